"""Tests for the Gemini codec (flowproof/wire/gemini.py).

Golden cases live in tests/wire/data/gemini/: ``<case>.request.json``,
``<case>.response.json`` (a GenerateContentResponse, or the JSON-array stream
form) or ``<case>.response.sse`` beside ``<case>.expected.json`` (whose
``source`` names the documented example each payload is shaped after).
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
from flowproof.wire.gemini import CODEC, GeminiCodec, model_from_path
from flowproof.wire.sse import SSEDecoder, SSEEvent, make_event, parse_sse

from .conftest import golden_cases, view_of_file

DATA = Path(__file__).parent / "data" / "gemini"


def _body(value: Any) -> bytes:
    return json.dumps(value).encode()


def _response(parts: list[Any], finish: str | None = "STOP") -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}}
    if finish is not None:
        candidate["finishReason"] = finish
    return {"candidates": [candidate]}


CONVERSATION = {
    "contents": [
        {"role": "user", "parts": [{"text": "Book it"}]},
        {
            "role": "model",
            "parts": [
                {"functionCall": {"id": "c1", "name": "search", "args": {"q": "x"}}},
                {"functionCall": {"id": "c2", "name": "book", "args": {"id": "KQ311"}}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "id": "c1",
                        "name": "search",
                        "response": {"result": "real"},
                    }
                },
                {
                    "functionResponse": {
                        "id": "c2",
                        "name": "book",
                        "response": {"status": "pending"},
                    }
                },
            ],
        },
    ],
    "generationConfig": {"temperature": 0},
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
        body = (DATA / "function_call_stream.response.sse").read_bytes()
        decoder = SSEDecoder()
        events: list[SSEEvent] = []
        for i in range(len(body)):
            events += decoder.feed(body[i : i + 1])
        events += decoder.close()
        assert CODEC.parse_events(events) == CODEC.parse_events(parse_sse(body))

    @pytest.mark.parametrize("case", ["function_call", "blocked"])
    def test_agrees_with_the_google_genai_sdk(self, case: str) -> None:
        """The SDK's own reading of a golden response gives the same text and function calls."""
        from google.genai import types

        body = (DATA / f"{case}.response.json").read_bytes()
        sdk = types.GenerateContentResponse.model_validate_json(body)
        view = CODEC.parse_response(body)
        sdk_calls = [(c.name, c.args) for c in sdk.function_calls or []]
        assert [(c.name, c.arguments) for c in view.tool_calls] == sdk_calls
        assert view.text == (sdk.text or "")


class TestMatches:
    @pytest.mark.parametrize(
        ("method", "path", "expected"),
        [
            pytest.param(
                "POST", "/v1beta/models/gemini-2.5-flash:generateContent", True, id="v1beta"
            ),
            pytest.param(
                "POST", "/v1/models/gemini-2.5-pro:streamGenerateContent", True, id="v1-stream"
            ),
            pytest.param(
                "POST", "/v1alpha/models/gemini-2.0-flash:generateContent", True, id="v1alpha"
            ),
            pytest.param(
                "POST", "/v1beta/tunedModels/my-model-abc:generateContent", True, id="tuned"
            ),
            pytest.param(
                "POST",
                "/v1/projects/p/locations/us-central1/publishers/google/models/gemini:generateContent",
                True,
                id="vertex",
            ),
            pytest.param("GET", "/v1beta/models/gemini-2.5-flash:generateContent", False, id="get"),
            pytest.param(
                "POST", "/v1beta/models/gemini-2.5-flash:countTokens", False, id="count-tokens"
            ),
            pytest.param(
                "POST", "/v1beta/models/text-embedding-004:embedContent", False, id="embed"
            ),
            pytest.param(
                "POST", "/v1beta/models/gemini-2.5-flash:batchGenerateContent", False, id="batch"
            ),
            pytest.param("POST", "/v1beta/models", False, id="list"),
            pytest.param(
                "POST", "/v2/models/gemini-2.5-flash:generateContent", False, id="unknown-version"
            ),
        ],
    )
    def test_matches(self, method: str, path: str, expected: bool) -> None:
        """Only POSTs to generateContent or streamGenerateContent are Gemini model calls."""
        assert CODEC.matches(method, "generativelanguage.googleapis.com", path) is expected

    def test_name_and_module_instance(self) -> None:
        """The module exposes a CODEC instance named "gemini"."""
        assert isinstance(CODEC, GeminiCodec)
        assert CODEC.name == "gemini"

    @pytest.mark.parametrize(
        ("path", "model"),
        [
            ("/v1beta/models/gemini-2.5-flash:streamGenerateContent", "gemini-2.5-flash"),
            ("/v1beta/tunedModels/my-model-abc:generateContent", "my-model-abc"),
            ("/v1/messages", None),
        ],
    )
    def test_model_from_path(self, path: str, model: str | None) -> None:
        """The model named in the path is found, or None when the path names none."""
        assert model_from_path(path) == model


