"""Tests for flowproof.assertions: subsequence, strict, guard calls, reply and every matcher."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowproof.assertions import MISMATCH_KINDS, AssertionResult, check_clause, describe_assertion, evaluate
from flowproof.errors import SpecError
from flowproof.spec import parse_tool_line, resolve_variables
from flowproof.spec.types import (
    AgentSpec,
    Clause,
    FlowSpec,
    Location,
    Matcher,
    PromptStep,
    ReplyAssertion,
    Step,
    ToolCallAssertion,
)
from flowproof.trajectory import Trajectory, build_trajectory
from flowproof.turns import FinishReason, RequestView, ResponseView, ToolCall, Turn

LOC = Location("booking.flow.yaml", 7, 5)
SYSTEM = "You are a booking assistant."


def clause(path: str, matcher: Matcher, value: str | None = None) -> Clause:
    pattern = re.compile(value) if matcher is Matcher.MATCHES and value is not None else None
    return Clause(path, tuple(path.split(".")), matcher, value, pattern, LOC)


def call_step(tool: str, *clauses: Clause, negated: bool = False) -> ToolCallAssertion:
    return ToolCallAssertion(tool, clauses, negated, f"{tool}", LOC)


def no_call(tool: str, *clauses: Clause) -> ToolCallAssertion:
    return call_step(tool, *clauses, negated=True)


def reply_step(text: str) -> ReplyAssertion:
    return ReplyAssertion(text, f"reply contains {text}", LOC)


def make_spec(*steps: Step, strict: bool = False) -> FlowSpec:
    agent = AgentSpec("python agent.py", None, (), 30.0, None, "proxy", LOC)
    return FlowSpec(
        path=Path("booking.flow.yaml"),
        name="books a flight",
        app="agent",
        agent=agent,
        tools=(),
        mcp=(),
        strict=strict,
        cassette=Path("booking.cassette.json"),
        volatile=(),
        presets=(),
        steps=(PromptStep("Book me a flight", LOC), *steps),
        location=Location("booking.flow.yaml", 1, 1),
    )


def call(name: str, args: object) -> ToolCall:
    return ToolCall(name, args if isinstance(args, str) else json.dumps(args))


def trajectory(*calls: ToolCall, reply: str | None = "You are booked.") -> Trajectory:
    view = RequestView("openai-chat", "gpt-4o", SYSTEM, (), ("user",), (), False, 100)
    turns = [
        Turn(i, view, ResponseView("", (c,), FinishReason.TOOL_CALLS)) for i, c in enumerate(calls)
    ]
    if reply is not None:
        turns.append(Turn(len(turns), view, ResponseView(reply, (), FinishReason.STOP)))
    return build_trajectory(turns)


def run(traj: Trajectory, *steps: Step, strict: bool = False) -> list[AssertionResult]:
    return evaluate(make_spec(*steps, strict=strict), traj)


BOOKING = trajectory(
    call("search_flights", {"destination": "NBO", "date": "2026-12-01"}),
    call("get_weather", {"city": "Nairobi"}),
    call("create_booking", {"flight": {"id": "KQ999"}, "passengers": [{"name": "Casey Jones"}]}),
)


class TestSubsequence:
    def test_listed_calls_in_order_pass_with_unlisted_between(self) -> None:
        """Asserted calls in order pass even with an unlisted call between them."""
        results = run(BOOKING, call_step("search_flights"), call_step("create_booking"))
        assert [r.passed for r in results] == [True, True]
        assert results[1].message == "create_booking: matched call 3 of 3"
        assert results[0].location == LOC

    def test_prompt_steps_yield_no_results(self) -> None:
        """Only assertion steps produce results."""
        assert run(BOOKING) == []

    def test_out_of_order_call_fails_and_says_so(self) -> None:
        """A call that only happened before the previous matched call is reported out of order."""
        results = run(BOOKING, call_step("create_booking"), call_step("search_flights"))
        assert results[0].passed and not results[1].passed
        assert results[1].message == (
            "expected search_flights\n"
            "  search_flights was called out of order: call 1 of 3 matches, but it comes before"
            " create_booking (call 3 of 3), which the previous assertion matched"
        )

    def test_same_tool_twice_needs_two_calls(self) -> None:
        """Two assertions on one tool need two distinct calls of it."""
        results = run(BOOKING, call_step("get_weather"), call_step("get_weather"))
        assert [r.passed for r in results] == [True, False]
        assert "was called out of order" in results[1].message

    def test_repeated_calls_match_in_order(self) -> None:
        """Repeated calls of one tool each satisfy one assertion, in order."""
        traj = trajectory(call("step", {"n": 1}), call("step", {"n": 2}))
        results = run(
            traj,
            call_step("step", clause("n", Matcher.EQUALS, "1")),
            call_step("step", clause("n", Matcher.EQUALS, "2")),
        )
        assert all(r.passed for r in results)

    def test_never_called_lists_the_calls(self) -> None:
        """A tool that was never called is reported with the tools that were, in order."""
        (result,) = run(BOOKING, call_step("cancel_booking"))
        assert not result.passed
        assert result.message == (
            "expected cancel_booking\n"
            "  cancel_booking was never called; the calls were, in order:"
            " search_flights, get_weather, create_booking"
        )

    def test_no_calls_at_all(self) -> None:
        """With no tool calls the message says no tool was called."""
        (result,) = run(trajectory(), call_step("search_flights"))
        assert result.message.endswith("no tool was called at all")

    def test_nearest_call_and_actual_value(self) -> None:
        """A wrong argument names the nearest call and the actual value at the path."""
        (result,) = run(
            BOOKING, call_step("create_booking", clause("flight.id", Matcher.EQUALS, "KQ311"))
        )
        assert not result.passed
        assert result.message == (
            "expected create_booking where flight.id equals KQ311\n"
            "  nearest call: create_booking (call 3 of 3)\n"
            '  flight.id is "KQ999", not "KQ311"'
        )

    def test_nearest_is_the_call_failing_fewest_clauses(self) -> None:
        """Among same-name calls the nearest is the one failing the fewest clauses."""
        traj = trajectory(call("book", {"a": "x", "b": "x"}), call("book", {"a": "1", "b": "x"}))
        (result,) = run(
            traj,
            call_step("book", clause("a", Matcher.EQUALS, "1"), clause("b", Matcher.EQUALS, "2")),
        )
        assert "nearest call: book (call 2 of 2)" in result.message
        assert 'b is "x", not "2"' in result.message
        assert "a is" not in result.message

    def test_later_failures_keep_the_cursor(self) -> None:
        """A failed assertion does not move the cursor, so the next one can still match."""
        results = run(BOOKING, call_step("nope"), call_step("search_flights"))
        assert [r.passed for r in results] == [False, True]

    def test_only_called_before_previous_match_and_not_matching(self) -> None:
        """A tool called only earlier, with other arguments, is reported with its nearest call."""
        (_, result) = run(
            BOOKING,
            call_step("get_weather"),
            call_step("search_flights", clause("destination", Matcher.EQUALS, "LHR")),
        )
        assert not result.passed
        assert (
            "search_flights was only called before get_weather (call 2 of 3),"
            " which the previous assertion matched"
        ) in result.message
        assert 'destination is "NBO", not "LHR"' in result.message

    def test_not_json_arguments(self) -> None:
        """Invalid JSON arguments fail every clause with the raw string shown."""
        traj = trajectory(call("create_booking", '{"flight": '))
        (result,) = run(traj, call_step("create_booking", clause("flight.id", Matcher.EXISTS)))
        assert not result.passed
        assert "not valid JSON" in result.message
        assert '"{\\"flight\\": "' in result.message

    def test_not_json_arguments_still_match_without_clauses(self) -> None:
        """A call with invalid JSON arguments still matches an assertion with no clauses."""
        (result,) = run(trajectory(call("create_booking", "{oops")), call_step("create_booking"))
        assert result.passed


class TestStrict:
    def test_strict_passes_when_every_call_is_listed(self) -> None:
        """Strict passes when the assertions cover every call in order."""
        results = run(
            BOOKING,
            call_step("search_flights"),
            call_step("get_weather"),
            call_step("create_booking"),
            strict=True,
        )
        assert [r.passed for r in results] == [True, True, True, True]
        assert results[-1].step is None

    def test_strict_reports_unlisted_calls(self) -> None:
        """Strict fails and lists each call no assertion matched."""
        results = run(
            BOOKING, call_step("search_flights"), call_step("create_booking"), strict=True
        )
        strict = results[-1]
        assert strict.step is None and not strict.passed
        assert strict.message == (
            "strict: true forbids tool calls no assert_tool_call lists, but the agent made:\n"
            '  - get_weather (call 2 of 3) with {"city": "Nairobi"}'
        )
        assert strict.location == Location("booking.flow.yaml", 1, 1)

    def test_a_strict_failure_points_at_the_strict_line(self, tmp_path: Path) -> None:
        """A loaded spec's strict failure is reported at its `strict:` line, not at 1:1."""
        from flowproof.spec import load_spec

        path = tmp_path / "booking.flow.yaml"
        path.write_text(
            "name: books a flight\nagent:\n  command: python agent.py\n\nstrict: true\n"
            "steps:\n  - prompt: Book me a flight\n  - assert_tool_call: search_flights\n",
            encoding="utf-8",
        )
        *_, strict = evaluate(load_spec(path), BOOKING)
        assert not strict.passed and strict.step is None
        assert (strict.location.line, strict.location.col) == (5, 1)
        assert str(strict.location).endswith("booking.flow.yaml:5:1")

    def test_not_strict_adds_no_result(self) -> None:
        """Without strict there is no flow-level result."""
        results = run(BOOKING, call_step("search_flights"))
        assert len(results) == 1


