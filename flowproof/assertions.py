"""Evaluate a flow spec's assertion steps against a trajectory.

Semantics (docs/design.md#spec-semantics, docs/spec.md):

- ``assert_tool_call`` steps form an ordered subsequence of ``trajectory.tool_calls``:
  each must match a call after the call the previous one matched; unlisted calls
  in between are allowed unless the flow says ``strict: true``.
- ``assert_no_tool_call`` covers the whole trajectory, whatever the position.
- ``assert: reply contains X`` (``reply is X`` alias) is a substring test on the
  reply; an absent reply reads "the agent has not replied", never "empty text".
- ``in:`` narrows the steps below it to a scope (`flowproof.scopes`): each scope
  has its own subsequence cursor and its own reply; the steps' results name it.
- The other steps are evaluated by the module of their concern: sub-agents and
  parallel calls (`flowproof.agent_checks`), budgets (`flowproof.budgets`), the
  cache prefix (`flowproof.cacheprefix`), egress and secrets from the proxy's
  witness (`flowproof.witness`), strict mocks (`flowproof.coverage`).

Nothing here raises for a failing assertion: every step yields an
`AssertionResult`, and a failure's message says what was expected and what the
trajectory actually held (the nearest call, the actual value at the path). The
same facts are data too: each failure carries its `Mismatch` values (the
where-clause path, the matcher, the expected and the actual value), which
``--json`` and ``--junit`` report as findings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from flowproof.agent_checks import evaluate_parallel, evaluate_subagent
from flowproof.budgets import evaluate_budget
from flowproof.cacheprefix import evaluate_cache_prefix
from flowproof.coverage import strict_mocks_result
from flowproof.outcome import MISMATCH_KINDS, AssertionResult, Mismatch, excerpt, quote
from flowproof.scopes import resolve_scope
from flowproof.spec.types import (
    BudgetAssertion,
    CachePrefixAssertion,
    EgressAssertion,
    FlowSpec,
    ParallelCallsAssertion,
    Price,
    ReplyAssertion,
    ScopeStep,
    SecretLeakAssertion,
    Step,
    SubagentAssertion,
    ToolCallAssertion,
)
from flowproof.trajectory import MCP, Trajectory, boundary_of
from flowproof.turns import ToolCall
from flowproof.where import ClauseCheck, check_clause, describe_clause
from flowproof.witness import Witness, evaluate_egress, evaluate_secret

__all__ = [
    "MISMATCH_KINDS",
    "AssertionResult",
    "ClauseCheck",
    "Mismatch",
    "check_clause",
    "describe_assertion",
    "evaluate",
]


@dataclass(frozen=True, slots=True)
class _Context:
    """What steps read besides the trajectory: prices, the prompts' texts, the proxy's witness."""

    pricing: tuple[Price, ...]
    prompts: tuple[str, ...]
    witness: Witness


def evaluate(
    spec: FlowSpec, trajectory: Trajectory, *, witness: Witness | None = None, strict_mocks: bool = False
) -> list[AssertionResult]:
    """Check every assertion step of ``spec`` (variables already resolved) against ``trajectory``.

    Returns one result per assertion step, in spec order (an ``in:`` step is followed by the
    results of its steps in each scope it covers), plus one for the ``strict`` check when the
    flow is strict and one for mock coverage with ``strict_mocks`` (or ``strict_mocks: true``).
    ``witness`` is what the proxy saw beyond model calls (egress, secret leaks). Prompt steps
    yield nothing.
    """
    context = _Context(spec.pricing, tuple(p.text for p in spec.prompts), witness or Witness())
    results, matched = _evaluate_steps(spec.steps, trajectory, context, "")
    if spec.strict:
        results.append(_evaluate_strict(spec, trajectory.tool_calls, matched))
    if strict_mocks or spec.strict_mocks:
        results.append(strict_mocks_result(spec, trajectory))
    return results


def _evaluate_steps(
    steps: Sequence[Step], trajectory: Trajectory, context: _Context, scope: str
) -> tuple[list[AssertionResult], list[int]]:
    results: list[AssertionResult] = []
    calls = trajectory.tool_calls
    next_pos = 0  # the subsequence cursor: the first call the next assert_tool_call may match
    prev_matched: int | None = None
    matched: list[int] = []
    for step in steps:
        result: AssertionResult | None = None
        if isinstance(step, ToolCallAssertion) and not step.negated:
            pos = _find_match(step, calls, next_pos)
            if pos is not None:
                result = AssertionResult(
                    step, True, f"{describe_assertion(step)}: matched {_call_ref(pos, calls)}", step.location
                )
                matched.append(pos)
                next_pos, prev_matched = pos + 1, pos
            else:
                message, why = _explain_missing_call(step, calls, next_pos, prev_matched)
                result = AssertionResult(step, False, message, step.location, why)
        elif isinstance(step, ToolCallAssertion):
            result = _evaluate_no_call(step, calls)
        elif isinstance(step, ReplyAssertion):
            result = _evaluate_reply(step, trajectory)
        elif isinstance(step, SubagentAssertion):
            result = evaluate_subagent(step, trajectory)
        elif isinstance(step, ParallelCallsAssertion):
            result = evaluate_parallel(step, trajectory)
        elif isinstance(step, EgressAssertion):
            result = evaluate_egress(step, context.witness)
        elif isinstance(step, SecretLeakAssertion):
            result = evaluate_secret(step, context.witness)
        elif isinstance(step, BudgetAssertion):
            result = evaluate_budget(step, trajectory, context.pricing)
        elif isinstance(step, CachePrefixAssertion):
            result = evaluate_cache_prefix(step, trajectory)
        elif isinstance(step, ScopeStep):
            results.extend(_evaluate_scope(step, trajectory, context, scope))
        if result is not None:
            results.append(replace(result, scope=scope) if scope else result)
    return results, matched


def _evaluate_scope(
    step: ScopeStep, trajectory: Trajectory, context: _Context, outer: str
) -> list[AssertionResult]:
    resolution = resolve_scope(step.scope, trajectory, context.prompts)
    problem = resolution.problem
    message = f"{step.source}: {resolution.summary}" if problem is None else (
        f"{step.source}: {problem}" + (f"\n  {resolution.summary}" if resolution.summary else ""))
    why = () if problem is None else (Mismatch("scope", expected=step.source, actual=problem),)
    head = AssertionResult(step, problem is None and bool(resolution.scopes), message, step.location, why,
                           scope=outer)
    results = [head]
    for scope in resolution.scopes:
        label = f"in {scope.label}" if not outer else f"{outer} › {scope.label}"
        inner, _ = _evaluate_steps(step.steps, scope.trajectory, context, label)
        results.extend(inner)
    return results


# --- assert_tool_call -------------------------------------------------------------------------


def describe_assertion(step: ToolCallAssertion) -> str:
    """The assertion in prose: ``create_booking where flight.id equals KQ311 and seat exists``."""
    if not step.clauses:
        return step.tool
    return f"{step.tool} where " + " and ".join(describe_clause(c) for c in step.clauses)


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
        raw = quote(excerpt(call.arguments_raw))
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
        args = excerpt(calls[i].arguments_raw)
        if step.clauses and not calls[i].is_json:
            lines.append(
                f"  but {_named_ref(i, calls)} was made with arguments that are not valid JSON,"
                f" so the where clauses cannot rule it out: {quote(args)}"
            )
        else:
            lines.append(f"  but {_named_ref(i, calls)} was made with {_args_text(calls[i])}")
    return AssertionResult(step, False, "\n".join(lines), step.location, why)


# --- reply ------------------------------------------------------------------------------------


def _evaluate_reply(step: ReplyAssertion, trajectory: Trajectory) -> AssertionResult:
    expected = f"expected the reply to contain {quote(step.text)}"
    reply = trajectory.reply
    if reply is None:
        reason = trajectory.reply_absent_reason or "no final assistant message"
        message = f"{expected}\n  the agent has not replied ({reason})"
        return AssertionResult(
            step, False, message, step.location, (Mismatch("reply contains", expected=step.text),)
        )
    if step.text in reply:
        return AssertionResult(step, True, f"the reply contains {quote(step.text)}", step.location)
    shown = "the reply is empty text" if reply == "" else f"the reply is {quote(excerpt(reply))}"
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


def _args_text(call: ToolCall) -> str:
    """A call's arguments as a message shows them: the raw text, cut; never a dangling blank."""
    if not call.arguments_raw.strip():
        return "no arguments"
    return excerpt(call.arguments_raw)


