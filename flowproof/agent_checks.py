"""The assertions about how the agent worked: ``assert_subagent`` and ``assert_parallel_tool_calls``.

``assert_subagent: NAME`` passes when a spawn call names NAME, the sub-agent's
own thread ran, and its result reached the parent (the three links of
`flowproof.families`); a failure names the first link missing, for the
sub-agent that got furthest. ``assert_parallel_tool_calls`` passes when one
model turn's response asked for every listed call (each where clause on a call
of its own); a failure shows how the calls were split across turns.

Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from flowproof.families import FINAL_ANSWER, HANDOFF_LINK, SPAWN_RESULT, family, spawn_tool_names
from flowproof.outcome import AssertionResult, Mismatch
from flowproof.scopes import turn_span
from flowproof.spec.types import ParallelCallsAssertion, SubagentAssertion, ToolPattern
from flowproof.subagents import SubAgent
from flowproof.trajectory import Trajectory
from flowproof.turns import ToolCall, Turn
from flowproof.where import matches_all

__all__ = ["evaluate_parallel", "evaluate_subagent"]


def _progress(sub: SubAgent) -> int:
    return int(sub.ran) + int(sub.returned)


def _missing_thread(sub: SubAgent) -> str:
    if family(sub.family).link == HANDOFF_LINK:
        return "no later request carries the handoff call's result"
    return "no later conversation's first request contains the prompt it was given"


def _missing_result(sub: SubAgent) -> str:
    row = family(sub.family)
    if row.result == SPAWN_RESULT:
        return f"no later request of its parent holds a tool result for call {sub.call.call_id or sub.call.name}"
    if row.result == FINAL_ANSWER:
        return "it ended without a final answer (a handoff's answer is its result)"
    return "no later request of its parent holds a tool result containing its final answer"


def evaluate_subagent(step: SubagentAssertion, trajectory: Trajectory) -> AssertionResult:
    agents = trajectory.agents
    matches = agents.named(step.name)
    if not matches:
        spawned = ", ".join(f"{s.call.name}({s.name}) in turn {s.spawn_turn}" for s in agents.subagents)
        detail = (f"the spawn calls were: {spawned}" if spawned
                  else f"no spawn call was made (flowproof knows: {spawn_tool_names()})")
        message = f"expected a sub-agent named {step.name}\n  no spawn call names {step.name}; {detail}"
        return AssertionResult(step, False, message, step.location,
                               (Mismatch("subagent", expected=step.name, actual="no spawn call"),))
    best = max(matches, key=lambda s: (_progress(s), -s.number))
    if best.ran and best.returned:
        message = (f"sub-agent {best.label()}: spawned in turn {best.spawn_turn}, ran in "
                   f"{turn_span(best.turns)}, its result reached the parent in turn {best.result_turn}")
        return AssertionResult(step, True, message, step.location)
    spawn = f"the spawn call {best.call.name}({best.name}) in turn {best.spawn_turn}"
    if not best.ran:
        message = (f"expected a sub-agent named {step.name} to run\n  {spawn} started no sub-agent "
                   f"thread: {_missing_thread(best)}")
        link = "thread"
    else:
        message = (f"expected the result of sub-agent {step.name} to reach its parent\n  {best.label()} ran "
                   f"({turn_span(best.turns)}) but its result never came back: {_missing_result(best)}")
        link = "result"
    return AssertionResult(step, False, message, step.location,
                           (Mismatch("subagent", expected=step.name, actual=f"no {link}",
                                     turn=best.spawn_turn),))


def _assign(patterns: Sequence[ToolPattern], calls: Sequence[ToolCall], used: frozenset[int] = frozenset()) -> bool:
    """True when each pattern can take a call of its own (a small search: turns ask for few calls)."""
    if not patterns:
        return True
    first, rest = patterns[0], patterns[1:]
    for i, call in enumerate(calls):
        if i not in used and call.name == first.tool and matches_all(first.clauses, call):
            if _assign(rest, calls, used | {i}):
                return True
    return False


def evaluate_parallel(step: ParallelCallsAssertion, trajectory: Trajectory) -> AssertionResult:
    listed = ", ".join(p.source for p in step.calls)
    turns: list[Turn] = [t for t in trajectory.turns if t.response is not None and t.response.tool_calls]
    for turn in turns:
        assert turn.response is not None
        if _assign(step.calls, turn.response.tool_calls):
            return AssertionResult(step, True, f"turn {turn.index} asked for {listed} at once", step.location)
    names = {p.tool for p in step.calls}
    split = [(t.index, [c.name for c in t.response.tool_calls]) for t in turns if t.response is not None]
    lines = [f"expected one model turn to ask for {listed} at once"]
    relevant = [(i, calls) for i, calls in split if names & set(calls)]
    if not relevant:
        lines.append("  no turn asked for any of them" + (
            "; the tool calls were: " + "; ".join(f"turn {i}: {', '.join(c)}" for i, c in split) if split else ""))
    else:
        lines.append("  the calls were split across turns:")
        lines.extend(f"  - turn {i}: {', '.join(calls)}" for i, calls in relevant)
        together = [i for i, calls in relevant if names <= set(calls)]
        if together:
            lines.append(f"  turn {together[0]} asked for all of them, but its arguments fail a where clause")
    why = (Mismatch("parallel", expected=[p.source for p in step.calls], actual=[c for _, c in relevant]),)
    return AssertionResult(step, False, "\n".join(lines), step.location, why)