class TestNoToolCall:
    def test_passes_when_tool_never_called(self) -> None:
        """A tool that was never called passes assert_no_tool_call."""
        (result,) = run(BOOKING, no_call("issue_refund"))
        assert result.passed
        assert result.message == "issue_refund was never called"

    def test_fails_when_tool_called_anywhere(self) -> None:
        """A call of the tool at any position fails the guard."""
        (_, result) = run(BOOKING, call_step("create_booking"), no_call("search_flights"))
        assert not result.passed
        assert result.message == (
            "expected no call to search_flights\n"
            "  but search_flights (call 1 of 3) was made with"
            ' {"destination": "NBO", "date": "2026-12-01"}'
        )

    def test_clauses_narrow_the_guard(self) -> None:
        """With clauses only a call matching all of them fails the guard."""
        traj = trajectory(call("issue_refund", {"status": "denied"}))
        (ok,) = run(traj, no_call("issue_refund", clause("status", Matcher.EQUALS, "approved")))
        (bad,) = run(traj, no_call("issue_refund", clause("status", Matcher.EQUALS, "denied")))
        assert ok.passed and ok.message == "no call to issue_refund where status equals approved"
        assert not bad.passed
        assert "issue_refund (call 1 of 1)" in bad.message

    def test_guard_does_not_move_the_cursor(self) -> None:
        """assert_no_tool_call leaves the subsequence cursor where it was."""
        results = run(BOOKING, no_call("x"), call_step("search_flights"))
        assert [r.passed for r in results] == [True, True]


