"""Sub-agents from plain turns: the three links, ordinals, nesting and handoffs."""

from __future__ import annotations

import json

from flowproof.conversations import group_conversations
from flowproof.subagents import build_agents
from flowproof.turns import ToolCall

from .agent_runs import (
    SPAWN,
    SPAWN_PROMPT,
    SUB_ANSWER,
    called,
    claude_code_run,
    said,
    turn,
)


def tree(turns):  # type: ignore[no-untyped-def]
    return build_agents(turns, group_conversations(turns))


class TestClaudeCode:
    def test_all_three_links(self) -> None:
        agents = tree(claude_code_run())
        (explore,) = agents.subagents
        assert (explore.name, explore.family, explore.spawn_turn, explore.parent) == ("Explore", "claude-code", 0, None)
        assert [t.index for t in explore.turns] == [2, 3]
        assert explore.result_turn == 4 and explore.answer == SUB_ANSWER
        assert agents.agent_of == {0: None, 1: None, 2: 0, 3: 0, 4: None}
        assert explore.label() == "Explore #1"

    def test_the_result_never_reached_the_parent(self) -> None:
        (explore,) = tree(claude_code_run(result_returns=False)).subagents
        assert explore.ran and not explore.returned

    def test_the_sub_agent_never_ran(self) -> None:
        (explore,) = tree(claude_code_run(sub_runs=False)).subagents
        assert not explore.ran and explore.answer is None

    def test_named_matches_loosely_and_children(self) -> None:
        agents = tree(claude_code_run())
        assert [s.number for s in agents.named("explore")] == [0]
        assert agents.named("Plan") == ()
        assert agents.children(None) == agents.subagents and agents.descendants(0) == ()


def responses(index: int, items: list[dict], response, instructions: str = "You are triage."):  # type: ignore[no-untyped-def]
    return turn(index, "openai-responses", {"model": "gpt-x", "instructions": instructions, "input": items}, response)


def test_an_openai_agents_handoff_is_the_rest_of_the_conversation() -> None:
    handoff = ToolCall("transfer_to_billing_agent", "{}", "call_h")
    lookup = ToolCall("lookup_invoice", json.dumps({"id": "INV-1"}), "call_l")
    first = [{"role": "user", "content": "Why was I charged twice?"}]
    after = [*first, {"type": "function_call", "call_id": "call_h", "name": handoff.name, "arguments": "{}"},
             {"type": "function_call_output", "call_id": "call_h", "output": '{"assistant": "Billing agent"}'}]
    turns = [
        responses(0, first, called(handoff)),
        responses(1, after, called(lookup), "You are billing."),
        responses(2, [*after, {"type": "function_call", "call_id": "call_l", "name": lookup.name,
                               "arguments": lookup.arguments_raw},
                      {"type": "function_call_output", "call_id": "call_l", "output": "one charge refunded"}],
                  said("Refunded the duplicate."), "You are billing."),
    ]
    agents = tree(turns)
    (billing,) = agents.subagents
    assert billing.name == "billing_agent" and [t.index for t in billing.turns] == [1, 2]
    assert billing.result_turn == 2 and billing.answer == "Refunded the duplicate."
    assert agents.agent_of[0] is None


def test_two_spawns_of_one_name_are_numbered_and_nesting_has_a_parent() -> None:
    from .agent_runs import anthropic, call, tool_result, tool_use, user

    second = call("Agent", "toolu_two", prompt="Look in the archive too", subagent_type="Explore")
    nested = call("Agent", "toolu_nest", prompt="Read the archive index", subagent_type="Reader")
    first = [user("go")]
    turns = [
        turn(0, "anthropic", anthropic("main", first), called(SPAWN, second)),
        turn(1, "anthropic", anthropic("explore", [user(SPAWN_PROMPT)]), said("KQ311")),
        turn(2, "anthropic", anthropic("explore", [user("x", "Look in the archive too")]), called(nested)),
        turn(3, "anthropic", anthropic("reader", [user("Read the archive index")]), said("index read")),
        turn(4, "anthropic", anthropic("explore", [user("x", "Look in the archive too"), tool_use(nested),
                                                   tool_result("toolu_nest", "index read")]), said("nothing")),
        turn(5, "anthropic", anthropic("main", [*first, tool_use(SPAWN, second),
                                                tool_result("toolu_spawn", "KQ311"),
                                                tool_result("toolu_two", "nothing")]), said("done")),
    ]
    agents = tree(turns)
    explore_1, explore_2, reader = agents.subagents
    assert (explore_1.ordinal, explore_2.ordinal) == (1, 2)
    assert [t.index for t in explore_2.turns] == [2, 4]
    assert reader.parent == explore_2.number and reader.result_turn == 4
    assert explore_1.result_turn == 5 and explore_2.result_turn == 5
    assert agents.descendants(explore_2.number) == (reader,)


def test_codex_result_comes_back_through_wait() -> None:
    spawn = ToolCall("spawn_agent", json.dumps({"message": "Find the booking code", "agent_type": "explorer"}),
                     "call_s")
    wait = ToolCall("wait", json.dumps({"ids": ["agent-1"]}), "call_w")
    first = [{"role": "user", "content": "Book the flight in the repo"}]
    step = [*first, {"type": "function_call", "call_id": "call_s", "name": "spawn_agent", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_s", "output": "agent-1"}]
    turns = [
        responses(0, first, called(spawn), "You are Codex."),
        responses(1, [{"role": "user", "content": "<env/>\nFind the booking code"}], said("It is KQ311."),
                  "You are an explorer."),
        responses(2, step, called(wait), "You are Codex."),
        responses(3, [*step, {"type": "function_call", "call_id": "call_w", "name": "wait", "arguments": "{}"},
                      {"type": "function_call_output", "call_id": "call_w",
                       "output": "agent-1 completed: It is KQ311."}], said("Booked KQ311"), "You are Codex."),
    ]
    (explorer,) = tree(turns).subagents
    assert explorer.family == "codex" and [t.index for t in explorer.turns] == [1]
    assert explorer.result_turn == 3
