"""Sub-agents from the wire: spawn calls, the child threads they started, and what came back.

Every turn of a run belongs to one agent: the root (the agent the flow
started, with its side calls) or a sub-agent. A sub-agent is found by the
three links of its family's row in `flowproof.families`: the spawn call in a
parent's response, its own thread (a conversation, `flowproof.conversations`,
or for a handoff the rest of the conversation it was handed), and its result
reaching the parent. Spawns are read in turn order, so a sub-agent spawned by a
sub-agent has that sub-agent as its parent.

Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from flowproof.conversations import Conversations
from flowproof.families import (
    ANSWER_IN_RESULT,
    FINAL_ANSWER,
    HANDOFF_LINK,
    SPAWN_RESULT,
    family,
    names_match,
    spawn_of,
)
from flowproof.turns import FinishReason, ToolCall, Turn

__all__ = ["AgentTree", "SubAgent", "build_agents", "final_answer"]


@dataclass(frozen=True, slots=True)
class SubAgent:
    """One spawn call and what became of it.

    ``number`` counts sub-agents from 0 in spawn order; ``ordinal`` counts from 1 among those
    with the same name (``in: "subagent Explore #2"``). ``parent`` is the spawning agent's
    number, None for the root. ``turns`` is the child's own thread (empty: it never ran);
    ``result_turn`` the index of the parent request that received its result (None: it did
    not come back; for a handoff, the child's last turn when it gave a final answer).
    """

    number: int
    name: str
    family: str
    call: ToolCall
    spawn_turn: int
    parent: int | None
    ordinal: int
    turns: tuple[Turn, ...]
    result_turn: int | None

    @property
    def ran(self) -> bool:
        return bool(self.turns)

    @property
    def returned(self) -> bool:
        return self.result_turn is not None

    @property
    def answer(self) -> str | None:
        return final_answer(self.turns)

    def label(self) -> str:
        return f"{self.name} #{self.ordinal}"

    def describe(self) -> str:
        """One line: ``Explore #1 (claude-code): spawned in turn 0, ran in turns 2, 3, result in turn 4``."""
        indexes = sorted(t.index for t in self.turns)
        ran = f"ran in turn(s) {', '.join(map(str, indexes))}" if indexes else "never ran"
        back = f"result in turn {self.result_turn}" if self.result_turn is not None else "no result came back"
        return f"{self.label()} ({self.family}): spawned in turn {self.spawn_turn}, {ran}, {back}"

    def to_json(self) -> dict[str, object]:
        return {"number": self.number, "name": self.name, "label": self.label(), "family": self.family,
                "parent": self.parent, "spawn_turn": self.spawn_turn,
                "turns": sorted(t.index for t in self.turns), "result_turn": self.result_turn,
                "text": self.describe()}


@dataclass(frozen=True, slots=True)
class AgentTree:
    """The sub-agents of a run and the agent each turn belongs to (None: the root)."""

    subagents: tuple[SubAgent, ...]
    agent_of: dict[int, int | None]

    def named(self, name: str) -> tuple[SubAgent, ...]:
        """The sub-agents whose spawn call names ``name``, in spawn order."""
        return tuple(s for s in self.subagents if names_match(name, s.name))

    def children(self, parent: int | None) -> tuple[SubAgent, ...]:
        return tuple(s for s in self.subagents if s.parent == parent)

    def descendants(self, number: int) -> tuple[SubAgent, ...]:
        out: list[SubAgent] = []
        for child in self.children(number):
            out.append(child)
            out.extend(self.descendants(child.number))
        return tuple(out)

    def root_turns(self, turns: Sequence[Turn]) -> tuple[Turn, ...]:
        return tuple(t for t in turns if self.agent_of.get(t.index) is None)

    def label_of(self, index: int) -> str | None:
        """The sub-agent a turn belongs to (``Explore #1``), None for the root agent."""
        number = self.agent_of.get(index)
        return self.subagents[number].label() if number is not None else None

    def lines(self) -> list[str]:
        """The tree as indented text: the agent the flow started, then each sub-agent under its
        parent (empty when there is none)."""
        if not self.subagents:
            return []
        out = ["the agent"]

        def walk(parent: int | None, depth: int) -> None:
            for child in self.children(parent):
                out.append("  " * depth + "└─ " + child.describe())
                walk(child.number, depth + 1)

        walk(None, 1)
        return out


def final_answer(turns: Sequence[Turn]) -> str | None:
    """The text the last turn answered with, or None when it ended in a tool call (or failed)."""
    if not turns:
        return None
    response = max(turns, key=lambda t: t.index).response
    if response is None or response.tool_calls or response.finish_reason is FinishReason.TOOL_CALLS:
        return None
    return response.text


def _result_turn(row_result: str, parent_turns: Sequence[Turn], spawn_turn: int, call: ToolCall,
                 child: tuple[Turn, ...]) -> int | None:
    later = [t for t in parent_turns if t.index > spawn_turn]
    if row_result == SPAWN_RESULT:
        for turn in later:
            if any(call.call_id is not None and r.call_id == call.call_id for r in turn.request.tool_results):
                return turn.index
        return None
    if row_result == ANSWER_IN_RESULT:
        answer = final_answer(child)
        if not answer or not answer.strip():
            return None
        for turn in later:
            if any(answer.strip() in r.content for r in turn.request.tool_results):
                return turn.index
        return None
    if row_result == FINAL_ANSWER and final_answer(child) is not None:
        return max(child, key=lambda t: t.index).index
    return None


def build_agents(turns: Sequence[Turn], conversations: Conversations) -> AgentTree:
    """Find every sub-agent of ``turns`` (abandoned turns are left out)."""
    ordered = sorted((t for t in turns if not t.abandoned), key=lambda t: t.index)
    agent_of: dict[int, int | None] = {t.index: None for t in ordered}
    claimed: set[int] = set()  # conversations already a sub-agent's thread
    found: list[SubAgent] = []
    counts: dict[str, int] = {}
    for turn in ordered:
        if turn.response is None:
            continue
        for call in turn.response.tool_calls:
            spawn = spawn_of(call.name, call.arguments if call.is_json else None)
            if spawn is None:
                continue
            row = family(spawn.family)
            number = len(found)
            parent = agent_of.get(turn.index)
            child: tuple[Turn, ...] = ()
            if row.link == HANDOFF_LINK:
                child = _handoff_child(ordered, turn, call, conversations)
            elif spawn.prompt:
                child = _prompted_child(ordered, turn, spawn.prompt, conversations, claimed)
            for t in child:
                agent_of[t.index] = number
            parent_turns = [t for t in ordered if agent_of.get(t.index) == parent]
            result = _result_turn(row.result, parent_turns, turn.index, call, child)
            key = spawn.name.lower()
            counts[key] = counts.get(key, 0) + 1
            found.append(SubAgent(number, spawn.name, spawn.family, call, turn.index, parent,
                                  counts[key], child, result))
    return AgentTree(tuple(found), agent_of)


def _prompted_child(ordered: Sequence[Turn], spawn_turn: Turn, prompt: str,
                    conversations: Conversations, claimed: set[int]) -> tuple[Turn, ...]:
    own = conversations.number_of.get(spawn_turn.index)
    wanted = prompt.strip()
    for conversation in conversations.all:
        first = conversation.first
        if (conversation.number in claimed or conversation.number == own
                or first.index <= spawn_turn.index or wanted not in first.request.prompt):
            continue
        claimed.add(conversation.number)
        return conversation.turns
    return ()


def _handoff_child(ordered: Sequence[Turn], spawn_turn: Turn, call: ToolCall,
                   conversations: Conversations) -> tuple[Turn, ...]:
    for turn in ordered:
        if turn.index <= spawn_turn.index:
            continue
        carried = any(
            (call.call_id is not None and r.call_id == call.call_id)
            or (call.call_id is None and r.name == call.name)
            for r in turn.request.tool_results
        )
        if carried:
            return (turn, *conversations.later(turn))
    return ()