class TestReply:
    def test_reply_contains(self) -> None:
        """A substring of the reply passes."""
        (result,) = run(BOOKING, reply_step("booked"))
        assert result.passed and result.message == 'the reply contains "booked"'

    def test_reply_missing_text(self) -> None:
        """A reply without the text fails and shows the reply."""
        (result,) = run(BOOKING, reply_step("cancelled"))
        assert not result.passed
        assert result.message == (
            'expected the reply to contain "cancelled"\n  the reply is "You are booked."'
        )

    def test_absent_reply_says_not_replied(self) -> None:
        """An absent reply reads "the agent has not replied" with the tool, never empty text."""
        traj = trajectory(call("create_booking", {}), reply=None)
        (result,) = run(traj, reply_step("booked"))
        assert not result.passed
        assert result.message == (
            'expected the reply to contain "booked"\n'
            "  the agent has not replied (its last turn ended in a tool call to create_booking)"
        )
        assert "empty" not in result.message

    def test_empty_reply_is_present(self) -> None:
        """An empty reply contains the empty string and says "empty text" when it fails."""
        traj = trajectory(reply="")
        assert run(traj, reply_step(""))[0].passed
        assert "the reply is empty text" in run(traj, reply_step("x"))[0].message


def check(args: object, path: str, matcher: Matcher, value: str | None = None) -> tuple[bool, str]:
    result = check_clause(clause(path, matcher, value), call("t", args))
    return result.passed, result.detail


