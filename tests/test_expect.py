"""Tests for flowproof.expect: the spec's matchers and messages as Python assertions."""

from __future__ import annotations

import pytest

import flowproof
from flowproof.cassette import loads_cassette
from flowproof.errors import SpecError
from flowproof.expect import (
    TrajectoryAssertionError,
    assert_no_tool_call,
    assert_reply,
    assert_tool_call,
    cassette_trajectory,
)

from .runner.helpers import BOOKING_TURNS, cassette_text


@pytest.fixture
def trajectory() -> flowproof.Trajectory:
    return cassette_trajectory(loads_cassette(cassette_text(BOOKING_TURNS), "booking.cassette.json"))


class TestExpect:
    def test_matching_call_passes_and_says_which(self, trajectory) -> None:
        """A matching call passes and the result names the call it matched."""
        result = assert_tool_call(trajectory, "create_booking where flight.id equals KQ311")
        assert result.passed and "call 2 of 2" in result.message

    def test_wrong_argument_fails_with_the_spec_message(self, trajectory) -> None:
        """A failing line raises AssertionError with what the call actually held."""
        with pytest.raises(AssertionError) as info:
            flowproof.assert_tool_call(trajectory, "create_booking where flight.id equals KQ999")
        text = str(info.value)
        assert text.startswith("expected create_booking where flight.id equals KQ999")
        assert "KQ311" in text
        # The same facts as data, for a test that wants to inspect them.
        assert isinstance(info.value, TrajectoryAssertionError)
        assert [(m.path, m.matcher, m.expected, m.actual, m.call) for m in info.value.mismatches] == [
            ("flight.id", "equals", "KQ999", "KQ311", 2)
        ]

    def test_no_tool_call(self, trajectory) -> None:
        """assert_no_tool_call passes for an uncalled tool and fails naming the offending call."""
        assert assert_no_tool_call(trajectory, "issue_refund").passed
        assert flowproof.assert_no_tool_call(trajectory, "create_booking where flight.id equals KQ999").passed
        with pytest.raises(AssertionError, match="but create_booking \\(call 2 of 2\\) was made"):
            assert_no_tool_call(trajectory, "create_booking")

    def test_reply(self, trajectory) -> None:
        """assert_reply is a substring test on the reply, failing with the reply shown."""
        assert assert_reply(trajectory, "booked").passed
        with pytest.raises(AssertionError, match="the reply is"):
            flowproof.assert_reply(trajectory, "cancelled")

    def test_absent_reply_is_not_empty_text(self) -> None:
        """With no reply the failure says the agent has not replied."""
        with pytest.raises(AssertionError, match="has not replied"):
            assert_reply(flowproof.build_trajectory([]), "x")

    def test_bad_line_is_a_spec_error(self, trajectory) -> None:
        """A line the spec language cannot parse raises SpecError naming the problem."""
        with pytest.raises(SpecError, match="where"):
            assert_tool_call(trajectory, "create_booking wher flight.id equals KQ311")

    def test_the_documented_example(self) -> None:
        """docs/pytest.md's example holds against the bundled booking cassette."""
        from pathlib import Path

        path = Path(__file__).resolve().parents[1] / "example_specs" / "booking.cassette.json"
        trajectory = flowproof.cassette_trajectory(flowproof.load_cassette(path))
        flowproof.assert_tool_call(trajectory, "create_booking where flight.id equals KQ311")
        flowproof.assert_no_tool_call(trajectory, "issue_refund")
        assert flowproof.assert_reply(trajectory, "booked").passed
