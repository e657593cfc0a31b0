"""Tests for the Anthropic Messages codec (flowproof/wire/anthropic.py).

Golden cases live in tests/wire/data/anthropic/: ``<case>.request.json``,
``<case>.response.json`` or ``<case>.response.sse`` beside ``<case>.expected.json``
(whose ``source`` names the documented example each payload is shaped after).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowproof.errors import WireError
from flowproof.turns import FinishReason
from flowproof.wire.anthropic import CODEC, AnthropicCodec
from flowproof.wire.sse import SSEDecoder, SSEEvent, make_event, parse_sse

from .conftest import golden_cases, view_of_file

DATA = Path(__file__).parent / "data" / "anthropic"


def _body(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


def _events(*payloads: dict[str, Any]) -> list[SSEEvent]:
    """Events named after their payload's type, as Anthropic sends them."""
    return [make_event(json.dumps(p), event=p.get("type")) for p in payloads]


def _tool_stream(*deltas: tuple[int, str]) -> list[SSEEvent]:
    """Tool_use blocks 0 and 1 whose input_json_delta fragments arrive in ``deltas`` order."""
    return _events(
        {"type": "message_start", "message": {"model": "m", "content": [], "stop_reason": None}},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "a", "name": "f", "input": {}},
        },
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "b", "name": "g", "input": {}},
        },
        *(
            {
                "type": "content_block_delta",
                "index": i,
                "delta": {"type": "input_json_delta", "partial_json": s},
            }
            for i, s in deltas
        ),
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}},
        {"type": "message_stop"},
    )


CONVERSATION = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 100,
    "messages": [
        {"role": "user", "content": "Book it"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "t1", "name": "search", "input": {"q": "x"}},
                {"type": "tool_use", "id": "t2", "name": "book", "input": {"id": "KQ311"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "real search"},
                {
                    "type": "tool_result",
                    "tool_use_id": "t2",
                    "content": [{"type": "text", "text": "ok"}],
                    "is_error": True,
                },
            ],
        },
    ],
}


class TestGolden:
    @pytest.mark.parametrize(("source", "expected"), golden_cases(DATA))
    def test_golden_view(self, source: Path, expected: Path) -> None:
        """Each documented payload parses to exactly the view its expected file pins."""
        want = json.loads(expected.read_text(encoding="utf-8"))
        want.pop("source")
        assert view_of_file(CODEC, source) == want

    def test_golden_cases_exist(self) -> None:
        """The golden directory holds request, response and stream cases."""
        names = {p.name.split(".", 1)[1] for p in DATA.iterdir()}
        assert {"request.json", "response.json", "response.sse", "expected.json"} <= names

    def test_stream_split_anywhere_gives_the_same_view(self) -> None:
        """Feeding the stream through the SSE decoder one byte at a time changes nothing."""
        body = (DATA / "tool_use_stream.response.sse").read_bytes()
        decoder = SSEDecoder()
        events: list[SSEEvent] = []
        for i in range(len(body)):
            events += decoder.feed(body[i : i + 1])
        events += decoder.close()
        assert CODEC.parse_events(events) == CODEC.parse_events(parse_sse(body))


class TestMatches:
    @pytest.mark.parametrize(
        ("method", "path", "expected"),
        [
            pytest.param("POST", "/v1/messages", True, id="messages"),
            pytest.param("post", "/v1/messages", True, id="lowercase-method"),
            pytest.param("POST", "/anthropic/v1/messages", True, id="gateway-prefix"),
            pytest.param("GET", "/v1/messages", False, id="get"),
            pytest.param("POST", "/v1/messages/count_tokens", False, id="count-tokens"),
            pytest.param("POST", "/v1/messages/batches", False, id="batches"),
            pytest.param("POST", "/v1/complete", False, id="legacy-complete"),
            pytest.param("POST", "/api/event_logging/batch", False, id="telemetry"),
        ],
    )
    def test_matches(self, method: str, path: str, expected: bool) -> None:
        """Only POSTs to the Messages endpoint are Anthropic model calls."""
        assert CODEC.matches(method, "api.anthropic.com", path) is expected

    def test_name_and_module_instance(self) -> None:
        """The module exposes a CODEC instance named "anthropic"."""
        assert isinstance(CODEC, AnthropicCodec)
        assert CODEC.name == "anthropic"


