"""Tests for flowproof.views: recorded turns as provider-neutral views, through the codecs."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from flowproof.cassette import RecordedRequest, RecordedResponse, RecordedTurn
from flowproof.errors import WireError
from flowproof.request_key import body_sha256
from flowproof.turns import FinishReason
from flowproof.views import request_view, turn_path_fields, turn_views
from flowproof.wire import CODEC_NAMES, codec_by_name
from flowproof.wire.sse import SSEEvent, canonical_raw

from .test_cassette import chat_body, make_turn


class TestTurnViews:
    def test_lone_surrogate_request_body_has_a_view(self):
        """A recorded request body holding a lone surrogate is still parsed by its codec."""
        turn = make_turn(0, body=chat_body("cut \ud83d"))
        assert turn_views(turn).request.model == "gpt-4o"

    def test_a_turn_no_codec_reads_says_which_body_the_message_unchanged(self):
        """The judge names the request or the answer (`verdict.unreadable_turn`); cassette
        checks keep the codec's own words."""
        with pytest.raises(WireError) as request:
            turn_views(make_turn(0, body={"model": "gpt-4o", "messages": "hi"}))
        assert (request.value.part, request.value.field) == ("request", "messages")
        assert str(request.value) == "openai-chat: messages: is a JSON string, expected an array"
        answer = make_turn(0, response=RecordedResponse(200, {}, body={"no": "choices"}))
        with pytest.raises(WireError) as response:
            turn_views(answer)
        assert response.value.part == "response" and str(response.value).startswith("openai-chat: choices")

    def test_json_response_view(self):
        """turn_views parses the stored request body and a JSON response through the codec."""
        body = {
            "model": "gpt-4o",
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        }
        turn = turn_views(make_turn(3, body=body))
        assert turn.index == 3
        assert turn.request.model == "gpt-4o"
        assert turn.request.system == "Be brief."
        assert turn.request.roles == ("system", "user")
        assert turn.response is not None
        assert turn.response.text == "héllo"
        assert turn.response.finish_reason is FinishReason.STOP

    def test_stream_response_view(self):
        """turn_views assembles an SSE response through the codec's event parser."""
        chunks = [
            {"id": "c", "object": "chat.completion.chunk", "model": "gpt-4o",
             "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}, "finish_reason": None}]},
            {"id": "c", "object": "chat.completion.chunk", "model": "gpt-4o",
             "choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]},
        ]
        datas = [json.dumps(c) for c in chunks] + ["[DONE]"]
        events = tuple(SSEEvent(raw=canonical_raw(None, d), data=d) for d in datas)
        resp = RecordedResponse(200, {"content-type": "text/event-stream"}, events=events)
        turn = turn_views(make_turn(0, resp))
        assert turn.response is not None
        assert turn.response.text == "Hello"
        assert turn.response.finish_reason is FinishReason.STOP

    def test_error_status_gives_an_error_view(self):
        """A recorded response with status >= 400 becomes an ERROR view with the error message."""
        resp = RecordedResponse(429, {}, body={"error": {"message": "Rate limit reached", "type": "requests"}})
        turn = turn_views(make_turn(0, resp))
        assert turn.response is not None
        assert turn.response.finish_reason is FinishReason.ERROR
        assert turn.response.text == "Rate limit reached"

    def test_an_abandoned_turn_without_a_response_has_no_response_view(self):
        turn = RecordedTurn(0, "openai-chat", make_turn().request, None, abandoned=True)
        view = turn_views(turn)
        assert view.abandoned and view.response is None

    def test_a_partial_stream_that_does_not_read_gives_no_response_view(self):
        """What arrived of an abandoned call is shown when it reads, never a reason to fail."""
        broken = RecordedResponse(200, {}, events=(SSEEvent(raw="data: {\n\n", data="{"),))
        view = turn_views(replace(make_turn(0, broken), abandoned=True))
        assert view.abandoned and view.response is None


class TestPathFields:
    def test_a_gemini_turn_views_the_model_of_its_url(self):
        body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
        raw = json.dumps(body, separators=(",", ":")).encode()
        url = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"
        turn = RecordedTurn(0, "gemini", RecordedRequest("POST", url, {}, body_sha256(raw), body),
                            RecordedResponse(200, {}, body={"candidates": [{"content": {"parts": [{"text": "x"}]},
                                                                            "finishReason": "STOP"}]}))
        assert turn_path_fields(turn) == {"model": "gemini-2.5-flash"}
        assert turn_views(turn).request.model == "gemini-2.5-flash"
        assert turn_path_fields(make_turn()) == {}


class TestParsedBodies:
    def test_views_read_the_parsed_body_without_serializing_it(self):
        """A stored body is read as parsed JSON: a value `json.dumps` cannot write (a set, which
        no cassette holds but which no view needs either) does not stop the view."""
        body = {**chat_body("hi"), "metadata": {"tags": {"a", "b"}}}
        with pytest.raises(TypeError):
            json.dumps(body)
        turn = replace(make_turn(0), request=replace(make_turn(0).request, body=body))
        assert turn_views(turn).request.prompt == "hi"
        assert request_view("openai-chat", body) is not None

    @pytest.mark.parametrize("name", CODEC_NAMES)
    def test_a_parsed_body_reads_as_its_bytes_do(self, name: str):
        """Each codec's view of a parsed body is its view of the same body as bytes, and a body
        that is not an object is refused the same way."""
        codec = codec_by_name(name)
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                "input": [{"role": "user", "content": "hi"}],
                "contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
        assert codec.view_request(body) == codec.parse_request(json.dumps(body).encode())
        with pytest.raises(WireError) as parsed:
            codec.view_request([1])
        with pytest.raises(WireError) as raw:
            codec.parse_request(b"[1]")
        assert str(parsed.value) == str(raw.value)

    def test_a_request_no_codec_reads_has_no_courtesy_view(self):
        assert request_view("no-such-provider", chat_body()) is None
        assert request_view("openai-chat", ["not", "an", "object"]) is None
