"""Tests for flowproof.runner.proxy: mitmdump start, ready event, stop."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from flowproof.errors import ProxyError
from flowproof.runner.proxy import (
    ProxySettings,
    _log_ends_with_done,
    build_command,
    free_port,
    read_events,
    start_proxy,
)

from .conftest import FAKE_ADDON, group_alive


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


def settings(tmp_path: Path, ca_dir: Path, **kw) -> ProxySettings:
    base = dict(
        mode="replay",
        cassette=tmp_path / "c.json",
        report=tmp_path / "events.jsonl",
        confdir=ca_dir,
        addon_script=FAKE_ADDON,
    )
    base.update(kw)
    return ProxySettings(**base)


class TestReadEvents:
    def test_skips_partial_last_line(self, tmp_path: Path) -> None:
        """A half-written last line is ignored, complete lines are parsed."""
        log = tmp_path / "e.jsonl"
        log.write_bytes(b'{"event": "ready"}\n{"event": "tu')
        assert read_events(log) == [{"event": "ready"}]

    def test_missing_file_is_empty(self, tmp_path: Path) -> None:
        """A log that does not exist yet has no events."""
        assert read_events(tmp_path / "nope.jsonl") == []


class TestDoneDetection:
    @pytest.mark.parametrize(
        ("content", "done"),
        [
            pytest.param(b'{"event": "ready"}\n{"event": "done", "unconsumed": []}\n', True, id="done-last"),
            pytest.param(b'{"event": "done", "unconsumed": []}\n{"event": "turn"}\n', False, id="done-earlier"),
            pytest.param(b'{"event": "ready"}\n{"event": "done", "unconsu', False, id="done-half-written"),
            pytest.param(b"", False, id="empty"),
        ],
    )
    def test_only_a_complete_final_done_line_counts(self, tmp_path: Path, content: bytes, done: bool) -> None:
        """Stopping early is allowed only once the done event is the last complete line."""
        log = tmp_path / "e.jsonl"
        log.write_bytes(content)
        assert _log_ends_with_done(log) is done

    def test_missing_log_is_not_done(self, tmp_path: Path) -> None:
        """No log yet means the done hook has not run."""
        assert not _log_ends_with_done(tmp_path / "nope.jsonl")


class TestBuildCommand:
    def test_replay_is_lazy_and_sets_options(self, tmp_path: Path, ca_dir: Path) -> None:
        """Replay dials upstream lazily and passes every flowproof option."""
        s = settings(tmp_path, ca_dir, upstream=("api.openai.com=http://127.0.0.1:1",), spec=tmp_path / "s.yaml")
        argv = build_command(s, FAKE_ADDON, {})
        assert "connection_strategy=lazy" in argv
        assert "flowproof_upstream=api.openai.com=http://127.0.0.1:1" in argv
        assert f"flowproof_spec={tmp_path / 's.yaml'}" in argv
        assert "--mode" not in argv
        assert not any(a.startswith("flowproof_transport=") for a in argv)  # the spec decides

    def test_transport_http_reaches_the_addon(self, tmp_path: Path, ca_dir: Path) -> None:
        """--transport http: the proxy refuses WebSocket upgrades for this flow."""
        argv = build_command(settings(tmp_path, ca_dir, transport="http"), FAKE_ADDON, {})
        assert "flowproof_transport=http" in argv

    def test_record_is_not_lazy_and_reverse_adds_modes(self, tmp_path: Path, ca_dir: Path) -> None:
        """Record keeps the default strategy and each reverse host gets its own listener."""
        s = settings(tmp_path, ca_dir, mode="record", route="base_url")
        argv = build_command(s, FAKE_ADDON, {"api.openai.com": 4100})
        assert "connection_strategy=lazy" not in argv
        assert argv[argv.index("--mode") + 1] == "regular"
        assert "reverse:https://api.openai.com@4100" in argv


class TestStartProxy:
    def test_start_reports_ports_and_stop_leaves_nothing(self, tmp_path: Path, ca_dir: Path) -> None:
        """The proxy reports its OS-chosen port, and stop kills the whole group and writes done."""
        s = settings(tmp_path, ca_dir, reverse_hosts=("api.openai.com",), route="base_url")
        proxy = start_proxy(s)
        try:
            assert proxy.port > 0
            assert proxy.url == f"http://127.0.0.1:{proxy.port}"
            assert set(proxy.reverse_ports) == {"api.openai.com"}
            assert proxy.startup_seconds > 0
            ready = proxy.events()[0]
            assert ready["event"] == "ready"
            assert ready["options"]["route"] == "base_url"
        finally:
            proxy.stop()
        assert not group_alive(proxy.process.pid)
        assert proxy.events()[-1]["event"] == "done"

    def test_context_manager_stops(self, tmp_path: Path, ca_dir: Path) -> None:
        """Leaving the with-block stops mitmdump."""
        with start_proxy(settings(tmp_path, ca_dir, port=free_port())) as proxy:
            pid = proxy.process.pid
            assert proxy.is_alive()
        assert not group_alive(pid)

    def test_bad_script_raises_proxy_error_with_output(self, tmp_path: Path, ca_dir: Path) -> None:
        """An addon that fails to load makes start_proxy raise ProxyError with mitmdump's output."""
        bad = tmp_path / "bad_addon.py"
        bad.write_text("raise RuntimeError('boom-from-addon')\n")
        with pytest.raises(ProxyError) as info:
            start_proxy(settings(tmp_path, ca_dir, addon_script=bad), timeout=8)
        assert "boom-from-addon" in str(info.value) or "not ready" in str(info.value)

    def test_wait_for_timeout(self, tmp_path: Path, ca_dir: Path) -> None:
        """wait_for raises ProxyError when the predicate never holds."""
        with start_proxy(settings(tmp_path, ca_dir)) as proxy:
            with pytest.raises(ProxyError, match="timed out"):
                proxy.wait_for(lambda evs: False, timeout=0.2)

    def test_scripted_events_are_read(self, tmp_path: Path, ca_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Events the addon writes after ready are visible through events()."""
        script = tmp_path / "events.json"
        script.write_text(json.dumps({"events": [{"event": "request_started", "id": "1"}]}))
        monkeypatch.setenv("FAKE_FLOWPROOF_SCRIPT", str(script))
        with start_proxy(settings(tmp_path, ca_dir)) as proxy:
            events = proxy.wait_for(lambda evs: len(evs) >= 2, timeout=5)
        assert events[1] == {"event": "request_started", "id": "1"}

    def test_fixed_port_puts_reverse_listeners_after_it(self, tmp_path: Path, ca_dir: Path) -> None:
        """With --proxy-port N the reverse listeners take N+1, N+2 … as `flowproof env` says."""
        port = free_port_pair()
        s = settings(tmp_path, ca_dir, port=port, route="base_url", reverse_hosts=("api.openai.com",))
        with start_proxy(s) as proxy:
            assert proxy.port == port
            assert proxy.reverse_ports == {"api.openai.com": port + 1}

    def test_env_override_of_addon_script(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """$FLOWPROOF_ADDON_SCRIPT replaces the addon script."""
        from flowproof.runner.proxy import addon_script_path

        monkeypatch.setenv("FLOWPROOF_ADDON_SCRIPT", str(FAKE_ADDON))
        assert addon_script_path(tmp_path) == FAKE_ADDON


class TestSweepScratch:
    def test_removes_only_dead_owners_folders(self, tmp_path: Path) -> None:
        """A folder whose pid is gone is removed; this process's and unrelated ones stay."""
        import subprocess as sp

        from flowproof.runner.proxy import scratch_prefix, sweep_scratch

        dead = sp.Popen(["true"])
        dead.wait()
        gone = tmp_path / f"flowproof-run-{dead.pid}-abc"
        mine = tmp_path / f"{scratch_prefix('proxy')}xyz"
        other = tmp_path / "flowproof-run-notapid"
        for folder in (gone, mine, other):
            folder.mkdir()
            (folder / "events.jsonl").write_text("{}\n")
        assert sweep_scratch(tmp_path) == [gone]
        assert not gone.exists() and mine.exists() and other.exists()
