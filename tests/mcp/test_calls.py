"""Tests for flowproof.mcp.calls: the MCP calls read back from the event log."""

from __future__ import annotations

from flowproof.mcp import calls_from_events


class TestCallsFromEvents:
    def test_calls_are_placed_after_the_turns_before_them(self) -> None:
        events = [
            {"event": "turn", "turn": {}},
            {"event": "mcp_call", "server": "s", "name": "t", "arguments": "{}", "answered": True},
            {"event": "turn", "turn": {}},
            {"event": "mcp_call", "server": "s", "name": "u", "arguments": "{\"a\":1}", "answered": False},
        ]
        calls = calls_from_events(events)
        assert [(c.name, c.after_turns, c.answered) for c in calls] == [("t", 1, True), ("u", 2, False)]