class TestIsStreamRequest:
    @pytest.mark.parametrize(
        ("path", "query", "expected"),
        [
            pytest.param("/v1beta/models/g:streamGenerateContent", "alt=sse", True, id="sse"),
            pytest.param("/v1beta/models/g:streamGenerateContent", "", True, id="json-array"),
            pytest.param("/v1beta/models/g:generateContent", "alt=sse", False, id="unary"),
        ],
    )
    def test_stream_is_decided_by_the_path(self, path: str, query: str, expected: bool) -> None:
        """streamGenerateContent is a streaming request whatever the body says."""
        assert CODEC.is_stream_request(b'{"contents": []}', path, query) is expected


class TestParseRequest:
    def test_function_responses_keep_name_and_id(self) -> None:
        """functionResponse parts become tool results with their own name and id."""
        view = CODEC.parse_request(_body(CONVERSATION))
        assert [(r.call_id, r.name, r.content) for r in view.tool_results] == [
            ("c1", "search", '{"result":"real"}'),
            ("c2", "book", '{"status":"pending"}'),
        ]
        assert view.roles == ("user", "model", "user")

    def test_missing_system_instruction_is_empty(self) -> None:
        """A request without systemInstruction has the empty system prompt."""
        assert CODEC.parse_request(_body({"contents": []})).system == ""

    def test_non_json_body(self) -> None:
        """A body that is not JSON raises WireError naming the provider and the body."""
        with pytest.raises(WireError) as info:
            CODEC.parse_request(b"\x00\x01 not json")
        assert (info.value.provider, info.value.field) == ("gemini", "body")

    def test_missing_contents(self) -> None:
        """A body without contents raises WireError naming the contents field."""
        with pytest.raises(WireError) as info:
            CODEC.parse_request(_body({"generationConfig": {}}))
        assert (info.value.provider, info.value.field) == ("gemini", "contents")
        assert "contents array" in str(info.value)

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            pytest.param([], "body", id="array-body"),
            pytest.param({"contents": {}}, "contents", id="contents-object"),
            pytest.param({"contents": [{"role": 1}]}, "contents[0].role", id="role-number"),
            pytest.param(
                {"contents": [{"parts": [{"text": 5}]}]},
                "contents[0].parts[0].text",
                id="text-number",
            ),
            pytest.param(
                {"contents": [{"parts": [{"functionResponse": {"response": {}}}]}]},
                "contents[0].parts[0].functionResponse.name",
                id="response-no-name",
            ),
            pytest.param(
                {"contents": [], "systemInstruction": 3}, "systemInstruction", id="system-number"
            ),
            pytest.param(
                {"contents": [], "tools": [{"functionDeclarations": [{}]}]},
                "tools[0].functionDeclarations[0].name",
                id="declaration-no-name",
            ),
        ],
    )
    def test_bad_shapes_name_the_field(self, body: Any, field: str) -> None:
        """A field of the wrong shape raises WireError naming that field's path."""
        with pytest.raises(WireError) as info:
            CODEC.parse_request(_body(body))
        assert info.value.field == field


