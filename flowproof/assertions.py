"""Evaluate a flow spec's assertion steps against a trajectory.

Semantics (docs/design.md#spec-semantics):

- ``assert_tool_call`` steps form an ordered subsequence of ``trajectory.tool_calls``:
  each must match a call after the call the previous one matched; unlisted calls
  in between are allowed unless the flow says ``strict: true``.
- ``assert_no_tool_call`` covers the whole trajectory, whatever the position.
- ``assert: reply contains X`` (``reply is X`` alias) is a substring test on the
  reply; an absent reply reads "the agent has not replied", never "empty text".

Nothing here raises for a failing assertion: every step yields an
`AssertionResult`, and a failure's message says what was expected and what the
trajectory actually held (the nearest call, the actual value at the path). The
same facts are data too: each failure carries its `Mismatch` values (the
where-clause path, the matcher, the expected and the actual value), which
``--json`` and ``--junit`` report as findings.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flowproof.model import ToolCall
from flowproof.spec.paths import resolve_path
from flowproof.spec.patterns import PatternTimeout, compile_bounded
from flowproof.spec.types import (
    Clause,
    FlowSpec,
    Location,
    Matcher,
    ReplyAssertion,
    Step,
    ToolCallAssertion,
)
from flowproof.trajectory import MCP, Trajectory, boundary_of

__all__ = ["MISMATCH_KINDS", "AssertionResult", "Mismatch", "check_clause", "describe_assertion", "evaluate"]

# Long values are cut in messages: a reviewer needs the start, not 8000 characters.
_EXCERPT = 160


#: What a `Mismatch` can be about: a where clause's matcher, or the step's own condition.
MISMATCH_KINDS = (
    "equals", "contains", "matches", "exists", "is absent",  # a where clause on the nearest call
    "called",  # assert_tool_call: the tool was never called
    "order",  # assert_tool_call: the matching call came before the previous assertion's
    "json",  # the nearest call's arguments are not JSON, so no where clause can match
    "not called",  # assert_no_tool_call: a call it forbids was made
    "reply contains",  # the reply does not contain the text (or there is no reply)
    "strict",  # strict: true: a call no assert_tool_call lists
)


@dataclass(frozen=True, slots=True)
class Mismatch:
    """One reason a step failed, as data; the result's message says the same in words.

    ``matcher`` is one of `MISMATCH_KINDS`. ``path`` is the where clause's path
    (``flight.id``) or None. ``expected`` is the clause's value as the spec wrote it
    (text; None for ``exists``/``is absent``), the tool name for ``called``, the text for
    ``reply contains``. ``actual`` is what the trajectory held: the JSON value at the path
    (None when the path is absent), the tools called in order for ``called``, a call's
    arguments for ``not called``/``strict``/``json``, the reply (None: no reply).
    ``tool`` and ``call`` (1-based, in the trajectory's tool calls) name the call concerned.
    """

    matcher: str
    path: str | None = None
    expected: Any = None
    actual: Any = None
    tool: str | None = None
    call: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "matcher": self.matcher,
            "path": self.path,
            "expected": self.expected,
            "actual": self.actual,
            "tool": self.tool,
            "call": self.call,
        }


@dataclass(frozen=True, slots=True)
class AssertionResult:
    """The verdict on one spec step (``step`` is None for the flow-level ``strict`` check).

    A failure's ``mismatches`` say why as data (empty for a pass)."""

    step: Step | None
    passed: bool
    message: str
    location: Location | None
    mismatches: tuple[Mismatch, ...] = ()


@dataclass(frozen=True, slots=True)
class ClauseCheck:
    """One where clause applied to one call: passed, a line saying what was found, and the
    value found at the clause's path (None when it is absent or the arguments are not JSON)."""

    clause: Clause
    passed: bool
    detail: str
    actual: Any = None


def evaluate(spec: FlowSpec, trajectory: Trajectory) -> list[AssertionResult]:
    """Check every assertion step of ``spec`` (variables already resolved) against ``trajectory``.

    Returns one result per assertion step, in spec order, plus one for the
    ``strict`` check when the flow is strict. Prompt steps yield nothing.
    """
    results: list[AssertionResult] = []
    calls = trajectory.tool_calls
    next_pos = 0  # the subsequence cursor: the first call the next assert_tool_call may match
    prev_matched: int | None = None
    matched: list[int] = []
    for step in spec.steps:
        if isinstance(step, ToolCallAssertion) and not step.negated:
            pos = _find_match(step, calls, next_pos)
            if pos is not None:
                results.append(
                    AssertionResult(
                        step,
                        True,
                        f"{describe_assertion(step)}: matched {_call_ref(pos, calls)}",
                        step.location,
                    )
                )
                matched.append(pos)
                next_pos, prev_matched = pos + 1, pos
            else:
                message, why = _explain_missing_call(step, calls, next_pos, prev_matched)
                results.append(AssertionResult(step, False, message, step.location, why))
        elif isinstance(step, ToolCallAssertion):
            results.append(_evaluate_no_call(step, calls))
        elif isinstance(step, ReplyAssertion):
            results.append(_evaluate_reply(step, trajectory))
    if spec.strict:
        results.append(_evaluate_strict(spec, calls, matched))
    return results


# --- assert_tool_call -------------------------------------------------------------------------


def describe_assertion(step: ToolCallAssertion) -> str:
    """The assertion in prose: ``create_booking where flight.id equals KQ311 and seat exists``."""
    if not step.clauses:
        return step.tool
    return f"{step.tool} where " + " and ".join(_describe_clause(c) for c in step.clauses)


def _describe_clause(clause: Clause) -> str:
    text = f"{clause.path} {clause.matcher.value}"
    return text if clause.value is None else f"{text} {clause.value}"


def _call_ref(pos: int, calls: Sequence[ToolCall]) -> str:
    return f"call {pos + 1} of {len(calls)}"


def _named_ref(pos: int, calls: Sequence[ToolCall]) -> str:
    # A call seen at the MCP boundary says so: the agent sent it, not just the model asked.
    over = ", over MCP" if boundary_of(calls[pos]) == MCP else ""
    return f"{calls[pos].name} ({_call_ref(pos, calls)}{over})"


def _call_matches(step: ToolCallAssertion, call: ToolCall) -> bool:
    return call.name == step.tool and all(check_clause(c, call).passed for c in step.clauses)


def _find_match(step: ToolCallAssertion, calls: Sequence[ToolCall], start: int) -> int | None:
    for pos in range(start, len(calls)):
        if _call_matches(step, calls[pos]):
            return pos
    return None


def _explain_missing_call(
    step: ToolCallAssertion,
    calls: Sequence[ToolCall],
    start: int,
    prev_matched: int | None,
) -> tuple[str, tuple[Mismatch, ...]]:
    lines = [f"expected {describe_assertion(step)}"]
    why: list[Mismatch] = []
    same = [i for i, c in enumerate(calls) if c.name == step.tool]
    if not same:
        lines.append(f"  {step.tool} was never called; {_called_tools(calls)}")
        why.append(Mismatch("called", expected=step.tool, actual=[c.name for c in calls], tool=step.tool))
        return "\n".join(lines), tuple(why)
    after = [i for i in same if i >= start]
    early_matches = [i for i in same if i < start and _call_matches(step, calls[i])]
    if early_matches and prev_matched is not None:
        lines.append(
            f"  {step.tool} was called out of order: {_call_ref(early_matches[0], calls)} matches,"
            f" but it comes before {_named_ref(prev_matched, calls)},"
            " which the previous assertion matched"
        )
        why.append(Mismatch("order", tool=step.tool, call=early_matches[0] + 1))
        if not after:
            return "\n".join(lines), tuple(why)
    elif not after and prev_matched is not None:
        lines.append(
            f"  {step.tool} was only called before {_named_ref(prev_matched, calls)},"
            " which the previous assertion matched"
        )
        why.append(Mismatch("order", tool=step.tool, call=same[-1] + 1))
    pool = after or same
    nearest = min(pool, key=lambda i: (_failures(step, calls[i]), i))
    lines.append(f"  nearest call: {_named_ref(nearest, calls)}")
    lines.extend(_clause_lines(step, calls[nearest]))
    why.extend(_clause_mismatches(step, calls[nearest], nearest))
    return "\n".join(lines), tuple(why)


def _failures(step: ToolCallAssertion, call: ToolCall) -> int:
    return sum(not check_clause(c, call).passed for c in step.clauses)


def _clause_lines(step: ToolCallAssertion, call: ToolCall) -> list[str]:
    if not call.is_json:
        raw = _quote(_excerpt(call.arguments_raw))
        return [f"  its arguments were not valid JSON, so no where clause can match: {raw}"]
    return [f"  {chk.detail}" for c in step.clauses if not (chk := check_clause(c, call)).passed]


def _clause_mismatches(step: ToolCallAssertion, call: ToolCall, pos: int) -> list[Mismatch]:
    """The failed where clauses of the call at ``pos`` as data (one, ``json``, when its
    arguments are not JSON and no clause could be applied)."""
    if not call.is_json:
        return [Mismatch("json", actual=call.arguments_raw, tool=call.name, call=pos + 1)]
    return [
        Mismatch(c.matcher.value, c.path, c.value, chk.actual, call.name, pos + 1)
        for c in step.clauses
        if not (chk := check_clause(c, call)).passed
    ]


def _arguments(call: ToolCall) -> Any:
    """A call's arguments as data: the parsed JSON, else the raw text."""
    return call.arguments if call.is_json else call.arguments_raw


def _called_tools(calls: Sequence[ToolCall]) -> str:
    if not calls:
        return "no tool was called at all"
    return "the calls were, in order: " + ", ".join(c.name for c in calls)


# --- assert_no_tool_call ----------------------------------------------------------------------


def _evaluate_no_call(step: ToolCallAssertion, calls: Sequence[ToolCall]) -> AssertionResult:
    what = describe_assertion(step)
    # A call whose arguments are not JSON cannot be ruled out by a where clause: a guard
    # that passed on it would prove nothing, so it counts against the guard.
    offending = [
        i
        for i, c in enumerate(calls)
        if _call_matches(step, c) or (c.name == step.tool and not c.is_json)
    ]
    if not offending:
        if step.clauses:
            message = f"no call to {what}"
        else:
            message = f"{step.tool} was never called"
        return AssertionResult(step, True, message, step.location)
    lines = [f"expected no call to {what}"]
    why = tuple(
        Mismatch("not called", actual=_arguments(calls[i]), tool=calls[i].name, call=i + 1)
        for i in offending
    )
    for i in offending:
        args = _excerpt(calls[i].arguments_raw)
        if step.clauses and not calls[i].is_json:
            lines.append(
                f"  but {_named_ref(i, calls)} was made with arguments that are not valid JSON,"
                f" so the where clauses cannot rule it out: {_quote(args)}"
            )
        else:
            lines.append(f"  but {_named_ref(i, calls)} was made with {_args_text(calls[i])}")
    return AssertionResult(step, False, "\n".join(lines), step.location, why)


# --- reply ------------------------------------------------------------------------------------


def _evaluate_reply(step: ReplyAssertion, trajectory: Trajectory) -> AssertionResult:
    expected = f"expected the reply to contain {_quote(step.text)}"
    reply = trajectory.reply
    if reply is None:
        reason = trajectory.reply_absent_reason or "no final assistant message"
        message = f"{expected}\n  the agent has not replied ({reason})"
        return AssertionResult(
            step, False, message, step.location, (Mismatch("reply contains", expected=step.text),)
        )
    if step.text in reply:
        return AssertionResult(step, True, f"the reply contains {_quote(step.text)}", step.location)
    shown = "the reply is empty text" if reply == "" else f"the reply is {_quote(_excerpt(reply))}"
    why = (Mismatch("reply contains", expected=step.text, actual=reply),)
    return AssertionResult(step, False, f"{expected}\n  {shown}", step.location, why)


# --- strict -----------------------------------------------------------------------------------


def _evaluate_strict(
    spec: FlowSpec, calls: Sequence[ToolCall], matched: Sequence[int]
) -> AssertionResult:
    taken = set(matched)
    unlisted = [i for i in range(len(calls)) if i not in taken]
    location = spec.strict_location or spec.location
    if not unlisted:
        return AssertionResult(
            None, True, "strict: every tool call is listed by an assert_tool_call", location
        )
    lines = ["strict: true forbids tool calls no assert_tool_call lists, but the agent made:"]
    for i in unlisted:
        lines.append(f"  - {_named_ref(i, calls)} with {_args_text(calls[i])}")
    why = tuple(
        Mismatch("strict", actual=_arguments(calls[i]), tool=calls[i].name, call=i + 1) for i in unlisted
    )
    return AssertionResult(None, False, "\n".join(lines), location, why)


# --- where clauses ----------------------------------------------------------------------------


def check_clause(clause: Clause, call: ToolCall) -> ClauseCheck:
    """Apply one where clause to a call's parsed arguments.

    ``detail`` states what the call actually held at the path (for failures, in
    words like ``flight.id is "KQ999", not "KQ311"``).
    """
    if not call.is_json:
        return ClauseCheck(
            clause,
            False,
            f"the arguments were not valid JSON: {_quote(_excerpt(call.arguments_raw))}",
        )
    found, actual = resolve_path(call.arguments, clause.segments)
    path, matcher, value = clause.path, clause.matcher, clause.value
    if matcher is Matcher.EXISTS:
        if found:
            return ClauseCheck(clause, True, f"{path} is {_show(actual)}", actual)
        return ClauseCheck(clause, False, f"{path} is absent, expected it to exist")
    if matcher is Matcher.ABSENT:
        if not found:
            return ClauseCheck(clause, True, f"{path} is absent")
        return ClauseCheck(clause, False, f"{path} is {_show(actual)}, expected it to be absent", actual)
    expected = value if value is not None else ""
    if not found:
        return ClauseCheck(
            clause, False, f"{path} is absent, expected it to {_verb(matcher)} {_quote(expected)}"
        )
    if matcher is Matcher.EQUALS:
        ok = _equals(actual, expected)
        return ClauseCheck(clause, ok, f"{path} is {_show(actual)}, not {_quote(expected)}", actual)
    if matcher is Matcher.CONTAINS:
        ok = _contains(actual, expected)
        if isinstance(actual, list):
            detail = f"{path} is {_show(actual)}, which has no element equal to {_quote(expected)}"
        elif isinstance(actual, dict):
            detail = f"{path} is {_show(actual)}, which has no key {_quote(expected)}"
        else:
            detail = f"{path} is {_show(actual)}, which does not contain {_quote(expected)}"
        return ClauseCheck(clause, ok, detail, actual)
    # MATCHES: the pattern was validated when the spec was parsed; compile here only when a
    # ${VAR} kept it from being compiled then, and report a bad one instead of raising.
    pattern = clause.pattern
    if pattern is None:
        try:
            pattern = compile_bounded(expected)
        except ValueError as exc:
            return ClauseCheck(clause, False, f"{path}: the pattern is invalid: {exc}", actual)
    text = actual if isinstance(actual, str) else _json_text(actual)
    try:
        ok = pattern.search(text)
    except PatternTimeout as exc:
        # A hostile pattern must not hang the run: it fails here, naming the clause.
        return ClauseCheck(
            clause, False,
            f"{clause.location}: `{path} matches` gave up: {exc} — the pattern backtracks "
            "catastrophically (nested repeats such as (a+)+ or (a|aa)+); rewrite it",
            actual,
        )
    return ClauseCheck(
        clause, ok, f"{path} is {_show(actual)}, which does not match /{pattern.pattern}/", actual
    )


def _verb(matcher: Matcher) -> str:
    return {Matcher.EQUALS: "equal", Matcher.CONTAINS: "contain", Matcher.MATCHES: "match"}.get(
        matcher, matcher.value
    )


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _equals(actual: Any, expected: str) -> bool:
    if isinstance(actual, str):
        return actual == expected
    if _json_text(actual) == expected:
        return True
    if isinstance(actual, int | float) and not isinstance(actual, bool):
        # JSON numbers compare by value: `equals 10.50` matches 10.5, `equals 1` matches 1.0.
        number = _number(expected)
        return number is not None and actual == number
    if isinstance(actual, (list, dict)):
        # A container written with spaces ([1, 2]) still means the same JSON.
        try:
            return bool(json.loads(expected) == actual)
        except (ValueError, RecursionError):
            return False
    return False


def _number(text: str) -> int | float | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return None
    return value


def _contains(actual: Any, expected: str) -> bool:
    if isinstance(actual, str):
        return expected in actual
    if isinstance(actual, list):
        return any(_equals(item, expected) for item in actual)
    if isinstance(actual, dict):
        return expected in actual
    return expected in _json_text(actual)


def _args_text(call: ToolCall) -> str:
    """A call's arguments as a message shows them: the raw text, cut; never a dangling blank."""
    if not call.arguments_raw.strip():
        return "no arguments"
    return _excerpt(call.arguments_raw)


def _show(value: Any) -> str:
    return _excerpt(_json_text(value))


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _excerpt(text: str) -> str:
    if len(text) <= _EXCERPT:
        return text
    return text[: _EXCERPT - 1] + "…"
