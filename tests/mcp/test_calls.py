"""Tests for flowproof.mcp.calls: the MCP tool a model-side tool name stands for (the calls' placement
among the turns is tested with the run record, tests/test_run_record.py)."""

from __future__ import annotations

from flowproof.mcp import mcp_tool_of


class TestMcpToolOf:
    def test_the_names_agents_give_an_mcp_tool(self) -> None:
        servers, tools = ["notes db", "exports"], ["export", "list"]
        assert mcp_tool_of("export", servers, tools) == "export"
        assert mcp_tool_of("mcp__exports__export", servers, tools) == "export"  # Claude Code, codex
        assert mcp_tool_of("exports__list", servers, tools) == "list"  # goose
        assert mcp_tool_of("mcp__notes_db__list", servers, tools) == "list"  # the space read as _
        assert mcp_tool_of("mcp__exports__delete", servers, tools) is None
        assert mcp_tool_of("mcp__files__export", servers, tools) is None
