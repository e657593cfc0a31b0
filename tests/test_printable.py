"""flowproof.printable: nothing that acts on a terminal survives; everything else is kept."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from flowproof.printable import UNPRINTABLE, printable


class TestPrintable:
    def test_osc_title_clipboard_and_cursor_movement_are_shown(self) -> None:
        text = "ok\x1b]0;title\x07\x1b]52;c;Zm9v\x1b\\\x1b[2A\x1b[K\x9b1m\r\u202eend"
        assert printable(text) == r"ok\x1b]0;title\x07\x1b]52;c;Zm9v\x1b\\x1b[2A\x1b[K\x9b1m\x0d\u202eend"

    def test_tabs_line_breaks_and_ordinary_unicode_stay(self) -> None:
        text = "Nairobi\tKQ311\nBooked ✓ — naïve 東京 مرحبا"
        assert printable(text) is text

    def test_crlf_is_a_line_break(self) -> None:
        assert printable("a\r\nb\x1b") == "a\nb\\x1b"

    @given(st.text())
    def test_no_unprintable_character_is_left_and_it_is_idempotent(self, text: str) -> None:
        shown = printable(text)
        assert not UNPRINTABLE.search(shown)
        assert printable(shown) == shown

    @given(st.text(alphabet=st.characters(
        blacklist_categories=("Cc", "Cs"),
        blacklist_characters="\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\ufffe\uffff",
    )))
    def test_text_without_controls_is_unchanged(self, text: str) -> None:
        assert printable(text) == text
