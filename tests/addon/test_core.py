"""The addon's hooks, driven directly with mitmproxy's test flows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mitmproxy import exceptions, http
from mitmproxy.test import tflow, tutils

from flowproof.cassette import load_cassette
from flowproof.wire.sse import encode_events

from .conftest import (
    CHAT_PATH,
    SYSTEM,
    Harness,
    chat_body,
    chat_events,
    chat_turn,
    model_flow,
    write_cassette,
)

SPEC = """\
name: Booking
app: agent
agent:
  command: python agent.py
tools:
  - name: search_flights
    result: { flights: [ { id: KQ311 } ] }
steps:
  - prompt: Book me a flight
"""


def tool_round_body(result: str) -> bytes:
    """A chat request that carries a search_flights tool result."""
    body = {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Book"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "search_flights", "arguments": "{\"dest\":\"NBO\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": result},
        ],
        "stream": True,
    }
    return json.dumps(body, separators=(",", ":")).encode()


def sse_response(flow: http.HTTPFlow) -> None:
    flow.response = tutils.tresp(
        status_code=200, headers=http.Headers([(b"content-type", b"text/event-stream")]), content=b""
    )


def stream_through(h: Harness, flow: http.HTTPFlow, chunks: list[bytes]) -> list[bytes]:
    """Run the response side of a streamed flow; return what the client received."""
    sse_response(flow)
    h.addon.responseheaders(flow)
    stream: Any = flow.response.stream  # type: ignore[union-attr]
    assert callable(stream)
    out = [stream(c) for c in chunks]
    out.append(stream(b""))
    h.addon.response(flow)
    return out


def json_response(flow: http.HTTPFlow, body: dict[str, Any]) -> None:
    flow.response = tutils.tresp(
        status_code=200, headers=http.Headers([(b"content-type", b"application/json")]),
        content=json.dumps(body).encode(),
    )


class TestOptions:
    def test_bad_mode_is_refused(self, harness: Harness):
        """An unknown mode is an OptionsError."""
        with pytest.raises(exceptions.OptionsError):
            harness.configure(flowproof_mode="playback")

    def test_bad_upstream_names_the_value(self, harness: Harness, tmp_path: Path):
        """A malformed upstream map fails configure with the value in the message."""
        with pytest.raises(exceptions.OptionsError, match="nonsense"):
            harness.configure(flowproof_mode="record", flowproof_cassette=str(tmp_path / "c.json"),
                              flowproof_upstream=["nonsense"])

    def test_bad_compare_handler_is_refused(self, harness: Harness, tmp_path: Path):
        """A compare handler that cannot be imported fails configure."""
        path = write_cassette(tmp_path / "c.json")
        with pytest.raises(exceptions.OptionsError, match="no_such_module_xyz"):
            harness.configure(flowproof_mode="compare", flowproof_cassette=str(path),
                              flowproof_compare_handler="no_such_module_xyz:f")

    def test_missing_cassette_says_how_to_record(self, harness: Harness, tmp_path: Path):
        """Replay of a missing cassette fails configure and names the record command."""
        with pytest.raises(exceptions.OptionsError, match="record"):
            harness.configure(flowproof_mode="replay", flowproof_cassette=str(tmp_path / "none.json"))

    def test_replay_without_cassette_path_is_refused(self, harness: Harness):
        """Replay with no cassette option at all fails configure."""
        with pytest.raises(exceptions.OptionsError, match="flowproof_cassette"):
            harness.configure(flowproof_mode="replay")

    def test_record_into_missing_directory_is_refused(self, harness: Harness, tmp_path: Path):
        """Recording into a directory that does not exist fails before any traffic."""
        with pytest.raises(exceptions.OptionsError, match="does not exist"):
            harness.configure(flowproof_mode="record", flowproof_cassette=str(tmp_path / "no" / "c.json"))

    def test_route_mismatch_is_refused(self, harness: Harness, tmp_path: Path):
        """Replay refuses a cassette recorded on the other route."""
        path = write_cassette(tmp_path / "c.json", route="base_url")
        with pytest.raises(exceptions.OptionsError, match="route"):
            harness.configure(flowproof_mode="replay", flowproof_cassette=str(path))

    def test_bad_spec_is_refused(self, harness: Harness, tmp_path: Path):
        """An invalid spec fails configure naming the spec option."""
        spec = tmp_path / "bad.flow.yaml"
        spec.write_text("name: [unclosed\n")
        with pytest.raises(exceptions.OptionsError, match="flowproof_spec"):
            harness.configure(flowproof_mode="record", flowproof_cassette=str(tmp_path / "c.json"),
                              flowproof_spec=str(spec))

    def test_replay_forces_lazy_connections(self, harness: Harness, tmp_path: Path):
        """Replay switches mitmproxy to lazy connections so no upstream is ever dialled."""
        path = write_cassette(tmp_path / "c.json")
        # The option belongs to mitmproxy's proxyserver addon, absent from the test context.
        harness.tctx.options.add_option("connection_strategy", str, "eager", "test", choices=("eager", "lazy"))
        harness.configure(flowproof_mode="replay", flowproof_cassette=str(path))
        assert harness.tctx.options.connection_strategy == "lazy"


class TestReplay:
    def configure(self, h: Harness, *turns) -> Path:
        path = write_cassette(h.tmp / "c.json", *turns)
        h.configure(flowproof_mode="replay", flowproof_cassette=str(path))
        return path

    def test_hit_serves_recorded_stream_bytes(self, harness: Harness):
        """A matching request is answered with the exact recorded SSE bytes."""
        self.configure(harness, chat_turn(0, chat_body(), "Booked KQ311."))
        f = model_flow(chat_body())
        harness.addon.request(f)
        assert f.response is not None
        assert f.response.status_code == 200
        assert f.response.content == encode_events(chat_events("Booked KQ311."))
        assert f.response.headers["content-type"] == "text/event-stream"
        turn_events = harness.events("turn")
        assert [e["turn"]["index"] for e in turn_events] == [0]

    def test_miss_answers_400_and_logs_divergence(self, harness: Harness):
        """An edited system prompt gets a 400 error body and a divergence event naming the change."""
        self.configure(harness, chat_turn(0, chat_body(), "Booked."))
        f = model_flow(chat_body(system="You are a helpful booking assistant."))
        harness.addon.request(f)
        assert f.response is not None
        assert f.response.status_code == 400
        assert "flowproof replay diverged" in json.loads(f.response.content)["error"]["message"]
        (event,) = harness.events("divergence")
        assert event["id"] == f.id
        assert "helpful" in event["text"]

    def test_extra_call_is_a_divergence(self, harness: Harness):
        """A second identical call with only one recorded turn fails as an extra call."""
        self.configure(harness, chat_turn(0, chat_body(), "Booked."))
        first, second = model_flow(chat_body()), model_flow(chat_body())
        harness.addon.request(first)
        harness.addon.request(second)
        assert first.response is not None and first.response.status_code == 200
        assert second.response is not None and second.response.status_code == 400
        assert harness.events("divergence")[0]["divergence"]["kind"] == "extra"

    def test_identical_bodies_are_served_in_recorded_order(self, harness: Harness):
        """Two recorded turns with the same body are each served once, earliest first."""
        self.configure(harness, chat_turn(0, chat_body(), "one"), chat_turn(1, chat_body(), "two"))
        flows = [model_flow(chat_body()), model_flow(chat_body())]
        for f in flows:
            harness.addon.request(f)
        assert [f.response.content for f in flows] == [  # type: ignore[union-attr]
            encode_events(chat_events("one")), encode_events(chat_events("two"))]

    def test_unconsumed_turns_are_reported_at_done(self, harness: Harness):
        """A recorded turn never requested is listed in the done event."""
        self.configure(harness, chat_turn(0, chat_body(), "a"), chat_turn(1, chat_body("other"), "b"))
        harness.addon.request(model_flow(chat_body()))
        harness.addon.done()
        (done,) = harness.events("done")
        assert done["unconsumed"] == [1]
        assert "never requested" in done["text"]

    def test_non_model_call_on_model_host_is_answered_locally(self, harness: Harness):
        """Telemetry on a model host gets a local 404 in replay and no event."""
        self.configure(harness)
        f = model_flow(b"{}", path="/v1/traces/ingest")
        harness.addon.request(f)
        assert f.response is not None and f.response.status_code == 404
        assert harness.events("request_started") == []

    def test_other_hosts_pass_through(self, harness: Harness):
        """A request to a non-model host is left alone in replay."""
        self.configure(harness)
        f = model_flow(b"{}", host="github.com", path="/repos")
        harness.addon.request(f)
        assert f.response is None

    def test_websocket_upgrade_is_refused_with_426(self, harness: Harness):
        """codex's WebSocket upgrade on a model endpoint is answered 426."""
        self.configure(harness)
        f = model_flow(b"", method="GET", path="/v1/responses", headers=[
            (b"host", b"api.openai.com"), (b"upgrade", b"websocket"), (b"connection", b"Upgrade")])
        harness.addon.request(f)
        assert f.response is not None and f.response.status_code == 426

    def test_tool_result_substitution_applies_before_matching(self, harness: Harness, tmp_path: Path):
        """A request whose real tool result differs still matches once the spec's mock replaces it."""
        spec = tmp_path / "b.flow.yaml"
        spec.write_text(SPEC)
        mocked = tool_round_body(json.dumps({"flights": [{"id": "KQ311"}]}, separators=(",", ":")))
        path = write_cassette(tmp_path / "c.json", chat_turn(0, mocked, "Found KQ311."))
        harness.configure(flowproof_mode="replay", flowproof_cassette=str(path), flowproof_spec=str(spec))
        f = model_flow(tool_round_body("{\"flights\": []}"))
        harness.addon.request(f)
        assert f.response is not None and f.response.status_code == 200


