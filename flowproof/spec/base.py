"""The two spec types the proxy needs, apart from the rest of the parsed spec.

`Location` (every node's place in its file) and `VolatileRule` travel in a flow's proxy
options, and the normalizer builds its presets from them at import. Every dataclass costs
about a millisecond to create, and `flowproof.spec.types` holds some twenty more that
only the runner's judge reads: kept here, mitmdump's start does not pay for those
(docs/performance.md). `flowproof.spec.types` re-exports both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Location", "VolatileRule"]


@dataclass(frozen=True, slots=True)
class Location:
    """Where a node sits in its spec file (1-based line and column)."""

    path: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}"


@dataclass(frozen=True, slots=True)
class VolatileRule:
    """A declared volatile span: a body path, plus an optional regex for the span inside a string.

    Matched spans are replaced by ``«volatile:<name>»`` before hashing.
    """

    name: str
    path: str
    segments: tuple[str, ...]
    pattern: re.Pattern[str] | None
    location: Location
