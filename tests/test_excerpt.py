"""Cutting two texts at their first difference."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from flowproof.excerpt import cut_pair, first_difference, window


def _naive_first_difference(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


class TestFirstDifference:
    def test_positions(self):
        """The first differing index; the shorter length for a prefix or equal texts."""
        assert first_difference("abc", "abd") == 2
        assert first_difference("ab", "abc") == 2
        assert first_difference("same", "same") == 4
        assert first_difference("", "x") == 0

    @given(st.text(alphabet="ab", max_size=1500), st.text(alphabet="ab", max_size=1500), st.text(max_size=1200))
    def test_agrees_with_a_character_by_character_scan(self, a, b, prefix):
        """Block by block (long values compare fast) yet the same index as a scan, for a shared
        prefix of any length, either side shorter, and a difference on either side of a block edge."""
        for x, y in ((a, b), (prefix + a, prefix + b), (prefix + a, prefix), (prefix, prefix)):
            assert first_difference(x, y) == _naive_first_difference(x, y)


class TestWindow:
    def test_ellipses_mark_the_cut_sides(self):
        """Text cut on the left or right gets an ellipsis on that side only."""
        assert window("0123456789", 0, 4) == "0123…"
        assert window("0123456789", 6, 4) == "…6789"
        assert window("0123456789", 2, 4) == "…2345…"


class TestCutPair:
    def test_short_texts_are_whole(self):
        """Texts that both fit are returned unchanged."""
        assert cut_pair("abc", "abd", width=10, before=3) == ("abc", "abd")

    def test_late_difference_is_shown(self):
        """Two long texts that differ only late are cut around the difference, not from the start."""
        a, b = "x" * 200 + "KQ311", "x" * 200 + "KQ999"
        ca, cb = cut_pair(a, b, width=20, before=5)
        assert "KQ311" in ca and "KQ999" in cb and ca.startswith("…")

    def test_equal_long_texts_start_at_the_beginning(self):
        """Equal texts (the difference is elsewhere) are shown from their start."""
        text = "y" * 50
        assert cut_pair(text, text, width=10, before=3) == ("y" * 10 + "…", "y" * 10 + "…")
