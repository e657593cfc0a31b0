"""Tests for flowproof.testing: the official SDK clients parse what the fake model server sends."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from flowproof.errors import FlowproofError
from flowproof.testing import (
    FakeModelServer,
    ReceivedRequest,
    Reply,
    ScriptedCall,
    ScriptError,
    load_script,
    script_from_data,
    split_arguments,
    split_text,
)

MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]


def openai_client(server: FakeModelServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="test-key", max_retries=0, timeout=10)


def anthropic_client(server: FakeModelServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="test-key", max_retries=0, timeout=10)


def gemini_client(server: FakeModelServer) -> genai.Client:
    return genai.Client(api_key="test-key", http_options=genai_types.HttpOptions(base_url=server.url))


def raw_post(server: FakeModelServer, path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    """POST with http.client and return status, lowercase headers and the whole body bytes."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"content-type": "application/json"})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def sse_data(raw: bytes) -> list[str]:
    """The data lines of an SSE body, in order."""
    return [line[len("data: "):] for line in raw.decode().splitlines() if line.startswith("data: ")]


class TestReply:
    def test_text_factory_sets_content_only(self) -> None:
        """Reply.text carries the text and no calls."""
        reply = Reply.text("hello", chunk_delay=0.1)
        assert (reply.content, reply.calls, reply.chunk_delay, reply.is_error) == ("hello", (), 0.1, False)

    def test_tool_call_dumps_dict_arguments_compactly(self) -> None:
        """A dict argument becomes compact JSON; a string argument is kept verbatim."""
        assert Reply.tool_call("f", {"a": 1, "b": "é"}).calls[0].arguments == '{"a":1,"b":"é"}'
        assert Reply.tool_call("f", '{ "raw" : 1 ').calls[0].arguments == '{ "raw" : 1 '

    def test_tool_calls_accepts_tuples_and_call_ids(self) -> None:
        """Reply.tool_calls builds parallel calls from tuples with an optional id."""
        reply = Reply.tool_calls([("a", {}), ("b", {"x": 1}, "my-id")], text="hm")
        assert reply.calls == (ScriptedCall("a", "{}"), ScriptedCall("b", '{"x":1}', "my-id"))
        assert reply.content == "hm"

    def test_error_needs_an_error_status(self) -> None:
        """Reply.error refuses a status below 400 with a ScriptError."""
        with pytest.raises(ScriptError, match="status must be >= 400"):
            Reply.error(200)

    def test_script_error_is_a_flowproof_error(self) -> None:
        """A malformed reply raises an error the CLI can print."""
        with pytest.raises(FlowproofError, match="cut_after must be >= 0"):
            Reply.text("x", cut_after=-1)

    def test_from_dict_reads_every_kind(self) -> None:
        """Reply.from_dict reads text, tool calls, errors and fault options."""
        assert Reply.from_dict({"text": "hi", "cut_after": 2}) == Reply.text("hi", cut_after=2)
        assert Reply.from_dict({"tool_calls": [{"name": "f", "arguments": {"a": 1}, "id": "c1"}]}) == (
            Reply.tool_call("f", {"a": 1}, call_id="c1")
        )
        assert Reply.from_dict({"error": {"status": 429, "retry_after": 2}}).retry_after == 2

    def test_from_dict_names_the_bad_key(self) -> None:
        """An unknown key is reported with where it is."""
        with pytest.raises(ScriptError, match=r"replies\[1\]: unknown keys \['txt'\]"):
            script_from_data([{"text": "ok"}, {"txt": "typo"}])

    def test_from_dict_rejects_wrong_types(self) -> None:
        """A fault option of the wrong type is refused, not crashed on."""
        with pytest.raises(ScriptError, match="chunk_delay has the wrong type"):
            Reply.from_dict({"text": "x", "chunk_delay": "slow"})

    def test_load_script_reads_lanes(self, tmp_path: Path) -> None:
        """A script file with replies and lanes loads into a Script."""
        path = tmp_path / "s.json"
        path.write_text(json.dumps({"replies": [{"text": "a"}], "lanes": {"title": [{"text": "T"}]}}))
        script = load_script(path)
        assert script.replies == (Reply.text("a"),)
        assert script.lanes == {"title": (Reply.text("T"),)}

    def test_load_script_reports_invalid_json(self, tmp_path: Path) -> None:
        """A broken JSON file names the file in the error."""
        path = tmp_path / "broken.json"
        path.write_text("[{")
        with pytest.raises(ScriptError, match="broken.json: not valid JSON"):
            load_script(path)

    def test_split_helpers_rejoin_exactly(self) -> None:
        """Text and argument pieces join back to the original, in several pieces."""
        text = "Hello  there,\nworld! "
        assert "".join(split_text(text)) == text and len(split_text(text)) == 3
        args = '{"city":"Paris","days":3}'
        assert "".join(split_arguments(args)) == args and len(split_arguments(args)) >= 3


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


