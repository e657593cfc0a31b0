"""Tests for flowproof.testing.anthropic: the anthropic SDK parses what the server sends."""

from __future__ import annotations

import json

from flowproof.testing import (
    FakeModelServer,
    Reply,
)

from .helpers import (
    MESSAGES,
    anthropic_client,
    raw_post,
)


class TestAnthropic:
    def test_non_streaming_tool_use(self) -> None:
        """A tool-call reply parses as a tool_use block with an input dict."""
        with FakeModelServer([Reply.tool_call("search", {"q": "kq311"})]) as server:
            message = anthropic_client(server).messages.create(model="claude-x", max_tokens=50, messages=MESSAGES)
        block = message.content[0]
        assert block.type == "tool_use"
        assert (block.id, block.name, block.input) == ("toolu_fake_1", "search", {"q": "kq311"})
        assert message.stop_reason == "tool_use"

    def test_stream_final_message_has_text_and_tool_input(self) -> None:
        """messages.stream assembles the text and the tool_use input from partial JSON."""
        reply = Reply.tool_call("book", {"flight": "KQ311", "passengers": [{"name": "Ann"}]},
                                text="Booking it now.")
        with FakeModelServer([reply, reply]) as server:
            with anthropic_client(server).messages.stream(model="claude-x", max_tokens=50,
                                                         messages=MESSAGES) as stream:
                kinds = [event.type for event in stream]
                message = stream.get_final_message()
            _, _, raw = raw_post(server, "/v1/messages", {"model": "m", "messages": [], "stream": True})
        assert message.content[0].type == "text" and message.content[0].text == "Booking it now."
        assert message.content[1].type == "tool_use"
        assert message.content[1].input == {"flight": "KQ311", "passengers": [{"name": "Ann"}]}
        assert message.stop_reason == "tool_use"
        assert "text" in kinds and "input_json" in kinds
        assert raw.decode().count("input_json_delta") >= 3
        assert raw.startswith(b"event: message_start\n")

    def test_error_format_is_anthropic(self) -> None:
        """An error reply uses Anthropic's type/error envelope."""
        with FakeModelServer([Reply.error(529, "overloaded")]) as server:
            status, _, raw = raw_post(server, "/v1/messages", {"model": "m", "messages": []})
        assert status == 529
        assert json.loads(raw) == {"type": "error", "error": {"type": "overloaded_error", "message": "overloaded"}}


class TestFinish:
    def test_finish_is_said_in_anthropic_words(self) -> None:
        """Each unified finish reason becomes Anthropic's stop_reason."""
        script = [Reply.text("x", finish=f) for f in ("stop", "length", "content_filter")]
        script.append(Reply.tool_call("f", {}, finish="stop"))
        with FakeModelServer(script) as server:
            client = anthropic_client(server)
            reasons = [client.messages.create(model="m", max_tokens=5, messages=MESSAGES).stop_reason
                       for _ in script]
        assert reasons == ["end_turn", "max_tokens", "refusal", "end_turn"]