class TestMatchers:
    @pytest.mark.parametrize(
        ("args", "value", "expected"),
        [
            pytest.param({"v": "KQ311"}, "KQ311", True, id="string"),
            pytest.param({"v": "KQ311"}, "kq311", False, id="string-case"),
            pytest.param({"v": 3}, "3", True, id="int"),
            pytest.param({"v": 3}, "4", False, id="int-other"),
            pytest.param({"v": True}, "true", True, id="bool"),
            pytest.param({"v": False}, "true", False, id="bool-other"),
            pytest.param({"v": None}, "null", True, id="null"),
            pytest.param({"v": "3"}, "3", True, id="numeric-string"),
            pytest.param({"v": [1, 2]}, "[1,2]", True, id="list-compact"),
            pytest.param({"v": [1, 2]}, "[1, 2]", True, id="list-spaced"),
            pytest.param({"v": {"a": 1}}, '{"a":1}', True, id="dict"),
            pytest.param({"v": {"a": 1}}, "a", False, id="dict-other"),
        ],
    )
    def test_equals(self, args: object, value: str, expected: bool) -> None:
        """equals compares strings as-is and other values via their JSON text."""
        assert check(args, "v", Matcher.EQUALS, value)[0] is expected

    @pytest.mark.parametrize(
        ("args", "value", "expected"),
        [
            pytest.param({"v": "Casey Jones"}, "Casey", True, id="substring"),
            pytest.param({"v": "Casey Jones"}, "Jordan", False, id="substring-missing"),
            pytest.param({"v": ["a", 3]}, "3", True, id="list-element"),
            pytest.param({"v": ["ab"]}, "a", False, id="list-not-substring"),
            pytest.param({"v": {"seat": "1A"}}, "seat", True, id="dict-key"),
            pytest.param({"v": {"seat": "1A"}}, "1A", False, id="dict-value-is-not-key"),
        ],
    )
    def test_contains(self, args: object, value: str, expected: bool) -> None:
        """contains is substring on strings, element on lists, key on mappings."""
        assert check(args, "v", Matcher.CONTAINS, value)[0] is expected

    def test_matches(self) -> None:
        """matches searches a string, and a non-string's JSON text."""
        assert check({"seat": "12C"}, "seat", Matcher.MATCHES, "[0-9]+[A-F]")[0]
        ok, detail = check({"seat": "12Z"}, "seat", Matcher.MATCHES, "^[0-9]+[A-F]$")
        assert not ok and detail == 'seat is "12Z", which does not match /^[0-9]+[A-F]$/'
        assert check({"n": 42}, "n", Matcher.MATCHES, r"^\d+$")[0]

    def test_matches_compiles_unresolved_pattern(self) -> None:
        """A clause without a compiled pattern is compiled on use; a bad one fails, not raises."""
        good = Clause("v", ("v",), Matcher.MATCHES, "a+", None, LOC)
        bad = Clause("v", ("v",), Matcher.MATCHES, "(", None, LOC)
        assert check_clause(good, call("t", {"v": "caa"})).passed
        result = check_clause(bad, call("t", {"v": "caa"}))
        assert not result.passed and "is invalid" in result.detail

    def test_exists_and_absent(self) -> None:
        """exists passes on a resolvable path and is absent on a missing one."""
        args = {"flight": {"id": "KQ311", "note": None}}
        assert check(args, "flight.id", Matcher.EXISTS)[0]
        assert check(args, "flight.note", Matcher.EXISTS)[0]
        assert check(args, "flight.gate", Matcher.EXISTS) == (
            False,
            "flight.gate is absent, expected it to exist",
        )
        assert check(args, "flight.gate", Matcher.ABSENT)[0]
        assert check(args, "flight.id", Matcher.ABSENT) == (
            False,
            'flight.id is "KQ311", expected it to be absent',
        )

    def test_paths_with_indices(self) -> None:
        """Digit segments index lists and are keys in mappings."""
        args = {"passengers": [{"name": "Ada"}, {"name": "Casey"}], "seats": {"0": "1A"}}
        assert check(args, "passengers.1.name", Matcher.EQUALS, "Casey")[0]
        assert check(args, "seats.0", Matcher.EQUALS, "1A")[0]
        assert check(args, "passengers.2.name", Matcher.ABSENT)[0]
        assert check(args, "passengers.x", Matcher.ABSENT)[0]
        assert check(args, "passengers.0.name.first", Matcher.ABSENT)[0]

    def test_missing_path_with_value_matcher(self) -> None:
        """A value matcher on a missing path says the path is absent and what was expected."""
        assert check({}, "flight.id", Matcher.CONTAINS, "KQ") == (
            False,
            'flight.id is absent, expected it to contain "KQ"',
        )

    def test_non_json_arguments_fail_every_clause(self) -> None:
        """Every clause on invalid JSON arguments fails, even is absent."""
        result = check_clause(clause("x", Matcher.ABSENT), ToolCall("t", "not json"))
        assert not result.passed
        assert result.detail == 'the arguments were not valid JSON: "not json"'

    def test_describe_assertion(self) -> None:
        """An assertion reads back as prose with its clauses joined by and."""
        step = call_step("book", clause("a", Matcher.EQUALS, "1"), clause("b", Matcher.ABSENT))
        assert describe_assertion(step) == "book where a equals 1 and b is absent"