class TestOpenAIResponses:
    def test_non_streaming_function_call(self) -> None:
        """A tool-call reply parses as a function_call output item."""
        with FakeModelServer([Reply.tool_call("lookup", {"q": "x"})]) as server:
            response = openai_client(server).responses.create(model="gpt-4o", input="find x")
        item = response.output[0]
        assert item.type == "function_call"
        assert (item.name, item.call_id, item.id) == ("lookup", "call_fake_1", "fc_fake_1")
        assert json.loads(item.arguments) == {"q": "x"}
        assert (response.id, response.status) == ("resp_fake_1", "completed")

    def test_non_streaming_text(self) -> None:
        """A text reply parses as a message output whose output_text is the text."""
        with FakeModelServer([Reply.text("All done.")]) as server:
            response = openai_client(server).responses.create(model="gpt-4o", input="go")
        assert response.output_text == "All done."

    def test_streaming_text_events(self) -> None:
        """A streamed text reply emits the full event sequence with increasing sequence numbers."""
        with FakeModelServer([Reply.text("one two three")]) as server:
            events = list(openai_client(server).responses.create(model="gpt-4o", input="go", stream=True))
        types = [e.type for e in events]
        assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                             "response.content_part.added"]
        assert types.count("response.output_text.delta") == 3
        assert types[-1] == "response.completed"
        assert [e.sequence_number for e in events] == list(range(len(events)))
        assert events[-1].response.output_text == "one two three"  # type: ignore[union-attr]

    def test_streaming_function_call_arguments(self) -> None:
        """Function-call argument deltas join to the arguments the done event repeats."""
        with FakeModelServer([Reply.tool_call("lookup", {"query": "flights to Nairobi"})]) as server:
            events = list(openai_client(server).responses.create(model="gpt-4o", input="go", stream=True))
        deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
        done = next(e for e in events if e.type == "response.function_call_arguments.done")
        assert len(deltas) >= 2 and "".join(deltas) == done.arguments  # type: ignore[union-attr]
        assert json.loads(done.arguments) == {"query": "flights to Nairobi"}  # type: ignore[union-attr]

    def test_streaming_uses_event_lines(self) -> None:
        """Each Responses SSE block names its type in an event: line."""
        with FakeModelServer([Reply.text("x")]) as server:
            _, headers, raw = raw_post(server, "/v1/responses", {"model": "m", "input": "x", "stream": True})
        assert headers["content-type"].startswith("text/event-stream")
        assert raw.startswith(b"event: response.created\ndata: {")


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