class TestPrompt:
    def test_prompt_is_the_newest_user_text(self) -> None:
        """The prompt is the text parts of the newest user content, not an earlier one."""
        body = {
            "contents": [
                {"role": "user", "parts": [{"text": "first"}]},
                {"role": "model", "parts": [{"text": "ok"}]},
                {
                    "role": "user",
                    "parts": [
                        {"text": "second"},
                        {"inlineData": {"mimeType": "image/png", "data": "AA=="}},
                        {"text": "part two"},
                    ],
                },
            ]
        }
        assert CODEC.parse_request(_body(body)).prompt == "second\npart two"

    def test_function_response_only_turn_is_skipped(self) -> None:
        """A trailing user turn holding only functionResponse parts leaves the earlier prompt."""
        assert CODEC.parse_request(_body(CONVERSATION)).prompt == "Book it"

    def test_content_without_role_is_a_user_turn(self) -> None:
        """A content item without a role counts as the user's."""
        body = {"contents": [{"role": "user", "parts": [{"text": "a"}]}, {"parts": [{"text": "b"}]}]}
        assert CODEC.parse_request(_body(body)).prompt == "b"

    def test_no_user_content_is_empty(self) -> None:
        """A request without user text has the empty prompt."""
        assert CODEC.parse_request(_body({"contents": []})).prompt == ""
        body = {"contents": [{"role": "model", "parts": [{"text": "hello"}]}]}
        assert CODEC.parse_request(_body(body)).prompt == ""


class TestParseResponse:
    @pytest.mark.parametrize(
        ("raw", "expected"),
        [
            ("STOP", FinishReason.STOP),
            ("MAX_TOKENS", FinishReason.LENGTH),
            ("SAFETY", FinishReason.CONTENT_FILTER),
            ("RECITATION", FinishReason.CONTENT_FILTER),
            ("BLOCKLIST", FinishReason.CONTENT_FILTER),
            ("PROHIBITED_CONTENT", FinishReason.CONTENT_FILTER),
            ("SPII", FinishReason.CONTENT_FILTER),
            ("OTHER", FinishReason.OTHER),
            ("LANGUAGE", FinishReason.OTHER),
        ],
    )
    def test_finish_reason_mapping(self, raw: str, expected: FinishReason) -> None:
        """Each Gemini finishReason maps to its unified finish reason and is kept raw."""
        view = CODEC.parse_response(_body(_response([{"text": "x"}], raw)))
        assert (view.finish_reason, view.raw_finish_reason) == (expected, raw)

    def test_function_call_with_stop_is_tool_calls(self) -> None:
        """A STOP answer carrying a functionCall finishes with tool-calls."""
        view = CODEC.parse_response(
            _body(
                _response(
                    [
                        {"text": "Sure."},
                        {"functionCall": {"name": "f", "args": {"b": 1, "a": [True]}}},
                    ]
                )
            )
        )
        assert view.finish_reason is FinishReason.TOOL_CALLS
        assert (view.text, view.tool_calls[0].arguments_raw) == ("Sure.", '{"b":1,"a":[true]}')

    def test_thought_parts_are_not_reply_text(self) -> None:
        """Parts marked thought: true are skipped when the reply text is assembled."""
        view = CODEC.parse_response(
            _body(_response([{"text": "hmm", "thought": True}, {"text": "Answer"}]))
        )
        assert view.text == "Answer"

    def test_error_body_reads_as_error(self) -> None:
        """A Google error body parses to finish reason error with its status kept."""
        view = CODEC.parse_response(CODEC.error_body(404, "no recorded turn"))
        assert (view.finish_reason, view.raw_finish_reason) == (FinishReason.ERROR, "NOT_FOUND")

    def test_missing_candidates(self) -> None:
        """A response without candidates or a block reason raises WireError naming candidates."""
        with pytest.raises(WireError) as info:
            CODEC.parse_response(_body({"usageMetadata": {}}))
        assert (info.value.provider, info.value.field) == ("gemini", "candidates")

    def test_array_chunk_of_wrong_shape_names_its_index(self) -> None:
        """A JSON-array stream with a non-object chunk raises WireError naming that chunk."""
        with pytest.raises(WireError) as info:
            CODEC.parse_response(_body([_response([{"text": "a"}], None), 7]))
        assert info.value.field == "body[1]"

    def test_empty_json_array_is_a_cut_stream(self) -> None:
        """An empty JSON-array stream never said why it ended and reads as error."""
        view = CODEC.parse_response(b"[]")
        assert (view.text, view.finish_reason) == ("", FinishReason.ERROR)


