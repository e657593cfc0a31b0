"""Where clauses applied to a tool call's arguments: ``flight.id equals KQ311`` and the rest.

The one owner of what a matcher means (docs/spec.md: equals compares JSON
numbers by value, contains looks into strings, lists and mapping keys, matches
is a time-bounded regex search). Every step that takes where clauses
(``assert_tool_call``, ``assert_no_tool_call``, ``assert_parallel_tool_calls``)
and the guard evidence call `check_clause`.

Pure.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from flowproof.outcome import excerpt, json_text, quote, show
from flowproof.spec.paths import resolve_path
from flowproof.spec.patterns import PatternTimeout, compile_bounded
from flowproof.spec.types import Clause, Matcher
from flowproof.turns import ToolCall

__all__ = ["ClauseCheck", "check_clause", "describe_clause", "matches_all"]


@dataclass(frozen=True, slots=True)
class ClauseCheck:
    """One where clause applied to one call: passed, a line saying what was found, and the
    value found at the clause's path (None when it is absent or the arguments are not JSON)."""

    clause: Clause
    passed: bool
    detail: str
    actual: Any = None



def describe_clause(clause: Clause) -> str:
    """A clause in prose: ``flight.id equals KQ311``."""
    text = f"{clause.path} {clause.matcher.value}"
    return text if clause.value is None else f"{text} {clause.value}"


def matches_all(clauses: tuple[Clause, ...], call: ToolCall) -> bool:
    """True when ``call`` passes every clause (a call with no clauses to pass always does)."""
    return all(check_clause(c, call).passed for c in clauses)


def check_clause(clause: Clause, call: ToolCall) -> ClauseCheck:
    """Apply one where clause to a call's parsed arguments.

    ``detail`` states what the call actually held at the path (for failures, in
    words like ``flight.id is "KQ999", not "KQ311"``).
    """
    if not call.is_json:
        return ClauseCheck(
            clause,
            False,
            f"the arguments were not valid JSON: {quote(excerpt(call.arguments_raw))}",
        )
    found, actual = resolve_path(call.arguments, clause.segments)
    path, matcher, value = clause.path, clause.matcher, clause.value
    if matcher is Matcher.EXISTS:
        if found:
            return ClauseCheck(clause, True, f"{path} is {show(actual)}", actual)
        return ClauseCheck(clause, False, f"{path} is absent, expected it to exist")
    if matcher is Matcher.ABSENT:
        if not found:
            return ClauseCheck(clause, True, f"{path} is absent")
        return ClauseCheck(clause, False, f"{path} is {show(actual)}, expected it to be absent", actual)
    expected = value if value is not None else ""
    if not found:
        return ClauseCheck(
            clause, False, f"{path} is absent, expected it to {_verb(matcher)} {quote(expected)}"
        )
    if matcher is Matcher.EQUALS:
        ok = _equals(actual, expected)
        return ClauseCheck(clause, ok, f"{path} is {show(actual)}, not {quote(expected)}", actual)
    if matcher is Matcher.CONTAINS:
        ok = _contains(actual, expected)
        if isinstance(actual, list):
            detail = f"{path} is {show(actual)}, which has no element equal to {quote(expected)}"
        elif isinstance(actual, dict):
            detail = f"{path} is {show(actual)}, which has no key {quote(expected)}"
        else:
            detail = f"{path} is {show(actual)}, which does not contain {quote(expected)}"
        return ClauseCheck(clause, ok, detail, actual)
    # MATCHES: the pattern was validated when the spec was parsed; compile here only when a
    # ${VAR} kept it from being compiled then, and report a bad one instead of raising.
    pattern = clause.pattern
    if pattern is None:
        try:
            pattern = compile_bounded(expected)
        except ValueError as exc:
            return ClauseCheck(clause, False, f"{path}: the pattern is invalid: {exc}", actual)
    text = actual if isinstance(actual, str) else json_text(actual)
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
        clause, ok, f"{path} is {show(actual)}, which does not match /{pattern.pattern}/", actual
    )


def _verb(matcher: Matcher) -> str:
    return {Matcher.EQUALS: "equal", Matcher.CONTAINS: "contain", Matcher.MATCHES: "match"}.get(
        matcher, matcher.value
    )


def _equals(actual: Any, expected: str) -> bool:
    if isinstance(actual, str):
        return actual == expected
    if json_text(actual) == expected:
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
    return expected in json_text(actual)

