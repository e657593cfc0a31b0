"""The record concern, driven through the root addon with mitmproxy's test flows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mitmproxy import http
from mitmproxy.connection import ConnectionState
from mitmproxy.test import tflow, tutils

from flowproof.cassette import load_cassette
from flowproof.wire.sse import encode_events

from .conftest import (
    CHAT_PATH,
    CUT_EMOJI_BODY,
    SPEC,
    Harness,
    chat_body,
    chat_events,
    chat_turn,
    gzipped,
    json_response,
    model_flow,
    sse_response,
    stream_through,
    tool_round_body,
)


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
        assert "failed before it completed" in event["text"] and event["kind"] == "upstream"

    def test_failed_cassette_write_is_visible(self, harness: Harness, capsys: pytest.CaptureFixture[str]):
        """A cassette that cannot be written gives an error event and a line on stderr."""
        path = self.configure(harness)
        path.mkdir()  # a directory where the file should go: the rename fails
        harness.addon.done()
        assert harness.events("error")
        assert "could not write the cassette" in capsys.readouterr().err


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

    def test_client_disconnect_midstream_records_an_abandoned_turn(self, harness: Harness):
        """A client that hangs up before the terminal event abandoned the call: an abandoned
        turn with what it got, no error, and the next call is the next turn."""
        path = self.configure(harness)
        cut = model_flow(chat_body())
        harness.addon.request(cut)
        sse_response(cut)
        harness.addon.responseheaders(cut)
        first = encode_events(chat_events("fine")[:1])
        cut.response.stream(first)  # type: ignore[union-attr, operator]
        cut.error = tflow.terr("Client disconnected.")
        harness.addon.error(cut)
        ok = model_flow(chat_body("again"))
        harness.addon.request(ok)
        stream_through(harness, ok, [encode_events(chat_events("fine"))])
        harness.addon.done()
        assert harness.events("error") == []
        abandoned, complete = load_cassette(path).turns
        assert (abandoned.index, abandoned.abandoned, complete.index, complete.abandoned) == (0, True, 1, False)
        assert abandoned.response is not None and len(abandoned.response.events or ()) == 1

    def test_client_leaving_after_done_records_a_complete_turn(self, harness: Harness):
        """openai-python's sync stream closes at [DONE]; the body's end never came through."""
        path = self.configure(harness)
        f = model_flow(chat_body())
        harness.addon.request(f)
        sse_response(f)
        harness.addon.responseheaders(f)
        f.response.stream(encode_events(chat_events("fine")))  # type: ignore[union-attr, operator]
        f.error = tflow.terr("Client disconnected.")
        harness.addon.error(f)
        harness.addon.done()
        assert harness.events("error") == []
        (turn,) = load_cassette(path).turns
        assert not turn.abandoned and turn.response is not None
        assert [e.data for e in turn.response.events or ()][-1] == "[DONE]"

    def test_a_mapped_upstream_that_cannot_be_dialled_is_named(self, harness: Harness):
        """No server connection was ever set up for the call: the error names the address the
        proxy dialled, the host the agent addressed, and the OS error in words."""
        self.configure(harness, flowproof_upstream=["api.openai.com=http://127.0.0.1:9"])
        f = model_flow(chat_body())
        harness.addon.request(f)
        f.server_conn.timestamp_tcp_setup = None
        f.error = tflow.terr("[Errno 111] Connect call failed ('127.0.0.1', 9)")
        harness.addon.error(f)
        (event,) = harness.events("error")
        assert (event["kind"], event["address"], event["host"]) == ("upstream_unreachable", "127.0.0.1:9",
                                                                    "api.openai.com")
        assert event["text"] == (
            "the proxy could not reach the model host 127.0.0.1:9 (where the upstream mapping sends "
            "api.openai.com): connection refused: nothing listens there ([Errno 111] Connect call failed "
            "('127.0.0.1', 9))"
        )

    def test_a_connect_to_a_model_host_that_fails_is_named_and_another_host_is_not(self, harness: Harness):
        """The proxy dials at CONNECT (no mapping): a model host that does not resolve is an
        error naming it; a telemetry host that does not is none of the model boundary's business."""
        self.configure(harness)
        for host in ("api.openai.com", "telemetry.example.com"):
            f = tflow.tflow(req=tutils.treq(method=b"CONNECT", host=host, port=443, path=b""))
            f.server_conn.error = "[Errno -2] Name or service not known"
            harness.addon.http_connect_error(f)
        (event,) = harness.events("error")
        assert (event["kind"], event["address"], event.get("id")) == ("upstream_unreachable", "api.openai.com:443",
                                                                      None)
        assert event["text"] == ("the proxy could not reach the model host api.openai.com:443: the host name does "
                                 "not resolve ([Errno -2] Name or service not known)")

    def test_an_upstream_cut_before_the_terminal_event_stays_an_error(self, harness: Harness):
        """The server closed its side mid-stream: a fault, never an abandoned turn."""
        path = self.configure(harness)
        f = model_flow(chat_body())
        harness.addon.request(f)
        sse_response(f)
        harness.addon.responseheaders(f)
        f.response.stream(encode_events(chat_events("fine")[:1]))  # type: ignore[union-attr, operator]
        f.server_conn.state = ConnectionState.CAN_WRITE  # the server's side is closed
        f.error = tflow.terr("peer closed connection without sending complete message body")
        harness.addon.error(f)
        harness.addon.done()
        (error,) = harness.events("error")
        assert "failed before it completed" in error["text"] and error["kind"] == "upstream"
        assert load_cassette(path).turns == ()

    def test_a_call_in_flight_at_shutdown_is_abandoned(self, harness: Harness):
        """The agent exited before the proxy noticed: done settles the call as abandoned."""
        path = self.configure(harness)
        f = model_flow(chat_body())
        harness.addon.request(f)
        harness.addon.done()
        (turn,) = load_cassette(path).turns
        assert turn.abandoned and turn.response is None
        assert harness.events("turn")[0]["turn"]["abandoned"] is True

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
        f = model_flow(gzipped(chat_body()), headers=[
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
            (b"content-type", b"text/event-stream"), (b"content-encoding", b"gzip")]), content=gzipped(data))
        f.response.raw_content = gzipped(data)
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