class TestParseEvents:
    def test_last_finish_reason_wins(self) -> None:
        """When several chunks carry finishReason, the last one is the stream's."""
        events = [
            make_event(json.dumps(_response([{"text": "a"}], "STOP"))),
            make_event(json.dumps(_response([{"text": "b"}], "MAX_TOKENS"))),
        ]
        view = CODEC.parse_events(events)
        assert (view.text, view.finish_reason, view.raw_finish_reason) == (
            "ab",
            FinishReason.LENGTH,
            "MAX_TOKENS",
        )

    def test_stream_without_finish_reason_is_an_error(self) -> None:
        """A stream that never sent a finishReason was cut short and reads as error."""
        view = CODEC.parse_events([make_event(json.dumps(_response([{"text": "par"}], None)))])
        assert (view.text, view.finish_reason) == ("par", FinishReason.ERROR)

    def test_error_chunk_mid_stream(self) -> None:
        """An error object arriving as a stream chunk ends the view with finish reason error."""
        events = [
            make_event(json.dumps(_response([{"text": "Hel"}], None))),
            make_event(
                json.dumps(
                    {"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}}
                )
            ),
        ]
        view = CODEC.parse_events(events)
        assert (view.text, view.finish_reason, view.raw_finish_reason) == (
            "Hel",
            FinishReason.ERROR,
            "UNAVAILABLE",
        )

    def test_usage_only_chunk_is_fine(self) -> None:
        """A chunk with no candidates (usage metadata only) changes nothing."""
        events = [
            make_event(json.dumps(_response([{"text": "hi"}]))),
            make_event('{"usageMetadata": {"totalTokenCount": 3}}'),
        ]
        assert CODEC.parse_events(events).finish_reason is FinishReason.STOP

    def test_non_json_data(self) -> None:
        """An event whose data is not JSON raises WireError naming the event."""
        with pytest.raises(WireError) as info:
            CODEC.parse_events([make_event("{oops")])
        assert (info.value.provider, info.value.field) == ("gemini", "events[0].data")

    def test_sse_and_array_forms_agree(self) -> None:
        """The same chunks read as SSE events or as a JSON array give the same view."""
        chunks = [
            _response([{"text": "a"}], None),
            _response([{"functionCall": {"name": "f"}}], "STOP"),
        ]
        from_events = CODEC.parse_events([make_event(json.dumps(c)) for c in chunks])
        assert CODEC.parse_response(_body(chunks)) == from_events
        assert from_events.finish_reason is FinishReason.TOOL_CALLS


class TestRewriteToolResults:
    def test_dict_result_is_used_as_is(self) -> None:
        """A mocked dict replaces functionResponse.response and keeps name and id."""
        out = CODEC.rewrite_tool_results(_body(CONVERSATION), {"book": {"status": "confirmed"}})
        part = json.loads(out)["contents"][2]["parts"][1]
        assert part == {
            "functionResponse": {"id": "c2", "name": "book", "response": {"status": "confirmed"}}
        }

    @pytest.mark.parametrize("value", ["done ✓", 42, [1, 2], None])
    def test_non_dict_result_is_wrapped(self, value: Any) -> None:
        """A mocked value that is not a dict becomes {"result": value}."""
        out = CODEC.rewrite_tool_results(_body(CONVERSATION), {"search": value})
        assert json.loads(out)["contents"][2]["parts"][0]["functionResponse"]["response"] == {
            "result": value
        }

    def test_snake_case_parts_are_rewritten(self) -> None:
        """function_response parts (snake_case) are rewritten like camelCase ones."""
        body = _body(
            {"contents": [{"parts": [{"function_response": {"name": "f", "response": {"a": 1}}}]}]}
        )
        out = CODEC.rewrite_tool_results(body, {"f": {"a": 2}})
        assert (
            out
            == b'{"contents":[{"parts":[{"function_response":{"name":"f","response":{"a":2}}}]}]}'
        )

    def test_rewrite_is_deterministic_and_idempotent(self) -> None:
        """The same input gives the same bytes, and rewriting the result again changes nothing."""
        body = json.dumps(CONVERSATION, indent=2).encode()
        first = CODEC.rewrite_tool_results(body, {"search": "mocked"})
        assert CODEC.rewrite_tool_results(body, {"search": "mocked"}) == first
        assert CODEC.rewrite_tool_results(first, {"search": "mocked"}) is first
        assert first.startswith(b'{"contents":[{"role":"user","parts":[{"text":"Book it"}]}')

    @pytest.mark.parametrize(
        "results",
        [
            pytest.param({}, id="no-mocks"),
            pytest.param({"unrelated": "x"}, id="other-tool"),
            pytest.param({"search": "real"}, id="same-content"),
        ],
    )
    def test_no_change_returns_the_original_bytes(self, results: dict[str, Any]) -> None:
        """When nothing is replaced the very same bytes object comes back."""
        body = json.dumps(CONVERSATION, indent=3).encode()
        assert CODEC.rewrite_tool_results(body, results) is body

    def test_non_json_body(self) -> None:
        """Rewriting a body that is not JSON raises WireError."""
        with pytest.raises(WireError, match="gemini: body"):
            CODEC.rewrite_tool_results(b"nope", {"search": "x"})


class TestErrorBody:
    @pytest.mark.parametrize(
        ("status", "name"),
        [
            (400, "INVALID_ARGUMENT"),
            (404, "NOT_FOUND"),
            (409, "ABORTED"),
            (418, "INVALID_ARGUMENT"),
            (429, "RESOURCE_EXHAUSTED"),
            (500, "INTERNAL"),
            (503, "UNAVAILABLE"),
        ],
    )
    def test_error_shape(self, status: int, name: str) -> None:
        """The body is Google's error JSON with the code and status name for the HTTP status."""
        body = json.loads(CODEC.error_body(status, "flowproof: no recorded turn matches"))
        assert body == {
            "error": {
                "code": status,
                "message": "flowproof: no recorded turn matches",
                "status": name,
            }
        }


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
_parts = st.fixed_dictionaries(
    {},
    optional={
        "text": st.text(max_size=5) | _json,
        "thought": _json,
        "functionCall": st.fixed_dictionaries(
            {"name": st.sampled_from(["search", "f"]) | _json},
            optional={"args": _json, "id": _json},
        )
        | _json,
        "function_call": _json,
        "functionResponse": st.fixed_dictionaries(
            {"name": st.sampled_from(["search", "f"]) | _json},
            optional={"response": _json, "id": _json},
        )
        | _json,
        "function_response": _json,
    },
)
_content = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from(["user", "model"]) | _json,
        "parts": st.lists(_parts | _json, max_size=3) | _json,
    },
)
_requests = st.fixed_dictionaries(
    {"contents": st.lists(_content | _json, max_size=3) | _json},
    optional={
        "systemInstruction": _content | _json,
        "system_instruction": _json,
        "tools": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "functionDeclarations": st.lists(_json, max_size=2) | _json,
                    "function_declarations": _json,
                    "googleSearch": _json,
                },
            )
            | _json,
            max_size=2,
        )
        | _json,
        "model": _json,
    },
)
_chunks = st.fixed_dictionaries(
    {},
    optional={
        "candidates": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "content": _content | _json,
                    "finishReason": st.sampled_from(["STOP", "SAFETY"]) | _json,
                },
            )
            | _json,
            max_size=2,
        )
        | _json,
        "promptFeedback": st.fixed_dictionaries({}, optional={"blockReason": _json}) | _json,
        "modelVersion": _json,
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
            assert e.provider == "gemini"
        else:
            assert view.provider == "gemini"

    @_fuzz
    @given(_json | _chunks | st.lists(_chunks | _json, max_size=3))
    def test_parse_response(self, value: Any) -> None:
        """parse_response returns a view or raises WireError for any JSON value, arrays included."""
        try:
            view = CODEC.parse_response(json.dumps(value).encode())
        except WireError as e:
            assert e.provider == "gemini"
        else:
            assert isinstance(view.finish_reason, FinishReason)

    @_fuzz
    @given(st.lists(_chunks | _json, max_size=5))
    def test_parse_events(self, payloads: list[Any]) -> None:
        """parse_events returns a view or raises WireError for any sequence of JSON chunks."""
        try:
            view = CODEC.parse_events([make_event(json.dumps(p)) for p in payloads])
        except WireError as e:
            assert e.provider == "gemini"
        else:
            assert all(isinstance(c.name, str) for c in view.tool_calls)

    @_fuzz
    @given(_requests | _json, _json)
    def test_rewrite_tool_results(self, value: Any, mocked: Any) -> None:
        """rewrite_tool_results returns bytes or raises WireError for any body and mock value."""
        body = json.dumps(value).encode()
        try:
            out = CODEC.rewrite_tool_results(body, {"search": mocked, "f": "x"})
        except WireError as e:
            assert e.provider == "gemini"
        else:
            assert out is body or json.loads(out) != value
