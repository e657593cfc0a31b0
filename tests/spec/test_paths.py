"""Tests for dotted paths: split, resolve, format."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowproof.spec.paths import format_path, resolve_path, split_path


class TestSplitPath:
    def test_splits_on_dots(self):
        """A dotted path becomes its segments, digits kept as text."""
        assert split_path("passengers.0.name") == ("passengers", "0", "name")

    def test_single_segment(self):
        """A path without dots is one segment."""
        assert split_path("destination") == ("destination",)

    @pytest.mark.parametrize("text", ["", ".a", "a.", "a..b", "."], ids=repr)
    def test_rejects_empty_segments(self, text):
        """An empty path or an empty segment is a ValueError."""
        with pytest.raises(ValueError):
            split_path(text)

    def test_rejects_whitespace(self):
        """A segment with whitespace is a ValueError."""
        with pytest.raises(ValueError, match="whitespace"):
            split_path("a. b")

    def test_empty_segment_message(self):
        """The message names the path and the problem."""
        with pytest.raises(ValueError) as info:
            split_path("a..b")
        assert str(info.value) == (
            "the path `a..b` has an empty segment (two dots, or a dot at an end)"
        )


class TestResolvePath:
    DATA = {"flight": {"id": "KQ311"}, "passengers": [{"name": "Casey"}], "0": "zero",
            "none": None}

    def test_nested_key(self):
        """Mapping keys are followed in order."""
        assert resolve_path(self.DATA, ("flight", "id")) == (True, "KQ311")

    def test_list_index(self):
        """A digit segment indexes a list."""
        assert resolve_path(self.DATA, ("passengers", "0", "name")) == (True, "Casey")

    def test_digit_key_in_mapping(self):
        """A digit segment is a plain key of a mapping."""
        assert resolve_path(self.DATA, ("0",)) == (True, "zero")

    def test_out_of_range(self):
        """An index past the end is not found."""
        assert resolve_path(self.DATA, ("passengers", "3")) == (False, None)

    def test_negative_index(self):
        """A negative index never matches a list element."""
        assert resolve_path(self.DATA, ("passengers", "-1")) == (False, None)

    def test_non_digit_on_list(self):
        """A key segment on a list is not found."""
        assert resolve_path(self.DATA, ("passengers", "name")) == (False, None)

    def test_missing_key(self):
        """A missing key is not found."""
        assert resolve_path(self.DATA, ("flight", "gate")) == (False, None)

    def test_into_scalar(self):
        """A scalar has no children."""
        assert resolve_path(self.DATA, ("flight", "id", "x")) == (False, None)

    def test_null_value_is_found(self):
        """A key holding null is found, with None as its value."""
        assert resolve_path(self.DATA, ("none",)) == (True, None)

    def test_empty_segments(self):
        """No segments resolve to the value itself."""
        assert resolve_path(self.DATA, ()) == (True, self.DATA)

    def test_unicode_digit_is_not_an_index(self):
        """A non-ASCII digit does not index a list (and does not crash)."""
        assert resolve_path([1, 2], ("²",)) == (False, None)

    @given(st.recursive(st.none() | st.integers() | st.text(),
                        lambda c: st.lists(c) | st.dictionaries(st.text(), c), max_leaves=10),
           st.lists(st.text(), max_size=4))
    def test_never_raises(self, value, segments):
        """Any JSON-like value and any segments give a (bool, value) pair."""
        found, _ = resolve_path(value, tuple(segments))
        assert isinstance(found, bool)


class TestFormatPath:
    def test_round_trip(self):
        """format_path inverts split_path."""
        assert format_path(split_path("a.0.b")) == "a.0.b"


class TestBracketIndex:
    @pytest.mark.parametrize(
        ("text", "dotted"),
        [("items[0].status", "items.0.status"), ("a[0][1]", "a.0.1"), ("[2].x", "2.x")],
    )
    def test_bracket_index_is_refused_with_the_dotted_spelling(self, text, dotted):
        """A bracket index is a ValueError whose message spells the dotted path."""
        with pytest.raises(ValueError) as info:
            split_path(text)
        assert str(info.value) == (
            f"the path `{text}` indexes a list with brackets; write `{dotted}`"
        )

    @pytest.mark.parametrize("text", ["tags[]", "a[x]", "price_[usd]"])
    def test_brackets_without_a_number_stay_a_key(self, text):
        """Brackets that hold no index are part of a plain key."""
        assert split_path(text) == (text,)
