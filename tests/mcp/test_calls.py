"""Tests for flowproof.mcp.calls: the MCP calls read back from the event log."""

from __future__ import annotations

from flowproof.mcp import calls_from_events, mcp_tool_of


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


class TestMcpToolOf:
    def test_the_names_agents_give_an_mcp_tool(self) -> None:
        servers, tools = ["notes db", "exports"], ["export", "list"]
        assert mcp_tool_of("export", servers, tools) == "export"
        assert mcp_tool_of("mcp__exports__export", servers, tools) == "export"  # Claude Code, codex
        assert mcp_tool_of("exports__list", servers, tools) == "list"  # goose
        assert mcp_tool_of("mcp__notes_db__list", servers, tools) == "list"  # the space read as _
        assert mcp_tool_of("mcp__exports__delete", servers, tools) is None
        assert mcp_tool_of("mcp__files__export", servers, tools) is None