class TestNumbersAndPatterns:
    @pytest.mark.parametrize(
        ("raw", "value", "expected"),
        [
            pytest.param('{"v": 10.50}', "10.50", True, id="trailing-zero"),
            pytest.param('{"v": 1.0}', "1", True, id="float-vs-int"),
            pytest.param('{"v": 1}', "1.0", True, id="int-vs-float"),
            pytest.param('{"v": 1000}', "1e3", True, id="exponent"),
            pytest.param('{"v": 1}', "true", False, id="bool-text-is-not-one"),
            pytest.param('{"v": true}', "1", False, id="bool-is-not-one"),
            pytest.param('{"v": 2}', "2.5", False, id="other-number"),
        ],
    )
    def test_equals_compares_json_numbers_by_value(self, raw: str, value: str, expected: bool):
        """equals compares a JSON number with a numeric value by value, not by spelling."""
        result = check_clause(clause("v", Matcher.EQUALS, value), ToolCall("t", raw))
        assert result.passed is expected

    def test_contains_finds_a_number_spelled_differently(self) -> None:
        """contains on a list finds a number written with a different spelling."""
        result = check_clause(clause("v", Matcher.CONTAINS, "1"), ToolCall("t", '{"v": [1.0]}'))
        assert result.passed

    def test_overflowing_pattern_fails_instead_of_raising(self) -> None:
        """An uncompiled pattern with an out-of-range repeat fails the clause, never raises."""
        bad = Clause("v", ("v",), Matcher.MATCHES, "a{99999999999}", None, LOC)
        result = check_clause(bad, call("t", {"v": "a"}))
        assert not result.passed
        assert result.detail.startswith("v: the pattern is invalid: bad regular expression")

    def test_invalid_pattern_message_has_no_python_repr(self) -> None:
        """The invalid-pattern message shows the pattern in backticks, not as a Python repr."""
        bad = Clause("v", ("v",), Matcher.MATCHES, "(", None, LOC)
        assert check_clause(bad, call("t", {"v": "a"})).detail == (
            "v: the pattern is invalid: bad regular expression `(`:"
            " missing ), unterminated subpattern at position 0"
        )