class TestFaults:
    def test_500_raises_after_no_retries(self) -> None:
        """A scripted 500 reaches the SDK as InternalServerError with the message."""
        with FakeModelServer([Reply.error(500, "boom")]) as server:
            with pytest.raises(openai.InternalServerError, match="boom"):
                openai_client(server).chat.completions.create(model="m", messages=MESSAGES)
            assert len(server.requests) == 1

    def test_429_sends_retry_after(self) -> None:
        """A scripted 429 carries retry-after and OpenAI's rate-limit error code."""
        with FakeModelServer([Reply.error(429, "slow down", retry_after=1.5)]) as server:
            with pytest.raises(openai.RateLimitError) as caught:
                openai_client(server).chat.completions.create(model="m", messages=MESSAGES)
        assert caught.value.response.headers["retry-after"] == "1.5"
        assert caught.value.code == "rate_limit_exceeded"

    def test_sdk_retries_honour_retry_after(self) -> None:
        """An SDK with retries waits retry-after and then gets the next scripted reply."""
        with FakeModelServer([Reply.error(429, retry_after=0.2), Reply.text("ok")]) as server:
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="test-key", max_retries=1)
            started = time.monotonic()
            result = client.chat.completions.create(model="m", messages=MESSAGES)
            elapsed = time.monotonic() - started
        assert result.choices[0].message.content == "ok"
        assert elapsed >= 0.2

    def test_cut_stream_openai_raises_connection_error(self) -> None:
        """A stream cut after N events makes the openai SDK raise APIConnectionError after N chunks."""
        seen: list[Any] = []
        with FakeModelServer([Reply.text("one two three four five", cut_after=3)]) as server:
            stream = openai_client(server).chat.completions.create(model="m", messages=MESSAGES, stream=True)
            with pytest.raises(openai.APIConnectionError):
                for chunk in stream:
                    seen.append(chunk)
        assert len(seen) == 3

    def test_cut_stream_anthropic_raises_protocol_error(self) -> None:
        """A cut Anthropic stream surfaces as the transport's RemoteProtocolError."""
        with FakeModelServer([Reply.text("one two three", cut_after=2)]) as server:
            with pytest.raises(httpx2.RemoteProtocolError):
                list(anthropic_client(server).messages.create(model="m", max_tokens=5, messages=MESSAGES,
                                                              stream=True))

    def test_cut_non_streaming_body(self) -> None:
        """A non-streamed body cut after N bytes is a connection error for the SDK."""
        with FakeModelServer([Reply.text("hello", cut_after=10)]) as server:
            with pytest.raises(openai.APIConnectionError):
                openai_client(server).chat.completions.create(model="m", messages=MESSAGES)

    def test_first_chunk_delay_is_measurable(self) -> None:
        """The first stream event arrives no sooner than first_chunk_delay, headers at once."""
        with FakeModelServer([Reply.text("a b", first_chunk_delay=0.3)]) as server:
            started = time.monotonic()
            stream = openai_client(server).chat.completions.create(model="m", messages=MESSAGES, stream=True)
            headers_at = time.monotonic() - started
            next(iter(stream))
            first_at = time.monotonic() - started
            stream.close()
        assert headers_at < 0.25
        assert first_at >= 0.3

    def test_chunk_delay_spaces_events(self) -> None:
        """chunk_delay puts time between stream events."""
        with FakeModelServer([Reply.text("a b c d", chunk_delay=0.05)]) as server:
            started = time.monotonic()
            list(openai_client(server).chat.completions.create(model="m", messages=MESSAGES, stream=True))
            elapsed = time.monotonic() - started
        assert elapsed >= 0.05 * 6  # role + 4 pieces + finish + [DONE] => 6 gaps

    def test_exhausted_script_fails_loudly(self) -> None:
        """A call past the end of the script gets a 500 naming how many calls were served."""
        with FakeModelServer([Reply.text("only one")]) as server:
            client = openai_client(server)
            client.chat.completions.create(model="m", messages=MESSAGES)
            with pytest.raises(openai.InternalServerError, match="script exhausted after 1 calls"):
                client.chat.completions.create(model="m", messages=MESSAGES)

    def test_max_tokens_ends_with_each_providers_length_reason(self) -> None:
        """max_tokens maps to length, max_tokens, MAX_TOKENS and an incomplete response."""
        script = [Reply.text("cut short", max_tokens=True)] * 4
        with FakeModelServer(script) as server:
            chat = openai_client(server).chat.completions.create(model="m", messages=MESSAGES)
            message = anthropic_client(server).messages.create(model="m", max_tokens=5, messages=MESSAGES)
            events = list(openai_client(server).responses.create(model="m", input="x", stream=True))
            _, _, raw = raw_post(server, "/v1beta/models/g:generateContent", {"contents": []})
        assert chat.choices[0].finish_reason == "length"
        assert message.stop_reason == "max_tokens"
        assert events[-1].type == "response.incomplete"
        assert json.loads(raw)["candidates"][0]["finishReason"] == "MAX_TOKENS"

    def test_non_object_arguments_fail_for_anthropic(self) -> None:
        """Invalid JSON arguments cannot become a tool_use input, so the server says why."""
        with FakeModelServer([Reply.tool_call("f", "not json")]) as server:
            status, _, raw = raw_post(server, "/v1/messages", {"model": "m", "messages": []})
        assert status == 500 and b"not a JSON object" in raw