class TestRecord:
    def configure(self, h: Harness, **extra: Any) -> Path:
        path = h.tmp / "rec.json"
        h.configure(flowproof_mode="record", flowproof_cassette=str(path), **extra)
        return path

    def test_stream_tap_passes_chunks_through_unchanged(self, harness: Harness):
        """Each streamed chunk reaches the client unchanged while the addon keeps a copy."""
        self.configure(harness)
        f = model_flow(chat_body())
        harness.addon.request(f)
        data = encode_events(chat_events("Booked."))
        chunks = [data[:7], data[7:50], data[50:]]
        out = stream_through(harness, f, chunks)
        assert out == [*chunks, b""]
        (event,) = harness.events("turn")
        recorded = event["turn"]["response"]["events"]
        assert [e["data"] for e in recorded][-1] == "[DONE]"
        assert len(recorded) == 3

    def test_record_writes_a_cassette_without_secrets(self, harness: Harness):
        """Two recorded turns land in the cassette at done, with no credential anywhere."""
        path = self.configure(harness)
        for i, text in enumerate(["first", "second"]):
            f = model_flow(chat_body(f"question {i}"))
            harness.addon.request(f)
            data = encode_events(chat_events(text))
            stream_through(harness, f, [data])
        harness.addon.done()
        raw = path.read_text()
        assert "sk-secret" not in raw and "authorization" not in raw.lower()
        cassette = load_cassette(path)
        assert [t.index for t in cassette.turns] == [0, 1]
        assert encode_events(cassette.turns[1].response.events or ()) == encode_events(chat_events("second"))
        assert cassette.turns[0].request.body["messages"][1]["content"] == "question 0"
        assert harness.events("done")[0]["unconsumed"] == []

    def test_json_response_is_stored_parsed(self, harness: Harness):
        """A non-streamed JSON response is stored as a parsed body."""
        path = self.configure(harness)
        f = model_flow(chat_body(stream=False))
        harness.addon.request(f)
        json_response(f, {"id": "x", "choices": []})
        harness.addon.responseheaders(f)
        harness.addon.response(f)
        harness.addon.done()
        assert load_cassette(path).turns[0].response.body == {"id": "x", "choices": []}

    def test_upstream_mapping_rewrites_destination(self, harness: Harness):
        """A mapped model host is sent to the upstream URL, path prefix included, and recorded under its own URL."""
        path = self.configure(harness, flowproof_upstream=["api.openai.com=http://127.0.0.1:8123/base"])
        f = model_flow(chat_body())
        harness.addon.request(f)
        assert (f.request.scheme, f.request.host, f.request.port) == ("http", "127.0.0.1", 8123)
        assert f.request.path == "/base" + CHAT_PATH
        assert f.request.headers["host"] == "127.0.0.1:8123"
        stream_through(harness, f, [encode_events(chat_events("ok"))])
        harness.addon.done()
        assert load_cassette(path).turns[0].request.url == "https://api.openai.com" + CHAT_PATH

    def test_upstream_mapping_covers_non_model_traffic(self, harness: Harness):
        """Traces on a mapped host go to the mapped upstream too, never to the real host."""
        path = self.configure(harness, flowproof_upstream=["api.openai.com=http://127.0.0.1:8123"])
        f = model_flow(b"{}", path="/v1/traces/ingest")
        harness.addon.request(f)
        assert f.response is None
        assert (f.request.scheme, f.request.host, f.request.port) == ("http", "127.0.0.1", 8123)
        json_response(f, {})
        harness.addon.response(f)
        harness.addon.done()
        assert load_cassette(path).turns == ()

    def test_tool_result_substitution_changes_forwarded_body(self, harness: Harness, tmp_path: Path):
        """The spec's tool result replaces the real one in the bytes sent upstream."""
        spec = tmp_path / "b.flow.yaml"
        spec.write_text(SPEC)
        self.configure(harness, flowproof_spec=str(spec))
        f = model_flow(tool_round_body("{\"flights\": []}"))
        harness.addon.request(f)
        sent = json.loads(f.request.content or b"")
        assert json.loads(sent["messages"][3]["content"]) == {"flights": [{"id": "KQ311"}]}

    def test_non_model_requests_are_not_recorded(self, harness: Harness):
        """Telemetry on a model host passes through and never becomes a turn."""
        path = self.configure(harness)
        f = model_flow(b"{}", path="/api/event_logging")
        harness.addon.request(f)
        assert f.response is None
        json_response(f, {})
        harness.addon.response(f)
        harness.addon.done()
        assert load_cassette(path).turns == ()

    def test_upstream_error_is_logged(self, harness: Harness):
        """A model call that fails upstream writes an error event."""
        self.configure(harness)
        f = model_flow(chat_body())
        harness.addon.request(f)
        f.error = tflow.terr()
        harness.addon.error(f)
        (event,) = harness.events("error")
        assert "failed before it completed" in event["text"]

    def test_failed_cassette_write_is_visible(self, harness: Harness, capsys: pytest.CaptureFixture[str]):
        """A cassette that cannot be written gives an error event and a line on stderr."""
        path = self.configure(harness)
        path.mkdir()  # a directory where the file should go: the rename fails
        harness.addon.done()
        assert harness.events("error")
        assert "could not write the cassette" in capsys.readouterr().err