class TestGuardEdges:
    def test_non_json_call_fails_a_guard_with_clauses(self) -> None:
        """A call whose arguments are not JSON cannot be ruled out, so the guard fails."""
        traj = trajectory(call("issue_refund", '{"status": "approved"'))
        (result,) = run(traj, no_call("issue_refund", clause("status", Matcher.EQUALS, "approved")))
        assert not result.passed
        assert result.message == (
            "expected no call to issue_refund where status equals approved\n"
            "  but issue_refund (call 1 of 1) was made with arguments that are not valid JSON,"
            ' so the where clauses cannot rule it out: "{\\"status\\": \\"approved\\""'
        )

    def test_non_json_call_of_another_tool_leaves_the_guard_alone(self) -> None:
        """Unparsable arguments of a different tool do not fail the guard."""
        traj = trajectory(call("search", "{oops"))
        (result,) = run(traj, no_call("issue_refund", clause("status", Matcher.EXISTS)))
        assert result.passed

    def test_empty_arguments_read_as_no_arguments(self) -> None:
        """A call with an empty argument string is shown as "no arguments", not a blank."""
        traj = trajectory(call("issue_refund", ""))
        (guard, strict) = run(traj, no_call("issue_refund"), strict=True)
        assert guard.message.endswith("issue_refund (call 1 of 1) was made with no arguments")
        assert strict.message.endswith("  - issue_refund (call 1 of 1) with no arguments")

    def test_strict_and_guard_both_report_a_forbidden_call(self) -> None:
        """Under strict, a forbidden unlisted call fails the guard and the strict check."""
        traj = trajectory(call("search", {}), call("issue_refund", {"id": 7}))
        results = run(traj, call_step("search"), no_call("issue_refund"), strict=True)
        assert [r.passed for r in results] == [True, False, False]
        assert "issue_refund (call 2 of 2)" in results[2].message

    def test_strict_with_only_a_guard_passes_when_no_call_is_made(self) -> None:
        """A strict flow that only forbids a call passes when the agent calls nothing."""
        results = run(trajectory(), no_call("issue_refund"), strict=True)
        assert [r.passed for r in results] == [True, True]

    def test_side_thread_call_satisfies_assert_tool_call(self) -> None:
        """assert_tool_call covers every thread, so a call made in a side conversation counts."""
        main = RequestView("openai-chat", "gpt-4o", SYSTEM, (), ("user",), (), False, 5000)
        side = RequestView("openai-chat", "gpt-4o", "Name this chat.", (), ("user",), (), False, 50)
        traj = build_trajectory(
            [
                Turn(0, side, ResponseView("", (call("set_title", {}),), FinishReason.TOOL_CALLS)),
                Turn(1, main, ResponseView("Done.", (), FinishReason.STOP)),
                Turn(2, main, ResponseView("Done.", (), FinishReason.STOP)),
            ]
        )
        (result,) = run(traj, call_step("set_title"))
        assert result.passed and traj.reply == "Done."


# Messages must never show a Python repr ("None", "Matcher."), so generated text that
# already holds one of those words would make the check below accuse the quoted input.
def _no_repr_words(text: str) -> bool:
    return "None" not in text and "Matcher." not in text


_KEYS = st.sampled_from(["a", "b", "0", "1", "", "a.b", "ü"]) | st.text(max_size=4).filter(_no_repr_words)
_LEAVES = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12).filter(_no_repr_words)
_JSON = st.recursive(
    _LEAVES,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(_KEYS, c, max_size=3),
    max_leaves=12,
)
_RAW = (
    _JSON.map(json.dumps)
    | st.text(max_size=20).filter(_no_repr_words)
    | st.sampled_from(["", "{", "NaN", "1" * 5000])
)
_CALLS = st.builds(ToolCall, st.sampled_from(["a", "b", "c"]), _RAW)
_RESPONSES = st.none() | st.builds(
    ResponseView,
    st.text(max_size=300).filter(_no_repr_words),
    st.lists(_CALLS, max_size=3).map(tuple),
    st.sampled_from(list(FinishReason)),
)
_TURNS = st.lists(st.tuples(st.sampled_from(["S1", "S2", ""]), _RESPONSES), max_size=6)
_CLAUSES = st.tuples(
    st.sampled_from(["a", "b", "0", "a.0", "a.b.c", "ü"]),
    st.sampled_from(
        [
            "equals v",
            "is 1",
            "contains a",
            "matches ^a",
            "exists",
            "is absent",
            "equals null",
            "equals [1, 2]",
            "contains 1.0",
            "matches ${V}",
            "equals ${V}",
        ]
    ),
).map(" ".join)
_LINES = st.tuples(st.sampled_from(["a", "b", "c"]), st.lists(_CLAUSES, max_size=3)).map(
    lambda t: t[0] + (" where " + " and ".join(t[1]) if t[1] else "")
)
_STEPS = st.lists(st.tuples(st.sampled_from(["call", "no", "reply"]), _LINES), max_size=5)


