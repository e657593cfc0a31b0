"""The OpenAI Responses codec.

Golden streams (tests/wire/data/openai_responses) follow the OpenAI API reference's
Responses streaming events (https://platform.openai.com/docs/api-reference/responses-streaming)
and the shape of a recorded o3 stream (reasoning item, function_call_arguments deltas
carrying ``obfuscation``, response.completed holding the final response); one stream
has no ``event:`` lines, as every measured client parsed (docs/design.md#sse-framing).
Ids and values are our own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowproof.errors import WireError
from flowproof.turns import FinishReason, ToolResult
from flowproof.wire.openai_responses import CODEC
from flowproof.wire.sse import SSEDecoder, encode_events, make_event

GOLDEN_DIR = "openai_responses"
_DATA = Path(__file__).parent / "data" / GOLDEN_DIR
STREAM_CASES = sorted(p.name.removesuffix(".response.sse") for p in _DATA.glob("*.response.sse"))


def _ev(kind: str, **payload) -> object:
    return make_event(json.dumps({"type": kind, **payload}), kind)


class TestParseRequest:
    def test_golden_request(self, golden) -> None:
        """Instructions, developer input, item roles, tools and resolved outputs are read."""
        view = CODEC.parse_request(golden.bytes("tools.request.json"))
        assert view.provider == "openai-responses"
        assert view.model == "gpt-4.1"
        assert view.system == "You are a booking assistant.\n\nAlways confirm the date."
        assert view.roles == (
            "developer",
            "user",
            "reasoning",
            "assistant",
            "assistant",
            "tool",
            "tool",
        )
        assert view.tools == ("search_flights", "get_weather", "web_search")
        assert view.tool_results == (
            ToolResult("call_fpA", "search_flights", '{"flights":[]}'),
            ToolResult("call_fpB", "get_weather", "sunny"),
        )
        assert view.stream is True

    def test_string_input_is_one_user_message(self) -> None:
        """A string input counts as one user message of that many characters."""
        view = CODEC.parse_request(b'{"model": "m", "input": "hello"}')
        assert (view.roles, view.system, view.text_size, view.stream) == (("user",), "", 5, False)

    def test_text_size(self) -> None:
        """text_size counts instructions, contents, call arguments, outputs and tool schemas."""
        tools = [{"type": "function", "name": "f"}]
        body = {
            "instructions": "ab",
            "input": [
                {"role": "user", "content": "cde"},
                {"type": "function_call", "call_id": "1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "1", "output": "xyz"},
            ],
            "tools": tools,
        }
        view = CODEC.parse_request(json.dumps(body).encode())
        assert view.text_size == 2 + 3 + 2 + 3 + len(json.dumps(tools, separators=(",", ":")))

    def test_structured_output_and_custom_tools(self) -> None:
        """List outputs read as text; custom tool calls resolve their outputs' names."""
        body = {
            "input": [
                {
                    "type": "custom_tool_call",
                    "call_id": "c",
                    "name": "apply_patch",
                    "input": "*** Begin",
                },
                {
                    "type": "custom_tool_call_output",
                    "call_id": "c",
                    "output": [{"type": "input_text", "text": "done"}],
                },
            ]
        }
        view = CODEC.parse_request(json.dumps(body).encode())
        assert view.tool_results == (ToolResult("c", "apply_patch", "done"),)

    def test_codex_additional_tools_item(self) -> None:
        """codex's responses-lite ``additional_tools`` item contributes its tool names."""
        body = {
            "input": [
                {
                    "type": "additional_tools",
                    "role": "developer",
                    "tools": [{"type": "function", "name": "exec"}],
                },
                {"type": "configuration_update", "reasoning": {"effort": "low"}},
            ]
        }
        view = CODEC.parse_request(json.dumps(body).encode())
        assert view.tools == ("exec",)
        assert view.roles == ("developer", "configuration_update")

    def test_non_json_body_is_a_wire_error(self) -> None:
        """A body that is not JSON raises WireError naming the provider."""
        with pytest.raises(WireError) as info:
            CODEC.parse_request(b"\x00\x01")
        assert info.value.provider == "openai-responses"

    def test_missing_input_is_a_wire_error(self) -> None:
        """A body without input raises WireError naming the field."""
        with pytest.raises(WireError) as info:
            CODEC.parse_request(b'{"model": "m"}')
        assert info.value.field == "input"

    def test_stored_prompt_without_input_is_accepted(self) -> None:
        """A request using a stored prompt template may omit input."""
        assert CODEC.parse_request(b'{"prompt": {"id": "pmpt_1"}}').roles == ()

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"input": 3}, "input"),
            ({"input": [7]}, "input[0]"),
            ({"input": [], "tools": "x"}, "tools"),
            ({"input": [], "tools": [1]}, "tools[0]"),
        ],
    )
    def test_wrong_shapes_name_the_field(self, body: dict, field: str) -> None:
        """Wrongly typed fields raise WireError naming the exact field."""
        with pytest.raises(WireError) as info:
            CODEC.parse_request(json.dumps(body).encode())
        assert info.value.field == field