class TestCompare:
    def setup_cassette(self, h: Harness, **extra: Any) -> Path:
        path = write_cassette(h.tmp / "c.json", chat_turn(0, chat_body(), "Booked KQ311."))
        h.configure(flowproof_mode="compare", flowproof_cassette=str(path), **extra)
        return path

    def run_live(self, h: Harness, body: bytes, text: str) -> http.HTTPFlow:
        f = model_flow(body)
        h.addon.request(f)
        assert f.response is None  # forwarded, not answered
        stream_through(h, f, [encode_events(chat_events(text))])
        return f

    def test_equal_live_response_is_compared(self, harness: Harness):
        """A live response equal up to case and spacing yields a compared event."""
        self.setup_cassette(harness)
        self.run_live(harness, chat_body(), "booked  kq311.")
        (event,) = harness.events("compared")
        assert event["result"]["equal"] is True
        assert [e["mode"] for e in harness.events("turn")] == ["compare"]
        assert event["result"]["text"]["status"] == "normalized"

    def test_different_text_is_drift(self, harness: Harness):
        """Different live text yields a drift event."""
        self.setup_cassette(harness)
        self.run_live(harness, chat_body(), "Sorry, no flights.")
        (event,) = harness.events("drift")
        assert event["result"]["equal"] is False

    def test_live_request_pairs_by_place_not_bytes(self, harness: Harness):
        """A live request with other bytes (another user text, a new field) still pairs by place."""
        self.setup_cassette(harness)
        self.run_live(harness, chat_body("Book a flight to Mombasa", temperature=0), "Booked KQ311.")
        (event,) = harness.events("compared")
        assert (event["result"]["kind"], event["result"]["turn"]) == ("paired", 0)
        assert event["result"]["context"]["fields"][0]["path"] == "messages.1.content"

    def test_new_system_prompt_is_extra_and_the_turn_missing(self, harness: Harness):
        """A live call in a thread the recording lacks is extra; its recorded turn is missing at done."""
        self.setup_cassette(harness)
        self.run_live(harness, chat_body(system="You are a travel agent."), "Booked KQ311.")
        harness.addon.done()
        extra, missing = harness.events("drift")
        assert extra["result"]["kind"] == "extra"
        assert "no recorded thread has this system prompt" in extra["text"]
        assert missing["result"]["kind"] == "missing" and missing["result"]["turn"] == 0
        assert harness.events("done")[0]["unconsumed"] == [0]

    def test_compare_never_writes_the_cassette(self, harness: Harness):
        """Compare leaves the cassette byte-identical, even at done."""
        path = self.setup_cassette(harness)
        before, mtime = path.read_bytes(), path.stat().st_mtime_ns
        self.run_live(harness, chat_body(), "Totally different.")
        harness.addon.done()
        assert path.read_bytes() == before
        assert path.stat().st_mtime_ns == mtime

    def test_handler_receives_results_instead_of_drift(self, harness: Harness):
        """With a compare handler every result goes to it and no drift event is written."""
        self.setup_cassette(harness, flowproof_compare_handler=f"{__name__}:collect")
        COLLECTED.clear()
        self.run_live(harness, chat_body(), "Sorry, no flights.")
        assert [r.equal for r in COLLECTED] == [False]
        assert harness.events("drift") == []
        assert harness.events("compared")[0]["handled"] is True

    def test_handler_receives_extra_and_missing_too(self, harness: Harness):
        """Unpaired results reach the handler like any other, the missing one at done."""
        self.setup_cassette(harness, flowproof_compare_handler=f"{__name__}:collect")
        COLLECTED.clear()
        self.run_live(harness, chat_body(system="You are a travel agent."), "Booked KQ311.")
        harness.addon.done()
        assert [(r.kind, r.equal) for r in COLLECTED] == [("extra", False), ("missing", False)]
        assert harness.events("drift") == []

    def test_a_handler_that_raises_rejects_the_result(self, harness: Harness):
        """A handler's exception is its verdict: a drift event naming it, even for an equal result."""
        self.setup_cassette(harness, flowproof_compare_handler=f"{__name__}:strict_text")
        self.run_live(harness, chat_body(), "booked kq311.")
        (event,) = harness.events("drift")
        assert event["handled"] is True and event["result"]["equal"] is True
        assert "rejected turn 0 (thread 0, depth 2): AssertionError: text is normalized" in event["text"]


