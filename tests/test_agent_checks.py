"""assert_subagent (naming the missing link) and assert_parallel_tool_calls (showing the split)."""

from __future__ import annotations

import json

from flowproof.agent_checks import evaluate_parallel, evaluate_subagent
from flowproof.spec import Location, ParallelCallsAssertion, SubagentAssertion, parse_tool_line
from flowproof.spec.types import ToolPattern
from flowproof.trajectory import build_trajectory
from flowproof.turns import FinishReason, ResponseView, ToolCall, Turn

from .agent_runs import claude_code_run, request_view

HERE = Location("t.flow.yaml", 8, 5)


def sub(name: str) -> SubagentAssertion:
    return SubagentAssertion(name, name, HERE)


class TestSubagent:
    def test_all_three_links(self) -> None:
        result = evaluate_subagent(sub("Explore"), build_trajectory(claude_code_run()))
        assert result.passed
        assert result.message == ("sub-agent Explore #1: spawned in turn 0, ran in turns 2, 3, its result "
                                  "reached the parent in turn 4")

    def test_no_spawn_call_names_it(self) -> None:
        result = evaluate_subagent(sub("Plan"), build_trajectory(claude_code_run()))
        assert "no spawn call names Plan; the spawn calls were: Agent(Explore) in turn 0" in result.message
        assert [m.actual for m in result.mismatches] == ["no spawn call"]

    def test_no_spawn_call_at_all(self) -> None:
        result = evaluate_subagent(sub("Plan"), build_trajectory(claude_code_run()[1:2]))
        assert "no spawn call was made (flowproof knows: Agent (claude-code)" in result.message

    def test_it_never_ran(self) -> None:
        result = evaluate_subagent(sub("Explore"), build_trajectory(claude_code_run(sub_runs=False)))
        assert not result.passed
        assert ("the spawn call Agent(Explore) in turn 0 started no sub-agent thread: no later "
                "conversation's first request contains the prompt it was given") in result.message
        assert [(m.actual, m.turn) for m in result.mismatches] == [("no thread", 0)]

    def test_its_result_never_came_back(self) -> None:
        result = evaluate_subagent(sub("Explore"), build_trajectory(claude_code_run(result_returns=False)))
        assert not result.passed
        assert ("Explore #1 ran (turns 2, 3) but its result never came back: no later request of its "
                "parent holds a tool result for call toolu_spawn") in result.message


def parallel(line: str) -> ParallelCallsAssertion:
    patterns = []
    for piece in line.split(","):
        tool, clauses = parse_tool_line(piece.strip(), HERE)
        patterns.append(ToolPattern(tool, clauses, piece.strip()))
    return ParallelCallsAssertion(tuple(patterns), line, HERE)


def calls_turn(index: int, *calls: tuple[str, dict]) -> Turn:  # type: ignore[type-arg]
    made = tuple(ToolCall(n, json.dumps(a), f"call_{index}_{i}") for i, (n, a) in enumerate(calls))
    return Turn(index, request_view(), ResponseView("", made, FinishReason.TOOL_CALLS))


class TestParallel:
    def test_one_turn_asks_for_all(self) -> None:
        traj = build_trajectory([calls_turn(0, ("search_flights", {"to": "NBO"}), ("search_hotels", {}))])
        result = evaluate_parallel(parallel("search_flights where to equals NBO, search_hotels"), traj)
        assert result.passed
        assert result.message == "turn 0 asked for search_flights where to equals NBO, search_hotels at once"

    def test_the_failure_shows_the_split(self) -> None:
        traj = build_trajectory([calls_turn(0, ("search_flights", {})), calls_turn(1, ("search_hotels", {}))])
        result = evaluate_parallel(parallel("search_flights, search_hotels"), traj)
        assert not result.passed
        assert result.message.splitlines()[1:] == ["  the calls were split across turns:",
                                                   "  - turn 0: search_flights", "  - turn 1: search_hotels"]
        assert result.mismatches[0].actual == [["search_flights"], ["search_hotels"]]

    def test_where_clauses_each_need_a_call_of_their_own(self) -> None:
        traj = build_trajectory([calls_turn(0, ("search", {"q": "a"}), ("book", {}))])
        assert not evaluate_parallel(parallel("search where q equals a, search where q equals b"), traj).passed
        both = build_trajectory([calls_turn(0, ("search", {"q": "b"}), ("search", {"q": "a"}))])
        assert evaluate_parallel(parallel("search where q equals a, search where q equals b"), both).passed

    def test_a_where_clause_failing_in_the_turn_that_had_them_all(self) -> None:
        traj = build_trajectory([calls_turn(0, ("search_flights", {"to": "LHR"}), ("search_hotels", {}))])
        result = evaluate_parallel(parallel("search_flights where to equals NBO, search_hotels"), traj)
        assert "turn 0 asked for all of them, but its arguments fail a where clause" in result.message

    def test_no_turn_asked_for_any(self) -> None:
        traj = build_trajectory([calls_turn(0, ("other", {}))])
        result = evaluate_parallel(parallel("a, b"), traj)
        assert "no turn asked for any of them; the tool calls were: turn 0: other" in result.message