class TestEvaluateProperties:
    @settings(max_examples=150, deadline=None)
    @given(_TURNS, _STEPS, st.booleans(), st.sampled_from(["a", "(", "x{99999999999}", "[0-9"]))
    def test_evaluate_never_raises_and_messages_read_well(
        self, turns: list, steps: list, strict: bool, var: str
    ) -> None:
        """Any trajectory and any valid clauses give one bounded, repr-free result per step."""
        traj = build_trajectory(
            [
                Turn(i, RequestView("p", "m", system, (), (), (), False, 10), response)
                for i, (system, response) in enumerate(turns)
            ]
        )
        built: list[Step] = []
        for kind, line in steps:
            if kind == "reply":
                built.append(reply_step(line))
                continue
            tool, clauses = parse_tool_line(line, LOC)
            built.append(ToolCallAssertion(tool, clauses, kind == "no", line, LOC))
        try:
            spec = resolve_variables(make_spec(*built, strict=strict), {"V": var})
        except SpecError:
            return
        results = evaluate(spec, traj)
        assert len(results) == len(built) + strict
        for result in results:
            assert "Matcher." not in result.message and "None" not in result.message
            assert len(result.message) < 6000


class TestMismatches:
    """Each failure carries why as data (path, matcher, expected, actual, tool, call); a pass
    carries nothing, and the message is unchanged by it."""

    def test_a_failed_where_clause_names_path_expected_and_actual(self) -> None:
        traj = trajectory(call("search_flights", {}), call("create_booking", {"flight": {"id": "KQ311"}}))
        step = call_step("create_booking", clause("flight.id", Matcher.EQUALS, "KQ999"), clause("seat", Matcher.EXISTS))
        (result,) = run(traj, step)
        assert not result.passed
        assert [m.to_json() for m in result.mismatches] == [
            {
                "matcher": "equals",
                "path": "flight.id",
                "expected": "KQ999",
                "actual": "KQ311",
                "tool": "create_booking",
                "call": 2,
            },
            {
                "matcher": "exists",
                "path": "seat",
                "expected": None,
                "actual": None,
                "tool": "create_booking",
                "call": 2,
            },
        ]
        assert 'flight.id is "KQ311", not "KQ999"' in result.message

    def test_the_actual_value_keeps_its_json_type(self) -> None:
        (result,) = run(
            trajectory(call("book", {"seats": [1, 2]})), call_step("book", clause("seats", Matcher.CONTAINS, "3"))
        )
        assert [(m.matcher, m.actual) for m in result.mismatches] == [("contains", [1, 2])]

    def test_a_tool_never_called_lists_what_was(self) -> None:
        (result,) = run(trajectory(call("search_flights", {})), call_step("create_booking"))
        assert [m.to_json() for m in result.mismatches] == [
            {
                "matcher": "called",
                "path": None,
                "expected": "create_booking",
                "actual": ["search_flights"],
                "tool": "create_booking",
                "call": None,
            }
        ]

    def test_out_of_order_names_the_early_call(self) -> None:
        traj = trajectory(call("create_booking", {}), call("search_flights", {}))
        results = run(traj, call_step("search_flights"), call_step("create_booking"))
        assert [(m.matcher, m.call) for m in results[1].mismatches] == [("order", 1)]

    def test_arguments_that_are_not_json(self) -> None:
        (result,) = run(trajectory(call("book", "{not json")), call_step("book", clause("a", Matcher.EXISTS)))
        assert [(m.matcher, m.actual, m.call) for m in result.mismatches] == [("json", "{not json", 1)]

    def test_a_guard_names_each_forbidden_call(self) -> None:
        traj = trajectory(call("issue_refund", {"order": 7}), call("search", {}), call("issue_refund", {"order": 8}))
        (result,) = run(traj, no_call("issue_refund"))
        assert [(m.matcher, m.tool, m.call, m.actual) for m in result.mismatches] == [
            ("not called", "issue_refund", 1, {"order": 7}), ("not called", "issue_refund", 3, {"order": 8})
        ]

    def test_the_reply_and_its_absence(self) -> None:
        (wrong,) = run(trajectory(reply="Sold out."), reply_step("booked"))
        assert [(m.matcher, m.expected, m.actual) for m in wrong.mismatches] == [
            ("reply contains", "booked", "Sold out.")
        ]
        (none,) = run(trajectory(reply=None), reply_step("booked"))
        assert [(m.matcher, m.actual) for m in none.mismatches] == [("reply contains", None)]

    def test_strict_names_each_unlisted_call(self) -> None:
        traj = trajectory(call("search_flights", {"to": "NBO"}), call("create_booking", {}))
        results = run(traj, call_step("create_booking"), strict=True)
        assert [(m.matcher, m.tool, m.call, m.actual) for m in results[-1].mismatches] == [
            ("strict", "search_flights", 1, {"to": "NBO"})
        ]

    def test_a_pass_carries_no_mismatch(self) -> None:
        results = run(
            trajectory(call("book", {"a": 1})), call_step("book", clause("a", Matcher.EQUALS, "1")), no_call("refund")
        )
        assert all(r.passed and r.mismatches == () for r in results)

    def test_every_matcher_is_a_listed_kind(self) -> None:
        assert {m.value for m in Matcher} <= set(MISMATCH_KINDS)