COLLECTED: list[Any] = []


def collect(result: Any) -> None:
    """A compare handler for the tests."""
    COLLECTED.append(result)


def strict_text(result: Any) -> None:
    """A compare handler that makes prose a contract."""
    if result.text.status != "exact":
        raise AssertionError(f"text is {result.text.status}")


class TestLifecycle:
    def test_tls_failure_is_logged(self, harness: Harness, tmp_path: Path):
        """A client TLS failure writes a tls_failed event naming the host."""
        harness.configure(flowproof_mode="record", flowproof_cassette=str(tmp_path / "c.json"))
        from mitmproxy import tls
        from mitmproxy.proxy import context

        client = tflow.tclient_conn()
        client.sni = "api.openai.com"
        data = tls.TlsData(client, context.Context(client, harness.tctx.options))
        harness.addon.tls_failed_client(data)
        (event,) = harness.events("tls_failed")
        assert event["host"] == "api.openai.com"
        assert "does not trust" in event["text"]

    def test_running_writes_ready(self, harness: Harness, tmp_path: Path):
        """The running hook writes a ready event with a listen list."""
        harness.configure(flowproof_mode="record", flowproof_cassette=str(tmp_path / "c.json"))
        harness.addon.running()
        (event,) = harness.events("ready")
        assert event["listen"] == []
        assert event["mode"] == "record"