class TestPrompt:
    def test_string_input_is_the_prompt(self) -> None:
        """A string input is the prompt as it stands."""
        assert CODEC.parse_request(b'{"input": "hello there"}').prompt == "hello there"

    def test_prompt_is_the_newest_user_item(self) -> None:
        """The prompt is the newest user item's input_text parts joined by newlines."""
        body = {
            "input": [
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
                {
                    "type": "message",
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "second"},
                        {"type": "input_image", "image_url": "https://x/y.png"},
                        {"type": "input_text", "text": "part two"},
                    ],
                },
            ]
        }
        assert CODEC.parse_request(json.dumps(body).encode()).prompt == "second\npart two"

    def test_tool_outputs_are_not_prompts(self) -> None:
        """function_call_output items after the user item do not replace the prompt."""
        body = {
            "input": [
                {"role": "user", "content": "Book it"},
                {"type": "function_call", "call_id": "1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "1", "output": "done"},
            ]
        }
        assert CODEC.parse_request(json.dumps(body).encode()).prompt == "Book it"

    def test_no_user_item_is_empty(self) -> None:
        """A request without a user item has the empty prompt."""
        body = {"instructions": "sys", "input": [{"role": "developer", "content": "dev"}]}
        assert CODEC.parse_request(json.dumps(body).encode()).prompt == ""
        assert CODEC.parse_request(b'{"prompt": {"id": "pmpt_1"}}').prompt == ""


class TestParseResponse:
    def test_golden_function_call(self, golden) -> None:
        """A completed response with a function_call is TOOL_CALLS, keeping the message text."""
        golden.assert_view(
            CODEC.parse_response(golden.bytes("function_call.response.json")), "function_call"
        )

    @pytest.mark.parametrize(
        ("status", "details", "unified", "raw"),
        [
            ("completed", None, FinishReason.STOP, "completed"),
            (
                "incomplete",
                {"reason": "max_output_tokens"},
                FinishReason.LENGTH,
                "max_output_tokens",
            ),
            (
                "incomplete",
                {"reason": "content_filter"},
                FinishReason.CONTENT_FILTER,
                "content_filter",
            ),
            ("failed", None, FinishReason.ERROR, "server_error"),
            ("cancelled", None, FinishReason.OTHER, "cancelled"),
        ],
    )
    def test_status_mapping(self, status: str, details, unified: FinishReason, raw: str) -> None:
        """Statuses and incomplete reasons map to unified finish reasons."""
        body = {
            "model": "m",
            "status": status,
            "incomplete_details": details,
            "error": {"code": "server_error", "message": "boom"} if status == "failed" else None,
            "output": [
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [
                        {"type": "output_text", "text": "a"},
                        {"type": "output_text", "text": "b"},
                    ],
                }
            ],
        }
        view = CODEC.parse_response(json.dumps(body).encode())
        assert (view.text, view.finish_reason, view.raw_finish_reason) == ("ab", unified, raw)

    def test_hosted_tool_calls_are_not_agent_calls(self) -> None:
        """web_search_call output items are not tool calls of the agent."""
        body = {
            "status": "completed",
            "output": [{"type": "web_search_call", "id": "ws", "status": "completed"}],
        }
        view = CODEC.parse_response(json.dumps(body).encode())
        assert (view.tool_calls, view.finish_reason) == ((), FinishReason.STOP)

    def test_error_body(self) -> None:
        """An OpenAI error body is an ERROR finish."""
        assert (
            CODEC.parse_response(CODEC.error_body(400, "bad")).finish_reason is FinishReason.ERROR
        )

    def test_non_json_response_is_a_wire_error(self) -> None:
        """A response body that is not JSON raises WireError naming the response body."""
        with pytest.raises(WireError, match="response body"):
            CODEC.parse_response(b"<html>")