class TestIsStreamRequest:
    @pytest.mark.parametrize(
        ("body", "expected"),
        [
            pytest.param(b'{"stream": true, "messages": []}', True, id="true"),
            pytest.param(b'{"stream": false}', False, id="false"),
            pytest.param(b'{"messages": []}', False, id="absent"),
            pytest.param(b'{"stream": "true"}', False, id="string"),
            pytest.param(b"not json", False, id="not-json"),
            pytest.param(b"[1]", False, id="array"),
        ],
    )
    def test_stream_flag(self, body: bytes, expected: bool) -> None:
        """Only a literal ``"stream": true`` asks for a stream."""
        assert CODEC.is_stream_request(body, "/v1/messages", "beta=true") is expected


class TestParseRequest:
    def test_tool_result_name_resolves_through_tool_use_id(self) -> None:
        """A tool_result is named after the earlier tool_use block with its id."""
        view = CODEC.parse_request(json.dumps(CONVERSATION).encode())
        assert [(r.call_id, r.name, r.content) for r in view.tool_results] == [
            ("t1", "search", "real search"),
            ("t2", "book", "ok"),
        ]

    def test_tool_result_before_its_tool_use_has_no_name(self) -> None:
        """A tool_use_id introduced only later in the conversation does not resolve."""
        body = _body(
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t9", "content": "x"}],
                },
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t9", "name": "late", "input": {}}],
                },
            ]
        )
        assert CODEC.parse_request(body).tool_results[0].name is None

    def test_missing_system_is_empty(self) -> None:
        """A request without system has the empty system prompt."""
        assert CODEC.parse_request(_body(messages=[])).system == ""

    def test_empty_tool_result_content(self) -> None:
        """A tool_result without content reads as the empty string."""
        body = _body(
            messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}]
        )
        assert CODEC.parse_request(body).tool_results[0].content == ""

    def test_non_json_body(self) -> None:
        """A body that is not JSON raises WireError naming the provider and the body."""
        with pytest.raises(WireError) as info:
            CODEC.parse_request(b"\xff{not json")
        assert (info.value.provider, info.value.field) == ("anthropic", "body")
        assert str(info.value).startswith("anthropic: body: not valid JSON")

    def test_missing_messages(self) -> None:
        """A body without messages raises WireError naming the messages field."""
        with pytest.raises(WireError) as info:
            CODEC.parse_request(_body(model="claude-sonnet-4-5"))
        assert (info.value.provider, info.value.field) == ("anthropic", "messages")

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            pytest.param(b"[]", "body", id="array-body"),
            pytest.param(_body(messages={}), "messages", id="messages-object"),
            pytest.param(
                _body(messages=[{"content": "hi"}]), "messages[0].role", id="role-missing"
            ),
            pytest.param(_body(messages=[], system=7), "system", id="system-number"),
            pytest.param(
                _body(messages=[], system=[{"type": "text"}]),
                "system[0].text",
                id="system-block-no-text",
            ),
            pytest.param(
                _body(messages=[], tools=[{"description": "x"}]), "tools[0].name", id="tool-no-name"
            ),
            pytest.param(_body(messages=[], model=3), "model", id="model-number"),
        ],
    )
    def test_bad_shapes_name_the_field(self, body: bytes, field: str) -> None:
        """A field of the wrong shape raises WireError naming that field's path."""
        with pytest.raises(WireError) as info:
            CODEC.parse_request(body)
        assert info.value.field == field


