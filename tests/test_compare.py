"""Tests for flowproof.compare: the verdict per pair, unpaired results, the span."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace

from flowproof.compare import (
    CompareResult,
    Difference,
    RequestContext,
    classify_text,
    compare_responses,
    extra_result,
    missing_result,
    record_on_span,
)
from flowproof.divergence import ABSENT
from flowproof.turns import FinishReason, ResponseView, ToolCall


def booking(
    args: str = '{"flight":{"id":"KQ311"},"seats":2}', call_id: str = "call_1"
) -> ResponseView:
    return ResponseView(
        "Booking now.",
        (ToolCall("create_booking", args, call_id),),
        FinishReason.TOOL_CALLS,
        "tool_use",
    )


def text(
    body: str, finish: FinishReason = FinishReason.STOP, raw: str | None = "stop"
) -> ResponseView:
    return ResponseView(body, (), finish, raw)


def compare(recorded: ResponseView, live: ResponseView, turn: int = 0) -> CompareResult:
    return compare_responses(recorded, live, turn=turn, live_call=turn, thread=0, depth=2)


class TestCompareResponses:
    def test_identical_responses_are_exact(self) -> None:
        """The same response is equal with text status exact and no differences."""
        result = compare(booking(), booking(), 2)
        assert result.equal and result.tool_calls_equal
        assert result.kind == "paired"
        assert result.text.status == "exact"
        assert result.turn == 2
        assert result.differences == ()
        assert result.recorded_tool_calls == (
            ("create_booking", '{"flight":{"id":"KQ311"},"seats":2}'),
        )

    def test_live_like_response_is_equal(self) -> None:
        """A fresh call id, reordered keys with other spacing, and case/whitespace prose: equal."""
        live = ResponseView(
            "  booking NOW.\n",
            (
                ToolCall(
                    "create_booking", '{ "seats": 2, "flight": { "id": "KQ311" } }', "call_zz9"
                ),
            ),
            FinishReason.TOOL_CALLS,
            "tool_calls",
        )
        result = compare(booking(), live)
        assert result.equal and result.tool_calls_equal
        assert result.text.status == "normalized"
        assert result.differences == ()

    def test_changed_argument_names_the_path_and_both_values(self) -> None:
        """A changed argument value is a different trajectory; the path runs into the arguments."""
        result = compare(booking(), booking('{"seats":2,"flight":{"id":"KQ999"}}'), 1)
        assert not result.equal and not result.tool_calls_equal
        assert result.differences == (
            Difference("tool_calls.0.arguments.flight.id", "KQ311", "KQ999"),
        )
        assert "- tool_calls.0.arguments.flight.id: recorded KQ311, live KQ999" in (
            result.render().splitlines()
        )

    def test_added_argument_shows_the_absent_side(self) -> None:
        """An argument only the live call has reads `recorded (absent)`."""
        result = compare(booking(), booking('{"flight":{"id":"KQ311"},"seats":2,"vip":true}'))
        assert result.differences == (Difference("tool_calls.0.arguments.vip", ABSENT, True),)
        assert (
            result.differences[0].render()
            == "tool_calls.0.arguments.vip: recorded (absent), live true"
        )

    def test_different_tool_shows_both_whole_calls(self) -> None:
        """Calling another tool is drift and names both calls, not an argument diff between them."""
        live = ResponseView("", (ToolCall("cancel_booking", "{}"),), FinishReason.TOOL_CALLS)
        result = compare(booking(), live, 3)
        assert not result.equal
        assert result.render().splitlines()[:2] == [
            "turn 3 (thread 0, depth 2): the live response differs from the recording",
            (
                '- tool_calls.0: recorded {"name":"create_booking","arguments":{"flight":{"id":"KQ311"},'
                '"seats":2}}, live {"name":"cancel_booking","arguments":{}}'
            ),
        ]

    def test_missing_call_is_absent_on_the_live_side(self) -> None:
        """A live response with fewer calls shows the dropped call against (absent)."""
        rec = ResponseView("", (ToolCall("a", "{}"), ToolCall("b", "{}")), FinishReason.TOOL_CALLS)
        live = ResponseView("", (ToolCall("a", "{}"),), FinishReason.TOOL_CALLS)
        result = compare(rec, live)
        assert [d.render() for d in result.differences] == [
            'tool_calls.1: recorded {"name":"b","arguments":{}}, live (absent)'
        ]

    def test_unparsable_arguments_show_the_whole_strings(self) -> None:
        """Arguments that are not JSON are compared raw and shown whole."""
        result = compare(booking("{oops"), booking("{oops!"))
        assert result.differences == (Difference("tool_calls.0.arguments", "{oops", "{oops!"),)

    def test_reworded_prose_is_different(self) -> None:
        """Reworded text is classified different, makes the result unequal and shows both texts."""
        result = compare(text("You are booked."), text("Your flight is booked."))
        assert result.text.status == "different"
        assert not result.equal
        assert result.differences == (
            Difference("text", "You are booked.", "Your flight is booked."),
        )
        assert '- text: recorded "You are booked.", live "Your flight is booked."' in (
            result.render().splitlines()
        )

    def test_whitespace_and_case_are_normalized(self) -> None:
        """Text differing only in whitespace and case is normalized and equal."""
        result = compare(text("You are  booked.\n"), text("  you are BOOKED."))
        assert result.text.status == "normalized"
        assert result.equal
        assert result.render() == (
            "turn 0 (thread 0, depth 2): equal (finish reason stop, text normalized)"
        )

    def test_changed_finish_reason_is_drift(self) -> None:
        """A different unified finish reason is drift even with the same text."""
        result = compare(text("Hi"), text("Hi", FinishReason.LENGTH, "length"), 4)
        assert not result.equal and not result.finish_reason.equal
        assert result.differences == (Difference("finish_reason", "stop", "length"),)
        lines = result.render().splitlines()
        assert "- finish_reason: recorded stop, live length" in lines
        assert "- text: exact" in lines

    def test_raw_finish_reason_is_not_compared(self) -> None:
        """Different raw reasons behind the same unified reason are not drift."""
        assert compare(text("Hi", raw="end_turn"), text("Hi", raw="stop_sequence")).equal

    def test_long_texts_are_cut_around_their_difference(self) -> None:
        """Long texts differing late show the differing words, not two identical openings."""
        lead = "Here is your itinerary. " * 10
        result = compare(
            text(lead + "Flight KQ311 departs at 9:00."),
            text(lead + "Flight KQ999 departs at 9:00."),
        )
        line = result.differences[0].render()
        assert "Flight KQ311 departs" in line and "Flight KQ999 departs" in line
        assert line.count("…") == 2  # both cut at the start; the ends fit


class TestUnpairedResults:
    def test_extra_is_never_equal_and_shows_the_live_side(self) -> None:
        """An extra result carries the live call only; text.status is None and equal is False."""
        result = extra_result(
            booking(),
            live_call=6,
            thread=0,
            depth=6,
            reason="thread 0 has no recorded turn at depth 6",
        )
        assert (result.kind, result.equal, result.turn, result.live_call) == (
            "extra",
            False,
            None,
            6,
        )
        assert result.text.status is None and result.text.recorded is None
        assert result.finish_reason.recorded is None and not result.finish_reason.equal
        assert result.render().splitlines() == [
            "live call 6 (thread 0, depth 6): extra — thread 0 has no recorded turn at depth 6",
            '- live: tool call create_booking {"flight":{"id":"KQ311"},"seats":2}',
            '- live: text "Booking now."',
        ]

    def test_missing_shows_the_recorded_side(self) -> None:
        """A missing result carries the recorded turn only."""
        result = missing_result(text("Done."), turn=4, thread=1, depth=3, reason="never reached")
        assert (result.kind, result.equal, result.turn, result.live_call) == (
            "missing",
            False,
            4,
            None,
        )
        assert result.to_json()["finish_reason"] == {
            "equal": False,
            "recorded": "stop",
            "live": None,
        }
        assert result.render().splitlines() == [
            "turn 4 (thread 1, depth 3): missing — never reached",
            '- recorded: text "Done."',
        ]


class TestToJson:
    def test_every_field_for_an_equal_result(self) -> None:
        """to_json carries kind, place, verdict, finish reasons and text.status, also when equal."""
        data = compare(booking(), booking(), 5).to_json()
        assert json.loads(json.dumps(data)) == data
        assert data["kind"] == "paired" and data["equal"] is True
        assert (data["turn"], data["live_call"], data["thread"], data["depth"]) == (5, 5, 0, 2)
        assert data["text"]["status"] == "exact"
        assert data["finish_reason"] == {
            "equal": True,
            "recorded": "tool-calls",
            "live": "tool-calls",
        }
        assert data["tool_calls"]["recorded"] == [
            {"name": "create_booking", "arguments": '{"flight":{"id":"KQ311"},"seats":2}'}
        ]
        assert data["differences"] == [] and data["context"] is None

    def test_differences_are_structured(self) -> None:
        """A difference is path/recorded/live data; an absent side is left out."""
        data = compare(booking(), booking('{"flight":{"id":"KQ311"}}')).to_json()
        assert data["differences"] == [{"path": "tool_calls.0.arguments.seats", "recorded": 2}]


def drifted() -> list[CompareResult]:
    context = RequestContext(thread=0, turn=0, envelope=("you added a tool: refund",), fields=())
    return [
        compare_responses(
            booking(), booking(), turn=0, live_call=0, thread=0, depth=2, context=context
        ),
        compare_responses(text("Hi"), text("hi "), turn=1, live_call=1, thread=1, depth=2),
        compare_responses(
            booking(),
            booking('{"flight":{"id":"KQ999"},"seats":2}'),
            turn=2,
            live_call=2,
            thread=0,
            depth=4,
        ),
        extra_result(text("More?"), live_call=3, thread=0, depth=6, reason="no recorded turn here"),
        missing_result(text("Bye."), turn=3, thread=0, depth=6, reason="never reached"),
    ]


class TestFromJson:
    def test_every_kind_round_trips(self) -> None:
        """from_json rebuilds exactly what to_json wrote, through real JSON text."""
        for result in drifted():
            again = CompareResult.from_json(json.loads(json.dumps(result.to_json())))
            assert again == result
            assert again.render() == result.render()

    def test_a_foreign_kind_is_refused(self) -> None:
        """A dict with an unknown kind is not silently accepted."""
        data = compare(text("a"), text("a")).to_json()
        data["kind"] = "replayed"
        with pytest.raises(ValueError, match="unknown compare result kind"):
            CompareResult.from_json(data)


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
        record_on_span(compare(text("a"), text("b")))

    def test_recording_span_gets_attributes(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A recording span receives compare_equal and compare_text_status."""
        span = FakeSpan(recording=True)
        monkeypatch.setattr(trace, "get_current_span", lambda: span)
        record_on_span(compare(text("a"), text(" A")))
        assert span.attributes == {
            "flowproof.compare_equal": True,
            "flowproof.compare_text_status": "normalized",
        }

    def test_unpaired_result_sets_only_compare_equal(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """An extra result has no text class: only compare_equal (False) is set."""
        span = FakeSpan(recording=True)
        monkeypatch.setattr(trace, "get_current_span", lambda: span)
        record_on_span(extra_result(text("x"), live_call=0, thread=0, depth=2, reason="r"))
        assert span.attributes == {"flowproof.compare_equal": False}

    def test_non_recording_fake_span_is_untouched(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A span that is not recording gets no attributes."""
        span = FakeSpan(recording=False)
        monkeypatch.setattr(trace, "get_current_span", lambda: span)
        record_on_span(compare(text("a"), text("b")))
        assert span.attributes == {}

    def test_missing_opentelemetry_is_a_noop(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """When opentelemetry cannot be imported record_on_span does nothing and does not raise."""
        import sys

        monkeypatch.setitem(sys.modules, "opentelemetry", None)
        record_on_span(compare(text("a"), text("b")))
        with pytest.raises(ImportError):
            __import__("opentelemetry")


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
        """Swapping sides keeps every verdict; differences exist exactly when unequal."""
        ab, ba = compare(a, b), compare(b, a)
        assert (ab.equal, ab.tool_calls_equal, ab.text.status) == (
            ba.equal,
            ba.tool_calls_equal,
            ba.text.status,
        )
        assert ab.finish_reason.equal == ba.finish_reason.equal
        assert [d.path for d in ab.differences] == [d.path for d in ba.differences]
        assert ab.equal == (not ab.differences)
        assert len(ab.render()) < 4000
        assert compare(a, a).equal