def _gzip(data: bytes) -> bytes:
    import gzip

    return gzip.compress(data, mtime=0)


CUT_EMOJI_BODY = json.dumps(
    {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "cut \ud83d"}]}
).encode()


class TestRecordEdges:
    """The record path when bodies are odd or the upstream or the client fails."""

    def configure(self, h: Harness, **extra: Any) -> Path:
        path = h.tmp / "rec.json"
        h.configure(flowproof_mode="record", flowproof_cassette=str(path), **extra)
        return path

    def test_stream_cut_midway_records_no_half_turn(self, harness: Harness):
        """A stream that fails after its first event gives an error event and no recorded turn."""
        path = self.configure(harness)
        f = model_flow(chat_body())
        harness.addon.request(f)
        sse_response(f)
        harness.addon.responseheaders(f)
        data = encode_events(chat_events("Booked."))
        assert f.response.stream(data[:40]) == data[:40]  # type: ignore[union-attr]
        f.error = tflow.terr("peer closed connection without sending complete message body")
        harness.addon.error(f)
        harness.addon.done()
        assert harness.events("turn") == []
        (error,) = harness.events("error")
        assert error["id"] == f.id and "without sending complete" in error["text"]
        assert load_cassette(path).turns == ()

    def test_client_disconnect_midstream_records_no_turn(self, harness: Harness):
        """A client that hangs up mid-stream gives an error event naming it, and the next call is turn 0."""
        path = self.configure(harness)
        cut = model_flow(chat_body())
        harness.addon.request(cut)
        sse_response(cut)
        harness.addon.responseheaders(cut)
        cut.error = tflow.terr("Client disconnected.")
        harness.addon.error(cut)
        ok = model_flow(chat_body("again"))
        harness.addon.request(ok)
        stream_through(harness, ok, [encode_events(chat_events("fine"))])
        harness.addon.done()
        assert "Client disconnected." in harness.events("error")[0]["text"]
        assert [t.index for t in load_cassette(path).turns] == [0]

    def test_server_error_is_recorded_as_a_turn(self, harness: Harness):
        """A 5xx answer is a recorded turn with its status and error body, so replay serves it again."""
        path = self.configure(harness)
        f = model_flow(chat_body())
        harness.addon.request(f)
        f.response = tutils.tresp(status_code=503, headers=http.Headers([(b"content-type", b"application/json")]),
                                  content=b'{"error":{"message":"overloaded"}}')
        harness.addon.responseheaders(f)
        harness.addon.response(f)
        harness.addon.done()
        (turn,) = load_cassette(path).turns
        assert (turn.response.status, turn.response.body) == (503, {"error": {"message": "overloaded"}})

    def test_non_utf8_request_body_is_recorded_and_logged(self, harness: Harness):
        """A model call whose body is not UTF-8 still gives a turn event and a recorded turn."""
        path = self.configure(harness)
        f = model_flow(b"\xff\xfe not json")
        harness.addon.request(f)
        json_response(f, {"error": {"message": "bad body"}})
        f.response.status_code = 400  # type: ignore[union-attr]
        harness.addon.response(f)
        harness.addon.done()
        (event,) = harness.events("turn")
        assert event["turn"]["request"]["body"] == "\udcff\udcfe not json"
        (turn,) = load_cassette(path).turns
        assert turn.request.body == "\udcff\udcfe not json"
        assert harness.events("error") == []

    def test_lone_surrogate_escape_in_body_is_recorded(self, harness: Harness):
        """A JSON body with a lone \\ud83d escape (a cut emoji) is logged, saved and loaded back intact."""
        path = self.configure(harness)
        f = model_flow(CUT_EMOJI_BODY)
        harness.addon.request(f)
        stream_through(harness, f, [encode_events(chat_events("ok"))])
        harness.addon.done()
        assert harness.events("error") == []
        assert harness.events("turn")[0]["turn"]["request"]["body"]["messages"][0]["content"] == "cut \ud83d"
        (turn,) = load_cassette(path).turns
        assert turn.request.body == json.loads(CUT_EMOJI_BODY)

    def test_gzip_request_body_is_hashed_decoded(self, harness: Harness):
        """A gzip-encoded request is recorded parsed, under the hash of its decoded bytes."""
        path = self.configure(harness)
        f = model_flow(_gzip(chat_body()), headers=[
            (b"host", b"api.openai.com"), (b"content-type", b"application/json"), (b"content-encoding", b"gzip")])
        harness.addon.request(f)
        stream_through(harness, f, [encode_events(chat_events("ok"))])
        harness.addon.done()
        (turn,) = load_cassette(path).turns
        assert turn.request.body_sha256 == chat_turn(0, chat_body(), "x").request.body_sha256
        assert turn.request.body == json.loads(chat_body())

    def test_gzip_stream_from_upstream_is_recorded_decoded(self, harness: Harness):
        """An upstream that gzips its SSE stream anyway is recorded as plain events."""
        path = self.configure(harness)
        f = model_flow(chat_body())
        harness.addon.request(f)
        data = encode_events(chat_events("zipped"))
        f.response = tutils.tresp(status_code=200, headers=http.Headers([
            (b"content-type", b"text/event-stream"), (b"content-encoding", b"gzip")]), content=_gzip(data))
        f.response.raw_content = _gzip(data)
        harness.addon.responseheaders(f)
        assert f.response.stream is False  # left buffered: mitmproxy decodes it whole
        harness.addon.response(f)
        harness.addon.done()
        (turn,) = load_cassette(path).turns
        assert turn.response.content() == data
        assert "content-encoding" not in turn.response.headers

    def test_concurrent_identical_calls_are_indexed_by_completion(self, harness: Harness):
        """Two identical calls in flight are numbered in the order they complete."""
        path = self.configure(harness)
        first, second = model_flow(chat_body()), model_flow(chat_body())
        harness.addon.request(first)
        harness.addon.request(second)
        stream_through(harness, second, [encode_events(chat_events("second"))])
        stream_through(harness, first, [encode_events(chat_events("first"))])
        harness.addon.done()
        turns = load_cassette(path).turns
        assert [(t.index, t.response.content()) for t in turns] == [
            (0, encode_events(chat_events("second"))), (1, encode_events(chat_events("first")))]
        assert [e["id"] for e in harness.events("turn")] == [second.id, first.id]

    def test_cwd_in_a_stream_is_portable_and_restored_elsewhere(self, harness: Harness, tmp_path: Path):
        """A recorded stream naming cwd stores «cwd» (not in a sibling name) and replays with the new cwd."""
        path = self.configure(harness, flowproof_cwd="/srv/proj", flowproof_home="/home/casey")
        f = model_flow(chat_body("list /srv/proj"))
        harness.addon.request(f)
        stream_through(harness, f, [encode_events(chat_events("see /srv/proj/a.py, /srv/proj2"))])
        harness.addon.done()
        (turn,) = load_cassette(path).turns
        assert turn.request.body["messages"][1]["content"] == "list «cwd»"
        assert "see «cwd»/a.py, /srv/proj2" in turn.response.content().decode()

        harness.configure(flowproof_mode="replay", flowproof_cassette=str(path),
                          flowproof_cwd="/ci/checkout", flowproof_home="/root")
        g = model_flow(chat_body("list /ci/checkout"))
        harness.addon.request(g)
        assert g.response is not None and g.response.status_code == 200
        assert "see /ci/checkout/a.py, /srv/proj2" in g.response.content.decode()


