"""Tests for flowproof.runner.warm: one mitmdump, a session per flow (real addon, real proxy).

Requests go through a session's explicit-proxy port as plain-http absolute-form
requests to api.openai.com, so no agent and no TLS are needed: a replay
session answers from its own cassette, or diverges in its own log.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from flowproof.errors import ProxyError
from flowproof.runner.proxy import ProxySettings, read_events
from flowproof.runner.warm import ProxyPool, WarmProxy, session_request, warm_key

from .conftest import group_alive
from .helpers import BOOKING_TURNS, cassette_text


def settings(tmp_path: Path, ca_dir: Path, name: str, **kw: Any) -> ProxySettings:
    cassette = tmp_path / f"{name}.cassette.json"
    if not cassette.exists() and kw.get("mode", "replay") != "record":
        cassette.write_text(cassette_text(BOOKING_TURNS))
    base: dict[str, Any] = {
        "mode": "replay", "cassette": cassette, "report": tmp_path / f"{name}.events.jsonl", "confdir": ca_dir,
    }
    base.update(kw)
    return ProxySettings(**base)


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


def kinds(path: Path) -> list[str]:
    return [str(e.get("event")) for e in read_events(path)]


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def pool(ca_files: Any) -> Any:
    with ProxyPool() as pool:
        yield pool


class TestWarmKey:
    def test_fixed_port_and_other_addons_need_their_own_proxy(
        self, tmp_path: Path, ca_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A fixed port, an addon script, or unknown mitmdump arguments: no warm proxy."""
        monkeypatch.delenv("FLOWPROOF_ADDON_SCRIPT", raising=False)
        base = settings(tmp_path, ca_dir, "a")
        assert warm_key(base) == (str(ca_dir), True)
        assert warm_key(settings(tmp_path, ca_dir, "a", port=8080)) is None
        assert warm_key(settings(tmp_path, ca_dir, "a", addon_script=tmp_path / "x.py")) is None
        assert warm_key(settings(tmp_path, ca_dir, "a", extra_args=("--set", "stream_large_bodies=1"))) is None
        monkeypatch.setenv("FLOWPROOF_ADDON_SCRIPT", str(tmp_path / "x.py"))
        assert warm_key(base) is None

    def test_record_without_upstream_dials_eagerly(self, tmp_path: Path, ca_dir: Path) -> None:
        """Replay and mapped upstreams are lazy, a plain record or compare is not: two kinds."""
        assert warm_key(settings(tmp_path, ca_dir, "r", mode="record"))[1] is False  # type: ignore[index]
        assert warm_key(settings(tmp_path, ca_dir, "c", mode="compare"))[1] is False  # type: ignore[index]
        mapped = settings(tmp_path, ca_dir, "m", mode="record", upstream=("api.openai.com=http://127.0.0.1:9",))
        assert warm_key(mapped)[1] is True  # type: ignore[index]


class TestSessionRequest:
    def test_carries_the_options_a_cold_proxy_gets(self, tmp_path: Path, ca_dir: Path) -> None:
        """Every flowproof_* option, the listeners (explicit, base-URL, MCP) and the environment."""
        s = settings(
            tmp_path, ca_dir, "a", reverse_hosts=("api.openai.com",), upstream=("api.openai.com=http://h:1",),
            extra_args=("--mode", "regular", "--mode", "reverse:http://127.0.0.1:8931@4555",
                        "--set", "flowproof_mcp=files=http://127.0.0.1:8931/mcp"),
            env=(("MCP_URL", "http://127.0.0.1:9/mcp"),),
        )
        message = session_request(s)
        assert message["listeners"] == [
            "regular", "reverse:https://api.openai.com", "reverse:http://127.0.0.1:8931@4555"
        ]
        assert message["options"]["mcp"] == ["files=http://127.0.0.1:8931/mcp"]
        assert message["options"]["upstream"] == ["api.openai.com=http://h:1"]
        assert message["options"]["cassette"] == str(s.cassette)
        assert message["options"]["transport"] == ""  # the spec's transport applies
        assert message["env"]["MCP_URL"] == "http://127.0.0.1:9/mcp"


