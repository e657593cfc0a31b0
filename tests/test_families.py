"""The agent-family table: which calls spawn sub-agents, and what they name."""

from __future__ import annotations

import pytest

from flowproof.families import FAMILIES, Spawn, family, names_match, spawn_of, spawn_tool_names


class TestSpawns:
    def test_claude_code_agent_tool(self) -> None:
        assert spawn_of("Agent", {"subagent_type": "Explore", "prompt": "p", "description": "d"}) == Spawn(
            "claude-code", "Explore", "p")

    def test_claude_code_default_sub_agent(self) -> None:
        assert spawn_of("Agent", {"prompt": "p"}) == Spawn("claude-code", "general-purpose", "p")

    @pytest.mark.parametrize("tool", ["TaskCreate", "TaskUpdate", "TaskList", "Task", "Bash"])
    def test_claude_code_task_tools_are_todo_tools(self, tool: str) -> None:
        assert spawn_of(tool, {"subject": "x", "prompt": "p"}) is None

    def test_codex_spawn_agent(self) -> None:
        assert spawn_of("spawn_agent", {"message": "look", "agent_type": "explorer"}) == Spawn(
            "codex", "explorer", "look")
        assert spawn_of("spawn_agent", {"message": "look"}) == Spawn("codex", "default", "look")

    def test_openai_agents_handoff(self) -> None:
        assert spawn_of("transfer_to_billing_agent", None) == Spawn("openai-agents", "billing_agent", None)
        assert spawn_of("transfer_to_", {}) is None

    def test_arguments_that_are_not_an_object(self) -> None:
        assert spawn_of("Agent", "not json") == Spawn("claude-code", "general-purpose", None)


def test_names_match() -> None:
    assert names_match("billing agent", "billing_agent")
    assert names_match("explore", "Explore")
    assert names_match("general-purpose", "general_purpose")
    assert not names_match("Explorer", "Explore")


def test_every_row_is_complete() -> None:
    for row in FAMILIES:
        assert row.spawn_tools or row.spawn_prefix, row.name
        assert row.evidence, row.name
        assert family(row.name) is row
    with pytest.raises(KeyError):
        family("goose")
    assert "Agent (claude-code)" in spawn_tool_names()
    assert "transfer_to_<name> (openai-agents)" in spawn_tool_names()