class TestTheNewSteps:
    """evaluate() dispatches every step of docs/spec.md and labels results by their scope."""

    def results(self, steps: str, head: str = "", **kwargs):  # type: ignore[no-untyped-def]
        from .agent_runs import claude_code_run, spec_of

        return evaluate(spec_of(steps, head), build_trajectory(claude_code_run()), **kwargs)

    def test_a_sub_agent_scope_and_its_reply(self) -> None:
        results = self.results(
            "  - assert_subagent: Explore\n"
            "  - in: subagent Explore\n    steps:\n      - assert_tool_call: Grep where pattern contains KQ\n"
            "      - assert: reply contains KQ311\n"
            "  - assert: reply contains Booked\n"
        )
        assert [(r.passed, r.scope) for r in results] == [
            (True, ""), (True, ""), (True, "in subagent Explore #1"), (True, "in subagent Explore #1"), (True, "")]
        assert results[1].message == "in subagent Explore: subagent Explore #1 (turns 2, 3)"

    def test_inside_a_scope_the_cursor_and_the_calls_are_the_scopes(self) -> None:
        results = self.results("  - in: subagent Explore\n    steps:\n      - assert_no_tool_call: Agent\n"
                               "  - assert_tool_call: Grep\n")
        assert all(r.passed for r in results)
        outside = self.results("  - in: subagent Explore\n    steps:\n      - assert_tool_call: Agent\n")
        assert [r.passed for r in outside] == [True, False]

    def test_an_ordinal_that_is_not_there_fails_the_in_step(self) -> None:
        results = self.results('  - in: "subagent Explore #2"\n    steps:\n      - assert: reply contains x\n')
        assert len(results) == 1 and not results[0].passed
        assert "#2 asks for more sub-agents named Explore than the 1 spawned" in results[0].message
        assert results[0].mismatches[0].matcher == "scope"

    def test_nested_scope_labels(self) -> None:
        results = self.results("  - in: prompt 1\n    steps:\n      - in: subagent Explore\n        steps:\n"
                               "          - assert: reply contains KQ311\n")
        assert [r.scope for r in results] == ["", "in prompt 1", "in prompt 1 › subagent Explore #1"]
        assert all(r.passed for r in results)

    def test_budgets_and_cache_inside_a_scope(self) -> None:
        results = self.results("  - in: subagent Explore\n    steps:\n      - assert: model calls at most 2\n"
                               "      - assert: cache prefix stable\n  - assert: model calls at most 4\n")
        assert [r.passed for r in results] == [True, True, True, False]

    def test_egress_and_secrets_read_the_witness(self) -> None:
        from flowproof.witness import EgressHost, SecretLeak, Witness

        witness = Witness(egress=(EgressHost("exfil.test", 80, "other", "http"),),
                          leaks=(SecretLeak("${T}", "exfil.test", "POST", "http://exfil.test/", "body", "t"),))
        steps = "  - assert_no_egress\n  - assert_no_secret_leak: ${T}\n"
        from .agent_runs import claude_code_run, spec_of

        spec = spec_of(steps, environ={"T": "tok-123456789"})
        traj = build_trajectory(claude_code_run())
        assert [r.passed for r in evaluate(spec, traj)] == [True, True]
        assert [r.passed for r in evaluate(spec, traj, witness=witness)] == [False, False]

    def test_strict_mocks_from_the_option_or_the_spec(self) -> None:
        head = "tools:\n  - name: Grep\n  - name: Agent\n  - name: unused_tool\n"
        assert self.results("", head)[-1:] == []
        (result,) = self.results("", head, strict_mocks=True)
        assert not result.passed and "unused_tool" in result.message
        (again,) = self.results("", head + "strict_mocks: true\n")
        assert not again.passed
