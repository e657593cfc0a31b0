"""Live-like mode: answers that differ from a recording the way a live model's do, deterministically.

A live model, asked the same thing twice, mints new tool-call ids, may emit the
argument keys of a call in another order, and changes the case and spacing of
its prose. `LiveLike` makes the fake server do the same to every answer, for
every API, streamed or not; everything is derived from ``seed`` and the call's
number on the server, so a test is reproducible and two seeds differ.

What it never changes: tool names, argument values, which calls are made and
their order, the finish reason, and the words of the text (lowercased, with
whitespace collapsed and trimmed, the text is the scripted one).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass, replace
from typing import Any

from flowproof.testing.script import Reply, ScriptedCall

__all__ = ["LiveLike", "normalized_text"]

_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass(frozen=True, slots=True)
class LiveLike:
    """How live-like the answers are; each part can be turned off on its own.

    - ``ids``: every id a response carries (tool-call ids ``call_…`` /
      ``toolu_…``, Gemini function-call ids, Responses item and response ids,
      message and completion ids) is freshly minted, scripted ``call_id`` values
      included.
    - ``key_order``: the keys of each tool call's JSON object arguments (nested
      objects too) come in another order than the script's.
    - ``prose``: the text changes case and whitespace, never its words.
    """

    seed: int = 0
    ids: bool = True
    key_order: bool = True
    prose: bool = True

    def _random(self, *parts: object) -> random.Random:
        digest = hashlib.sha256("/".join(map(str, (self.seed, *parts))).encode()).digest()
        return random.Random(int.from_bytes(digest[:8], "big"))

    def mint(self, prefix: str, call: int, kind: str, index: int = 0, *, length: int = 24) -> str:
        """A fresh id for the ``index``-th ``kind`` of call number ``call``: ``prefix`` + random characters."""
        rng = self._random("id", call, kind, index)
        return prefix + "".join(rng.choice(_ALPHABET) for _ in range(length))

    def apply(self, reply: Reply, call: int) -> Reply:
        """``reply`` as a live model would say it on call number ``call`` (ids are minted by the renderers)."""
        content = self.reword_case_and_space(reply.content, call) if self.prose else reply.content
        calls = tuple(self.reorder(c, call, i) for i, c in enumerate(reply.calls)) if self.key_order else reply.calls
        return replace(reply, content=content, calls=calls)

    def reorder(self, scripted: ScriptedCall, call: int, index: int) -> ScriptedCall:
        """The call with its object arguments' keys in another order (other arguments untouched)."""
        try:
            arguments = json.loads(scripted.arguments)
        except ValueError:
            return scripted
        if not isinstance(arguments, dict):
            return scripted
        rng = self._random("keys", call, index)
        shuffled = _shuffle_keys(arguments, rng)
        raw = json.dumps(shuffled, separators=(",", ":"), ensure_ascii=False)
        return replace(scripted, arguments=raw)

    def reword_case_and_space(self, text: str, call: int) -> str:
        """``text`` with other case and whitespace (words kept); unchanged only when it has neither."""
        if not text:
            return text
        rng = self._random("prose", call)

        def space(match: re.Match[str]) -> str:
            return rng.choice([" ", "  ", "\n", match.group(0)])

        def word(match: re.Match[str]) -> str:
            w = match.group(0)
            if rng.random() < 0.35 and w[0].isascii() and w[0].isalpha():
                return w[0].swapcase() + w[1:]
            return w

        changed = re.sub(r"\S+", word, re.sub(r"\s+", space, text))
        if rng.random() < 0.5:
            changed += "\n"
        if changed == text:
            # Make sure something changed: the first ASCII letter's case, else trailing whitespace.
            position = next((i for i, ch in enumerate(text) if ch.isascii() and ch.isalpha()), None)
            if position is None:
                return text + " "
            changed = text[:position] + text[position].swapcase() + text[position + 1 :]
        return changed


def _shuffle_keys(value: Any, rng: random.Random) -> Any:
    if isinstance(value, list):
        return [_shuffle_keys(v, rng) for v in value]
    if not isinstance(value, dict):
        return value
    keys = list(value)
    order = keys[:]
    rng.shuffle(order)
    if len(keys) > 1 and order == keys:
        order = keys[1:] + keys[:1]  # never the scripted order
    return {k: _shuffle_keys(value[k], rng) for k in order}


def normalized_text(text: str) -> str:
    """Text trimmed, whitespace collapsed and lowercased: what live-like prose never changes."""
    return " ".join(text.split()).lower()
