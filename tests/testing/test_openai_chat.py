"""Tests for flowproof.testing.openai_chat: the openai SDK parses what the server sends."""

from __future__ import annotations

import json

import pytest

from flowproof.testing import (
    FakeModelServer,
    Reply,
)

from .helpers import (
    MESSAGES,
    openai_client,
    raw_post,
    sse_data,
)


class TestOpenAIChat:
    def test_non_streaming_text(self) -> None:
        """A text reply parses as a chat.completion with finish_reason stop."""
        with FakeModelServer([Reply.text("Hello!")]) as server:
            result = openai_client(server).chat.completions.create(model="gpt-4o", messages=MESSAGES)
        assert result.choices[0].message.content == "Hello!"
        assert result.choices[0].finish_reason == "stop"
        assert (result.id, result.created, result.model) == ("chatcmpl-fake-1", 1700000000, "gpt-4o")
        assert result.usage is not None and result.usage.total_tokens > 0

    def test_non_streaming_tool_call(self) -> None:
        """A tool-call reply parses with a counter-based id and the scripted arguments."""
        with FakeModelServer([Reply.tool_call("get_weather", {"city": "Paris"})]) as server:
            result = openai_client(server).chat.completions.create(model="gpt-4o", messages=MESSAGES)
        call = result.choices[0].message.tool_calls[0]  # type: ignore[index]
        assert (call.id, call.function.name) == ("call_fake_1", "get_weather")  # type: ignore[union-attr]
        assert json.loads(call.function.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
        assert result.choices[0].finish_reason == "tool_calls"
        assert result.choices[0].message.content is None

    def test_streaming_text_arrives_in_several_chunks(self) -> None:
        """A streamed text reply arrives as several content deltas that join to the text."""
        with FakeModelServer([Reply.text("The quick brown fox jumps.")]) as server:
            stream = openai_client(server).chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
            chunks = list(stream)
        pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
        assert len(pieces) >= 4
        assert "".join(pieces) == "The quick brown fox jumps."
        assert chunks[-1].choices[0].finish_reason == "stop"

    def test_streaming_parallel_tool_calls_assemble_by_index(self) -> None:
        """Interleaved parallel tool-call deltas assemble into the scripted arguments."""
        script = [Reply.tool_calls([("book", {"flight": "KQ311", "seats": 2}), ("notify", {"to": "ann"})])] * 2
        with FakeModelServer(script) as server:
            client = openai_client(server)
            chunks = list(client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True))
            with client.chat.completions.stream(model="gpt-4o", messages=MESSAGES) as helper:
                final = helper.get_final_completion()
        calls: dict[int, dict[str, str]] = {}
        argument_deltas = 0
        for chunk in chunks:
            for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                slot = calls.setdefault(delta.index, {"name": "", "arguments": ""})
                if delta.function and delta.function.name:
                    slot["name"] = delta.function.name
                if delta.function and delta.function.arguments:
                    slot["arguments"] += delta.function.arguments
                    argument_deltas += 1
        assert argument_deltas >= 4
        assert {c["name"]: json.loads(c["arguments"]) for c in calls.values()} == {
            "book": {"flight": "KQ311", "seats": 2}, "notify": {"to": "ann"}}
        helper_calls = final.choices[0].message.tool_calls or []
        assert [json.loads(c.function.arguments) for c in helper_calls] == [  # type: ignore[union-attr]
            {"flight": "KQ311", "seats": 2}, {"to": "ann"}]
        assert [c.id for c in helper_calls] == ["call_fake_3", "call_fake_4"]

    def test_include_usage_sends_a_usage_chunk(self) -> None:
        """With include_usage the stream ends with an empty-choices usage chunk before [DONE]."""
        with FakeModelServer([Reply.text("hi there"), Reply.text("hi there")]) as server:
            chunks = list(openai_client(server).chat.completions.create(
                model="gpt-4o", messages=MESSAGES, stream=True, stream_options={"include_usage": True}))
            _, _, raw = raw_post(server, "/v1/chat/completions", {"model": "m", "messages": [], "stream": True})
        assert chunks[-1].choices == [] and chunks[-1].usage is not None
        assert chunks[-1].usage.total_tokens == chunks[-1].usage.prompt_tokens + chunks[-1].usage.completion_tokens
        data = sse_data(raw)
        assert data[-1] == "[DONE]" and all('"usage"' not in d for d in data)


class TestFinish:
    @pytest.mark.parametrize("stream", [False, True])
    def test_finish_is_said_in_chat_words(self, stream: bool) -> None:
        """finish= names the finish_reason, even against the content (a tool call ending with stop)."""
        script = [Reply.tool_call("f", {"a": 1}, finish="stop"), Reply.text("x", finish="content_filter")]
        with FakeModelServer(script) as server:
            client = openai_client(server)
            reasons = []
            for _ in script:
                if stream:
                    chunks = list(client.chat.completions.create(model="m", messages=MESSAGES, stream=True))
                    reasons.append(next(c.choices[0].finish_reason for c in chunks
                                        if c.choices and c.choices[0].finish_reason))
                else:
                    result = client.chat.completions.create(model="m", messages=MESSAGES)
                    reasons.append(result.choices[0].finish_reason)
        assert reasons == ["stop", "content_filter"]