class TestPrompt:
    def test_prompt_is_the_newest_user_text(self) -> None:
        """The prompt is the text blocks of the newest user message, not an earlier one."""
        body = _body(
            messages=[
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "ok"},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "second"},
                        {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
                        {"type": "text", "text": "part two"},
                    ],
                },
            ]
        )
        assert CODEC.parse_request(body).prompt == "second\npart two"

    def test_tool_result_only_turn_is_skipped(self) -> None:
        """A trailing user turn holding only tool_result blocks leaves the earlier prompt."""
        assert CODEC.parse_request(json.dumps(CONVERSATION).encode()).prompt == "Book it"

    def test_tool_result_text_is_not_prompt(self) -> None:
        """Text beside tool results is the prompt; the tool results' own text is not."""
        body = _body(
            messages=[
                {"role": "user", "content": "old"},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "t", "content": "result"},
                        {"type": "text", "text": "now continue"},
                    ],
                },
            ]
        )
        assert CODEC.parse_request(body).prompt == "now continue"

    def test_no_user_message_is_empty(self) -> None:
        """A request without a user message, or with only tool results, has the empty prompt."""
        assert CODEC.parse_request(_body(messages=[])).prompt == ""
        only_results = [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}
        ]
        assert CODEC.parse_request(_body(messages=only_results)).prompt == ""