class TestReplayEdges:
    """Replay of recorded error answers and of odd request bodies."""

    @pytest.mark.parametrize(("status", "response"), [
        (500, {"body": {"error": {"message": "boom", "type": "server_error"}}}),
        (429, {"text": "slow down"}),
        (401, {"body": {"error": {"message": "bad key"}}}),
    ])
    def test_recorded_error_replays_as_recorded(self, harness: Harness, status: int, response: dict):
        """A recorded 4xx/5xx answer is served with its status and body, and is no divergence."""
        from flowproof.cassette import RecordedResponse, RecordedTurn

        base = chat_turn(0, chat_body(), "x")
        ctype = "application/json" if "body" in response else "text/plain"
        turn = RecordedTurn(0, base.provider, base.request,
                            RecordedResponse(status, {"content-type": ctype}, **response))
        path = write_cassette(harness.tmp / "c.json", turn)
        harness.configure(flowproof_mode="replay", flowproof_cassette=str(path))
        f = model_flow(chat_body())
        harness.addon.request(f)
        assert f.response is not None
        assert (f.response.status_code, f.response.content) == (status, turn.response.content())
        assert harness.events("divergence") == []
        assert [e["turn"]["response"]["status"] for e in harness.events("turn")] == [status]

    def test_non_utf8_miss_is_logged_as_divergence(self, harness: Harness):
        """A request body that is not UTF-8 gets the 400 and a divergence event in the log."""
        path = write_cassette(harness.tmp / "c.json", chat_turn(0, chat_body(), "x"))
        harness.configure(flowproof_mode="replay", flowproof_cassette=str(path))
        f = model_flow(b"\xff\xfe not json")
        harness.addon.request(f)
        assert f.response is not None and f.response.status_code == 400
        (event,) = harness.events("divergence")
        assert event["id"] == f.id

    def test_recorded_lone_surrogate_replays(self, harness: Harness):
        """A turn recorded from a body with a lone \\ud83d escape is matched and its JSON answer served."""
        from flowproof.cassette import RecordedResponse, RecordedTurn

        base = chat_turn(0, CUT_EMOJI_BODY, "x")
        turn = RecordedTurn(0, base.provider, base.request,
                            RecordedResponse(400, {"content-type": "application/json"},
                                             body={"error": {"message": "no low surrogate: \ud83d"}}))
        path = write_cassette(harness.tmp / "c.json", turn)
        harness.configure(flowproof_mode="replay", flowproof_cassette=str(path))
        f = model_flow(CUT_EMOJI_BODY)
        harness.addon.request(f)
        assert f.response is not None and f.response.status_code == 400
        assert json.loads(f.response.content or b"") == {"error": {"message": "no low surrogate: \ud83d"}}

    def test_gzip_request_matches_a_plain_recording(self, harness: Harness):
        """A gzip-encoded request matches the turn recorded from the same body sent plain."""
        path = write_cassette(harness.tmp / "c.json", chat_turn(0, chat_body(), "hi"))
        harness.configure(flowproof_mode="replay", flowproof_cassette=str(path))
        f = model_flow(_gzip(chat_body()), headers=[
            (b"host", b"api.openai.com"), (b"content-type", b"application/json"), (b"content-encoding", b"gzip")])
        harness.addon.request(f)
        assert f.response is not None and f.response.status_code == 200


