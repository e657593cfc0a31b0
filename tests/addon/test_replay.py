"""The replay concern, driven through the root addon with mitmproxy's test flows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flowproof.divergence import Divergence
from flowproof.wire.sse import encode_events

from ..test_content_encoding import gzip_bomb
from .conftest import (
    CUT_EMOJI_BODY,
    SPEC,
    Harness,
    chat_body,
    chat_events,
    chat_turn,
    gzipped,
    model_flow,
    tool_round_body,
    write_cassette,
)


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
        (event,) = harness.events("turn")
        assert (event["mode"], event["index"]) == ("replay", 0)

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
        assert "helpful" in Divergence.from_json(event["divergence"]).render()

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
        assert done == {"event": "done", "unconsumed": [1]}

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
        assert [e["index"] for e in harness.events("turn")] == [0]

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

    @pytest.mark.parametrize(
        "body",
        [
            chat_body(),
            json.dumps(json.loads(chat_body()), indent=2).encode(),
            CUT_EMOJI_BODY,
            json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "Zürich 東京 \\n"}]},
                       ensure_ascii=False).encode(),
        ],
        ids=["compact", "pretty", "lone-surrogate", "non-ascii"],
    )
    def test_turn_event_names_the_recorded_turn_and_never_copies_it(self, harness: Harness, body: bytes):
        """The turn line names the cassette turn served and the hash it matched, whatever the
        body's form, in the same write as its request_started line; no body crosses the log."""
        second = chat_turn(1, body, "Booked.")
        path = write_cassette(harness.tmp / "c.json", chat_turn(0, chat_body("other"), "x"), second)
        harness.configure(flowproof_mode="replay", flowproof_cassette=str(path))
        flow = model_flow(body)
        harness.addon.request(flow)
        (event,) = harness.events("turn")
        assert event == {"event": "turn", "id": flow.id, "mode": "replay", "index": 1,
                         "body_sha256": second.request.body_sha256, "ms": event["ms"]}
        lines = (harness.tmp / "events.jsonl").read_text(encoding="utf-8").splitlines()
        assert [json.loads(x)["event"] for x in lines][-2:] == ["request_started", "turn"]
        assert len(lines[-1]) < 300

    def test_request_started_names_when_the_request_arrived(self, harness: Harness):
        """``at`` is the request's arrival on the wall clock, the moment the turn's ``ms`` counts
        from: with it a model call has a start and an end (docs/otel.md)."""
        path = write_cassette(harness.tmp / "c.json", chat_turn(0, chat_body(), "Booked."))
        harness.configure(flowproof_mode="replay", flowproof_cassette=str(path))
        flow = model_flow(chat_body())
        harness.addon.request(flow)
        (started,) = harness.events("request_started")
        assert started["at"] == flow.request.timestamp_start and started["id"] == flow.id

    def test_gzip_request_matches_a_plain_recording(self, harness: Harness):
        """A gzip-encoded request matches the turn recorded from the same body sent plain."""
        path = write_cassette(harness.tmp / "c.json", chat_turn(0, chat_body(), "hi"))
        harness.configure(flowproof_mode="replay", flowproof_cassette=str(path))
        f = model_flow(gzipped(chat_body()), headers=[
            (b"host", b"api.openai.com"), (b"content-type", b"application/json"), (b"content-encoding", b"gzip")])
        harness.addon.request(f)
        assert f.response is not None and f.response.status_code == 200

    def test_a_body_decoding_past_the_cap_is_refused_413_naming_the_call(self, harness: Harness):
        """80 MiB of zeros in 80 KB of gzip: refused at the 64 MiB cap, never matched or expanded whole."""
        path = write_cassette(harness.tmp / "c.json", chat_turn(0, chat_body(), "hi"))
        harness.configure(flowproof_mode="replay", flowproof_cassette=str(path))
        f = model_flow(gzip_bomb(80), headers=[
            (b"host", b"api.openai.com"), (b"content-type", b"application/json"), (b"content-encoding", b"gzip")])
        harness.addon.request(f)
        assert f.response is not None and f.response.status_code == 413
        assert "64 MiB" in json.loads(f.response.content or b"")["error"]["message"]
        (error,) = harness.events("error")
        assert "POST https://api.openai.com/v1/chat/completions" in error["text"] and "64 MiB" in error["text"]
        assert harness.events("turn") == harness.events("divergence") == []


class TestReplayHookFailure:
    def test_a_crash_in_replay_never_forwards_the_call(
        self, harness: Harness, monkeypatch: pytest.MonkeyPatch
    ):
        """If flowproof itself fails on a request, the agent gets a 400 and the run an error; nothing goes upstream."""
        path = write_cassette(harness.tmp / "c.json", chat_turn(0, chat_body(), "Booked."))
        harness.configure(flowproof_mode="replay", flowproof_cassette=str(path))

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("boom")

        monkeypatch.setattr("flowproof.addon.shared.detect", broken)
        f = model_flow(chat_body(), path="/v1/chat/completions?key=secret-query-value")
        harness.addon.request(f)
        assert f.response is not None and f.response.status_code == 400
        (event,) = harness.events("error")
        assert event["id"] == f.id
        assert "request hook" in event["text"] and "RuntimeError: boom" in event["text"]
        assert "secret-query-value" not in event["text"]
