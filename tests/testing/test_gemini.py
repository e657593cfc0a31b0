"""Tests for flowproof.testing.gemini: google-genai parses what the server sends."""

from __future__ import annotations

import json

import pytest
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from flowproof.testing import (
    FakeModelServer,
    Reply,
)

from .helpers import (
    gemini_client,
    raw_post,
)


class TestGemini:
    def test_generate_content_function_call(self) -> None:
        """generate_content parses a functionCall part with its args."""
        with FakeModelServer([Reply.tool_call("get_weather", {"city": "Paris"})]) as server:
            client = gemini_client(server)  # kept in a name: a collected Client closes its transport
            result = client.models.generate_content(model="gemini-2.0-flash", contents="weather?")
            request = server.requests[0]
        assert result.function_calls is not None
        assert (result.function_calls[0].name, result.function_calls[0].args) == ("get_weather", {"city": "Paris"})
        assert request.path.endswith("/models/gemini-2.0-flash:generateContent")
        assert request.api == "gemini"

    def test_generate_content_stream_text(self) -> None:
        """generate_content_stream yields several chunks whose text joins to the reply."""
        with FakeModelServer([Reply.text("It is sunny in Paris.")]) as server:
            client = gemini_client(server)
            chunks = list(client.models.generate_content_stream(
                model="gemini-2.0-flash", contents="weather?"))
            query = server.requests[0].query
        assert len(chunks) >= 3
        assert "".join(c.text or "" for c in chunks) == "It is sunny in Paris."
        assert chunks[-1].candidates[0].finish_reason == genai_types.FinishReason.STOP  # type: ignore[index]
        assert query == {"alt": "sse"}

    def test_sse_events_end_with_crlf(self) -> None:
        """Gemini SSE events are terminated by CRLF CRLF, as Google sends them."""
        with FakeModelServer([Reply.text("a b")]) as server:
            _, _, raw = raw_post(server, "/v1beta/models/g:streamGenerateContent?alt=sse", {"contents": []})
        assert raw.startswith(b"data: {") and raw.endswith(b"}\r\n\r\n")
        assert raw.count(b"\r\n\r\n") == 2

    def test_stream_without_sse_is_a_json_array(self) -> None:
        """streamGenerateContent without alt=sse answers one JSON array of chunks."""
        with FakeModelServer([Reply.text("a b c")]) as server:
            _, _, raw = raw_post(server, "/v1beta/models/g:streamGenerateContent", {"contents": []})
        chunks = json.loads(raw)
        assert [c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks] == ["a ", "b ", "c"]

    def test_error_format_is_google(self) -> None:
        """A Gemini error carries code, message and the RPC status word."""
        with FakeModelServer([Reply.error(429, "slow down")]) as server:
            client = gemini_client(server)
            with pytest.raises(genai_errors.ClientError) as caught:
                client.models.generate_content(model="g", contents="x")
        assert caught.value.code == 429 and caught.value.status == "RESOURCE_EXHAUSTED"


class TestFinish:
    def test_finish_is_said_in_gemini_words(self) -> None:
        """length and content_filter become MAX_TOKENS and SAFETY; a tool call ends with STOP."""
        script = [Reply.text("x", finish="length"), Reply.text("x", finish="content_filter"),
                  Reply.tool_call("f", {"a": 1})]
        with FakeModelServer(script) as server:
            client = gemini_client(server)
            reasons = [client.models.generate_content(model="g", contents="x").candidates[0].finish_reason  # type: ignore[index]
                       for _ in script]
        assert reasons == [genai_types.FinishReason.MAX_TOKENS, genai_types.FinishReason.SAFETY,
                           genai_types.FinishReason.STOP]
