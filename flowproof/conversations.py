"""Conversations that continue: which earlier model call each request carries on from.

A request *continues* an earlier one when its conversation list (messages,
input items, contents: `flowproof.wire.prefix.conversation_items`) is longer
and the part it added after the earlier request's items holds the earlier
response: every tool-call id it returned, or, without ids, its tool names or
its reply text (and then most of the earlier items are unchanged too, so two
short "OK"s in unrelated conversations do not join). Nothing else is read: the
system prompt may change (that is what the cache-prefix rule catches), and a
side call in between (a title call) is a conversation of its own, not a break.

This is not the reply rule's thread (docs/design.md#reply groups by system
prompt); it is what the cache-prefix rule and sub-agent threads need.

Pure.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flowproof.turns import Turn
from flowproof.wire.prefix import conversation_items

__all__ = ["Conversation", "Conversations", "group_conversations"]


@dataclass(frozen=True, slots=True)
class Conversation:
    """The turns of one conversation in index order; ``number`` counts conversations by first turn."""

    number: int
    turns: tuple[Turn, ...]

    @property
    def first(self) -> Turn:
        return self.turns[0]


@dataclass(frozen=True, slots=True)
class Conversations:
    """Every conversation of a run, and for each turn the earlier turn it continues (if any)."""

    all: tuple[Conversation, ...]
    #: turn index -> the index of the turn it continues
    previous: dict[int, int]
    #: turn index -> its conversation's number
    number_of: dict[int, int]

    def of(self, turn: Turn) -> Conversation | None:
        number = self.number_of.get(turn.index)
        return self.all[number] if number is not None else None

    def later(self, turn: Turn) -> tuple[Turn, ...]:
        """The turns that continue ``turn``, directly or through others, in index order."""
        found = {turn.index}
        out: list[Turn] = []
        conversation = self.of(turn)
        for other in conversation.turns if conversation is not None else ():
            if self.previous.get(other.index) in found:
                found.add(other.index)
                out.append(other)
        return tuple(out)


def _canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _echoes(earlier: Turn, old: tuple[Any, ...], new: tuple[Any, ...]) -> bool:
    """True when ``new`` (items after ``old``'s length) carries ``earlier``'s response."""
    response = earlier.response
    if response is None:
        return False
    added = _canonical(list(new))
    ids = [c.call_id for c in response.tool_calls if c.call_id]
    if ids:
        return all(_canonical(i) in added for i in ids)
    if response.tool_calls:
        markers = [_canonical(c.name) for c in response.tool_calls]
    elif response.text.strip():
        markers = [_canonical(response.text)[1:-1]]
    else:
        return False
    return all(m in added for m in markers)


def _mostly_kept(old: tuple[Any, ...], items: tuple[Any, ...]) -> bool:
    kept = sum(_canonical(a) == _canonical(b) for a, b in zip(old, items, strict=False))
    return kept * 2 >= len(old)


def group_conversations(turns: Sequence[Turn]) -> Conversations:
    """Group ``turns`` (abandoned ones are left out) into conversations."""
    ordered = sorted((t for t in turns if not t.abandoned), key=lambda t: t.index)
    items = {t.index: conversation_items(t.request.provider, t.body) for t in ordered}
    previous: dict[int, int] = {}
    for position, turn in enumerate(ordered):
        mine = items[turn.index]
        if not mine:
            continue
        for earlier in reversed(ordered[:position]):
            old = items[earlier.index]
            if earlier.request.provider != turn.request.provider or not old or len(old) >= len(mine):
                continue
            new = mine[len(old):]
            has_ids = earlier.response is not None and any(c.call_id for c in earlier.response.tool_calls)
            if _echoes(earlier, old, new) and (has_ids or _mostly_kept(old, mine)):
                previous[turn.index] = earlier.index
                break
    number_of: dict[int, int] = {}
    groups: list[list[Turn]] = []
    for turn in ordered:
        before = previous.get(turn.index)
        if before is not None and before in number_of:
            number = number_of[before]
        else:
            number = len(groups)
            groups.append([])
        number_of[turn.index] = number
        groups[number].append(turn)
    return Conversations(
        all=tuple(Conversation(n, tuple(g)) for n, g in enumerate(groups)),
        previous=previous,
        number_of=number_of,
    )
