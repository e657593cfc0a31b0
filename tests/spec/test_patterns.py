"""Time-bounded `matches` patterns."""

from __future__ import annotations

import time

import pytest

from flowproof.spec.patterns import (
    MATCH_SECONDS,
    MAX_PATTERN_CHARS,
    BoundedPattern,
    PatternTimeout,
    compile_bounded,
)


class TestCompile:
    def test_re_syntax_including_lookarounds_and_backreferences(self) -> None:
        """What `re` accepts is accepted (RE2 would refuse these two)."""
        assert compile_bounded(r"(?<=K)Q\d+").search("KQ311")
        assert compile_bounded(r"(a)\1").search("xaa")
        assert not compile_bounded(r"^\d{3}$").search("12a")

    def test_unicode_word_characters_match_as_in_re(self) -> None:
        assert compile_bounded(r"^\w+$").search("Zürich")

    def test_broken_pattern_is_a_value_error_with_the_reason(self) -> None:
        with pytest.raises(ValueError, match=r"bad regular expression `\[\[a`: .*position"):
            compile_bounded("[[a")

    def test_over_long_pattern_is_refused(self) -> None:
        with pytest.raises(ValueError, match="limit"):
            compile_bounded("a" * (MAX_PATTERN_CHARS + 1))

    def test_equality_is_by_pattern_text(self) -> None:
        assert compile_bounded("a+") == compile_bounded("a+") != compile_bounded("b+")
        assert isinstance(compile_bounded("a"), BoundedPattern)


class TestBound:
    def test_catastrophic_search_times_out(self) -> None:
        """`(a|aa)+$` on 30 `a` and `!` stops at the bound instead of running for minutes."""
        pattern = compile_bounded("(a|aa)+$")
        started = time.monotonic()
        with pytest.raises(PatternTimeout) as caught:
            pattern.search("a" * 30 + "!")
        assert time.monotonic() - started < MATCH_SECONDS + 5
        assert caught.value.length == 31 and "(a|aa)+$" in str(caught.value)
