"""Tests for flowproof.addon.warm: routing each flow to the session of its listener.

The sessions here are registered directly (the control socket is exercised with a
real proxy in tests/runner/test_warm.py); flows come from mitmproxy's test helpers
with the client's local port set to the listener they "arrived on".
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mitmproxy import http
from mitmproxy.addons.proxyserver import Proxyserver
from mitmproxy.test import taddons

from flowproof import ports as ports_module
from flowproof.addon import Flowproof
from flowproof.addon import warm as warm_module
from flowproof.addon.core import build_flow_state
from flowproof.addon.options import AddonConfig
from flowproof.addon.shared import Shared
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
    async def test_each_flow_is_answered_by_the_session_of_its_listener(self, tmp_path: Path) -> None:
        """Two replay sessions with different cassettes: the port decides which one answers."""
        with taddons.context():
            a = replay_session(tmp_path, "a", 1, 5001, "from A")
            b = replay_session(tmp_path, "b", 2, 5002, "from B")
            warm = router(tmp_path, a, b)
            fa, fb = on_port(model_flow(chat_body()), 5001), on_port(model_flow(chat_body()), 5002)
            await warm.request(fa)
            await warm.request(fb)
            assert fa.response is not None and b"from A" in fa.response.content
            assert fb.response is not None and b"from B" in fb.response.content
            for session in (a, b):
                session.state.shared.events.close()
            assert kinds(tmp_path / "a.jsonl") == ["request_started", "turn"]
            assert kinds(tmp_path / "b.jsonl") == ["request_started", "turn"]

    async def test_egress_hooks_reach_the_session_of_the_listener(self, tmp_path: Path) -> None:
        """CONNECT and request headers are routed like requests: each session sees its own hosts."""
        with taddons.context():
            a = replay_session(tmp_path, "a", 1, 5001, "from A")
            b = replay_session(tmp_path, "b", 2, 5002, "from B")
            warm = router(tmp_path, a, b)
            await warm.http_connect(on_port(model_flow(b"", host="exfil.example.test", method="CONNECT"), 5001))
            await warm.requestheaders(on_port(model_flow(chat_body()), 5002))
            for session in (a, b):
                session.state.shared.events.close()
            assert [e["host"] for e in read_log(tmp_path / "a.jsonl")] == ["exfil.example.test"]
            assert [e["host"] for e in read_log(tmp_path / "b.jsonl")] == ["api.openai.com"]

    async def test_a_flow_on_no_open_session_is_refused_never_forwarded(self, tmp_path: Path) -> None:
        """A connection left on a closed (or unknown) listener gets a 502, not the real API."""
        with taddons.context():
            a = replay_session(tmp_path, "a", 1, 5001, "from A")
            warm = router(tmp_path, a)
            a.closed = True
            stray, unknown = on_port(model_flow(chat_body()), 5001), on_port(model_flow(chat_body()), 6000)
            await warm.request(stray)
            await warm.request(unknown)
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


class _Chain:
    """A session state whose chain is ``children`` (and a real log at ``log``)."""

    def __init__(self, log: Path, *children: object) -> None:
        self.shared = Shared(AddonConfig(ProxyOptions(report=log)))
        self.children = children

    @property
    def addons(self) -> list[object]:
        return [*self.children, self.shared.events]


class TestOneSessionCannotHoldAnother:
    async def test_a_hook_that_blocks_holds_only_its_own_session(self, tmp_path: Path) -> None:
        """A flow's hook stuck in user code (a slow compare handler, a backtracking volatile
        pattern): another session's flow is answered meanwhile, and so is the stuck one after."""
        other_answered = threading.Event()
        seen: list[str] = []

        class Stuck:
            def request(self, flow: http.HTTPFlow) -> None:
                # On one event loop this would wait the whole 5 s and find B unanswered.
                seen.append("B first" if other_answered.wait(5) else "B held")

        with taddons.context():
            stuck = Session(1, _Chain(tmp_path / "a.jsonl", Stuck()), (), frozenset({5001}))  # type: ignore[arg-type]
            b = replay_session(tmp_path, "b", 2, 5002, "from B")
            warm = router(tmp_path, stuck, b)
            fa, fb = on_port(model_flow(chat_body()), 5001), on_port(model_flow(chat_body()), 5002)
            held = asyncio.ensure_future(warm.request(fa))
            await asyncio.sleep(0)
            await asyncio.wait_for(warm.request(fb), 5)
            assert fb.response is not None and b"from B" in fb.response.content
            other_answered.set()
            await asyncio.wait_for(held, 5)
            assert seen == ["B first"]
            b.state.shared.events.close()

    async def test_a_session_s_hooks_run_one_at_a_time_in_order(self, tmp_path: Path) -> None:
        order: list[str] = []

        class Slow:
            def request(self, flow: http.HTTPFlow) -> None:
                order.append(f"start {flow.id}")
                time.sleep(0.05)
                order.append(f"end {flow.id}")

        with taddons.context():
            session = Session(1, _Chain(tmp_path / "a.jsonl", Slow()), (), frozenset({5001}))  # type: ignore[arg-type]
            warm = router(tmp_path, session)
            flows = [on_port(model_flow(chat_body()), 5001) for _ in range(3)]
            await asyncio.gather(*(warm.request(f) for f in flows))
        assert order == [f"{edge} {f.id}" for f in flows for edge in ("start", "end")]

    async def test_close_gives_up_on_work_that_does_not_return_and_says_so(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The session is aborted after CLOSE_WAIT (nothing recorded, an error event naming the
        hook), instead of a close that hangs until the runner gives the whole proxy up."""
        monkeypatch.setattr(warm_module, "CLOSE_WAIT", 0.2)
        release = threading.Event()
        done: list[str] = []

        class Handler:
            def response(self, flow: http.HTTPFlow) -> None:
                release.wait(10)

            def done(self) -> None:
                done.append("done")

        proxyserver = Proxyserver()
        with taddons.context(proxyserver) as tctx:
            # Closing a session sets the proxy's servers up again for the modes left: the
            # base listener, which must be on 127.0.0.1 (a free port) and stopped with the test.
            tctx.configure(proxyserver, listen_host="127.0.0.1", listen_port=0)
            session = Session(1, _Chain(tmp_path / "a.jsonl", Handler()), (), frozenset({5001}))  # type: ignore[arg-type]
            warm = router(tmp_path, session)
            flow = on_port(model_flow(chat_body()), 5001)
            stuck = asyncio.ensure_future(warm.response(flow))
            await asyncio.sleep(0.05)
            started = time.monotonic()
            try:
                await asyncio.wait_for(warm._close(session, finish=True), 5)
                took = time.monotonic() - started
                release.set()
                await asyncio.wait_for(stuck, 5)
            finally:
                await proxyserver.servers.update([])
        assert took < 2 and done == [] and session.closed
        [error] = [e for e in read_log(tmp_path / "a.jsonl") if e["event"] == "error"]
        assert "Handler.response hook was still running 0.2s after the agent finished" in error["text"]


def _reaching_the_chain(monkeypatch: pytest.MonkeyPatch, entry: Callable[[str], Any]) -> list[Any]:
    """``entry(hook name)`` for each hook that reached a session's chain (`Session.run_hook`),
    taken on the thread that ran it, in order."""
    seen: list[Any] = []
    run_hook = Session.run_hook

    def recorded(self: Session, name: str, *args: object) -> None:
        seen.append(entry(name))
        run_hook(self, name, *args)

    monkeypatch.setattr(Session, "run_hook", recorded)
    return seen


def _count_hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The hooks that reached a session's chain, by name, in order."""
    return _reaching_the_chain(monkeypatch, lambda name: name)


class TestIdleHooksStayOnTheLoop:
    """A hook no child of the session acts on never makes the trip to the session's worker."""

    async def test_a_replayed_call_takes_its_request_alone_to_the_worker(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Of a replayed call's four hooks only ``request`` does work; the host's egress is
        written on its first request and skipped on the next."""
        hops = _count_hops(monkeypatch)
        with taddons.context():
            cassette = write_cassette(tmp_path / "a.json", chat_turn(0, chat_body(), "one"),
                                      chat_turn(1, chat_body("again"), "two"))
            session = Session(1, build_flow_state(ProxyOptions(cassette=cassette, report=tmp_path / "a.jsonl")))
            for body in (chat_body(), chat_body("again")):
                flow = model_flow(body)
                for name in ("requestheaders", "request", "responseheaders", "response"):
                    await session.hook(name, flow)
                assert flow.response is not None and flow.response.status_code == 200
            session.release()
            session.state.shared.events.close()
        assert hops == ["requestheaders", "request", "request"]
        assert kinds(tmp_path / "a.jsonl") == ["egress", "request_started", "turn", "request_started", "turn"]

    async def test_a_held_call_still_streams_its_answer(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """An abandoned turn is replayed through the hold server: its response headers must
        reach `Replay`, which streams the partial answer instead of buffering it."""
        from dataclasses import replace

        hops = _count_hops(monkeypatch)
        with taddons.context():
            turn = replace(chat_turn(0, chat_body(), "partial"), abandoned=True)
            cassette = write_cassette(tmp_path / "a.json", turn)
            session = Session(1, build_flow_state(ProxyOptions(cassette=cassette, report=tmp_path / "a.jsonl")))
            flow = model_flow(chat_body())
            await session.hook("request", flow)
            flow.response = http.Response.make(200, b"", {"content-type": "text/event-stream"})
            await session.hook("responseheaders", flow)
            assert flow.response.stream is True
            await session.hook("response", flow)
            await session.hook("response", flow)  # the held call is finished now: nothing to do
            session.release()
            for child in session.state.addons:
                if getattr(child, "hold_server", None) is not None:
                    child.hold_server.close()
            session.state.shared.events.close()
        assert hops == ["request", "responseheaders", "response"]

    async def test_every_hook_of_a_recording_reaches_the_worker(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A concern that says nothing about idleness (record) gets every hook, as before."""
        hops = _count_hops(monkeypatch)
        with taddons.context():
            options = ProxyOptions(mode=Mode.RECORD, cassette=tmp_path / "r.json", report=tmp_path / "r.jsonl")
            session = Session(1, build_flow_state(options))
            flow = model_flow(chat_body())
            for name in ("request", "responseheaders", "response"):
                await session.hook(name, flow)
            session.release()
            session.state.shared.events.close()
        assert hops == ["request", "responseheaders", "response"]

    async def test_a_secret_scan_or_a_new_port_is_never_skipped(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The witness skips only what it has seen: another port of a seen host is new egress,
        and with secrets declared every request is scanned."""
        from flowproof.addon.witness import Witness
        from flowproof.witness import Secret

        secret = Secret("KEY", "sk-live-1234567890", "[KEY]")
        shared = Shared(AddonConfig(ProxyOptions(report=tmp_path / "w.jsonl", secrets=(secret,))))
        witness = Witness(shared)
        flow = model_flow(chat_body())
        assert not witness.idle("requestheaders", flow)
        witness.requestheaders(flow)
        assert witness.idle("requestheaders", flow)
        flow.request.port = 8443
        assert not witness.idle("requestheaders", flow)
        assert not witness.idle("request", flow)
        connect = model_flow(b"", host="Exfil.Example.test.", method="CONNECT")
        assert witness.idle("requestheaders", connect)  # http_connect has it
        assert not witness.idle("http_connect", connect)
        witness.http_connect(connect)
        assert witness.idle("http_connect", model_flow(b"", host="exfil.example.test", method="CONNECT"))
        shared.events.close()


def _threads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(hook, thread name) of each hook that reached a session's chain, in order."""
    return _reaching_the_chain(monkeypatch, lambda name: (name, threading.current_thread().name))


class TestUserCodeAloneGoesToTheWorker:
    """A flow that runs no code of the user's does its hooks on the loop, as a single-flow
    proxy does; a compare handler or a spec's own volatile pattern keeps them on the worker."""

    async def test_a_replayed_call_never_leaves_the_loop(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        seen = _threads(monkeypatch)
        loop_thread = threading.current_thread().name
        with taddons.context():
            cassette = write_cassette(tmp_path / "a.json", chat_turn(0, chat_body(), "one"))
            session = Session.of(1, build_flow_state(ProxyOptions(cassette=cassette, report=tmp_path / "a.jsonl")))
            flow = model_flow(chat_body())
            for name in ("requestheaders", "request", "responseheaders", "response"):
                await session.hook(name, flow)
            assert flow.response is not None and b"one" in flow.response.content
            await session.hook("done")
            session.release()
        assert seen[:2] == [("requestheaders", loop_thread), ("request", loop_thread)]
        assert seen[2][0] == "done" and seen[2][1].startswith("flowproof-session-1")  # the cassette write
        assert kinds(tmp_path / "a.jsonl") == ["egress", "request_started", "turn", "done"]

    async def test_a_compare_handler_keeps_every_hook_on_the_worker(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        seen = _threads(monkeypatch)

        class Asked:
            def request(self, flow: http.HTTPFlow) -> None:
                pass

        with taddons.context():
            state = _Chain(tmp_path / "a.jsonl", Asked())
            state.shared = Shared(AddonConfig.build(ProxyOptions(report=tmp_path / "a.jsonl",
                                                                 compare_handler="json:dumps")))
            session = Session.of(1, state)  # type: ignore[arg-type]
            await session.hook("request", model_flow(chat_body()))
            session.release()
            state.shared.events.close()
        assert [thread.split("_")[0] for _, thread in seen] == ["flowproof-session-1"]

    def test_a_compare_flow_goes_to_the_worker_even_without_a_handler(self, tmp_path: Path) -> None:
        """The compare engine's field diff of two bodies is not bounded by their size."""
        state = _Chain(tmp_path / "a.jsonl")
        for mode, offload in ((Mode.REPLAY, False), (Mode.RECORD, False), (Mode.COMPARE, True)):
            state.shared = Shared(AddonConfig(ProxyOptions(mode=mode, report=tmp_path / "a.jsonl")))
            assert Session.of(1, state).offload is offload, mode  # type: ignore[arg-type]

    async def test_a_hook_behind_queued_work_waits_its_turn(self, tmp_path: Path) -> None:
        """On the loop or not, a session's hooks keep mitmproxy's order: a request that
        arrives while ``done`` runs on the worker runs after it."""
        release = threading.Event()
        order: list[str] = []

        class Writer:
            def done(self) -> None:
                release.wait(5)
                order.append("done")

            def request(self, flow: http.HTTPFlow) -> None:
                order.append("request")

        with taddons.context():
            session = Session(1, _Chain(tmp_path / "a.jsonl", Writer()), offload=False)  # type: ignore[arg-type]
            writing = asyncio.ensure_future(session.hook("done"))
            await asyncio.sleep(0.05)
            asking = asyncio.ensure_future(session.hook("request", model_flow(chat_body())))
            await asyncio.sleep(0.05)
            assert order == []
            release.set()
            await asyncio.wait_for(asyncio.gather(writing, asking), 5)
            session.release()
        assert order == ["done", "request"]


class TestListeners:
    async def test_sessions_opened_side_by_side_never_pick_the_same_port(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The kernel calls a port free until its listener is bound, so a session opened while
        another's listeners are still being set up may be offered the other's port. mitmproxy
        then refused the whole mode list and the flow failed to open (exit 5, seen as one flow of
        a ``-j 2`` run of tests/e2e/test_warm_proxy.py). Here both are offered the same port first."""
        real = ports_module._probe
        offered = iter([real()] * 2)
        monkeypatch.setattr(ports_module, "_probe", lambda: next(offered, None) or real())
        proxyserver = Proxyserver()
        with taddons.context(proxyserver) as tctx:
            tctx.configure(proxyserver, listen_host="127.0.0.1", listen_port=0)
            warm = router(tmp_path)
            sessions = [Session(n, None) for n in (1, 2)]  # type: ignore[arg-type]
            try:
                await asyncio.gather(*(warm._listen(s, ["regular", "reverse:https://api.openai.com"])
                                       for s in sessions))
                ports = [s.ports for s in sessions]
                running = [server.is_running for server in proxyserver.servers]
            finally:
                await proxyserver.servers.update([])
        assert all(len(p) == 2 for p in ports) and not ports[0] & ports[1], ports
        assert len(running) == 5 and all(running), running  # the base listener and four of the sessions'

    def test_a_port_the_proxy_listens_on_or_sets_up_is_never_picked(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        offered = iter([5001, 5002, 5003])
        monkeypatch.setattr(ports_module, "_probe", lambda: next(offered))
        taken = warm_module._ports_of(["regular", "regular@5001", "reverse:https://api.openai.com@5002", "bad:"])
        assert taken == {5001, 5002}
        assert warm_module._with_port("regular", taken) == ("regular@5003", True)
        assert warm_module._with_port("regular@5001", taken) == ("regular@5001", False)  # the flow's own choice
        assert taken == {5001, 5002, 5003}


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
