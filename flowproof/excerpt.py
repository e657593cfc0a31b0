"""Cutting two texts at their first difference: the one owner of that rule.

Reports that show a recorded and a live value side by side (replay divergence,
compare drift, the heal diff) cut long values to a window around where they
first differ. Cutting each from its start would show two identical excerpts
whenever the texts differ only past the cut, hiding the very change reported.

Pure.

>>> first_difference("book KQ311", "book KQ312")
9
>>> cut_pair("a" * 50 + "X", "a" * 50 + "Y", width=10, before=3)
('…aaaX', '…aaaY')
"""

from __future__ import annotations

__all__ = ["cut_pair", "first_difference", "window"]

ELLIPSIS = "…"


#: Characters compared at once by `first_difference` before it looks at single ones.
_BLOCK = 512


def first_difference(a: str, b: str) -> int:
    """The index of the first character where ``a`` and ``b`` differ (the shorter length
    when one is a prefix of the other, including when they are equal)."""
    n = min(len(a), len(b))
    # Whole blocks compared as slices first (in C), then the differing block by character:
    # a report compares 50 kB values, where a loop over every character took milliseconds.
    start = 0
    while start < n and a[start:start + _BLOCK] == b[start:start + _BLOCK]:
        start += _BLOCK
    for i in range(start, min(start + _BLOCK, n)):
        if a[i] != b[i]:
            return i
    return n


def window(text: str, start: int, width: int) -> str:
    """``text[start:start + width]`` with ``…`` where text was cut off on either side."""
    end = start + width
    return (ELLIPSIS if start > 0 else "") + text[start:end] + (ELLIPSIS if end < len(text) else "")


def cut_pair(a: str, b: str, *, width: int, before: int) -> tuple[str, str]:
    """Both texts cut to the same ``width`` window, starting ``before`` characters ahead of
    their first difference; texts that both fit are returned whole, equal texts from the start."""
    if len(a) <= width and len(b) <= width:
        return a, b
    at = first_difference(a, b) if a != b else 0
    start = max(0, at - before)
    return window(a, start, width), window(b, start, width)
