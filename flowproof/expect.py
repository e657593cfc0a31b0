"""Trajectory assertions for Python tests, in the words of a flow spec.

A test that drives its agent itself (in-process, or from a cassette) asserts on
the `Trajectory` with the same matchers and the same failure messages as a spec:

    assert_tool_call(trajectory, "create_booking where flight.id equals KQ311")
    assert_no_tool_call(trajectory, "issue_refund")
    assert_reply(trajectory, "booked")

A failure raises `TrajectoryAssertionError` (an `AssertionError`) whose text is the
spec's message (what was expected, and what the trajectory held: the nearest call,
the value at the path) and whose ``mismatches`` are the same facts as data.
A line the spec language cannot parse raises `SpecError`. Pure: no I/O.
"""

from __future__ import annotations

from pathlib import Path

from flowproof.assertions import AssertionResult, Mismatch, evaluate
from flowproof.cassette import Cassette, turn_views
from flowproof.errors import SpecError
from flowproof.options import Route
from flowproof.spec.clauses import parse_tool_line
from flowproof.spec.types import (
    AgentSpec,
    Clause,
    FlowSpec,
    Location,
    ReplyAssertion,
    Step,
    ToolCallAssertion,
)
from flowproof.trajectory import Trajectory, build_trajectory

__all__ = [
    "TrajectoryAssertionError",
    "assert_no_tool_call",
    "assert_reply",
    "assert_tool_call",
    "cassette_trajectory",
]

#: Where a line given in Python "is": messages name it instead of a spec file position.
_HERE = Location("<python>", 1, 1)


class TrajectoryAssertionError(AssertionError):
    """A failed trajectory assertion: the spec's message, with its result as data."""

    def __init__(self, result: AssertionResult) -> None:
        super().__init__(result.message)
        self.result = result

    @property
    def mismatches(self) -> tuple[Mismatch, ...]:
        """Why it failed: the where-clause path, the matcher, expected and actual values."""
        return self.result.mismatches


# `__tracebackhide__` (read by pytest, a plain local otherwise): a failing assertion in a test
# shows the test's own line and the message, not these frames with their arguments' reprs
# (a whole trajectory). A SpecError is raised afresh here for the same reason.


def assert_tool_call(trajectory: Trajectory, line: str) -> AssertionResult:
    """Pass when some tool call matches ``line`` (``tool [where clause (and clause)*]``)."""
    __tracebackhide__ = True
    tool, clauses = _parse(line, "assert_tool_call")
    step = ToolCallAssertion(tool, clauses, False, f"assert_tool_call: {line}", _HERE)
    return _check(step, trajectory)


def assert_no_tool_call(trajectory: Trajectory, line: str) -> AssertionResult:
    """Pass when no tool call matches ``line`` (a bare tool name: it was never called)."""
    __tracebackhide__ = True
    tool, clauses = _parse(line, "assert_no_tool_call")
    step = ToolCallAssertion(tool, clauses, True, f"assert_no_tool_call: {line}", _HERE)
    return _check(step, trajectory)


def assert_reply(trajectory: Trajectory, contains: str) -> AssertionResult:
    """Pass when the agent replied and the reply contains ``contains``."""
    __tracebackhide__ = True
    return _check(ReplyAssertion(contains, f"assert: reply contains {contains}", _HERE), trajectory)


def _parse(line: str, keyword: str) -> tuple[str, tuple[Clause, ...]]:
    __tracebackhide__ = True
    try:
        return parse_tool_line(line, _HERE, keyword=keyword)
    except SpecError as e:
        # The parser's own frames say nothing about the caller's line; the message says all.
        raise e.with_traceback(None) from None


def cassette_trajectory(cassette: Cassette) -> Trajectory:
    """The trajectory a cassette holds (every turn, through its codec)."""
    return build_trajectory([turn_views(t) for t in cassette.turns])


def _check(step: Step, trajectory: Trajectory) -> AssertionResult:
    __tracebackhide__ = True
    (result,) = evaluate(_one_step_flow(step), trajectory)
    if not result.passed:
        raise TrajectoryAssertionError(result)
    return result


def _one_step_flow(step: Step) -> FlowSpec:
    # `evaluate` reads only the steps and `strict`; the rest says "no spec file".
    agent = AgentSpec(None, None, (), 0.0, None, Route.PROXY, _HERE)
    return FlowSpec(
        path=Path(_HERE.path),
        name="",
        app="",
        agent=agent,
        tools=(),
        mcp=(),
        strict=False,
        cassette=Path(),
        volatile=(),
        presets=(),
        steps=(step,),
        location=_HERE,
    )