class TestParseResponse:
    @pytest.mark.parametrize(
        ("raw", "expected"),
        [
            ("end_turn", FinishReason.STOP),
            ("stop_sequence", FinishReason.STOP),
            ("tool_use", FinishReason.TOOL_CALLS),
            ("max_tokens", FinishReason.LENGTH),
            ("refusal", FinishReason.CONTENT_FILTER),
            ("pause_turn", FinishReason.OTHER),
            ("something_new", FinishReason.OTHER),
        ],
    )
    def test_stop_reason_mapping(self, raw: str, expected: FinishReason) -> None:
        """Each Anthropic stop_reason maps to its unified finish reason and is kept raw."""
        view = CODEC.parse_response(_body(content=[], stop_reason=raw))
        assert (view.finish_reason, view.raw_finish_reason) == (expected, raw)

    def test_tool_input_object_is_reserialized_compactly(self) -> None:
        """A non-streamed tool input object becomes compact JSON with its key order kept."""
        body = _body(
            content=[{"type": "tool_use", "id": "t", "name": "f", "input": {"z": 1, "a": "é"}}],
            stop_reason="tool_use",
        )
        call = CODEC.parse_response(body).tool_calls[0]
        assert call.arguments_raw == '{"z":1,"a":"é"}'
        assert call.arguments == {"z": 1, "a": "é"}

    def test_server_tool_use_is_not_a_tool_call(self) -> None:
        """A server_tool_use block runs at Anthropic and is not reported as an agent tool call."""
        body = _body(
            content=[
                {
                    "type": "server_tool_use",
                    "id": "srvtoolu_1",
                    "name": "web_search",
                    "input": {"query": "x"},
                },
                {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
                {"type": "text", "text": "Found it."},
            ],
            stop_reason="end_turn",
        )
        view = CODEC.parse_response(body)
        assert (view.tool_calls, view.text) == ((), "Found it.")

    def test_error_body_reads_as_error(self) -> None:
        """An Anthropic error body parses to finish reason error with the error type kept."""
        view = CODEC.parse_response(CODEC.error_body(404, "no recorded turn"))
        assert (view.finish_reason, view.raw_finish_reason, view.text) == (
            FinishReason.ERROR,
            "not_found_error",
            "",
        )

    def test_missing_content(self) -> None:
        """A response without content raises WireError naming the content field."""
        with pytest.raises(WireError) as info:
            CODEC.parse_response(_body(stop_reason="end_turn"))
        assert (info.value.provider, info.value.field) == ("anthropic", "content")

    def test_non_json_body(self) -> None:
        """A response body that is not JSON raises WireError, not a raw exception."""
        with pytest.raises(WireError, match="anthropic: body"):
            CODEC.parse_response(b"<html>502 Bad Gateway</html>")


class TestParseEvents:
    def test_interleaved_fragments_concatenate_per_index(self) -> None:
        """input_json_delta fragments are concatenated exactly, in order, per block index."""
        events = _tool_stream((1, '{"b"'), (0, '{ "a" :'), (1, ": 2}"), (0, " 1 }"))
        view = CODEC.parse_events(events)
        assert [(c.name, c.arguments_raw, c.call_id) for c in view.tool_calls] == [
            ("f", '{ "a" : 1 }', "a"),
            ("g", '{"b": 2}', "b"),
        ]
        assert view.finish_reason is FinishReason.TOOL_CALLS

    def test_no_fragments_means_empty_object(self) -> None:
        """A tool_use block with no input_json_delta has arguments ``{}``."""
        view = CODEC.parse_events(_tool_stream((0, ""), (0, "")))
        assert [c.arguments_raw for c in view.tool_calls] == ["{}", "{}"]
        assert view.tool_calls[0].arguments == {}

    def test_type_falls_back_to_event_name(self) -> None:
        """A data payload without a type is dispatched on the SSE event name."""
        events = [
            make_event(
                '{"index":0,"content_block":{"type":"text","text":"Hi"}}',
                event="content_block_start",
            ),
            make_event(
                '{"index":0,"delta":{"type":"text_delta","text":" there"}}',
                event="content_block_delta",
            ),
            make_event('{"delta":{"stop_reason":"end_turn"}}', event="message_delta"),
        ]
        view = CODEC.parse_events(events)
        assert (view.text, view.finish_reason) == ("Hi there", FinishReason.STOP)

    def test_stream_without_stop_reason_is_an_error(self) -> None:
        """A stream that ends before message_delta was cut short and reads as error."""
        events = _events(
            {"type": "message_start", "message": {"model": "m", "content": []}},
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Hal"},
            },
        )
        view = CODEC.parse_events(events)
        assert (view.text, view.finish_reason, view.raw_finish_reason) == (
            "Hal",
            FinishReason.ERROR,
            None,
        )

    def test_empty_data_events_are_skipped(self) -> None:
        """Events without data (comments, keep-alives) change nothing."""
        events = [SSEEvent(raw=": keep-alive\n\n", data=""), *_tool_stream()]
        assert CODEC.parse_events(events).finish_reason is FinishReason.TOOL_CALLS

    def test_delta_before_start(self) -> None:
        """A delta for a block that never started raises WireError naming the event."""
        events = _events(
            {
                "type": "content_block_delta",
                "index": 3,
                "delta": {"type": "text_delta", "text": "x"},
            }
        )
        with pytest.raises(WireError) as info:
            CODEC.parse_events(events)
        assert info.value.field == "events[0].index"

    def test_non_json_data(self) -> None:
        """An event whose data is not JSON raises WireError naming the event."""
        with pytest.raises(WireError) as info:
            CODEC.parse_events([make_event("{oops", event="message_start")])
        assert (info.value.provider, info.value.field) == ("anthropic", "events[0].data")

    def test_matches_the_sdk_accumulator(self) -> None:
        """The golden tool stream assembles to the same text and input as the SDK's accumulator."""
        # A private SDK helper: the same code the SDK's MessageStream runs on every event.
        import anthropic.lib.streaming._messages as streaming  # a test dependency: never skipped
        events = parse_sse((DATA / "tool_use_stream.response.sse").read_bytes())
        snapshot = None
        json_bufs: dict[int, bytes] = {}
        for event in events:
            payload = json.loads(event.data)
            if payload["type"] == "ping":
                continue
            snapshot = streaming.accumulate_event(
                event=payload, current_snapshot=snapshot, json_bufs=json_bufs
            )
        assert snapshot is not None
        view = CODEC.parse_events(events)
        sdk_text = "".join(b.text for b in snapshot.content if b.type == "text")
        sdk_inputs = [b.input for b in snapshot.content if b.type == "tool_use"]
        assert view.text == sdk_text
        assert [c.arguments for c in view.tool_calls] == sdk_inputs


