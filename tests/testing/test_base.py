"""Tests for flowproof.testing.base: text and argument splitting."""

from __future__ import annotations

from flowproof.testing import (
    split_arguments,
    split_text,
)


class TestSplitting:
    def test_split_helpers_rejoin_exactly(self) -> None:
        """Text and argument pieces join back to the original, in several pieces."""
        text = "Hello  there,\nworld! "
        assert "".join(split_text(text)) == text and len(split_text(text)) == 3
        args = '{"city":"Paris","days":3}'
        assert "".join(split_arguments(args)) == args and len(split_arguments(args)) >= 3