class TestParseEvents:
    @pytest.mark.parametrize("case", STREAM_CASES)
    def test_golden_streams(self, golden, case: str) -> None:
        """Each golden stream assembles to its expected view."""
        golden.assert_view(CODEC.parse_events(golden.events(f"{case}.response.sse")), case)

    @pytest.mark.parametrize("case", STREAM_CASES)
    def test_golden_streams_in_odd_chunks(self, golden, case: str) -> None:
        """Chunks of 13 bytes give the same bytes back and the same view."""
        data = golden.bytes(f"{case}.response.sse")
        decoder = SSEDecoder()
        events = [
            e for i in range(0, len(data), 13) for e in decoder.feed(data[i : i + 13])
        ] + decoder.close()
        assert encode_events(events) == data
        golden.assert_view(CODEC.parse_events(events), case)

    def test_deltas_only_stream(self) -> None:
        """Without output_item or terminal events, text deltas still make the text."""
        events = [
            _ev("response.output_text.delta", output_index=0, content_index=0, delta="Hi "),
            _ev("response.output_text.delta", output_index=0, content_index=0, delta="there"),
        ]
        view = CODEC.parse_events(events)
        assert (view.text, view.finish_reason) == ("Hi there", FinishReason.OTHER)

    def test_failed_response(self) -> None:
        """response.failed is an ERROR finish named by the error code."""
        events = [
            _ev(
                "response.failed",
                response={
                    "status": "failed",
                    "output": [],
                    "error": {"code": "rate_limit_exceeded", "message": "x"},
                },
            )
        ]
        view = CODEC.parse_events(events)
        assert (view.finish_reason, view.raw_finish_reason) == (
            FinishReason.ERROR,
            "rate_limit_exceeded",
        )

    def test_error_event(self) -> None:
        """A top-level error event without a terminal response is an ERROR finish."""
        events = [
            _ev("response.output_text.delta", output_index=0, content_index=0, delta="par"),
            _ev("error", code="server_error", message="boom"),
        ]
        view = CODEC.parse_events(events)
        assert (view.text, view.finish_reason, view.raw_finish_reason) == (
            "par",
            FinishReason.ERROR,
            "server_error",
        )

    def test_event_line_used_when_json_has_no_type(self) -> None:
        """A payload without ``type`` is dispatched on its ``event:`` line."""
        event = make_event(
            json.dumps({"response": {"status": "completed", "output": []}}), "response.completed"
        )
        assert CODEC.parse_events([event]).finish_reason is FinishReason.STOP

    def test_done_marker_and_comments_are_skipped(self) -> None:
        """A chat-style [DONE] and keep-alive comments are ignored."""
        events = [
            SSEDecoder().feed(b": ping\n\n")[0],
            _ev("response.completed", response={"status": "completed", "output": []}),
            make_event("[DONE]"),
        ]
        assert CODEC.parse_events(events).finish_reason is FinishReason.STOP

    def test_non_json_event_is_a_wire_error(self) -> None:
        """A data line that is not JSON raises WireError naming the event."""
        with pytest.raises(WireError) as info:
            CODEC.parse_events([make_event("ok"), make_event("{")])
        assert info.value.field == "events[0].data"


class TestRewriteToolResults:
    def test_replaces_resolved_outputs(self, golden) -> None:
        """function_call_output items of mocked tools get the mock as compact JSON."""
        body = golden.bytes("tools.request.json")
        out = json.loads(
            CODEC.rewrite_tool_results(body, {"search_flights": {"flights": [{"id": "KQ311"}]}})
        )
        assert out["input"][5]["output"] == '{"flights":[{"id":"KQ311"}]}'
        assert out["input"][6]["output"] == "sunny"

    def test_unknown_fields_pass_through(self, golden) -> None:
        """Top-level and item fields flowproof does not read survive, in order."""
        body = golden.bytes("tools.request.json")
        original = json.loads(body)
        out = json.loads(CODEC.rewrite_tool_results(body, {"get_weather": "rain"}))
        assert list(out) == list(original)
        assert out["prompt_cache_key"] == original["prompt_cache_key"]
        assert out["input"][:6] == original["input"][:6]

    def test_deterministic(self, golden) -> None:
        """The same rewrite twice gives the same bytes."""
        body = golden.bytes("tools.request.json")
        mock = {"get_weather": {"sky": "clear", "temp": 24}}
        assert CODEC.rewrite_tool_results(body, mock) == CODEC.rewrite_tool_results(body, mock)

    def test_no_op_returns_identical_bytes(self, golden) -> None:
        """No matching tool, an empty mock table or a string input returns the bytes unchanged."""
        body = golden.bytes("tools.request.json")
        assert CODEC.rewrite_tool_results(body, {"create_booking": 1}) == body
        assert CODEC.rewrite_tool_results(body, {}) == body
        plain = b'{"input": "hi"}'
        assert CODEC.rewrite_tool_results(plain, {"x": 1}) == plain

    def test_missing_input_is_a_wire_error(self) -> None:
        """Rewriting a body without input raises WireError."""
        with pytest.raises(WireError):
            CODEC.rewrite_tool_results(b'{"model": "m"}', {"x": 1})


