"""Tests for flowproof.runner.report: text, JSON, JUnit, heal diff, show."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

from flowproof.cassette import loads_cassette
from flowproof.errors import EXIT_ASSERTION, EXIT_DIVERGENCE, EXIT_OK
from flowproof.runner.flow import FlowResult
from flowproof.runner.report import (
    junit_xml,
    render_json,
    render_text,
    show_cassette,
    worst_exit,
)
from flowproof.verdict import StepResult

from .helpers import BOOKING_TURNS, cassette_text


def result(code: int = EXIT_OK, **kw) -> FlowResult:
    base = dict(spec_path=Path("booking.flow.yaml"), name="Booking", mode="replay", exit_code=code,
                cassette=Path("booking.cassette.json"))
    base.update(kw)
    return FlowResult(**base)


def cassette(turns, route="proxy"):
    return loads_cassette(cassette_text(turns, route), "c.json")


class TestText:
    def test_passing_flow(self) -> None:
        """A passing flow shows ✓ per step and ends with 'Nothing to do.'."""
        text = render_text([result(steps=(StepResult(True, "ok", None, "assert: reply contains booked"),))])
        assert "✓ Booking [replay]" in text and "✓ assert: reply contains booked" in text
        assert text.endswith("Nothing to do.")

    def test_failing_step_shows_message_and_location(self) -> None:
        """A failed step shows ✗, its location and its message."""
        step = StepResult(False, "the agent has not replied", "booking.flow.yaml:9:5", "assert: reply contains booked")
        text = render_text([result(EXIT_ASSERTION, steps=(step,))])
        assert "✗ assert: reply contains booked (booking.flow.yaml:9:5)" in text
        assert "the agent has not replied" in text
        assert text.splitlines()[-1].startswith("Fix the agent")

    def test_divergence_says_how_to_rerecord(self) -> None:
        """A divergence report includes its text and ends with the record command."""
        text = render_text([result(EXIT_DIVERGENCE, divergences=("book.flight.id: recorded KQ311, replayed KQ999",))])
        assert "replayed KQ999" in text
        assert "flowproof-run booking.flow.yaml --record" in text.splitlines()[-1]

    def test_several_flows_end_with_one_table(self) -> None:
        """Several flows end with a table: a header and one aligned row per flow, in run order."""
        text = render_text([
            result(duration=1.25),
            result(EXIT_ASSERTION, spec_path=Path("deep/refund.flow.yaml"), name="Refund guard"),
        ])
        table = text.split("\n\n")[-2].splitlines()
        assert table[1].split() == ["✓", "passed", "replay", "1.2s", "booking.flow.yaml", "Booking"]
        assert table[2].split()[:4] == ["✗", "assertion", "failed", "replay"] and table[2].endswith("Refund guard")
        assert table[1].index("booking.flow.yaml") == table[2].index("deep/refund.flow.yaml")
        assert "1 of 2 flow(s) passed" in text

    def test_one_flow_has_no_table(self) -> None:
        """A single flow's report is not followed by a one-row table."""
        assert "verdict" not in render_text([result()])

    def test_worst_exit(self) -> None:
        """Several flows exit with the worst code."""
        assert worst_exit([result(EXIT_OK), result(EXIT_DIVERGENCE), result(EXIT_ASSERTION)]) == EXIT_DIVERGENCE
        assert worst_exit([]) == EXIT_OK


class TestMachine:
    def test_json(self) -> None:
        """The JSON report carries the exit code and each flow's verdict."""
        doc = json.loads(render_json([result(EXIT_ASSERTION)]))
        assert doc["exit_code"] == EXIT_ASSERTION
        assert doc["flows"][0]["verdict"] == "assertion failed"

    def test_junit(self) -> None:
        """JUnit XML has one testcase per flow and marks failures."""
        root = ET.fromstring(junit_xml([result(), result(EXIT_DIVERGENCE, name="Other")]).split("\n", 1)[1])
        assert root.get("tests") == "2" and root.get("failures") == "1"
        cases = root.findall("testcase")
        assert cases[0].find("failure") is None
        assert cases[1].find("failure") is not None


class TestShow:
    def test_conversation(self) -> None:
        """show prints each turn with model, user text, tool calls and the reply."""
        text = show_cassette(cassette(BOOKING_TURNS), "c.json")
        assert text.startswith("c.json: 3 turn(s), route proxy")
        assert "model: gpt-4o" in text
        assert "user: 'Book me a flight'" in text
        assert '→ tool call create_booking {"flight":{"id":"KQ311"}}' in text
        assert "Your flight is booked: B-1042." in text


def anthropic_tool_result_turn(index: int) -> dict:
    """An anthropic cassette turn whose newest user message holds only a tool result."""
    return {
        "index": index,
        "provider": "anthropic",
        "request": {
            "method": "POST",
            "url": "https://api.anthropic.com/v1/messages",
            "headers": {"content-type": "application/json"},
            "body_sha256": f"{index:064x}",
            "body": {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Book me a flight to NBO"}]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "tu_1", "name": "search_flights",
                     "input": {"destination": "NBO"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "tu_1", "content": "KQ311 found"}]},
            ]},
        },
        "response": {
            "status": 200,
            "headers": {"content-type": "application/json"},
            "body": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                     "content": [{"type": "text", "text": "KQ311 is available."}],
                     "stop_reason": "end_turn"},
        },
    }


class TestShowPrompt:
    def test_user_line_is_the_prompt_not_the_tool_result(self) -> None:
        """For an anthropic turn ending in a tool-result turn, the user line is the earlier prompt."""
        text = show_cassette(cassette([anthropic_tool_result_turn(0)]), "c.json")
        user_lines = [line for line in text.splitlines() if line.startswith("  user:")]
        assert user_lines == ["  user: 'Book me a flight to NBO'"]
        assert "tool result (search_flights): 'KQ311 found'" in text
