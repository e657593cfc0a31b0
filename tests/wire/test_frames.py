"""Model APIs over a WebSocket: frames and the Responses frame codec (flowproof.wire.frames)."""

from __future__ import annotations

import json

import pytest

from flowproof.testing.openai_responses import stream_events
from flowproof.wire import codec_by_name
from flowproof.wire.base import Frame
from flowproof.wire.frames import detect_frames, frame_codec_by_name, frames_as_events
from flowproof.wire.openai_responses import FRAMES


class TestFrame:
    def test_text_and_binary_round_trip_through_json(self) -> None:
        for frame in (Frame(text='{"type":"x"}'), Frame(text=""), Frame(data=b"\x00\xff")):
            assert Frame.from_json(frame.to_json()) == frame
        assert Frame(data=b"\x00").to_json() == {"binary": "AA=="}
        assert Frame.of(b"h\xc3\xa9", True).text == "hé" and Frame.of(b"\x01", False).data == b"\x01"

    @pytest.mark.parametrize("bad", [{"text": 1}, {"binary": "!!"}, {"text": "a", "extra": 1}, "x"])
    def test_anything_else_is_refused(self, bad: object) -> None:
        with pytest.raises(ValueError):
            Frame.from_json(bad)


class TestDetection:
    def test_the_responses_upgrade_is_found_on_any_host(self) -> None:
        assert detect_frames("api.openai.com", "/v1/responses") is FRAMES
        assert detect_frames("gateway.local:8080", "/v1/responses?x=1") is FRAMES
        assert detect_frames("api.openai.com", "/v1/realtime") is None
        assert frame_codec_by_name("openai-responses") is FRAMES and frame_codec_by_name("anthropic") is None


class TestResponsesFrames:
    def test_requests_and_terminals(self) -> None:
        assert FRAMES.is_request(Frame(text='{"type":"response.create","input":[]}'))
        assert not FRAMES.is_request(Frame(text='{"type":"response.cancel"}'))
        assert not FRAMES.is_request(Frame(text="not json")) and not FRAMES.is_request(Frame(data=b"{}"))
        for kind in ("response.completed", "response.incomplete", "response.failed", "error"):
            assert FRAMES.is_terminal(Frame(text=json.dumps({"type": kind})))
        assert not FRAMES.is_terminal(Frame(text='{"type":"response.output_text.delta"}'))

    def test_the_error_frame_carries_the_status(self) -> None:
        frame = FRAMES.error_frame(400, "replay diverged")
        data = json.loads(frame.text or "")
        assert (data["type"], data["status"], data["error"]["message"]) == ("error", 400, "replay diverged")
        assert FRAMES.is_terminal(frame)

    def test_server_frames_read_as_the_http_codec_reads_its_stream(self) -> None:
        """The fake server's events (an independent producer), one frame each, give the same view
        as the HTTP codec's stream: the turn reads alike over either transport."""
        from flowproof.testing.base import Context
        from flowproof.testing.script import Reply

        ctx = Context(n=1, call_ids=(1,), model="m", body={}, input_tokens=1, output_tokens=1)
        events = stream_events(Reply.tool_call("get_weather", {"city": "Paris"}), ctx)
        frames = [Frame(text=json.dumps(e)) for e in events]
        view = codec_by_name("openai-responses").parse_events(frames_as_events(frames))
        assert [(c.name, c.arguments) for c in view.tool_calls] == [("get_weather", {"city": "Paris"})]
        assert frames_as_events([Frame(data=b"x")]) == ()

    def test_the_status_an_error_frame_stands_for(self) -> None:
        assert FRAMES.error_status(FRAMES.error_frame(429, "slow down")) == 429
        assert FRAMES.error_status(Frame(text='{"type":"error","status_code":500}')) == 500
        assert FRAMES.error_status(Frame(text='{"type":"error","error":{}}')) is None  # no status given
        assert FRAMES.error_status(Frame(text='{"type":"response.completed"}')) is None
