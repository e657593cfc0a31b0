"""Tests for flowproof.runner.proxy: one lifecycle — a mitmdump per kind, a session per flow.

The first classes run the stand-in addon (tests/runner/fake_addon.py: the real root addon and
control socket, scripted sessions); the pool's classes run the real addon, with requests sent
through a session's explicit-proxy port as plain-http absolute-form requests to
api.openai.com, so no agent and no TLS are needed: a replay session answers from its own
cassette, or diverges in its own log.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from flowproof import ports as ports_module
from flowproof.errors import ProxyError
from flowproof.options import Mode, ProxyOptions, Route, from_json, listeners_for, parse_upstreams
from flowproof.runner import proxy as proxy_module
from flowproof.runner import spawn as spawn_module
from flowproof.runner.proxy import (
    FlowProxy,
    ProxyKind,
    ProxyPool,
    ProxyProcess,
    free_port,
    read_events,
    session_request,
    start_proxy,
)

from .conftest import FAKE_ADDON, group_gone
from .helpers import BOOKING_TURNS, cassette_text


def free_port_pair() -> int:
    """A port N on 127.0.0.1 such that N and N+1 were both free a moment ago."""
    for _ in range(50):
        first = socket.socket()
        first.bind(("127.0.0.1", 0))
        port = first.getsockname()[1]
        second = socket.socket()
        try:
            second.bind(("127.0.0.1", port + 1))
        except OSError:
            continue
        finally:
            first.close()
            second.close()
        return port
    raise AssertionError("no two consecutive free ports on 127.0.0.1 in 50 tries")


def options(tmp_path: Path, name: str = "a", **kw: Any) -> ProxyOptions:
    """A flow's options with its own cassette (replay: the booking turns) and event log."""
    cassette = tmp_path / f"{name}.cassette.json"
    if not cassette.exists() and kw.get("mode", Mode.REPLAY) != Mode.RECORD:
        cassette.write_text(cassette_text(BOOKING_TURNS))
    base: dict[str, Any] = {"cassette": cassette, "report": tmp_path / f"{name}.events.jsonl"}
    base.update(kw)
    return ProxyOptions(**base)


def fake(tmp_path: Path, ca_dir: Path, **kw: Any) -> FlowProxy:
    """A flow's proxy of its own, on the stand-in addon."""
    return start_proxy(options(tmp_path, **kw), ca_dir, script=FAKE_ADDON)


def wait_for_events(proxy: FlowProxy, count: int, timeout: float = 10) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while len(events := proxy.events()) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    return events


def post_chat(port: int, text: str) -> tuple[int, str]:
    """POST an openai chat request through the explicit proxy on ``port``."""
    body = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}).encode()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{port}"}))
    request = urllib.request.Request(
        "http://api.openai.com/v1/chat/completions", data=body,
        headers={"content-type": "application/json"}, method="POST",
    )
    try:
        with opener.open(request, timeout=20) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def kinds(path: Path | None) -> list[str]:
    assert path is not None
    return [str(e.get("event")) for e in read_events(path)]


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


class TestFreePort:
    """Flows run side by side pick their listeners' ports before the proxy binds them."""

    def test_a_port_handed_out_lately_is_not_handed_out_again(self, monkeypatch: pytest.MonkeyPatch) -> None:
        offered = iter([40001, 40001, 40002])
        monkeypatch.setattr(proxy_module, "_handed_out", deque(maxlen=256))
        monkeypatch.setattr(ports_module, "_probe", lambda: next(offered))
        assert [free_port(), free_port()] == [40001, 40002]

    def test_two_hundred_in_a_row_are_distinct_and_free(self) -> None:
        # The kernel picks among ~14,000 ports at random: 200 picks collide more often than not.
        ports = [free_port() for _ in range(200)]
        assert len(set(ports)) == len(ports)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", ports[-1]))


