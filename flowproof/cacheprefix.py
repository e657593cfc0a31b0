"""The cache-prefix rule: each request keeps the previous request's prefix byte for byte.

A provider's prompt cache serves a request only as far as it starts with the
bytes of an earlier one, read in the provider's cache order (tools, system,
messages for Anthropic: ``cache_order`` in `flowproof.wire.providers`). So in a
conversation that continues (`flowproof.conversations`: request K+1 carries on
from request K, whatever its system prompt did), request K+1 must repeat every
root of request K unchanged, and extend only the conversation itself. A
timestamp in the system prompt, a tool list reordered per call, an edited
earlier message: each silently costs a full-price prompt on every turn, and
this rule names it.

The bodies compared are the recorded ones: a declared volatile span is a
placeholder on both sides, so it is never a break (docs/volatile.md).

Pure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from flowproof.excerpt import cut_pair, first_difference
from flowproof.outcome import AssertionResult, Mismatch
from flowproof.spec.types import CachePrefixAssertion
from flowproof.trajectory import Trajectory
from flowproof.turns import Turn
from flowproof.wire.prefix import CachePart, cache_parts

__all__ = ["CacheBreak", "cache_breaks", "evaluate_cache_prefix"]

_WIDTH, _BEFORE = 80, 30


@dataclass(frozen=True, slots=True)
class CacheBreak:
    """Where request ``later`` stops repeating request ``earlier`` (turn indexes), in conversation
    ``conversation``: the first differing field ``path``, the ``byte`` offset inside it (UTF-8),
    and both sides cut around it."""

    conversation: int
    earlier: int
    later: int
    path: str
    byte: int
    earlier_text: str
    later_text: str

    def render(self) -> str:
        return (f"conversation {self.conversation}: turn {self.later} does not keep turn {self.earlier}'s "
                f"prefix: {self.path} differs at byte {self.byte}\n"
                f"    turn {self.earlier}: {self.earlier_text}\n    turn {self.later}: {self.later_text}")


def _canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def _first_difference(a: Any, b: Any, path: str) -> tuple[str, str, str]:
    """The deepest path where ``a`` and ``b`` first differ, and both values there as text."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys_a, keys_b = list(a), list(b)
        for i, key in enumerate(keys_a):
            if i >= len(keys_b) or keys_b[i] != key:
                break  # a key added, removed or moved: the mapping itself is where they part
            if _canonical(a[key]) != _canonical(b[key]):
                return _first_difference(a[key], b[key], _join(path, key))
        return path or "(the body)", _canonical(a), _canonical(b)
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            if _canonical(x) != _canonical(y):
                return _first_difference(x, y, _join(path, i))
        return path or "(the body)", _canonical(a), _canonical(b)
    if isinstance(a, str) and isinstance(b, str):
        return path, a, b
    return path, _canonical(a), _canonical(b)


def _break(conversation: int, earlier: Turn, later: Turn, root: str, a: Any, b: Any) -> CacheBreak:
    path, text_a, text_b = _first_difference(a, b, root)
    at = first_difference(text_a, text_b)
    shown_a, shown_b = cut_pair(text_a, text_b, width=_WIDTH, before=_BEFORE)
    return CacheBreak(conversation, earlier.index, later.index, path, len(text_a[:at].encode("utf-8")),
                      json.dumps(shown_a, ensure_ascii=False), json.dumps(shown_b, ensure_ascii=False))


def _compare(conversation: int, earlier: Turn, later: Turn) -> CacheBreak | None:
    parts_a = cache_parts(earlier.request.provider, earlier.body)
    parts_b = {p.root: p for p in cache_parts(later.request.provider, later.body)}
    for part in parts_a:
        other: CachePart | None = parts_b.get(part.root)
        if other is None:
            continue
        if not part.present and not other.present:
            continue
        a = part.value if part.present else None
        b = other.value if other.present else None
        if part.growing and isinstance(a, list) and isinstance(b, list) and len(b) >= len(a):
            b = b[: len(a)]  # the conversation may grow: only what K sent must be repeated
        if _canonical(a) != _canonical(b) or part.present != other.present:
            return _break(conversation, earlier, later, part.root, a, b)
    return None


def cache_breaks(trajectory: Trajectory) -> list[CacheBreak]:
    """Every request that does not keep the prefix of the request it continues."""
    conversations = trajectory.conversations
    by_index = {t.index: t for t in trajectory.turns}
    found: list[CacheBreak] = []
    for later_index, earlier_index in sorted(conversations.previous.items()):
        earlier, later = by_index.get(earlier_index), by_index.get(later_index)
        if earlier is None or later is None:
            continue
        broken = _compare(conversations.number_of[later_index], earlier, later)
        if broken is not None:
            found.append(broken)
    return found


def evaluate_cache_prefix(step: CachePrefixAssertion, trajectory: Trajectory) -> AssertionResult:
    """``assert: cache prefix stable`` over every continuing conversation in ``trajectory``."""
    pairs = len([i for i in trajectory.conversations.previous if i in {t.index for t in trajectory.turns}])
    breaks = cache_breaks(trajectory)
    if not breaks:
        return AssertionResult(step, True, f"every request kept the previous request's prefix "
                               f"({pairs} continuation(s) checked)", step.location)
    lines = ["expected every request to start with the previous request's prefix, in the "
             "provider's cache order"]
    lines.extend("  " + b.render() for b in breaks)
    why = tuple(Mismatch("cache prefix", path=b.path, expected=b.earlier_text, actual=b.later_text,
                         turn=b.later) for b in breaks)
    return AssertionResult(step, False, "\n".join(lines), step.location, why)
