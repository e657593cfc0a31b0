"""Tests for flowproof.compare: drift classes, rendering, handlers and the span attribute."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace

from flowproof.compare import (
    CassetteDriftError,
    CompareResult,
    classify_text,
    compare_responses,
    record_on_span,
    report_comparison,
)
from flowproof.errors import EXIT_DRIFT, FlowFailure
from flowproof.model import FinishReason, ResponseView, ToolCall


def booking(args: str = '{"flight":{"id":"KQ311"},"seats":2}') -> ResponseView:
    return ResponseView(
        "Booking now.", (ToolCall("create_booking", args),), FinishReason.TOOL_CALLS, "tool_use"
    )


def text(
    body: str, finish: FinishReason = FinishReason.STOP, raw: str | None = "stop"
) -> ResponseView:
    return ResponseView(body, (), finish, raw)


class TestCompareResponses:
    def test_identical_responses_are_exact(self) -> None:
        """The same response is equal with text status exact."""
        result = compare_responses(booking(), booking(), 2)
        assert result.equal and result.tool_calls_equal
        assert result.text.status == "exact"
        assert result.turn_index == 2
        assert result.recorded_tool_calls == (
            ("create_booking", '{"flight":{"id":"KQ311"},"seats":2}'),
        )

    def test_reordered_argument_keys_are_not_drift(self) -> None:
        """Arguments with reordered keys and other whitespace compare as canonical JSON."""
        live = booking('{ "seats": 2, "flight": { "id": "KQ311" } }')
        result = compare_responses(booking(), live, 0)
        assert result.equal and result.tool_calls_equal

    def test_changed_argument_is_drift(self) -> None:
        """A changed argument value is a different trajectory."""
        result = compare_responses(booking(), booking('{"flight":{"id":"KQ999"},"seats":2}'), 1)
        assert not result.equal and not result.tool_calls_equal
        assert (
            'call 1: recorded create_booking {"flight":{"id":"KQ311"},"seats":2}' in result.render()
        )

    def test_different_tool_is_drift(self) -> None:
        """Calling another tool is drift and the render names both calls."""
        live = ResponseView("", (ToolCall("cancel_booking", "{}"),), FinishReason.TOOL_CALLS)
        result = compare_responses(booking(), live, 3)
        assert not result.equal
        assert result.render().splitlines()[:3] == [
            "turn 3: the live response drifted from the recording",
            "  tool calls differ:",
            '    call 1: recorded create_booking {"flight":{"id":"KQ311"},"seats":2},'
            " live cancel_booking {}",
        ]

    def test_missing_call_renders_no_call(self) -> None:
        """A live response with fewer calls shows "(no call)" on the missing side."""
        rec = ResponseView("", (ToolCall("a", "{}"), ToolCall("b", "{}")), FinishReason.TOOL_CALLS)
        live = ResponseView("", (ToolCall("a", "{}"),), FinishReason.TOOL_CALLS)
        rendered = compare_responses(rec, live, 0).render()
        assert "call 2: recorded b {}, live (no call)" in rendered
        assert "call 1:" not in rendered

    def test_reworded_prose_is_different(self) -> None:
        """Reworded text is classified different and makes the result unequal."""
        result = compare_responses(text("You are booked."), text("Your flight is booked."), 0)
        assert result.text.status == "different"
        assert not result.equal
        assert 'recorded: "You are booked."' in result.render()
        assert 'live:     "Your flight is booked."' in result.render()

    def test_whitespace_and_case_are_normalized(self) -> None:
        """Text differing only in whitespace and case is normalized and equal."""
        result = compare_responses(text("You are  booked.\n"), text("  you are BOOKED."), 0)
        assert result.text.status == "normalized"
        assert result.equal
        assert (
            result.render() == "turn 0: the live response matches the recording (text: normalized)"
        )

    def test_changed_finish_reason_is_drift(self) -> None:
        """A different unified finish reason is drift even with the same text."""
        result = compare_responses(text("Hi"), text("Hi", FinishReason.LENGTH, "length"), 4)
        assert not result.equal and not result.finish_reason.equal
        assert "  finish reason: recorded stop, live length" in result.render().splitlines()

    def test_raw_finish_reason_is_not_compared(self) -> None:
        """Different raw reasons behind the same unified reason are not drift."""
        result = compare_responses(text("Hi", raw="end_turn"), text("Hi", raw="stop_sequence"), 0)
        assert result.equal


class TestClassifyText:
    @pytest.mark.parametrize(
        ("a", "b", "status"),
        [
            pytest.param("a b", "a b", "exact", id="exact"),
            pytest.param("", "", "exact", id="both-empty"),
            pytest.param(" A\tb\n", "a b", "normalized", id="tabs-case"),
            pytest.param("ab", "a b", "different", id="split-word"),
            pytest.param("a b.", "a b", "different", id="punctuation"),
        ],
    )
    def test_classes(self, a: str, b: str, status: str) -> None:
        """Texts are exact, normalized after trim/collapse/lowercase, or different."""
        assert classify_text(a, b).status == status


class TestToJson:
    def test_text_status_present_when_equal(self) -> None:
        """to_json always carries text.status, also for an equal result."""
        data = compare_responses(booking(), booking(), 5).to_json()
        assert data["equal"] is True
        assert data["text"]["status"] == "exact"
        assert data["turn_index"] == 5
        assert data["finish_reason"] == {
            "equal": True,
            "recorded": "tool-calls",
            "live": "tool-calls",
        }
        assert data["tool_calls"]["recorded"] == [
            {"name": "create_booking", "arguments": '{"flight":{"id":"KQ311"},"seats":2}'}
        ]


class TestReportComparison:
    def test_drift_without_handler_raises(self) -> None:
        """Without a handler an unequal result raises CassetteDriftError with exit code 4."""
        result = compare_responses(text("a"), text("b"), 1)
        with pytest.raises(CassetteDriftError) as info:
            report_comparison(result, None)
        assert info.value.result is result
        assert info.value.exit_code == EXIT_DRIFT
        assert isinstance(info.value, FlowFailure)
        assert str(info.value) == result.render()

    def test_equal_without_handler_returns(self) -> None:
        """An equal result with no handler returns quietly."""
        result = compare_responses(text("a"), text("A"), 0)
        assert report_comparison(result) is None

    def test_handler_receives_results_instead_of_raising(self) -> None:
        """A handler gets every result, drift or not, and nothing is raised."""
        seen: list[CompareResult] = []
        drift = compare_responses(text("a"), text("b"), 1)
        same = compare_responses(text("a"), text("a"), 2)
        report_comparison(drift, seen.append)
        report_comparison(same, seen.append)
        assert seen == [drift, same]


class FakeSpan:
    def __init__(self, recording: bool) -> None:
        self.recording = recording
        self.attributes: dict[str, Any] = {}

    def is_recording(self) -> bool:
        return self.recording

    def set_attribute(self, key: str, value: Any) -> None:
        self.attributes[key] = value


class TestSpan:
    def test_default_span_is_a_noop(self) -> None:
        """With only the API installed the current span is non-recording and nothing happens."""
        assert not trace.get_current_span().is_recording()
        record_on_span(compare_responses(text("a"), text("b"), 0))

    def test_recording_span_gets_attributes(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A recording span receives compare_equal and compare_text_status."""
        span = FakeSpan(recording=True)
        monkeypatch.setattr(trace, "get_current_span", lambda: span)
        seen: list[CompareResult] = []
        report_comparison(compare_responses(text("a"), text(" A"), 0), seen.append)
        assert span.attributes == {
            "flowproof.compare_equal": True,
            "flowproof.compare_text_status": "normalized",
        }

    def test_non_recording_fake_span_is_untouched(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A span that is not recording gets no attributes."""
        span = FakeSpan(recording=False)
        monkeypatch.setattr(trace, "get_current_span", lambda: span)
        record_on_span(compare_responses(text("a"), text("b"), 0))
        assert span.attributes == {}

    def test_missing_opentelemetry_is_a_noop(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """When opentelemetry cannot be imported record_on_span does nothing and does not raise."""
        import sys

        monkeypatch.setitem(sys.modules, "opentelemetry", None)
        record_on_span(compare_responses(text("a"), text("b"), 0))
        with pytest.raises(ImportError):
            __import__("opentelemetry")


class TestLongValues:
    def test_long_texts_are_cut_around_their_difference(self) -> None:
        """Long texts differing late show the differing words, not two identical openings."""
        lead = "Here is your itinerary. " * 10
        result = compare_responses(
            text(lead + "Flight KQ311 departs at 9:00."),
            text(lead + "Flight KQ999 departs at 9:00."),
            2,
        )
        lines = result.render().splitlines()
        assert (
            lines[2]
            == '    recorded: "…erary. Here is your itinerary. Flight KQ311 departs at 9:00."'
        )
        assert (
            lines[3]
            == '    live:     "…erary. Here is your itinerary. Flight KQ999 departs at 9:00."'
        )

    def test_long_arguments_are_cut_around_their_difference(self) -> None:
        """Long arguments differing late show the differing value on both sides."""
        padding = ",".join(f'"k{i}":"value number {i}"' for i in range(12))
        rec = booking("{" + padding + ',"z":"KQ311"}')
        live = booking("{" + padding + ',"z":"KQ999"}')
        line = compare_responses(rec, live, 0).render().splitlines()[2]
        assert '"z":"KQ311"}, live create_booking …' in line
        assert line.endswith('"z":"KQ999"}')
        assert len(line) < 2 * 130 + 60

    def test_name_change_with_long_equal_arguments_shows_their_start(self) -> None:
        """Calls that differ only by name show their equal arguments from the start."""
        args = '{"note":"' + "x" * 300 + '"}'
        rec = ResponseView("", (ToolCall("a", args),), FinishReason.TOOL_CALLS)
        live = ResponseView("", (ToolCall("b", args),), FinishReason.TOOL_CALLS)
        line = compare_responses(rec, live, 0).render().splitlines()[2]
        assert line.startswith('    call 1: recorded a {"note":"xxx')


_TEXTS = st.text(max_size=400) | st.sampled_from(["", " ", "Booked.", "booked.  "])
_CALL_LISTS = st.lists(
    st.builds(ToolCall, st.sampled_from(["a", "b"]), st.text(max_size=300) | st.just('{"x": 1}')),
    max_size=3,
).map(tuple)
_VIEWS = st.builds(ResponseView, _TEXTS, _CALL_LISTS, st.sampled_from(list(FinishReason)))


class TestCompareProperties:
    @settings(max_examples=200, deadline=None)
    @given(_VIEWS, _VIEWS)
    def test_compare_is_symmetric_and_renders_bounded(
        self, a: ResponseView, b: ResponseView
    ) -> None:
        """Swapping the sides keeps every verdict, and the report stays a few short lines."""
        ab, ba = compare_responses(a, b, 0), compare_responses(b, a, 0)
        assert (ab.equal, ab.tool_calls_equal, ab.text.status) == (
            ba.equal,
            ba.tool_calls_equal,
            ba.text.status,
        )
        assert ab.finish_reason.equal == ba.finish_reason.equal
        rendered = ab.render()
        assert len(rendered) < 2000
        assert compare_responses(a, a, 0).equal
