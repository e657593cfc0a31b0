"""The OpenAI Chat Completions codec.

Golden payloads (tests/wire/data/openai_chat) follow the shapes of the openai-python
repository's recorded streams (.inline-snapshot/external/*.bin, e.g. 453df473e962…
for parallel tool calls with an include_usage chunk) and the OpenAI API reference's
chat completion object; their ids and values are our own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowproof.errors import WireError
from flowproof.turns import FinishReason, ToolResult
from flowproof.wire.openai_chat import CODEC
from flowproof.wire.sse import SSEDecoder, encode_events, make_event

GOLDEN_DIR = "openai_chat"
_DATA = Path(__file__).parent / "data" / GOLDEN_DIR
STREAM_CASES = sorted(p.name.removesuffix(".response.sse") for p in _DATA.glob("*.response.sse"))


def _chunk(delta: dict, finish: str | None = None, index: int = 0) -> str:
    return json.dumps(
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "model": "m",
            "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
        }
    )


class TestParseRequest:
    def test_golden_request(self, golden) -> None:
        """System and developer text, roles, tools and resolved tool results are read."""
        view = CODEC.parse_request(golden.bytes("tools.request.json"))
        assert view.provider == "openai-chat"
        assert view.model == "gpt-4o"
        assert view.system == "You are a booking assistant.\n\nAlways confirm the date."
        assert view.roles == ("system", "developer", "user", "assistant", "tool", "tool")
        assert view.tools == ("search_flights", "get_weather")
        assert view.tool_results == (
            ToolResult("call_fp0SearchFlights", "search_flights", '{"flights": []}'),
            ToolResult("call_fp1GetWeather", "get_weather", "sunny, 24°C"),
        )
        assert view.stream is True

    def test_text_size_counts_contents_and_schemas(self) -> None:
        """text_size is message text plus tool-call arguments plus compact tool schema JSON."""
        tools = [{"type": "function", "function": {"name": "f"}}]
        body = {
            "model": "m",
            "messages": [
                {"role": "user", "content": "abcd"},
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": "{}"}}],
                },
            ],
            "tools": tools,
        }
        view = CODEC.parse_request(json.dumps(body).encode())
        assert view.text_size == 4 + 2 + len(json.dumps(tools, separators=(",", ":")))

    def test_legacy_functions_and_function_role(self) -> None:
        """Legacy ``functions`` name tools and ``role: function`` messages are tool results."""
        body = {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "function", "name": "lookup", "content": "42"},
            ],
            "functions": [{"name": "lookup", "parameters": {}}],
        }
        view = CODEC.parse_request(json.dumps(body).encode())
        assert view.tools == ("lookup",)
        assert view.tool_results == (ToolResult(None, "lookup", "42"),)
        assert view.stream is False and view.model is None

    def test_unresolved_tool_call_id_has_no_name(self) -> None:
        """A tool message whose call id matches no assistant call has name None."""
        body = {"messages": [{"role": "tool", "tool_call_id": "nope", "content": "x"}]}
        assert CODEC.parse_request(json.dumps(body).encode()).tool_results == (
            ToolResult("nope", None, "x"),
        )

    def test_non_json_body_is_a_wire_error(self) -> None:
        """A body that is not JSON raises WireError naming the provider and the body."""
        with pytest.raises(WireError) as info:
            CODEC.parse_request(b"model=gpt-4o")
        assert info.value.provider == "openai-chat"
        assert "request body" in str(info.value) and "not valid JSON" in str(info.value)

    def test_non_object_body_is_a_wire_error(self) -> None:
        """A JSON array body raises WireError."""
        with pytest.raises(WireError, match="expected a JSON object"):
            CODEC.parse_request(b"[]")

    def test_missing_messages_is_a_wire_error(self) -> None:
        """A body without messages raises WireError naming the field."""
        with pytest.raises(WireError) as info:
            CODEC.parse_request(b'{"model": "gpt-4o"}')
        assert info.value.field == "messages"

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"messages": {}}, "messages"),
            ({"messages": ["hi"]}, "messages[0]"),
            ({"messages": [{"content": "x"}]}, "messages[0].role"),
            ({"messages": [], "tools": {}}, "tools"),
            ({"messages": [], "tools": [3]}, "tools[0]"),
        ],
    )
    def test_wrong_shapes_name_the_field(self, body: dict, field: str) -> None:
        """Wrongly typed fields raise WireError naming the exact field, never TypeError."""
        with pytest.raises(WireError) as info:
            CODEC.parse_request(json.dumps(body).encode())
        assert info.value.field == field

    def test_is_stream_request(self) -> None:
        """Only ``"stream": true`` asks for a stream; garbage is not a stream."""
        assert CODEC.is_stream_request(b'{"stream": true}', "/v1/chat/completions", "")
        assert not CODEC.is_stream_request(b'{"stream": "yes"}', "/v1/chat/completions", "")
        assert not CODEC.is_stream_request(b"\xff", "/v1/chat/completions", "")


class TestPrompt:
    def test_prompt_is_the_newest_user_text(self) -> None:
        """The prompt is the newest ``role: user`` message, its text parts joined by newlines."""
        body = {
            "messages": [
                {"role": "system", "content": "sys"},
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "ok"},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "second"},
                        {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                        {"type": "text", "text": "part two"},
                    ],
                },
            ]
        }
        assert CODEC.parse_request(json.dumps(body).encode()).prompt == "second\npart two"

    def test_tool_messages_are_not_prompts(self) -> None:
        """Tool and legacy function results after the user message do not replace the prompt."""
        body = {
            "messages": [
                {"role": "user", "content": "Book it"},
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": "{}"}}],
                },
                {"role": "tool", "tool_call_id": "1", "content": "done"},
                {"role": "function", "name": "f", "content": "also done"},
            ]
        }
        assert CODEC.parse_request(json.dumps(body).encode()).prompt == "Book it"

    def test_no_user_message_is_empty(self) -> None:
        """A request without a user message has the empty prompt."""
        body = {"messages": [{"role": "system", "content": "sys"}]}
        assert CODEC.parse_request(json.dumps(body).encode()).prompt == ""


class TestParseResponse:
    def test_golden_tool_calls(self, golden) -> None:
        """A chat.completion with tool_calls maps to TOOL_CALLS with exact argument strings."""
        golden.assert_view(
            CODEC.parse_response(golden.bytes("tool_calls.response.json")), "tool_calls"
        )

    @pytest.mark.parametrize(
        ("raw", "unified"),
        [
            ("stop", FinishReason.STOP),
            ("tool_calls", FinishReason.TOOL_CALLS),
            ("function_call", FinishReason.TOOL_CALLS),
            ("length", FinishReason.LENGTH),
            ("content_filter", FinishReason.CONTENT_FILTER),
            ("eos", FinishReason.OTHER),
            (None, FinishReason.OTHER),
        ],
    )
    def test_finish_reason_mapping(self, raw: str | None, unified: FinishReason) -> None:
        """Provider finish reasons map to the unified ones; the raw reason is kept."""
        body = {
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "hi"},
                    "finish_reason": raw,
                }
            ],
        }
        view = CODEC.parse_response(json.dumps(body).encode())
        assert (view.text, view.finish_reason, view.raw_finish_reason) == ("hi", unified, raw)

    def test_refusal_is_the_text_when_content_is_null(self) -> None:
        """A refusal with null content is what the user reads."""
        body = {
            "choices": [
                {"message": {"content": None, "refusal": "I can't."}, "finish_reason": "stop"}
            ]
        }
        assert CODEC.parse_response(json.dumps(body).encode()).text == "I can't."

    def test_error_body(self) -> None:
        """An OpenAI error body is an ERROR finish with the error type as raw reason."""
        view = CODEC.parse_response(CODEC.error_body(429, "slow down"))
        assert (view.finish_reason, view.raw_finish_reason) == (
            FinishReason.ERROR,
            "rate_limit_error",
        )

    def test_missing_choices_is_a_wire_error(self) -> None:
        """A response without choices or error raises WireError naming choices."""
        with pytest.raises(WireError) as info:
            CODEC.parse_response(b'{"id": "x"}')
        assert info.value.field == "choices"


class TestParseEvents:
    @pytest.mark.parametrize("case", STREAM_CASES)
    def test_golden_streams(self, golden, case: str) -> None:
        """Each golden stream assembles to its expected view."""
        golden.assert_view(CODEC.parse_events(golden.events(f"{case}.response.sse")), case)

    @pytest.mark.parametrize("case", STREAM_CASES)
    def test_golden_streams_byte_by_byte(self, golden, case: str) -> None:
        """Feeding the golden bytes one at a time gives the same events and view, and the same bytes back."""
        data = golden.bytes(f"{case}.response.sse")
        decoder = SSEDecoder()
        events = [
            e for i in range(len(data)) for e in decoder.feed(data[i : i + 1])
        ] + decoder.close()
        assert encode_events(events) == data
        golden.assert_view(CODEC.parse_events(events), case)

    def test_interleaved_parallel_calls_keep_index_order(self) -> None:
        """Tool calls are ordered by index even when index 1 starts first."""
        events = [
            make_event(
                _chunk(
                    {
                        "tool_calls": [
                            {"index": 1, "id": "b", "function": {"name": "g", "arguments": "{"}}
                        ]
                    }
                )
            ),
            make_event(
                _chunk(
                    {
                        "tool_calls": [
                            {"index": 0, "id": "a", "function": {"name": "f", "arguments": "["}}
                        ]
                    }
                )
            ),
            make_event(_chunk({"tool_calls": [{"index": 1, "function": {"arguments": "}"}}]})),
            make_event(_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "]"}}]})),
            make_event(_chunk({}, "tool_calls")),
            make_event("[DONE]"),
        ]
        view = CODEC.parse_events(events)
        assert [(c.name, c.arguments_raw, c.call_id) for c in view.tool_calls] == [
            ("f", "[]", "a"),
            ("g", "{}", "b"),
        ]

    def test_arguments_are_concatenated_exactly(self) -> None:
        """Whitespace and key order in argument fragments are kept byte for byte."""
        parts = ['{ "b" :', " 1,\n", '"a":2 }']
        events = [
            make_event(
                _chunk(
                    {
                        "tool_calls": [
                            {"index": 0, "id": "x", "function": {"name": "f", "arguments": ""}}
                        ]
                    }
                )
            )
        ]
        events += [
            make_event(_chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}))
            for p in parts
        ]
        assert CODEC.parse_events(events).tool_calls[0].arguments_raw == "".join(parts)

    def test_events_after_done_are_ignored(self) -> None:
        """Nothing after data: [DONE] is read."""
        events = [
            make_event(_chunk({"content": "a"}, "stop")),
            make_event("[DONE]"),
            make_event("not json"),
        ]
        assert CODEC.parse_events(events).text == "a"

    def test_comments_and_blank_events_are_skipped(self) -> None:
        """Keep-alive comment events do not disturb assembly."""
        events = [SSEDecoder().feed(b": ping\n\n")[0], make_event(_chunk({"content": "a"}, "stop"))]
        assert CODEC.parse_events(events).finish_reason is FinishReason.STOP

    def test_other_choices_are_ignored(self) -> None:
        """Only choice 0 is assembled, as parse_response reads choices[0]."""
        events = [
            make_event(_chunk({"content": "zero"})),
            make_event(_chunk({"content": "one"}, index=1)),
        ]
        assert CODEC.parse_events(events).text == "zero"

    def test_error_chunk_is_an_error_finish(self) -> None:
        """An error object mid-stream ends the view with ERROR, keeping the text so far."""
        events = [
            make_event(_chunk({"content": "par"})),
            make_event(json.dumps({"error": {"message": "overloaded", "type": "server_error"}})),
        ]
        view = CODEC.parse_events(events)
        assert (view.text, view.finish_reason, view.raw_finish_reason) == (
            "par",
            FinishReason.ERROR,
            "server_error",
        )

    def test_missing_index_falls_back_to_ids(self) -> None:
        """Gateways that omit the index still get one call per id."""
        events = [
            make_event(
                _chunk({"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "1"}}]})
            ),
            make_event(_chunk({"tool_calls": [{"function": {"arguments": "2"}}]})),
            make_event(
                _chunk({"tool_calls": [{"id": "b", "function": {"name": "g", "arguments": "3"}}]})
            ),
        ]
        assert [(c.name, c.arguments_raw) for c in CODEC.parse_events(events).tool_calls] == [
            ("f", "12"),
            ("g", "3"),
        ]

    def test_non_json_chunk_is_a_wire_error(self) -> None:
        """A data line that is not JSON raises WireError naming the event."""
        with pytest.raises(WireError) as info:
            CODEC.parse_events([make_event("{oops")])
        assert info.value.field == "events[0].data"

    def test_sdk_agrees_on_golden_stream(self, golden) -> None:
        """The openai SDK assembles the parallel-tool-call golden stream to the same calls."""
        # openai>=3 is built on httpx2 (docs/design.md#openai-python); its MockTransport answers without a socket.
        import httpx2 as transport_mod
        import openai  # test dependencies (pyproject.toml): an import failure is a broken setup
        data = golden.bytes("parallel_tool_calls.response.sse")

        def handler(request):
            return transport_mod.Response(
                200, headers={"content-type": "text/event-stream"}, content=data
            )

        http_client = transport_mod.Client(transport=transport_mod.MockTransport(handler))
        client = openai.OpenAI(
            api_key="test", base_url="http://127.0.0.1:9/v1", http_client=http_client
        )
        try:
            with client.chat.completions.stream(
                model="m", messages=[{"role": "user", "content": "x"}]
            ) as stream:
                final = stream.get_final_completion()
        finally:
            client.close()
        sdk_calls = [
            (c.function.name, c.function.arguments, c.id)
            for c in final.choices[0].message.tool_calls or []
        ]
        ours = CODEC.parse_events(golden.events("parallel_tool_calls.response.sse"))
        assert sdk_calls == [(c.name, c.arguments_raw, c.call_id) for c in ours.tool_calls]
        assert final.choices[0].finish_reason == ours.raw_finish_reason


class TestRewriteToolResults:
    def test_replaces_resolved_tool_content(self, golden) -> None:
        """Tool messages resolved to a mocked tool get the mock; others are untouched."""
        body = golden.bytes("tools.request.json")
        out = CODEC.rewrite_tool_results(
            body, {"search_flights": {"flights": [{"id": "KQ311", "dest": "NBO"}]}}
        )
        messages = json.loads(out)["messages"]
        assert messages[4]["content"] == '{"flights":[{"id":"KQ311","dest":"NBO"}]}'
        assert messages[5]["content"] == [{"type": "text", "text": "sunny, 24°C"}]

    def test_string_results_stay_strings(self, golden) -> None:
        """A string mock is inserted as-is, not JSON-quoted."""
        out = CODEC.rewrite_tool_results(
            golden.bytes("tools.request.json"), {"get_weather": "rain"}
        )
        assert json.loads(out)["messages"][5]["content"] == "rain"

    def test_unknown_fields_and_key_order_pass_through(self, golden) -> None:
        """Fields flowproof does not know survive a rewrite with their key order."""
        body = golden.bytes("tools.request.json")
        original = json.loads(body)
        out = json.loads(CODEC.rewrite_tool_results(body, {"get_weather": "rain"}))
        assert list(out) == list(original)
        assert out["x_vendor_future_field"] == {"z": 1, "a": [3, 2, 1]}
        assert out["tools"] == original["tools"]

    def test_rewrite_is_deterministic_and_compact(self, golden) -> None:
        """The same input gives the same compact, UTF-8 bytes."""
        body = golden.bytes("tools.request.json")
        first = CODEC.rewrite_tool_results(body, {"get_weather": {"t": "24°C"}})
        assert first == CODEC.rewrite_tool_results(body, {"get_weather": {"t": "24°C"}})
        compact = json.dumps(json.loads(first), ensure_ascii=False, separators=(",", ":")).encode()
        assert first == compact and "24°C".encode() in first

    def test_no_match_returns_identical_bytes(self, golden) -> None:
        """When no tool result is replaced the original bytes come back unchanged."""
        body = golden.bytes("tools.request.json")
        assert CODEC.rewrite_tool_results(body, {"create_booking": {"booking": "B-1"}}) == body
        assert CODEC.rewrite_tool_results(body, {}) == body

    def test_already_rewritten_is_a_no_op(self, golden) -> None:
        """Rewriting a body that already holds the mock returns it unchanged."""
        once = CODEC.rewrite_tool_results(
            golden.bytes("tools.request.json"), {"get_weather": "rain"}
        )
        assert CODEC.rewrite_tool_results(once, {"get_weather": "rain"}) == once

    def test_rewrite_of_non_json_is_a_wire_error(self) -> None:
        """A rewrite of a non-JSON body raises WireError."""
        with pytest.raises(WireError):
            CODEC.rewrite_tool_results(b"nope", {"f": 1})


class TestErrorBodyAndMatching:
    def test_error_body_shape(self) -> None:
        """The error body is OpenAI's error object with message, type and code."""
        error = json.loads(CODEC.error_body(409, "no recorded turn matches"))["error"]
        assert error["message"] == "no recorded turn matches"
        assert error["type"] == "invalid_request_error" and error["code"] == "flowproof"
        assert json.loads(CODEC.error_body(500, "x"))["error"]["type"] == "server_error"

    def test_matches(self) -> None:
        """matches() accepts POST …/chat/completions only."""
        assert CODEC.matches("POST", "h", "/openai/deployments/d/chat/completions")
        assert not CODEC.matches("GET", "h", "/v1/chat/completions")
        assert not CODEC.matches("POST", "h", "/v1/completions")