class TestHookFailures:
    def test_a_crash_in_replay_never_forwards_the_call(
        self, harness: Harness, monkeypatch: pytest.MonkeyPatch
    ):
        """If flowproof itself fails on a request, the agent gets a 400 and the run an error; nothing goes upstream."""
        path = write_cassette(harness.tmp / "c.json", chat_turn(0, chat_body(), "Booked."))
        harness.configure(flowproof_mode="replay", flowproof_cassette=str(path))

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("boom")

        monkeypatch.setattr("flowproof.addon.core.detect", broken)
        f = model_flow(chat_body(), path="/v1/chat/completions?key=secret-query-value")
        harness.addon.request(f)
        assert f.response is not None and f.response.status_code == 400
        (event,) = harness.events("error")
        assert event["id"] == f.id
        assert "request hook" in event["text"] and "RuntimeError: boom" in event["text"]
        assert "secret-query-value" not in event["text"]

    def test_a_crash_while_recording_a_response_fails_the_run(
        self, harness: Harness, monkeypatch: pytest.MonkeyPatch
    ):
        """A response flowproof cannot record is an error event, so no recording silently lacks a turn."""
        path = harness.tmp / "rec.json"
        harness.configure(flowproof_mode="record", flowproof_cassette=str(path))
        f = model_flow(chat_body(stream=False))
        harness.addon.request(f)

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("boom")

        monkeypatch.setattr(harness.addon, "_recorded_response", broken)
        json_response(f, {"id": "x", "choices": []})
        harness.addon.responseheaders(f)
        harness.addon.response(f)
        (event,) = harness.events("error")
        assert event["id"] == f.id and "response hook" in event["text"]
