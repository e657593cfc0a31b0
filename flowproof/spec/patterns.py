"""``matches`` patterns that cannot hang a run.

Python's ``re`` backtracks without limit: ``(a|aa)+$`` against thirty ``a`` and a
``!`` runs for minutes, holding the interpreter lock so that not even SIGTERM is
handled. A `BoundedPattern` runs on the ``regex`` engine instead, which accepts
the same syntax as ``re`` (lookarounds and back-references included, which RE2
refuses, and with the same Unicode ``\\w``/``\\d``), gives each search a time
bound, and releases the interpreter lock while it searches, so signals are
handled at once. A search that hits the bound raises `PatternTimeout`; the
caller turns it into a failed assertion that names the clause.

Why not RE2: it is linear-time, but it rejects lookarounds and back-references
and matches ``\\w`` as ASCII only, so valid specs would stop parsing or start
failing. See docs/reliability.md.
"""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Callable
from typing import Any

__all__ = [
    "MATCH_SECONDS",
    "MAX_PATTERN_CHARS",
    "BoundedPattern",
    "PatternTimeout",
    "bound",
    "compile_bounded",
]

#: The time bound of one search. The engine checks its clock coarsely (a search stops
#: within about a second and a half of it on a loaded machine), so it is kept small.
MATCH_SECONDS = 0.5
#: A longer pattern is refused at parse time: nobody writes one by hand, and compiling an
#: enormous pattern is itself a way to stall the parser.
MAX_PATTERN_CHARS = 2000


class PatternTimeout(Exception):
    """A search ran past `MATCH_SECONDS` (the pattern backtracks catastrophically)."""

    def __init__(self, pattern: str, length: int) -> None:
        self.pattern = pattern
        self.length = length
        super().__init__(
            f"/{pattern}/ was stopped after {MATCH_SECONDS:g}s on a {length}-character value"
        )


class BoundedPattern:
    """A compiled ``matches`` pattern whose every search is time-bounded."""

    __slots__ = ("_compiled", "pattern")

    def __init__(self, pattern: str, compiled: Any) -> None:
        self.pattern = pattern
        self._compiled = compiled

    def search(self, text: str) -> bool:
        """True when the pattern occurs in ``text``; `PatternTimeout` past the bound."""
        try:
            found = self._compiled.search(text, timeout=MATCH_SECONDS, concurrent=True)
        except TimeoutError:
            raise PatternTimeout(self.pattern, len(text)) from None
        return found is not None

    def sub(self, repl: Callable[[Any], str], text: str) -> str:
        """``re.sub`` with the bound: every match replaced by ``repl(match)``; `PatternTimeout`
        past it (the volatile rules' replacement, `flowproof.normalize`)."""
        try:
            return str(self._compiled.sub(repl, text, timeout=MATCH_SECONDS, concurrent=True))
        except TimeoutError:
            raise PatternTimeout(self.pattern, len(text)) from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BoundedPattern) and other.pattern == self.pattern

    def __hash__(self) -> int:
        return hash(self.pattern)

    def __repr__(self) -> str:
        return f"BoundedPattern({self.pattern!r})"


def compile_bounded(text: str) -> BoundedPattern:
    """Compile a ``matches`` pattern (``re`` syntax); ValueError with the reason when broken."""
    if len(text) > MAX_PATTERN_CHARS:
        raise ValueError(
            f"the regular expression is {len(text)} characters long, over the "
            f"{MAX_PATTERN_CHARS}-character limit"
        )
    # Imported here: `regex` is ~5% of the proxy's start-up import (docs/hotpath.md), and a
    # spec without a `matches` pattern never needs it.
    import regex

    try:
        # Some valid patterns warn (possible nested set); a warning is not a broken pattern.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # `re` first: the spec language is `re` syntax, and its messages are the ones
            # users know. `regex` (VERSION0) accepts everything `re` does.
            re.compile(text)
            compiled = regex.compile(text, flags=regex.VERSION0)
    except (re.error, regex.error) as e:
        pos = getattr(e, "pos", None)
        where = f" at position {pos}" if pos is not None else ""
        reason = getattr(e, "msg", None) or str(e)
        raise ValueError(f"bad regular expression `{text}`: {reason}{where}") from None
    except (OverflowError, RecursionError, ValueError, MemoryError) as e:
        raise ValueError(f"bad regular expression `{text}`: {e}") from None
    return BoundedPattern(text, compiled)


#: The ``re`` flags a pattern carries over to ``regex`` (the two share these values).
_FLAGS = re.IGNORECASE | re.MULTILINE | re.DOTALL | re.VERBOSE | re.ASCII


@functools.lru_cache(maxsize=256)
def _bound(text: str, flags: int) -> BoundedPattern:
    import regex  # see compile_bounded

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return BoundedPattern(text, regex.compile(text, flags=flags | regex.VERSION0))


def bound(pattern: re.Pattern[str]) -> BoundedPattern:
    """The time-bounded form of a pattern ``re`` already compiled (a volatile rule's, checked
    when its spec loaded): the same source and flags on the ``regex`` engine."""
    return _bound(pattern.pattern, pattern.flags & _FLAGS)
