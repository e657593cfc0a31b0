"""Tests for flowproof.report.cassette: a cassette as a readable conversation (flowproof show)."""

from __future__ import annotations

import pytest

from flowproof.errors import FlowproofError
from flowproof.report.cassette import show_cassette

from ..runner.helpers import BOOKING_TURNS, chat_turn
from .helpers import cassette


class TestShow:
    def test_conversation(self) -> None:
        """show prints each turn with model, user text, tool calls and the reply."""
        text = show_cassette(cassette(BOOKING_TURNS), "c.json")
        assert text.startswith("c.json: 3 turn(s), route proxy")
        assert "model: gpt-4o" in text
        assert "user: 'Book me a flight'" in text
        assert '→ tool call create_booking {"flight":{"id":"KQ311"}}' in text
        assert "Your flight is booked: B-1042." in text

    def test_one_turn_and_one_thread(self) -> None:
        """--turn keeps one turn; --thread keeps a thread's turns, numbered by first turn."""
        helper = chat_turn(3, text="Sub-agent answer.", system="You search flights.")
        c = cassette([*BOOKING_TURNS, helper])
        one = show_cassette(c, "c.json", turn=1)
        assert "turn 1 —" in one and "turn 0 —" not in one and "turn 2 —" not in one
        assert "  thread: 0" in one
        side = show_cassette(c, "c.json", thread=1)
        assert "thread 1: turn(s) 3" in side and "Sub-agent answer." in side and "turn 0 —" not in side
        main = show_cassette(c, "c.json", thread=0)
        assert [line.split(" —")[0] for line in main.splitlines() if line.startswith("turn ")] == [
            "turn 0", "turn 1", "turn 2"]

    def test_a_turn_or_thread_that_is_not_there_names_what_is(self) -> None:
        """Asking for a missing turn or thread is a usage error listing the ones there are."""
        with pytest.raises(FlowproofError, match="has no turn 7 — its turns are: 0, 1, 2"):
            show_cassette(cassette(BOOKING_TURNS), "c.json", turn=7)
        with pytest.raises(FlowproofError, match="has no thread 2 — its threads are: 0"):
            show_cassette(cassette(BOOKING_TURNS), "c.json", thread=2)


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


def test_show_draws_the_parent_and_its_sub_agents() -> None:
    from ..agent_runs import claude_code_cassette

    text = show_cassette(claude_code_cassette(), "cc.json")
    lines = text.splitlines()
    assert lines[1:3] == ["the agent",
                          "  └─ Explore #1 (claude-code): spawned in turn 0, ran in turn(s) 2, 3, result in turn 4"]
    turn_2 = text.split("turn 2 —", 1)[1].split("turn 3 —", 1)[0]
    assert "  sub-agent: Explore #1" in turn_2
    assert "sub-agent:" not in text.split("turn 1 —", 1)[1].split("turn 2 —", 1)[0]