class TestOneProxyManyFlows:
    def test_sessions_share_one_process_and_keep_their_own_logs(
        self, tmp_path: Path, ca_dir: Path, pool: ProxyPool
    ) -> None:
        """Three sessions, one mitmdump: one flow's divergence is in its log only, and each
        flow's done event lists its own unconsumed turns."""
        sessions = [pool.open(settings(tmp_path, ca_dir, name)) for name in ("a", "b", "c")]
        assert pool.starts == 1 and len({s.proxy.pid for s in sessions}) == 1
        assert len({s.port for s in sessions}) == 3
        status, body = post_chat(sessions[1].port, "something never recorded")
        assert status == 400 and "diverged" in body
        for session in sessions:
            session.stop()
        a, b, c = (kinds(s.settings.report) for s in sessions)
        assert "divergence" in b and "divergence" not in a and "divergence" not in c
        assert a[0] == "ready" and a[-1] == "done" and b[-1] == "done"
        done = read_events(sessions[0].settings.report)[-1]
        assert done["unconsumed"] == [0, 1, 2]
        # A closed session's listener is gone; the proxy lives on for the next flow.
        assert not listening(sessions[0].port)
        assert sessions[0].proxy.is_alive()

    def test_a_closed_session_frees_the_way_for_the_next_on_the_same_proxy(
        self, tmp_path: Path, ca_dir: Path, pool: ProxyPool
    ) -> None:
        """Sequential flows reuse the one proxy; each gets a fresh replayer."""
        for name in ("a", "b"):
            session = pool.open(settings(tmp_path, ca_dir, name))
            status, _ = post_chat(session.port, "nope")
            assert status == 400
            session.stop()
            assert kinds(session.settings.report).count("divergence") == 1
        assert pool.starts == 1

    def test_mixed_modes_get_a_proxy_per_kind(self, tmp_path: Path, ca_dir: Path, pool: ProxyPool) -> None:
        """A replay flow and a record flow in one pool: each on a proxy that dials as its mode
        must; the record writes its own cassette, the replay cassette is untouched."""
        replay = pool.open(settings(tmp_path, ca_dir, "a"))
        before = replay.settings.cassette.read_bytes()
        record = pool.open(settings(tmp_path, ca_dir, "r", mode="record"))
        assert pool.starts == 2 and replay.proxy.pid != record.proxy.pid
        record.stop()
        replay.stop()
        assert record.settings.cassette.exists()  # an empty recording, written at close
        assert replay.settings.cassette.read_bytes() == before

    def test_a_session_on_a_proxy_of_the_other_kind_is_refused_clearly(
        self, tmp_path: Path, ca_dir: Path, ca_files: Any
    ) -> None:
        """The addon refuses a record flow on a lazy proxy (it would dial unlike a cold one)."""
        proxy = WarmProxy.start(str(ca_dir), lazy=True)
        try:
            with pytest.raises(ProxyError, match="lazily"):
                proxy.open(settings(tmp_path, ca_dir, "r", mode="record"))
            assert proxy.is_alive()
            ok = proxy.open(settings(tmp_path, ca_dir, "a"))  # the proxy still serves others
            ok.stop()
            assert kinds(ok.settings.report)[-1] == "done"
        finally:
            proxy.kill()

    def test_a_bad_cassette_fails_that_flow_only(self, tmp_path: Path, ca_dir: Path, pool: ProxyPool) -> None:
        """A session the addon cannot configure is refused with its reason; the proxy lives on."""
        bad = settings(tmp_path, ca_dir, "bad")
        bad.cassette.write_text("{not json")
        with pytest.raises(ProxyError, match="bad.cassette.json"):
            pool.open(bad)
        good = pool.open(settings(tmp_path, ca_dir, "good"))
        good.stop()
        assert pool.starts == 1


class TestFailures:
    def test_a_dead_proxy_is_replaced_for_the_next_flow(
        self, tmp_path: Path, ca_dir: Path, pool: ProxyPool
    ) -> None:
        """The proxy dies mid-flow: that flow's log has no done event; the next flow gets a new proxy."""
        first = pool.open(settings(tmp_path, ca_dir, "a"))
        os.killpg(first.proxy.pid, signal.SIGKILL)
        first.proxy.process.wait(timeout=5)
        first.stop()
        assert "done" not in kinds(first.settings.report)
        second = pool.open(settings(tmp_path, ca_dir, "b"))
        status, _ = post_chat(second.port, "nope")
        second.stop()
        assert status == 400 and pool.starts == 2
        assert second.proxy.pid != first.proxy.pid

    def test_a_dropped_control_connection_aborts_without_writing(
        self, tmp_path: Path, ca_dir: Path, pool: ProxyPool
    ) -> None:
        """A runner that gives up on a record flow (no close): nothing is written, ever."""
        record = pool.open(settings(tmp_path, ca_dir, "r", mode="record"))
        record._sock.close()  # the flow's thread died without closing its session
        replay = pool.open(settings(tmp_path, ca_dir, "a", mode="record"))  # same proxy, later
        replay.stop()
        assert replay.settings.cassette.exists()
        assert not record.settings.cassette.exists()
        assert "done" not in kinds(record.settings.report)
        assert pool.starts == 1

    def test_close_kills_every_proxy(self, tmp_path: Path, ca_dir: Path, ca_files: Any) -> None:
        """The pool's close leaves no process behind."""
        pool = ProxyPool()
        session = pool.open(settings(tmp_path, ca_dir, "a"))
        session.stop()
        pool.close()
        assert not group_alive(session.proxy.pid)
