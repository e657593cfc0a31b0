"""Tests for flowproof.addon.warm: routing each flow to the session of its listener.

The sessions here are registered directly (the control socket is exercised with a
real proxy in tests/runner/test_warm.py); flows come from mitmproxy's test helpers
with the client's local port set to the listener they "arrived on".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mitmproxy import http
from mitmproxy.test import taddons

from flowproof.addon import Flowproof
from flowproof.addon.core import build_flow_state
from flowproof.addon.warm import Session, WarmSessions
from flowproof.options import Mode, ProxyOptions

from .conftest import Harness, chat_body, chat_turn, model_flow, read_log, write_cassette


def replay_session(tmp: Path, name: str, number: int, port: int, text: str) -> Session:
    cassette = write_cassette(tmp / f"{name}.json", chat_turn(0, chat_body(), text))
    options = ProxyOptions(cassette=cassette, report=tmp / f"{name}.jsonl")
    return Session(number, build_flow_state(options), ("regular@0",), frozenset({port}))


def on_port(flow: http.HTTPFlow, port: int) -> http.HTTPFlow:
    flow.client_conn.sockname = ("127.0.0.1", port)
    return flow


def router(tmp: Path, *sessions: Session) -> WarmSessions:
    warm = WarmSessions(tmp / "control.sock", build_flow_state)
    for session in sessions:
        for port in session.ports:
            warm.by_port[port] = session
        warm._open_sessions.append(session)
    return warm


def kinds(path: Path) -> list[str]:
    return [e["event"] for e in read_log(path)]


class TestRouting:
    def test_each_flow_is_answered_by_the_session_of_its_listener(self, tmp_path: Path) -> None:
        """Two replay sessions with different cassettes: the port decides which one answers."""
        with taddons.context():
            a = replay_session(tmp_path, "a", 1, 5001, "from A")
            b = replay_session(tmp_path, "b", 2, 5002, "from B")
            warm = router(tmp_path, a, b)
            fa, fb = on_port(model_flow(chat_body()), 5001), on_port(model_flow(chat_body()), 5002)
            warm.request(fa)
            warm.request(fb)
            assert fa.response is not None and b"from A" in fa.response.content
            assert fb.response is not None and b"from B" in fb.response.content
            for session in (a, b):
                session.state.shared.events.close()
            assert kinds(tmp_path / "a.jsonl") == ["request_started", "turn"]
            assert kinds(tmp_path / "b.jsonl") == ["request_started", "turn"]

    def test_a_flow_on_no_open_session_is_refused_never_forwarded(self, tmp_path: Path) -> None:
        """A connection left on a closed (or unknown) listener gets a 502, not the real API."""
        with taddons.context():
            a = replay_session(tmp_path, "a", 1, 5001, "from A")
            warm = router(tmp_path, a)
            a.closed = True
            stray, unknown = on_port(model_flow(chat_body()), 5001), on_port(model_flow(chat_body()), 6000)
            warm.request(stray)
            warm.request(unknown)
            for flow in (stray, unknown):
                assert flow.response is not None and flow.response.status_code == 502
                assert "no flow is open" in json.loads(flow.response.content)["error"]["message"]
            a.state.shared.events.close()
            assert not (tmp_path / "a.jsonl").exists()  # nothing reached the closed session

    def test_a_failing_child_does_not_stop_the_rest_of_the_chain(self, tmp_path: Path) -> None:
        """As mitmproxy does for addons: one hook's exception is logged, the next child still runs."""
        calls: list[str] = []

        class Boom:
            def done(self) -> None:
                raise RuntimeError("boom")

        class Later:
            def done(self) -> None:
                calls.append("later")

        class State:
            shared: Any = None

            @property
            def addons(self) -> list[object]:
                return [Boom(), Later()]

        Session(1, State()).run_hook("done")
        assert calls == ["later"]


class TestRootInWarmMode:
    def test_flowproof_control_makes_the_router_the_only_child(self, harness: Harness) -> None:
        """With a control socket the single-flow options are unused: no cassette is needed."""
        harness.configure(flowproof_control=str(harness.tmp / "c.sock"))
        root = harness.addon.root
        assert isinstance(root.warm, WarmSessions)
        assert root.addons == [root.warm]

    def test_shutdown_aborts_open_sessions_without_writing(self, tmp_path: Path) -> None:
        """A record session still open when the proxy stops writes no cassette and no done event."""
        addon = Flowproof()
        with taddons.context(addon) as tctx:
            tctx.options.update(flowproof_control=str(tmp_path / "c.sock"))
            options = ProxyOptions(mode=Mode.RECORD, cassette=tmp_path / "r.json", report=tmp_path / "r.jsonl")
            session = Session(1, build_flow_state(options), (), frozenset({5003}))
            assert addon.warm is not None
            addon.warm.by_port[5003] = session
            addon.warm._open_sessions.append(session)
            addon.done()
        assert not (tmp_path / "r.json").exists()
        assert "done" not in kinds(tmp_path / "r.jsonl")
        assert session.closed
