"""The normalized model shared by every part."""

from __future__ import annotations

from flowproof.turns import FinishReason, ToolCall, parse_arguments


class TestToolCall:
    def test_arguments_are_parsed_from_the_raw_wire_string(self) -> None:
        """The raw argument string is kept exactly and parsed once."""
        call = ToolCall("book", '{"flight": {"id": "KQ311"}}', "call_1")
        assert call.arguments == {"flight": {"id": "KQ311"}}
        assert call.is_json
        assert call.arguments_raw == '{"flight": {"id": "KQ311"}}'

    def test_invalid_json_is_marked_not_json(self) -> None:
        """Arguments that are not JSON parse to None and say so."""
        call = ToolCall("book", "{flight: KQ311")
        assert call.arguments is None
        assert not call.is_json
        assert call.canonical_arguments() == "{flight: KQ311"

    def test_empty_arguments_mean_an_empty_object(self) -> None:
        """An empty argument string (no deltas arrived) reads as an empty object."""
        assert ToolCall("ping", "").arguments == {}

    def test_canonical_arguments_sort_keys(self) -> None:
        """Canonical arguments ignore key order and whitespace, so reordering is not drift."""
        a = ToolCall("t", '{"b": 1, "a": [1, 2]}')
        b = ToolCall("t", '{"a":[1,2],"b":1}')
        assert a.canonical_arguments() == b.canonical_arguments() == '{"a":[1,2],"b":1}'

    def test_equality_is_on_the_wire_fields(self) -> None:
        """Two calls are equal when name, raw arguments and call id are equal."""
        assert ToolCall("t", "{}", "c") == ToolCall("t", "{}", "c")
        assert ToolCall("t", "{}", "c") != ToolCall("t", "{ }", "c")


class TestHelpers:
    def test_parse_arguments_returns_none_for_non_json(self) -> None:
        """parse_arguments never raises on bad input."""
        assert parse_arguments("[1, 2]") == [1, 2]
        assert parse_arguments("nope") is None

    def test_finish_reasons_are_the_unified_labels(self) -> None:
        """The unified finish reasons are the labels compare and reports print."""
        assert [r.value for r in FinishReason] == [
            "stop",
            "tool-calls",
            "length",
            "content-filter",
            "error",
            "other",
        ]


class TestHostileArguments:
    def test_absurdly_nested_arguments_are_not_json(self) -> None:
        """Arguments nested past the recursion limit read as not-JSON instead of crashing."""
        call = ToolCall("t", "[" * 100_000)
        assert call.arguments is None and not call.is_json
        assert parse_arguments("[" * 100_000) is None