class TestRewriteToolResults:
    def test_string_result_replaces_content(self) -> None:
        """A mocked string replaces the content of the matching tool_result as a string."""
        out = CODEC.rewrite_tool_results(json.dumps(CONVERSATION).encode(), {"search": "mocked"})
        blocks = json.loads(out)["messages"][2]["content"]
        assert blocks[0] == {"type": "tool_result", "tool_use_id": "t1", "content": "mocked"}
        assert blocks[1] == CONVERSATION["messages"][2]["content"][1]

    def test_object_result_becomes_compact_json_and_keeps_is_error(self) -> None:
        """A mocked object becomes a compact JSON string and the block's other keys stay."""
        out = CODEC.rewrite_tool_results(
            json.dumps(CONVERSATION).encode(), {"book": {"status": "confirmed", "ref": "Ä1"}}
        )
        block = json.loads(out)["messages"][2]["content"][1]
        assert block == {
            "type": "tool_result",
            "tool_use_id": "t2",
            "content": '{"status":"confirmed","ref":"Ä1"}',
            "is_error": True,
        }

    def test_rewritten_body_is_compact_and_keeps_key_order(self) -> None:
        """The re-serialized body is compact UTF-8 JSON with the original key order."""
        original = json.dumps(CONVERSATION, indent=2).encode()
        out = CODEC.rewrite_tool_results(original, {"search": "ü"})
        assert out.startswith(b'{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[')
        assert b'"content":"\xc3\xbc"' in out

    def test_rewrite_is_deterministic_and_idempotent(self) -> None:
        """The same input gives the same bytes, and rewriting the result again changes nothing."""
        body = json.dumps(CONVERSATION, indent=1).encode()
        first = CODEC.rewrite_tool_results(body, {"search": [1, 2]})
        assert CODEC.rewrite_tool_results(body, {"search": [1, 2]}) == first
        assert CODEC.rewrite_tool_results(first, {"search": [1, 2]}) is first

    @pytest.mark.parametrize(
        "results",
        [
            pytest.param({}, id="no-mocks"),
            pytest.param({"unrelated": "x"}, id="other-tool"),
            pytest.param({"search": "real search"}, id="same-content"),
        ],
    )
    def test_no_change_returns_the_original_bytes(self, results: dict[str, Any]) -> None:
        """When nothing is replaced the very same bytes object comes back."""
        body = json.dumps(CONVERSATION, indent=3).encode()
        assert CODEC.rewrite_tool_results(body, results) is body

    def test_non_json_body(self) -> None:
        """Rewriting a body that is not JSON raises WireError."""
        with pytest.raises(WireError, match="anthropic: body"):
            CODEC.rewrite_tool_results(b"nope", {"search": "x"})


class TestErrorBody:
    @pytest.mark.parametrize(
        ("status", "error_type"),
        [
            (400, "invalid_request_error"),
            (404, "not_found_error"),
            (409, "invalid_request_error"),
            (429, "rate_limit_error"),
            (500, "api_error"),
            (529, "overloaded_error"),
        ],
    )
    def test_error_shape(self, status: int, error_type: str) -> None:
        """The body is Anthropic's error JSON with the type matching the status."""
        body = json.loads(CODEC.error_body(status, "flowproof: no recorded turn matches"))
        assert body == {
            "type": "error",
            "error": {"type": error_type, "message": "flowproof: no recorded turn matches"},
        }

    def test_sdk_reads_the_error_message(self) -> None:
        """The anthropic SDK's error type parses the body and exposes our message."""
        from anthropic.types import ErrorResponse

        parsed = ErrorResponse.model_validate_json(CODEC.error_body(404, "nothing recorded"))
        assert (parsed.error.type, parsed.error.message) == ("not_found_error", "nothing recorded")


