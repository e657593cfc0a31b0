"""Responses over a WebSocket through a real mitmdump with the addon: record keeps one frame
transcript per connection, replay answers with no upstream and strictly, compare pairs the turns.

The agent is openai-python's own WebSocket client (``client.responses.connect()``) going
through the explicit proxy with TLS interception; the upstream is the fake model server's
WebSocket mode. A warm-up, then two turns chained by ``previous_response_id``, as codex talks.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai
import pytest
import websockets.exceptions

from flowproof.addon.websocket import _injector
from flowproof.cassette import WEBSOCKET_METHOD, TurnRef, load_cassette
from flowproof.divergence import Divergence
from flowproof.options import Mode, ProxyOptions
from flowproof.runner.proxy import ProxyPool
from flowproof.testing import FakeModelServer, Reply

from .conftest import Mitmdump, start_mitmdump

pytestmark = pytest.mark.timeout(180)

INSTRUCTIONS = "You are a weather bot. Answer in one sentence."
TOOLS = [{"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}]
SCRIPT = [Reply.tool_call("get_weather", {"city": "Paris"}), Reply.text("It is sunny in Paris.")]
TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")


def _connect(proxy: Mitmdump, bundle: Path) -> Any:
    client = openai.OpenAI(api_key="sk-test", max_retries=0)
    context = ssl.create_default_context(cafile=str(bundle))
    return client.responses.connect(websocket_connection_options={"ssl": context, "proxy": proxy.url,
                                                                  "open_timeout": 20})


def _turn(conn: Any, **create: Any) -> list[Any]:
    conn.response.create(**create)
    events = []
    for event in conn:
        events.append(event)
        if event.type in TERMINAL:
            return events
    raise AssertionError("the socket closed before a terminal event")


def weather_agent(proxy: Mitmdump, bundle: Path, instructions: str = INSTRUCTIONS) -> list[Any]:
    """Warm-up, a tool call, its result, the answer: the terminal event of each turn."""
    with _connect(proxy, bundle) as conn:
        warm = _turn(conn, model="gpt-x", instructions=instructions, tools=TOOLS, input=[], generate=False,
                     store=False)[-1]
        if warm.type == "error":
            return [warm]
        asked = _turn(conn, model="gpt-x", input="Weather in Paris?", previous_response_id=warm.response.id,
                      store=False)[-1]
        call = asked.response.output[0]
        answered = _turn(conn, model="gpt-x", previous_response_id=asked.response.id, store=False,
                         input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])[-1]
    return [warm, asked, answered]


@pytest.fixture
def recorded(tmp_path: Path, ca_bundle: tuple[Path, Path]) -> Iterator[tuple[Path, list[Any], FakeModelServer]]:
    confdir, bundle = ca_bundle
    cassette = tmp_path / "ws.cassette.json"
    with FakeModelServer(list(SCRIPT)) as server:
        proxy = _record(tmp_path, confdir, cassette, server, "record")
        try:
            ends = weather_agent(proxy, bundle)
            assert proxy.stop() == 0
        finally:
            proxy.kill()
        yield cassette, ends, server


def _record(tmp_path: Path, confdir: Path, cassette: Path, server: FakeModelServer, name: str,
            *options: str) -> Mitmdump:
    """A recording proxy whose api.openai.com is the fake model server."""
    return start_mitmdump(tmp_path, confdir, "flowproof_mode=record", f"flowproof_cassette={cassette}",
                          f"flowproof_upstream=api.openai.com={server.url}", *options, name=name)


def _replay(tmp_path: Path, confdir: Path, cassette: Path, name: str) -> Mitmdump:
    return start_mitmdump(tmp_path, confdir, "flowproof_mode=replay", f"flowproof_cassette={cassette}", name=name)


@contextmanager
def handshake_explained(events: Callable[[], list[dict[str, Any]]], output: Callable[[], str]) -> Iterator[None]:
    """An upgrade that gets no answer at all (websockets' handshake timeout) fails with what
    the proxy logged and printed by then: that hang has been seen, rarely, and never again
    on a rerun, so the first failure has to carry its own evidence."""
    try:
        yield
    except TimeoutError as e:
        raise AssertionError(
            f"the upgrade got no answer ({e}); the proxy's events: {events()}; its output: {output()[-3000:]}"
        ) from e


def _output_of(tmp_path: Path, name: str) -> Callable[[], str]:
    """What `start_mitmdump` captured of the proxy named ``name``."""
    return lambda: (tmp_path / f"{name}.stderr").read_text(errors="replace")


def test_a_handshake_that_hangs_fails_with_the_proxy_s_evidence() -> None:
    with pytest.raises(AssertionError, match=r"no answer \(timed out\).*'event': 'ready'.*its output: boot"):
        with handshake_explained(lambda: [{"event": "ready"}], lambda: "boot"):
            raise TimeoutError("timed out")


class TestRecord:
    def test_one_transcript_per_connection_each_request_frame_a_turn(
        self, recorded: tuple[Path, list[Any], FakeModelServer]
    ) -> None:
        cassette_path, ends, server = recorded
        assert [e.type for e in ends] == ["response.completed"] * 3
        assert ends[2].response.output_text == "It is sunny in Paris."
        frames = [r.json for r in server.model_requests]
        assert [r.method for r in server.model_requests] == ["WEBSOCKET"] * 3
        cassette = load_cassette(cassette_path)
        assert cassette.format == 2
        turns = cassette.turns
        assert [(t.index, t.connection, t.request.method, t.abandoned) for t in turns] == [
            (0, 0, WEBSOCKET_METHOD, False), (1, 0, WEBSOCKET_METHOD, False), (2, 0, WEBSOCKET_METHOD, False)]
        # The request is the frame as the agent sent it (here the fake got the same bytes).
        assert [t.request.body for t in turns] == frames
        assert turns[0].request.body["generate"] is False
        assert turns[1].request.body["previous_response_id"] == "resp_fake_warmup_1"
        assert turns[0].request.url == "wss://api.openai.com/v1/responses"
        [connection] = cassette.connections
        assert connection.transcript == (TurnRef(0), TurnRef(1), TurnRef(2))
        assert connection.closed_by == "client" and connection.url == "wss://api.openai.com/v1/responses"
        # Every server frame up to the terminal event, in order, one per event the client got.
        last = turns[2].response
        assert last is not None and last.frames is not None
        assert json.loads(last.frames[-1].text or "")["type"] == "response.completed"
        assert [json.loads(f.text or "")["sequence_number"] for f in last.frames] == list(range(len(last.frames)))

    def test_server_frames_reach_the_client_as_they_arrive(self, tmp_path: Path, ca_bundle: tuple[Path, Path]) -> None:
        """The first event arrives while the upstream is still sending: streamed, never buffered."""
        confdir, bundle = ca_bundle
        cassette = tmp_path / "slow.cassette.json"
        with FakeModelServer([Reply.text("one two three four five six", chunk_delay=0.4)]) as server:
            proxy = _record(tmp_path, confdir, cassette, server, "slow")
            try:
                with _connect(proxy, bundle) as conn:
                    conn.response.create(model="gpt-x", input="Say six words.")
                    next(iter(conn))
                    (exchange,) = server.model_exchanges
                    assert exchange.response is not None
                    upstream_done, sent = exchange.response.complete, len(exchange.response.chunks)
                    for event in conn:
                        if event.type in TERMINAL:
                            break
                total = len(server.model_exchanges[0].response.chunks)  # type: ignore[union-attr]
                assert proxy.stop() == 0
            finally:
                proxy.kill()
        assert not upstream_done and sent < total, f"the client got its first frame after {sent} of {total}"

    def test_transport_http_refuses_the_upgrade_with_426(self, tmp_path: Path, ca_bundle: tuple[Path, Path]) -> None:
        """The opt-out: the upgrade never reaches the upstream and the agent must speak HTTP."""
        confdir, bundle = ca_bundle
        cassette = tmp_path / "http.cassette.json"
        with FakeModelServer(list(SCRIPT)) as server:
            proxy = _record(tmp_path, confdir, cassette, server, "http", "flowproof_transport=http")
            try:
                with pytest.raises(Exception) as refused:  # noqa: B017 — websockets' handshake error
                    _connect(proxy, bundle).enter()
                assert proxy.stop() == 0
            finally:
                proxy.kill()
            assert server.requests == []
        assert "426" in str(refused.value)
        assert load_cassette(cassette).connections == ()

    def test_a_client_that_leaves_mid_answer_abandoned_its_turn(
        self, tmp_path: Path, ca_bundle: tuple[Path, Path]
    ) -> None:
        confdir, bundle = ca_bundle
        cassette = tmp_path / "left.cassette.json"
        with FakeModelServer([Reply.text("a b c d e f", chunk_delay=0.3)]) as server:
            proxy = _record(tmp_path, confdir, cassette, server, "left")
            try:
                conn = _connect(proxy, bundle).enter()
                conn.response.create(model="gpt-x", input="hi")
                got = [next(iter(conn)).type, next(iter(conn)).type]
                conn.close()
                server.wait_settled()
                assert proxy.stop() == 0
            finally:
                proxy.kill()
        [turn] = load_cassette(cassette).turns
        assert turn.abandoned and turn.response is not None and turn.response.frames is not None
        assert [json.loads(f.text or "")["type"] for f in turn.response.frames][:2] == got
        assert not any(json.loads(f.text or "")["type"] == "response.completed" for f in turn.response.frames)

        # Replay serves what reached the client, then holds: no terminal event, no error.
        proxy = _replay(tmp_path, confdir, cassette, "held")
        try:
            conn = _connect(proxy, bundle).enter()
            conn.response.create(model="gpt-x", input="hi")
            received: list[str] = []

            def read() -> None:
                try:
                    received.extend(e.type for e in conn)
                except Exception:  # noqa: BLE001 — the SDK's own error once we close under it
                    pass

            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            time.sleep(1.5)
            conn.close()
            reader.join(5)
            assert proxy.stop() == 0
            events = proxy.events()
        finally:
            proxy.kill()
        assert received == [json.loads(f.text or "")["type"] for f in turn.response.frames]
        assert [e["event"] for e in events if e["event"] in ("turn", "divergence", "error")] == ["turn"]

    def test_a_server_that_drops_the_connection_mid_answer_is_an_error_not_a_turn(
        self, tmp_path: Path, ca_bundle: tuple[Path, Path]
    ) -> None:
        confdir, bundle = ca_bundle
        cassette = tmp_path / "cut.cassette.json"
        with FakeModelServer([Reply.text("a b c d", cut_after=2)]) as server:
            proxy = _record(tmp_path, confdir, cassette, server, "cut")
            try:
                # The socket ends without a terminal event (or the SDK says it closed): any
                # other error (the CONNECT, TLS, the handshake) is not this test's cut.
                with pytest.raises((AssertionError, websockets.exceptions.ConnectionClosed)):
                    with _connect(proxy, bundle) as conn:
                        _turn(conn, model="gpt-x", input="hi")
                assert proxy.stop() == 0
                errors = proxy.events("error")
            finally:
                proxy.kill()
        assert load_cassette(cassette).turns == ()
        [error] = errors
        assert "the model call on the WebSocket to wss://api.openai.com/v1/responses failed" in error["text"]
        assert error["kind"] == "upstream"

    def test_a_spec_tool_result_replaces_the_one_in_the_request_frame(
        self, tmp_path: Path, ca_bundle: tuple[Path, Path]
    ) -> None:
        """`tools:` results apply to frames as to HTTP bodies: forwarded, recorded and matched."""
        confdir, bundle = ca_bundle
        spec = tmp_path / "weather.flow.yaml"
        spec.write_text("name: weather\nagent:\n  command: agent\ntools:\n  - name: get_weather\n"
                        "    result: {forecast: rain}\nsteps:\n  - prompt: weather?\n")
        cassette = tmp_path / "tools.cassette.json"
        with FakeModelServer(list(SCRIPT)) as server:
            proxy = _record(tmp_path, confdir, cassette, server, "tools", f"flowproof_spec={spec}")
            try:
                weather_agent(proxy, bundle)
                assert proxy.stop() == 0
            finally:
                proxy.kill()
            forwarded = server.model_requests[2].json["input"][0]["output"]
        assert forwarded == '{"forecast":"rain"}'  # the agent's own "sunny" never left the proxy
        assert load_cassette(cassette).turns[2].request.body["input"][0]["output"] == forwarded
        proxy = start_mitmdump(tmp_path, confdir, "flowproof_mode=replay", f"flowproof_cassette={cassette}",
                               f"flowproof_spec={spec}", name="tools-replay")
        try:
            ends = weather_agent(proxy, bundle)
            assert proxy.stop() == 0
            kinds = [e["event"] for e in proxy.events() if e["event"] in ("turn", "divergence", "error")]
        finally:
            proxy.kill()
        assert kinds == ["turn"] * 3 and ends[-1].response.output_text == "It is sunny in Paris."


class TestReplay:
    def test_replay_answers_every_turn_with_no_upstream_twice(
        self, tmp_path: Path, ca_bundle: tuple[Path, Path], recorded: tuple[Path, list[Any], FakeModelServer]
    ) -> None:
        confdir, bundle = ca_bundle
        cassette, recorded_ends, server = recorded
        for run in range(2):
            proxy = _replay(tmp_path, confdir, cassette, f"replay{run}")
            try:
                ends = weather_agent(proxy, bundle)
                assert proxy.stop() == 0
                events = proxy.events()
            finally:
                proxy.kill()
            assert [e.model_dump() for e in ends] == [e.model_dump() for e in recorded_ends]
            assert [e["event"] for e in events if e["event"] in ("turn", "divergence", "error")] == ["turn"] * 3
            # A replayed turn is named by its place in the cassette, never copied into the log.
            served = [(e["mode"], e["index"]) for e in events if e["event"] == "turn"]
            assert served == [("replay", i) for i in range(3)]
            assert events[-1]["event"] == "done" and events[-1]["unconsumed"] == []
        assert len(server.model_requests) == 3  # only the recording's frames ever reached it

    def test_replay_through_a_session_of_the_shared_proxy(
        self, tmp_path: Path, ca_bundle: tuple[Path, Path], recorded: tuple[Path, list[Any], FakeModelServer],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """The runner's path: a session on the shared proxy, whose hooks run in order and whose
        recorded frames are injected from the event loop (its WebSocket hooks run there)."""
        monkeypatch.delenv("FLOWPROOF_ADDON_SCRIPT", raising=False)
        confdir, bundle = ca_bundle
        cassette, recorded_ends, _server = recorded
        with ProxyPool() as pool:
            session = pool.open(ProxyOptions(mode=Mode.REPLAY, cassette=cassette, report=tmp_path / "s.jsonl"),
                                confdir)
            try:
                with handshake_explained(session.events, session.stderr_tail):
                    ends = weather_agent(session, bundle)  # type: ignore[arg-type]
            finally:
                session.stop()
            events = session.events()
        assert [e.model_dump() for e in ends] == [e.model_dump() for e in recorded_ends]
        assert [e["event"] for e in events if e["event"] in ("turn", "divergence", "error")] == ["turn"] * 3
        assert events[-1]["event"] == "done" and events[-1]["unconsumed"] == []

    def test_one_edited_word_is_a_divergence_and_an_error_event_with_status(
        self, tmp_path: Path, ca_bundle: tuple[Path, Path], recorded: tuple[Path, list[Any], FakeModelServer]
    ) -> None:
        confdir, bundle = ca_bundle
        cassette, _, _ = recorded
        proxy = _replay(tmp_path, confdir, cassette, "edited")
        try:
            started = time.monotonic()
            [error] = weather_agent(proxy, bundle, instructions=INSTRUCTIONS.replace("sentence", "word"))
            elapsed = time.monotonic() - started
            assert proxy.stop() == 0
            [divergence] = proxy.events("divergence")
        finally:
            proxy.kill()
        assert (error.type, error.status) == ("error", 400) and "flowproof replay diverged" in error.error.message
        assert elapsed < 15
        assert divergence["divergence"]["kind"] == "unmatched"
        text = Divergence.from_json(divergence["divergence"]).render()
        assert "instructions" in text and "sentence" in text

    def test_a_cassette_without_connections_still_refuses_the_upgrade(
        self, tmp_path: Path, ca_bundle: tuple[Path, Path]
    ) -> None:
        """What a recording made over HTTP saw: the upgrade refused (426), so the agent falls back."""
        confdir, bundle = ca_bundle
        cassette = tmp_path / "http.cassette.json"
        cassette.write_text('{"format": 1, "route": "proxy", "turns": []}\n')
        proxy = _replay(tmp_path, confdir, cassette, "http-only")
        try:
            with pytest.raises(Exception) as refused:  # noqa: B017 — websockets' handshake error
                with handshake_explained(proxy.events, _output_of(tmp_path, "http-only")):
                    _connect(proxy, bundle).enter()
            assert proxy.stop() == 0
        finally:
            proxy.kill()
        assert "426" in str(refused.value)


class TestCompare:
    def test_compare_pairs_websocket_turns_against_the_same_fake(
        self, tmp_path: Path, ca_bundle: tuple[Path, Path], recorded: tuple[Path, list[Any], FakeModelServer]
    ) -> None:
        confdir, bundle = ca_bundle
        cassette, _, _ = recorded
        with FakeModelServer(list(SCRIPT), live=1) as server:
            proxy = start_mitmdump(tmp_path, confdir, "flowproof_mode=compare", f"flowproof_cassette={cassette}",
                                   f"flowproof_upstream=api.openai.com={server.url}", name="compare")
            try:
                ends = weather_agent(proxy, bundle)
                assert proxy.stop() == 0
                events = proxy.events()
            finally:
                proxy.kill()
        assert ends[-1].response.output_text == "it is sunny in paris." or ends[-1].type == "response.completed"
        compared = [e for e in events if e["event"] in ("compared", "drift")]
        assert [e["event"] for e in compared] == ["compared"] * 3, [e.get("text") for e in compared]
        assert load_cassette(cassette).turns  # never written


class TestInjection:
    def test_a_replayed_frame_skips_the_command_wrapper_s_signature_check(
        self, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The proxy server's ``inject.websocket`` itself runs, but not mitmproxy's ``@command``
        check of its arguments (an ``inspect.signature`` per frame)."""
        from mitmproxy import command
        from mitmproxy.addons.proxyserver import Proxyserver
        from mitmproxy.test import tflow

        checked: list[object] = []
        monkeypatch.setattr(command, "verify_arg_signature", lambda *args: checked.append(args))
        proxyserver = Proxyserver()
        proxyserver.inject_websocket(tflow.tflow(), True, b"through the wrapper")
        assert len(checked) == 1  # the check the wrapper makes, seen by this test
        with caplog.at_level("WARNING"):
            _injector(proxyserver)(tflow.tflow(), True, b"{}", True)
        assert len(checked) == 1
        assert "Cannot inject WebSocket messages into non-WebSocket flows" in caplog.text

    def test_an_inject_method_without_a_wrapper_is_called_as_it_is(self) -> None:
        class Plain:
            def inject_websocket(self, flow: object, to_client: bool, message: bytes, is_text: bool) -> None:
                raise NotImplementedError

        plain = Plain()
        assert _injector(plain) == plain.inject_websocket