class TestMatching:
    def test_matches(self) -> None:
        """POST /v1/responses matches; retrieval and sub-resources do not."""
        assert CODEC.matches("POST", "api.openai.com", "/v1/responses")
        assert CODEC.matches("POST", "x.openai.azure.com", "/openai/responses")
        assert not CODEC.matches("GET", "api.openai.com", "/v1/responses/resp_1")
        assert not CODEC.matches("POST", "api.openai.com", "/v1/responses/resp_1/cancel")
        assert not CODEC.matches("POST", "gw.corp", "/gw/responses")

    def test_is_stream_request(self) -> None:
        """The stream flag comes from the body."""
        assert CODEC.is_stream_request(b'{"stream": true, "input": "x"}', "/v1/responses", "")
        assert not CODEC.is_stream_request(b'{"input": "x"}', "/v1/responses", "")


class TestSDKAgreement:
    @pytest.mark.parametrize("case", ["function_calls", "text_no_event_lines"])
    def test_sdk_reads_the_same_stream(self, golden, case: str) -> None:
        """The openai SDK's Responses stream parser finds the same text and calls in the golden bytes."""
        # openai>=3 is built on httpx2 (docs/design.md#openai-python); its MockTransport answers without a socket.
        import httpx2
        import openai  # test dependencies (pyproject.toml): an import failure is a broken setup
        data = golden.bytes(f"{case}.response.sse")

        def handler(request):
            return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=data)

        client = openai.OpenAI(
            api_key="test",
            base_url="http://127.0.0.1:9/v1",
            http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
        )
        try:
            with client.responses.stream(model="m", input="x") as stream:
                final = stream.get_final_response()
        finally:
            client.close()
        ours = CODEC.parse_events(golden.events(f"{case}.response.sse"))
        sdk_calls = [
            (o.name, o.arguments, o.call_id) for o in final.output if o.type == "function_call"
        ]
        assert sdk_calls == [(c.name, c.arguments_raw, c.call_id) for c in ours.tool_calls]
        assert final.output_text == ours.text


class TestContinuationIds:
    """What threads follow: the response a request continues, and the id a response gives."""

    def test_the_request_names_the_response_it_continues(self) -> None:
        body = {"model": "m", "previous_response_id": "resp_9", "input": [
            {"type": "function_call_output", "call_id": "c1", "output": "sun"}]}
        view = CODEC.parse_request(json.dumps(body).encode())
        assert view.previous_response_id == "resp_9" and view.system == "" and view.roles == ("tool",)
        assert CODEC.parse_request(b'{"model":"m","input":"hi"}').previous_response_id is None

    def test_a_response_gives_its_id_streamed_or_not(self) -> None:
        whole = {"id": "resp_7", "object": "response", "status": "completed", "model": "m", "output": []}
        assert CODEC.parse_response(json.dumps(whole).encode()).response_id == "resp_7"
        streamed = [_ev("response.created", response={**whole, "status": "in_progress"}),
                    _ev("response.completed", response=whole)]
        assert CODEC.parse_events(streamed).response_id == "resp_7"
        failed = {**whole, "status": "failed", "error": {"code": "server_error", "message": "x"}}
        assert CODEC.parse_response(json.dumps(failed).encode()).response_id == "resp_7"

    def test_a_continuation_tool_output_is_mocked_through_the_known_call_names(self) -> None:
        """The call is in the previous response, not the body: its name comes from call_names."""
        body = json.dumps({"model": "m", "previous_response_id": "resp_1", "input": [
            {"type": "function_call_output", "call_id": "call_9", "output": "sunny"}]}).encode()
        assert CODEC.rewrite_tool_results(body, {"get_weather": {"f": "rain"}}) == body
        rewritten = json.loads(CODEC.rewrite_tool_results(body, {"get_weather": {"f": "rain"}},
                                                          {"call_9": "get_weather"}))
        assert rewritten["input"][0]["output"] == '{"f":"rain"}'
