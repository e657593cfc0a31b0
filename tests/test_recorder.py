"""Record assembly: the stream tap and the cassette form of a live response."""

from __future__ import annotations

import json

from flowproof.normalize import Normalizer
from flowproof.recorder import PendingCall, StreamTap, response_from_body, response_from_stream
from flowproof.request_key import prepare_request
from flowproof.wire import codec_by_name
from flowproof.wire.sse import encode_events, make_event

CHAT = codec_by_name("openai-chat")
STREAM = encode_events((make_event('{"choices":[]}'), make_event("[DONE]")))
SSE = [("Content-Type", "text/event-stream"), ("Set-Cookie", "sid=SECRET")]


class TestStreamTap:
    def test_chunks_pass_through_and_events_are_kept(self):
        """Every chunk is returned unchanged; the decoded events and the end are recorded."""
        tap = StreamTap()
        half = len(STREAM) // 2
        assert [tap.feed(STREAM[:half]), tap.feed(STREAM[half:])] == [STREAM[:half], STREAM[half:]]
        assert not tap.ended
        assert tap.feed(b"") == b""
        assert tap.ended and [e.data for e in tap.events] == ['{"choices":[]}', "[DONE]"]

    def test_a_stream_cut_midway_keeps_what_was_seen(self):
        """Without the final b"" the tap has not ended; finish flushes what the decoder holds."""
        tap = StreamTap()
        tap.feed(b'data: {"a":1}\n\ndata: {"b"')
        assert not tap.ended and len(tap.events) == 1
        assert [e.data for e in tap.finish()] == ['{"a":1}', '{"b"']


class TestPendingCall:
    def test_request_is_redacted_before_it_is_kept(self):
        """The URL loses its key and the headers their credentials."""
        prepared = prepare_request(CHAT, b'{"model":"m","messages":[]}', {}, Normalizer())
        headers = [("Authorization", "Bearer sk-x"), ("Content-Type", "application/json")]
        call = PendingCall.start(
            CHAT, "POST", "https://h.example/v1/chat/completions?key=SECRET", headers, prepared
        )
        assert call.request.url == "https://h.example/v1/chat/completions"
        assert call.request.headers == {"content-type": "application/json"}
        assert call.request.body == {"model": "m", "messages": []}
        turn = call.turn(4, response_from_body(200, [], "application/json", b"{}", Normalizer()))
        assert (turn.index, turn.provider, turn.request.body_sha256) == (
            4,
            "openai-chat",
            prepared.sha256,
        )


class TestResponses:
    def test_stream_response_is_its_events(self):
        """A tapped stream is recorded as its events, with allow-listed headers."""
        tap = StreamTap()
        tap.feed(STREAM)
        recorded = response_from_stream(200, SSE, tap, Normalizer())
        assert recorded.headers == {"content-type": "text/event-stream"}
        assert recorded.content() == STREAM

    def test_stream_paths_are_made_portable(self):
        """The agent's cwd inside a stream becomes «cwd»."""
        tap = StreamTap()
        tap.feed(encode_events((make_event(json.dumps({"path": "/home/u/proj/a.py"})),)))
        recorded = response_from_stream(200, SSE, tap, Normalizer(cwd="/home/u/proj"))
        assert recorded.events is not None and "«cwd»/a.py" in recorded.events[0].data

    def test_body_kinds(self):
        """A buffered body is events (SSE), parsed JSON, text, or empty."""
        n = Normalizer()
        assert response_from_body(200, [], "text/event-stream", STREAM, n).events is not None
        assert response_from_body(200, [], "application/json", b'{"a":1}', n).body == {"a": 1}
        assert response_from_body(502, [], "application/json", b"<html>", n).text == "<html>"
        assert response_from_body(200, [], "text/plain", b"hi", n).text == "hi"
        empty = response_from_body(204, [], "", b"", n)
        assert (empty.body, empty.events, empty.text) == (None, None, None)


class TestCompleteOrAbandoned:
    """A client that leaves: complete after the API's terminal event, abandoned before it."""

    def call(self) -> PendingCall:
        prepared = prepare_request(CHAT, b'{"model":"m","messages":[]}', {}, Normalizer())
        call = PendingCall.start(CHAT, "POST", "https://api.openai.com/v1/chat/completions", [], prepared)
        call.response_started(200, SSE)
        return call

    def test_the_terminal_event_makes_the_tap_complete_before_the_body_ends(self):
        """[DONE] arrived, the end of the body did not: complete, not ended."""
        tap = StreamTap(CHAT)
        tap.feed(STREAM)
        assert tap.complete and not tap.ended

    def test_a_client_leaving_after_done_gives_a_complete_turn(self):
        call = self.call()
        call.tap_stream().feed(STREAM)
        turn = call.left_turn(3, Normalizer())
        assert (turn.index, turn.abandoned) == (3, False)
        assert turn.response is not None and turn.response.status == 200
        assert [e.data for e in turn.response.events or ()] == ['{"choices":[]}', "[DONE]"]
        assert turn.response.headers == {"content-type": "text/event-stream"}

    def test_a_client_leaving_before_done_gives_an_abandoned_turn_with_what_arrived(self):
        """The complete events only: a half-received last event is not made whole."""
        call = self.call()
        call.tap_stream().feed(b'data: {"a":1}\n\ndata: {"b"')
        turn = call.left_turn(0, Normalizer())
        assert turn.abandoned and turn.response is not None
        assert [e.data for e in turn.response.events or ()] == ['{"a":1}']

    def test_a_client_gone_before_any_response_gives_an_abandoned_turn_without_one(self):
        prepared = prepare_request(CHAT, b'{"model":"m","messages":[]}', {}, Normalizer())
        call = PendingCall.start(CHAT, "POST", "https://api.openai.com/v1/chat/completions", [], prepared)
        turn = call.left_turn(1, Normalizer())
        assert turn.abandoned and turn.response is None and not call.complete

    def test_a_buffered_answer_the_client_never_got_is_abandoned_without_a_response(self):
        """Not streamed: the proxy holds the body until it is whole, so nothing reached the client."""
        call = self.call()
        turn = call.left_turn(0, Normalizer())
        assert turn.abandoned and turn.response is None
