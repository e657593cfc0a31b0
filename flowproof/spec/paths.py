"""Dotted paths into JSON-like values: ``passengers.0.name``.

A path is split on dots into segments. A digit segment indexes a list, or is a
plain key of a mapping (JSON object keys are strings, so ``"0"`` can be a key).
The same syntax names tool-call arguments in ``where`` clauses and request-body
fields in ``volatile:`` rules (which also accept ``*`` for "every element").
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["format_path", "resolve_path", "split_path"]

# `passengers[0]`: an index written in brackets, which the dotted syntax spells `passengers.0`.
_BRACKET_INDEX = re.compile(r"\[([0-9]+)\]")


def split_path(text: str) -> tuple[str, ...]:
    """Split ``a.b.0`` into ``("a", "b", "0")``.

    Raises ValueError (with a sentence saying what is wrong) for an empty path, an
    empty segment (``a..b``, ``.a``, ``a.``), whitespace, or a bracket index
    (``passengers[0]``, spelled ``passengers.0`` here); callers turn that into a
    SpecError at the right file position.

    >>> split_path("passengers.0.name")
    ('passengers', '0', 'name')
    """
    if not text:
        raise ValueError("the path is empty")
    segments = tuple(text.split("."))
    if any(not s for s in segments):
        raise ValueError(f"the path `{text}` has an empty segment (two dots, or a dot at an end)")
    if any(s != s.strip() or any(c.isspace() for c in s) for s in segments):
        raise ValueError(f"the path `{text}` contains whitespace")
    if _BRACKET_INDEX.search(text):
        # Read as a key it would never be found, and a guard on it would pass vacuously.
        dotted = _BRACKET_INDEX.sub(r".\1", text).lstrip(".")
        raise ValueError(f"the path `{text}` indexes a list with brackets; write `{dotted}`")
    return segments


def resolve_path(value: Any, segments: Sequence[str]) -> tuple[bool, Any]:
    """Follow ``segments`` into ``value``; return ``(found, value_there)``.

    A mapping is indexed by the segment as a key. A list is indexed by a digit
    segment (``"0"``, ``"12"``); negative or non-digit segments never match a list
    element. Anything else (a string, a number, None) has no children. Never raises.

    >>> resolve_path({"flight": {"id": "KQ311"}}, ("flight", "id"))
    (True, 'KQ311')
    >>> resolve_path({"a": [1, 2]}, ("a", "5"))
    (False, None)
    """
    current = value
    for segment in segments:
        if isinstance(current, Mapping):
            if segment not in current:
                return False, None
            current = current[segment]
        elif isinstance(current, list | tuple):
            # isdigit() also accepts e.g. superscript digits that int() rejects.
            if not (segment.isascii() and segment.isdigit()):
                return False, None
            index = int(segment)
            if index >= len(current):
                return False, None
            current = current[index]
        else:
            return False, None
    return True, current


def format_path(segments: Sequence[str]) -> str:
    """Join segments back into the spec's dotted syntax: ``("a", "0")`` -> ``a.0``."""
    return ".".join(segments)