class TestServer:
    def test_records_requests_in_order(self) -> None:
        """Each request is recorded with path, query, lowercase headers, body and parsed JSON."""
        with FakeModelServer([Reply.text("a"), Reply.text("b")]) as server:
            client = openai_client(server)
            client.chat.completions.create(model="first", messages=MESSAGES)
            client.responses.create(model="second", input="x")
            requests = server.requests
        assert [r.path for r in requests] == ["/v1/chat/completions", "/v1/responses"]
        assert [r.api for r in requests] == ["openai-chat", "openai-responses"]
        assert requests[0].json["model"] == "first" and json.loads(requests[0].body) == requests[0].json
        assert requests[0].headers["authorization"] == "Bearer test-key"
        assert isinstance(requests[1], ReceivedRequest) and requests[1].method == "POST"

    def test_health_and_unknown_paths(self) -> None:
        """GET /health answers 200 and an unknown path 404, neither consuming the script."""
        with FakeModelServer([Reply.text("kept")]) as server:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
            conn.request("GET", "/health")
            health = conn.getresponse()
            health.read()
            conn.request("GET", "/v1/models")
            missing = conn.getresponse()
            body = json.loads(missing.read())
            conn.close()
            remaining = server.remaining
        assert (health.status, missing.status, remaining) == (200, 404, 1)
        assert "nothing answers GET /v1/models" in body["error"]["message"]

    def test_client_reset_prints_no_traceback(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A client that resets its connection is normal traffic: the server stays quiet and serving."""
        import struct

        with FakeModelServer([Reply.text("still here")]) as server:
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            time.sleep(0.1)  # the handler is now blocked reading the request line
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
            time.sleep(0.2)
            answer = openai_client(server).chat.completions.create(model="m", messages=MESSAGES)
        assert answer.choices[0].message.content == "still here"
        assert "Traceback" not in capsys.readouterr().err

    def test_port_closed_after_exit(self) -> None:
        """After the context exits the port refuses connections."""
        with FakeModelServer() as server:
            port = server.port
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2)

    def test_stop_interrupts_a_slow_stream(self) -> None:
        """Stopping while a delayed stream is in flight returns promptly."""
        server = FakeModelServer([Reply.text("a", first_chunk_delay=30)]).start()
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        try:
            conn.request("POST", "/v1/chat/completions", body=b'{"stream": true}')
            conn.getresponse()
            started = time.monotonic()
            server.stop()
            assert time.monotonic() - started < 3
        finally:
            conn.close()

    def test_set_and_extend_script(self) -> None:
        """set_script replaces the pending replies and extend_script appends."""
        with FakeModelServer([Reply.text("dropped")]) as server:
            server.set_script([Reply.text("one")])
            server.extend_script([Reply.text("two")])
            client = openai_client(server)
            texts = [client.chat.completions.create(model="m", messages=MESSAGES).choices[0].message.content
                     for _ in range(2)]
            served = server.calls_served
        assert texts == ["one", "two"] and served == 2

    def test_lanes_answer_by_system_prompt(self) -> None:
        """A request whose system prompt contains a lane key is answered from that lane."""
        with FakeModelServer([Reply.text("main answer")], lanes={"Name this session": [Reply.text("Title")]}) as s:
            client = anthropic_client(s)
            title = client.messages.create(model="m", max_tokens=5, system="Name this session briefly.",
                                           messages=MESSAGES)
            main = client.messages.create(model="m", max_tokens=5, system="You book flights.", messages=MESSAGES)
        assert title.content[0].text == "Title"  # type: ignore[union-attr]
        assert main.content[0].text == "main answer"  # type: ignore[union-attr]

    def test_bytes_are_reproducible(self) -> None:
        """Two servers given the same script and requests send identical bytes."""
        script = [Reply.tool_call("f", {"a": 1}, text="x y"), Reply.text("done")]
        outputs = []
        for _ in range(2):
            with FakeModelServer(script) as server:
                outputs.append([
                    raw_post(server, "/v1/chat/completions", {"model": "m", "messages": [], "stream": True})[2],
                    raw_post(server, "/v1/messages", {"model": "m", "messages": []})[2],
                ])
        assert outputs[0] == outputs[1]

    def test_headers_carry_no_date(self) -> None:
        """Responses omit the Date header so recorded headers do not depend on the clock."""
        with FakeModelServer([Reply.text("x")]) as server:
            _, headers, _ = raw_post(server, "/v1/chat/completions", {"model": "m", "messages": []})
        assert "date" not in headers and headers["content-type"] == "application/json"

    def test_streams_use_chunked_transfer(self) -> None:
        """A stream is sent with chunked transfer encoding, one event per chunk."""
        with FakeModelServer([Reply.text("a b")]) as server:
            with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
                body = b'{"stream": true}'
                sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
                             b"Connection: close\r\n\r\n%s" % (len(body), body))
                raw = b""
                while chunk := sock.recv(65536):
                    raw += chunk
        head, _, rest = raw.partition(b"\r\n\r\n")
        assert b"transfer-encoding: chunked" in head.lower()
        assert rest.endswith(b"0\r\n\r\n") and rest.count(b"data: ") == 5


def dechunk(payload: bytes) -> tuple[list[bytes], bytes]:
    """The chunk payloads of a chunked HTTP body, and what follows the terminating chunk."""
    chunks: list[bytes] = []
    while True:
        size_line, _, payload = payload.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return chunks, payload
        chunks.append(payload[:size])
        assert payload[size : size + 2] == b"\r\n"
        payload = payload[size + 2 :]


def raw_exchange(server: FakeModelServer, path: str, body: bytes) -> bytes:
    """POST over a bare socket (Connection: close) and return every byte the server sent."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                     % (path.encode(), len(body), body))
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    return raw


class TestExchanges:
    def test_plain_answer_is_kept_byte_for_byte(self) -> None:
        """A non-streamed answer is kept with its status, headers and exactly the body bytes sent."""
        with FakeModelServer([Reply.tool_call("f", {"a": 1})]) as server:
            status, headers, body = raw_post(server, "/v1/messages", {"model": "m", "messages": []})
            [exchange] = server.exchanges
            request = server.requests[0]
        assert exchange.request == request
        assert exchange.response is not None and exchange.response.complete
        assert exchange.response.status == status == 200
        assert exchange.response.body == body and exchange.response.chunks == (body,)
        assert dict(exchange.response.headers) == headers
        assert exchange.response.content_type == "application/json"

    def test_stream_is_kept_without_chunk_framing(self) -> None:
        """A stream is kept as its chunk payloads, whose join is the de-chunked body on the wire."""
        with FakeModelServer([Reply.text("a b c")]) as server:
            raw = raw_exchange(server, "/v1/chat/completions", b'{"model": "m", "stream": true}')
            [exchange] = server.exchanges
        head, _, rest = raw.partition(b"\r\n\r\n")
        chunks, trailer = dechunk(rest)
        assert trailer == b"\r\n"
        response = exchange.response
        assert response is not None and response.complete
        assert response.chunks == tuple(chunks) and len(chunks) == 6
        assert response.body == b"".join(chunks) and b"\r\n" not in response.body
        assert ("transfer-encoding", "chunked") in response.headers
        assert response.content_type.startswith("text/event-stream")
        assert head.startswith(b"HTTP/1.1 200")

    def test_cut_stream_is_incomplete(self) -> None:
        """A stream cut after N events keeps those N events and is marked incomplete."""
        with FakeModelServer([Reply.text("one two three four", cut_after=2)]) as server:
            with pytest.raises(openai.APIConnectionError):
                list(openai_client(server).chat.completions.create(model="m", messages=MESSAGES, stream=True))
            [exchange] = server.exchanges
        assert exchange.response is not None and not exchange.response.complete
        assert len(exchange.response.chunks) == 2
        assert sse_data(exchange.response.body)[1] != "[DONE]"

    def test_errors_and_non_model_paths_are_kept(self) -> None:
        """Error answers keep their headers, and model_exchanges leaves out non-model requests."""
        with FakeModelServer([Reply.error(429, "slow down", retry_after=2)]) as server:
            raw_post(server, "/health", {})
            status, _, body = raw_post(server, "/v1/chat/completions", {"model": "m", "messages": []})
            exchanges, model_exchanges = server.exchanges, server.model_exchanges
        assert [e.request.path for e in exchanges] == ["/health", "/v1/chat/completions"]
        assert [e.request.path for e in model_exchanges] == ["/v1/chat/completions"]
        response = model_exchanges[0].response
        assert response is not None and response.status == status == 429
        assert ("retry-after", "2") in response.headers and response.body == body
        assert exchanges[0].response is not None and exchanges[0].response.status == 404

    def test_response_is_none_before_headers_go_out(self) -> None:
        """A request whose delayed answer has not started yet has no response recorded."""
        server = FakeModelServer([Reply.text("late", first_chunk_delay=30)]).start()
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        try:
            conn.request("POST", "/v1/chat/completions", body=b'{"model": "m", "messages": []}')
            deadline = time.monotonic() + 5
            while not server.exchanges and time.monotonic() < deadline:
                time.sleep(0.01)
            exchanges = server.exchanges
        finally:
            server.stop()
            conn.close()
        assert len(exchanges) == 1 and exchanges[0].response is None


class TestCommandLine:
    def test_serves_a_script_until_sigterm(self, tmp_path: Path) -> None:
        """The entry point prints its URL first, serves the script, and exits 0 on SIGTERM."""
        script = tmp_path / "script.json"
        script.write_text(json.dumps([{"text": "from the file"}]))
        proc = subprocess.Popen(
            [sys.executable, "-m", "flowproof.testing", "--port", "0", "--script", str(script), "--quiet"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            assert line.startswith("listening on http://127.0.0.1:")
            url = line.removeprefix("listening on ")
            client = openai.OpenAI(base_url=url + "/v1", api_key="test-key", max_retries=0, timeout=10)
            result = client.chat.completions.create(model="m", messages=MESSAGES)
            assert result.choices[0].message.content == "from the file"
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=10) == 0
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
            proc.stdout.close()  # type: ignore[union-attr]
            proc.stderr.close()  # type: ignore[union-attr]

    def test_bad_script_exits_2(self, tmp_path: Path) -> None:
        """A malformed script file exits 2 with a message naming the reply."""
        script = tmp_path / "bad.json"
        script.write_text(json.dumps([{"text": "ok"}, {"tool_calls": [{"arguments": {}}]}]))
        result = subprocess.run(
            [sys.executable, "-m", "flowproof.testing", "--script", str(script)],
            capture_output=True, text=True, timeout=20,
        )
        assert result.returncode == 2
        assert "replies[1].tool_calls[0]: a tool call needs a name" in result.stderr