# --- hypothesis: arbitrary JSON never escapes as anything but WireError ---------------------

_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6)
)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=12,
)
_block_types = st.sampled_from(
    ["text", "tool_use", "tool_result", "thinking", "server_tool_use", "image"]
)
_blocks = st.fixed_dictionaries(
    {"type": _block_types | _json},
    optional={
        "text": st.text(max_size=5) | _json,
        "id": st.sampled_from(["t1", "t2"]) | _json,
        "name": st.sampled_from(["search", "book"]) | _json,
        "tool_use_id": st.sampled_from(["t1", "t2"]) | _json,
        "content": st.text(max_size=5) | st.lists(_json, max_size=2) | _json,
        "input": _json,
    },
)
_messages = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant"]) | _json},
    optional={"content": st.text(max_size=5) | st.lists(_blocks | _json, max_size=3) | _json},
)
_requests = st.fixed_dictionaries(
    {"messages": st.lists(_messages | _json, max_size=3) | _json},
    optional={
        "system": st.text(max_size=5) | st.lists(_blocks, max_size=2) | _json,
        "tools": _json,
        "model": _json,
        "stream": _json,
    },
)
_responses = st.fixed_dictionaries(
    {"content": st.lists(_blocks | _json, max_size=3) | _json},
    optional={
        "stop_reason": _json,
        "model": _json,
        "type": st.just("error") | _json,
        "error": _json,
    },
)
_event_payloads = st.fixed_dictionaries(
    {
        "type": st.sampled_from(
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "message_delta",
                "error",
                "ping",
            ]
        )
        | _json
    },
    optional={
        "index": st.integers(0, 2) | _json,
        "message": _json,
        "content_block": _blocks | _json,
        "delta": st.fixed_dictionaries(
            {"type": st.sampled_from(["text_delta", "input_json_delta", "thinking_delta"]) | _json},
            optional={
                "text": _json,
                "partial_json": st.text(max_size=5) | _json,
                "stop_reason": _json,
            },
        )
        | _json,
        "error": _json,
    },
)
_fuzz = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class TestOnlyWireErrorEscapes:
    @_fuzz
    @given(
        st.binary(max_size=40)
        | _json.map(lambda v: json.dumps(v).encode())
        | _requests.map(lambda v: json.dumps(v).encode())
    )
    def test_parse_request(self, body: bytes) -> None:
        """parse_request returns a view or raises WireError for any bytes."""
        try:
            view = CODEC.parse_request(body)
        except WireError as e:
            assert e.provider == "anthropic"
        else:
            assert view.provider == "anthropic"

    @_fuzz
    @given(_json | _responses)
    def test_parse_response(self, value: Any) -> None:
        """parse_response returns a view or raises WireError for any JSON value."""
        try:
            view = CODEC.parse_response(json.dumps(value).encode())
        except WireError as e:
            assert e.provider == "anthropic"
        else:
            assert isinstance(view.finish_reason, FinishReason)

    @_fuzz
    @given(st.lists(_event_payloads | _json, max_size=6))
    def test_parse_events(self, payloads: list[Any]) -> None:
        """parse_events returns a view or raises WireError for any sequence of JSON events."""
        events = [make_event(json.dumps(p)) for p in payloads]
        try:
            view = CODEC.parse_events(events)
        except WireError as e:
            assert e.provider == "anthropic"
        else:
            assert all(isinstance(c.name, str) for c in view.tool_calls)

    @_fuzz
    @given(_requests | _json, _json)
    def test_rewrite_tool_results(self, value: Any, mocked: Any) -> None:
        """rewrite_tool_results returns bytes or raises WireError for any body and mock value."""
        body = json.dumps(value).encode()
        try:
            out = CODEC.rewrite_tool_results(body, {"search": mocked, "book": "x"})
        except WireError as e:
            assert e.provider == "anthropic"
        else:
            assert out is body or json.loads(out) != value
