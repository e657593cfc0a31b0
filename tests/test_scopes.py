"""in: scopes on plain turns: sub-agents (each, #N), prompts, nesting, and what fails."""

from __future__ import annotations

from flowproof.scopes import prompt_of, resolve_scope
from flowproof.spec import PromptScope, SubagentScope
from flowproof.trajectory import build_trajectory

from .agent_runs import (
    MAIN_SYSTEM,
    SUB_ANSWER,
    anthropic,
    call,
    called,
    claude_code_run,
    said,
    turn,
    user,
)


def test_a_sub_agent_scope_is_its_own_thread_and_its_answer() -> None:
    resolution = resolve_scope(SubagentScope("Explore"), build_trajectory(claude_code_run()), [])
    (scope,) = resolution.scopes
    assert resolution.problem is None and scope.label == "subagent Explore #1"
    assert [t.index for t in scope.trajectory.turns] == [2, 3]
    assert [c.name for c in scope.trajectory.tool_calls] == ["Grep"]
    assert scope.trajectory.reply == SUB_ANSWER
    assert resolution.summary == "subagent Explore #1 (turns 2, 3)"


def test_no_such_sub_agent_lists_those_spawned() -> None:
    resolution = resolve_scope(SubagentScope("Plan"), build_trajectory(claude_code_run()), [])
    assert resolution.scopes == ()
    assert resolution.problem == "no spawn call names Plan; the sub-agents spawned were: Explore (turn 0)"


def test_an_ordinal_past_the_end_and_a_sub_agent_that_never_ran() -> None:
    traj = build_trajectory(claude_code_run())
    assert "asks for more sub-agents named Explore than the 1 spawned" in (
        resolve_scope(SubagentScope("Explore", 2), traj, []).problem or "")
    idle = resolve_scope(SubagentScope("Explore"), build_trajectory(claude_code_run(sub_runs=False)), [])
    assert idle.problem is not None and "never ran" in idle.problem


def two_prompts() -> list:  # type: ignore[type-arg]
    """Prompt 1 books (a tool call, then a reply); prompt 2 cancels (one reply)."""
    book = call("create_booking", "toolu_b", flight="KQ311")
    first = [user("Book KQ311")]
    return [
        turn(0, "anthropic", anthropic(MAIN_SYSTEM, first, tools=("create_booking",)), called(book)),
        turn(1, "anthropic", anthropic(MAIN_SYSTEM, [*first, {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_b", "name": "create_booking", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_b", "content": "B-1"}]}],
            tools=("create_booking",)), said("Booked B-1")),
        turn(2, "anthropic", anthropic(MAIN_SYSTEM, [user("Book KQ311 and cancel it")], tools=("create_booking",)),
             said("Cancelled")),
    ]


def test_prompt_scopes_split_the_run_by_the_newest_user_text() -> None:
    traj = build_trajectory(two_prompts())
    prompts = ["Book KQ311", "Book KQ311 and cancel it"]
    (first,) = resolve_scope(PromptScope(1), traj, prompts).scopes
    (second,) = resolve_scope(PromptScope(2), traj, prompts).scopes
    assert [t.index for t in first.trajectory.turns] == [0, 1]
    assert first.trajectory.reply == "Booked B-1" and [c.name for c in first.trajectory.tool_calls] == [
        "create_booking"]
    assert [t.index for t in second.trajectory.turns] == [2] and second.trajectory.tool_calls == ()
    assert second.trajectory.reply == "Cancelled"


def test_a_prompt_scope_holds_the_sub_agents_spawned_while_answering_it() -> None:
    traj = build_trajectory(claude_code_run())
    from .agent_runs import PROMPT

    (scope,) = resolve_scope(PromptScope(1), traj, [PROMPT]).scopes
    assert sorted(t.index for t in scope.trajectory.turns) == [0, 1, 2, 3, 4]
    assert [s.name for s in scope.trajectory.agents.subagents] == ["Explore"]
    assert scope.trajectory.reply == "Booked KQ311."  # the agent's own answer, not the sub-agent's


def test_a_prompt_nobody_received() -> None:
    resolution = resolve_scope(PromptScope(2), build_trajectory(two_prompts()), ["Book KQ311", "Refund"])
    assert resolution.problem is not None and "no model call carried prompt 2" in resolution.problem


def test_prompt_of() -> None:
    prompts = ["Book a flight", "Book a flight to Paris"]
    assert prompt_of("Book a flight to Paris", prompts) == 2
    assert prompt_of("<reminder/>\nBook a flight to Paris please", prompts) == 2
    assert prompt_of("<reminder/>\nBook a flight", prompts) == 1
    assert prompt_of("something else", prompts) is None