class TestReadEvents:
    def test_skips_partial_last_line(self, tmp_path: Path) -> None:
        """A half-written last line is ignored, complete lines are parsed."""
        log = tmp_path / "e.jsonl"
        log.write_bytes(b'{"event": "ready"}\n{"event": "tu')
        assert read_events(log) == [{"event": "ready"}]

    def test_missing_file_is_empty(self, tmp_path: Path) -> None:
        """A log that does not exist yet has no events."""
        assert read_events(tmp_path / "nope.jsonl") == []


class TestSessionRequest:
    def test_carries_the_resolved_options_and_listeners(self, tmp_path: Path) -> None:
        """The open message is the flow's options (listeners included), and reads back equal."""
        o = options(
            tmp_path, route=Route.BASE_URL, tool_results={"search": {"id": 1}},
            upstream=parse_upstreams(["api.openai.com=http://h:1"]),
            listeners=listeners_for(Route.BASE_URL, more=["reverse:http://127.0.0.1:8931@4555"]),
        )
        message = session_request(o)
        assert message["op"] == "open"
        assert message["options"]["listeners"] == [
            "regular", "reverse:https://api.openai.com", "reverse:https://api.anthropic.com",
            "reverse:https://generativelanguage.googleapis.com", "reverse:http://127.0.0.1:8931@4555",
        ]
        assert message["options"]["upstream"] == ["api.openai.com=http://h:1"]
        assert message["options"]["cassette"] == str(o.cassette)
        assert "env" not in message  # resolved data: the addon resolves nothing itself
        assert from_json(json.loads(json.dumps(message["options"]))) == o


