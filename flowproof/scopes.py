"""``in:`` scopes: the part of a run the steps below an ``in:`` look at.

- ``in: subagent NAME`` is each sub-agent a spawn call names NAME, one scope
  per sub-agent (``#N`` picks the Nth, counted in spawn order): that
  sub-agent's own thread, and its reply is the sub-agent's final answer.
- ``in: prompt K`` is the calls made while answering the spec's K-th prompt:
  the turns of the agent the flow started whose newest user text carries
  prompt K (it equals it, else contains it; among prompts that fit, the longest
  wins, then the later), plus every turn of the sub-agents spawned in them. Its
  reply is the reply rule applied to those turns.

A scope is resolved against the trajectory it sits in, so a scope inside a
scope narrows further (a sub-agent's own sub-agents).

Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from flowproof.families import spawn_tool_names
from flowproof.spec.types import PromptScope, SubagentScope
from flowproof.subagents import SubAgent
from flowproof.trajectory import Trajectory, narrow
from flowproof.turns import Turn

__all__ = ["Scope", "Resolution", "prompt_of", "resolve_scope", "turn_span"]


@dataclass(frozen=True, slots=True)
class Scope:
    """One part of the run, named as reports name it (``subagent Explore #1``)."""

    label: str
    trajectory: Trajectory
    detail: str


@dataclass(frozen=True, slots=True)
class Resolution:
    """What an ``in:`` resolved to: its scopes, and a problem (None when it is fine)."""

    scopes: tuple[Scope, ...]
    problem: str | None
    summary: str


def turn_span(turns: Sequence[Turn]) -> str:
    indexes = sorted(t.index for t in turns)
    if not indexes:
        return "no turns"
    return f"turn {indexes[0]}" if len(indexes) == 1 else f"turns {', '.join(map(str, indexes))}"


def prompt_of(text: str, prompts: Sequence[str]) -> int | None:
    """The 1-based number of the prompt a request's newest user ``text`` carries, or None."""
    for number in range(len(prompts), 0, -1):
        if text == prompts[number - 1]:
            return number
    best: int | None = None
    for number, prompt in enumerate(prompts, start=1):
        if prompt and prompt in text and (best is None or len(prompt) >= len(prompts[best - 1])):
            best = number
    return best


def _subagent_scope(trajectory: Trajectory, sub: SubAgent, position: int) -> Scope:
    label = f"subagent {sub.name} #{position}"
    return Scope(label, narrow(trajectory, {t.index for t in sub.turns}, reply_thread=sub.turns),
                 turn_span(sub.turns))


def _resolve_subagent(scope: SubagentScope, trajectory: Trajectory) -> Resolution:
    matches = trajectory.agents.named(scope.name)
    if not matches:
        spawned = trajectory.agents.subagents
        seen = ", ".join(f"{s.name} (turn {s.spawn_turn})" for s in spawned)
        why = (f"the sub-agents spawned were: {seen}" if spawned else
               f"no spawn call was made (flowproof knows: {spawn_tool_names()})")
        return Resolution((), f"no spawn call names {scope.name}; {why}", "")
    if scope.ordinal is not None:
        if scope.ordinal > len(matches):
            return Resolution((), f"#{scope.ordinal} asks for more sub-agents named {scope.name} than "
                              f"the {len(matches)} spawned", "")
        chosen = [(scope.ordinal, matches[scope.ordinal - 1])]
    else:
        chosen = list(enumerate(matches, start=1))
    scopes = tuple(_subagent_scope(trajectory, sub, n) for n, sub in chosen)
    idle = [f"#{n} (spawned in turn {sub.spawn_turn})" for n, sub in chosen if not sub.ran]
    problem = (f"{', '.join(idle)} of the sub-agents named {scope.name} never ran: no sub-agent "
               "thread was found for its spawn call") if idle else None
    if len(scopes) == 1:
        summary = f"{scopes[0].label} ({scopes[0].detail})"
    else:
        parts = ", ".join(f"#{n} {s.detail}" for (n, _), s in zip(chosen, scopes, strict=True))
        summary = f"{len(scopes)} sub-agents named {scope.name}; the steps below apply to each ({parts})"
    return Resolution(scopes, problem, summary)


def _resolve_prompt(scope: PromptScope, trajectory: Trajectory, prompts: Sequence[str]) -> Resolution:
    agents = trajectory.agents
    roots = [t for t in trajectory.turns if agents.agent_of.get(t.index) is None]
    keep = {t.index for t in roots if prompt_of(t.request.prompt, prompts) == scope.number}
    for sub in agents.subagents:  # in spawn order, so a nested spawn follows its parent
        if sub.spawn_turn in keep:
            keep.update(t.index for t in sub.turns)
    label = f"prompt {scope.number}"
    if not keep:
        return Resolution((), f"no model call carried prompt {scope.number} as its newest user text "
                          "(the agent may not have received it)", "")
    scoped = narrow(trajectory, keep, reply_thread=None)
    scoped_roots = [t for t in scoped.turns if agents.agent_of.get(t.index) is None]
    scoped = _with_root_reply(scoped, trajectory, scoped_roots)
    detail = turn_span(scoped.turns)
    return Resolution((Scope(label, scoped, detail),), None, f"{label} ({detail})")


def _with_root_reply(scoped: Trajectory, whole: Trajectory, roots: list[Turn]) -> Trajectory:
    # The reply of a prompt is the agent's own answer to it, never a sub-agent's.
    reply = narrow(whole, {t.index for t in roots})
    return replace(scoped, reply=reply.reply, reply_absent_reason=reply.reply_absent_reason)


def resolve_scope(scope: SubagentScope | PromptScope, trajectory: Trajectory,
                  prompts: Sequence[str]) -> Resolution:
    """The scopes an ``in:`` covers in ``trajectory`` (``prompts``: the spec's prompt texts)."""
    if isinstance(scope, PromptScope):
        return _resolve_prompt(scope, trajectory, prompts)
    return _resolve_subagent(scope, trajectory)