class TestStartProxy:
    def test_start_reports_ports_and_stop_leaves_nothing(self, tmp_path: Path, ca_dir: Path, ca_files: Any) -> None:
        """The session reports its OS-chosen ports, and stop kills the whole group and writes done."""
        proxy = fake(tmp_path, ca_dir, route=Route.BASE_URL, listeners=listeners_for(Route.BASE_URL))
        try:
            assert proxy.port > 0
            assert proxy.url == f"http://127.0.0.1:{proxy.port}"
            assert "api.openai.com" in proxy.reverse_ports and proxy.port not in proxy.reverse_ports.values()
            assert all(listening(p) for p in (proxy.port, *proxy.reverse_ports.values()))
            assert proxy.startup_seconds > 0
            ready = proxy.events()[0]
            assert ready["event"] == "ready"
            assert ready["options"]["route"] == "base_url"
        finally:
            proxy.stop()
        assert group_gone(proxy.process.pid)
        assert proxy.events()[-1]["event"] == "done"

    def test_context_manager_stops(self, tmp_path: Path, ca_dir: Path, ca_files: Any) -> None:
        """Leaving the with-block stops mitmdump."""
        with fake(tmp_path, ca_dir, listeners=listeners_for(Route.PROXY, free_port())) as proxy:
            pid = proxy.process.pid
            assert proxy.is_alive()
        assert group_gone(pid)

    def test_bad_script_raises_proxy_error_with_output(self, tmp_path: Path, ca_dir: Path, ca_files: Any) -> None:
        """An addon that fails to load makes start_proxy raise ProxyError with mitmdump's output."""
        bad = tmp_path / "bad_addon.py"
        bad.write_text("raise RuntimeError('boom-from-addon')\n")
        with pytest.raises(ProxyError) as info:
            start_proxy(options(tmp_path), ca_dir, script=bad, timeout=8)
        assert "boom-from-addon" in str(info.value) or "not ready" in str(info.value)

    def test_scripted_events_are_read(self, tmp_path: Path, ca_dir: Path, ca_files: Any,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
        """Events the addon writes after ready are visible through events()."""
        script = tmp_path / "events.json"
        script.write_text(json.dumps({"events": [{"event": "request_started", "id": "1"}]}))
        monkeypatch.setenv("FAKE_FLOWPROOF_SCRIPT", str(script))
        with fake(tmp_path, ca_dir) as proxy:
            events = wait_for_events(proxy, 2)
        assert events[1] == {"event": "request_started", "id": "1"}

    def test_fixed_port_puts_reverse_listeners_after_it(self, tmp_path: Path, ca_dir: Path, ca_files: Any) -> None:
        """With --proxy-port N the reverse listeners take N+1, N+2 … as `flowproof env` says."""
        port = free_port_pair()
        with fake(tmp_path, ca_dir, route=Route.BASE_URL, listeners=listeners_for(Route.BASE_URL, port)) as proxy:
            assert proxy.port == port
            assert proxy.reverse_ports["api.openai.com"] == port + 1

    def test_env_override_of_addon_script(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """$FLOWPROOF_ADDON_SCRIPT replaces the addon script, and is part of the pool's kind."""
        monkeypatch.setenv("FLOWPROOF_ADDON_SCRIPT", str(FAKE_ADDON))
        assert Path(spawn_module.addon_script(str(tmp_path))) == FAKE_ADDON
        assert ProxyPool().kind(ProxyOptions(), tmp_path).script == FAKE_ADDON


class TestKind:
    def test_replay_and_mapped_upstreams_are_lazy_record_and_compare_are_not(self, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
        """Replay and mapped upstreams dial lazily, a plain record or compare does not: two kinds."""
        monkeypatch.delenv("FLOWPROOF_ADDON_SCRIPT", raising=False)
        pool = ProxyPool()
        assert pool.kind(ProxyOptions(), tmp_path) == ProxyKind(tmp_path, True, None)
        assert pool.kind(ProxyOptions(mode=Mode.RECORD), tmp_path).lazy is False
        assert pool.kind(ProxyOptions(mode=Mode.COMPARE), tmp_path).lazy is False
        mapped = ProxyOptions(mode=Mode.RECORD, upstream=parse_upstreams(["api.openai.com=http://127.0.0.1:9"]))
        assert pool.kind(mapped, tmp_path).lazy is True


@pytest.fixture
def pool(ca_files: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.delenv("FLOWPROOF_ADDON_SCRIPT", raising=False)
    with ProxyPool() as pool:
        yield pool


class TestOneProxyManyFlows:
    def test_sessions_share_one_process_and_keep_their_own_logs(
        self, tmp_path: Path, ca_dir: Path, pool: ProxyPool
    ) -> None:
        """Three sessions, one mitmdump: one flow's divergence is in its log only, and each
        flow's done event lists its own unconsumed turns."""
        sessions = [pool.open(options(tmp_path, name), ca_dir) for name in ("a", "b", "c")]
        assert pool.starts == 1 and len({s.process.pid for s in sessions}) == 1
        assert len({s.port for s in sessions}) == 3
        status, body = post_chat(sessions[1].port, "something never recorded")
        assert status == 400 and "diverged" in body
        for session in sessions:
            session.stop()
        a, b, c = (kinds(s.options.report) for s in sessions)
        assert "divergence" in b and "divergence" not in a and "divergence" not in c
        assert a[0] == "ready" and a[-1] == "done" and b[-1] == "done"
        assert sessions[0].options.report is not None
        done = read_events(sessions[0].options.report)[-1]
        assert done["unconsumed"] == [0, 1, 2]
        # A closed session's listener is gone; the proxy lives on for the next flow.
        assert not listening(sessions[0].port)
        assert sessions[0].process.is_alive()

    def test_a_closed_session_frees_the_way_for_the_next_on_the_same_proxy(
        self, tmp_path: Path, ca_dir: Path, pool: ProxyPool
    ) -> None:
        """Sequential flows reuse the one proxy; each gets a fresh replayer."""
        for name in ("a", "b"):
            session = pool.open(options(tmp_path, name), ca_dir)
            status, _ = post_chat(session.port, "nope")
            assert status == 400
            session.stop()
            assert kinds(session.options.report).count("divergence") == 1
        assert pool.starts == 1

    def test_a_compare_handler_is_imported_from_the_flow_s_path_not_the_proxy_s(
        self, tmp_path: Path, ca_dir: Path, pool: ProxyPool
    ) -> None:
        """The proxy outlives the run that started it: a later flow's handler, on that flow's
        PYTHONPATH only, is imported from the folders its session request names."""
        (tmp_path / "warm_checks.py").write_text("def on_compare(result):\n    return None\n")
        handler = {"mode": Mode.COMPARE, "compare_handler": "warm_checks:on_compare"}
        with pytest.raises(ProxyError, match="cannot import module 'warm_checks'"):
            pool.open(options(tmp_path, "alone", **handler), ca_dir)
        session = pool.open(options(tmp_path, "a", handler_path=(str(tmp_path),), **handler), ca_dir)
        session.stop()
        assert kinds(session.options.report)[-1] == "done" and pool.starts == 1

    def test_a_fixed_port_is_reused_by_the_next_flow(self, tmp_path: Path, ca_dir: Path, pool: ProxyPool) -> None:
        """An agent started by hand keeps its port (--proxy-port N) across the flows of a run."""
        port = free_port()
        for name in ("a", "b"):
            session = pool.open(options(tmp_path, name, listeners=listeners_for(Route.PROXY, port)), ca_dir)
            assert session.port == port
            status, _ = post_chat(port, "nope")
            session.stop()
            assert status == 400
        assert pool.starts == 1

    def test_mixed_modes_get_a_proxy_per_kind(self, tmp_path: Path, ca_dir: Path, pool: ProxyPool) -> None:
        """A replay flow and a record flow in one pool: each on a proxy that dials as its mode
        must; the record writes its own cassette, the replay cassette is untouched."""
        replay = pool.open(options(tmp_path, "a"), ca_dir)
        assert replay.options.cassette is not None
        before = replay.options.cassette.read_bytes()
        record = pool.open(options(tmp_path, "r", mode=Mode.RECORD), ca_dir)
        assert pool.starts == 2 and replay.process.pid != record.process.pid
        record.stop()
        replay.stop()
        assert record.options.cassette is not None and record.options.cassette.exists()  # empty, written at close
        assert replay.options.cassette.read_bytes() == before

    def test_a_session_on_a_proxy_of_the_other_kind_is_refused_clearly(
        self, tmp_path: Path, ca_dir: Path, ca_files: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The addon refuses a record flow on a lazy proxy (it would dial unlike its own kind)."""
        monkeypatch.delenv("FLOWPROOF_ADDON_SCRIPT", raising=False)
        proxy = ProxyProcess.start(ProxyKind(ca_dir, lazy=True))
        try:
            with pytest.raises(ProxyError, match="lazily"):
                proxy.open(options(tmp_path, "r", mode=Mode.RECORD))
            assert proxy.is_alive()
            ok = proxy.open(options(tmp_path, "a"))  # the proxy still serves others
            ok.stop()
            assert kinds(ok.options.report)[-1] == "done"
        finally:
            proxy.kill()

    def test_a_bad_cassette_fails_that_flow_only(self, tmp_path: Path, ca_dir: Path, pool: ProxyPool) -> None:
        """A session the addon cannot configure is refused with its reason; the proxy lives on."""
        bad = options(tmp_path, "bad")
        assert bad.cassette is not None
        bad.cassette.write_text("{not json")
        with pytest.raises(ProxyError, match="bad.cassette.json"):
            pool.open(bad, ca_dir)
        good = pool.open(options(tmp_path, "good"), ca_dir)
        good.stop()
        assert pool.starts == 1


class TestFailures:
    def test_a_dead_proxy_is_replaced_for_the_next_flow(
        self, tmp_path: Path, ca_dir: Path, pool: ProxyPool
    ) -> None:
        """The proxy dies mid-flow: that flow's log has no done event; the next flow gets a new proxy."""
        first = pool.open(options(tmp_path, "a"), ca_dir)
        os.killpg(first.process.pid, signal.SIGKILL)
        first.process.process.wait(timeout=5)
        first.stop()
        assert "done" not in kinds(first.options.report)
        second = pool.open(options(tmp_path, "b"), ca_dir)
        status, _ = post_chat(second.port, "nope")
        second.stop()
        assert status == 400 and pool.starts == 2
        assert second.process.pid != first.process.pid

    def test_a_dropped_control_connection_aborts_without_writing(
        self, tmp_path: Path, ca_dir: Path, pool: ProxyPool
    ) -> None:
        """A runner that gives up on a record flow (no close): nothing is written, ever."""
        record = pool.open(options(tmp_path, "r", mode=Mode.RECORD), ca_dir)
        record._sock.close()  # the flow's thread died without closing its session
        later = pool.open(options(tmp_path, "a", mode=Mode.RECORD), ca_dir)  # same proxy, later
        later.stop()
        assert later.options.cassette is not None and later.options.cassette.exists()
        assert record.options.cassette is not None and not record.options.cassette.exists()
        assert "done" not in kinds(record.options.report)
        assert pool.starts == 1

    def test_close_kills_every_proxy(self, tmp_path: Path, ca_dir: Path, ca_files: Any,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
        """The pool's close leaves no process behind."""
        monkeypatch.delenv("FLOWPROOF_ADDON_SCRIPT", raising=False)
        pool = ProxyPool()
        session = pool.open(options(tmp_path, "a"), ca_dir)
        session.stop()
        pool.close()
        assert group_gone(session.process.pid)

    def test_a_flow_of_its_own_stops_its_proxy_with_it(self, tmp_path: Path, ca_dir: Path, ca_files: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
        """start_proxy is a pool of one: the real addon's session closes cleanly (done written)
        and the process is gone when the session stops."""
        monkeypatch.delenv("FLOWPROOF_ADDON_SCRIPT", raising=False)
        proxy = start_proxy(options(tmp_path), ca_dir)
        assert kinds(proxy.options.report) == ["ready"]
        proxy.stop()
        assert kinds(proxy.options.report)[-1] == "done"
        assert group_gone(proxy.process.pid)


class TestPrestart:
    """`prestart`: the proxy the command line starts before its own imports (docs/performance.md)."""

    def test_the_first_pool_takes_the_prestarted_proxy_of_its_kind(
        self, tmp_path: Path, ca_dir: Path, pool: ProxyPool
    ) -> None:
        """The flow's session opens on the proxy started early: no second mitmdump."""
        spawn_module.prestart(*ProxyKind(ca_dir, lazy=True).key)
        (early,) = spawn_module.EARLY
        session = pool.open(options(tmp_path, "a"), ca_dir)
        assert session.process.spawned is early and pool.starts == 1 and spawn_module.EARLY == []
        status, _ = post_chat(session.port, "never recorded")
        session.stop()
        assert status == 400 and kinds(session.options.report)[0] == "ready"

    def test_a_prestarted_proxy_of_another_kind_is_killed(
        self, tmp_path: Path, ca_dir: Path, pool: ProxyPool
    ) -> None:
        """A record flow cannot use a lazy proxy: the guess is killed (its scratch folder
        removed) and the flow gets a proxy of its own kind."""
        spawn_module.prestart(*ProxyKind(ca_dir, lazy=True).key)
        (early,) = spawn_module.EARLY
        session = pool.open(options(tmp_path, "r", mode=Mode.RECORD), ca_dir)
        assert session.process.spawned is not early and pool.starts == 1
        assert early.process.poll() is not None and not Path(early.scratch.name).exists()
        session.stop()

    def test_one_no_pool_took_is_killed_when_the_runner_exits(self, ca_dir: Path, ca_files: Any) -> None:
        """A run that never opens a session (a spec that does not load) leaves nothing running."""
        code = (
            "import sys; from flowproof.runner.spawn import EARLY, prestart; "
            f"prestart({str(ca_dir)!r}, True); print(EARLY[0].pid, EARLY[0].scratch.name)"
        )
        env = {k: v for k, v in os.environ.items() if k != "FLOWPROOF_ADDON_SCRIPT"}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             timeout=60, env=env)
        pid, scratch = out.stdout.split()
        assert group_gone(int(pid)) and not Path(scratch).exists()
