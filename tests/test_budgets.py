"""Budgets from plain turns: counts, tokens from usage, cost from pricing, and what fails how."""

from __future__ import annotations

from dataclasses import replace

import pytest

from flowproof.budgets import evaluate_budget, price_of, turn_cost
from flowproof.spec import BudgetAssertion, Location, Metric, Price
from flowproof.trajectory import build_trajectory
from flowproof.turns import Usage

from .agent_runs import claude_code_run

HERE = Location("t.flow.yaml", 9, 5)
PRICES = (Price("claude-x", input=3.0, output=15.0, cache_read=0.3, cache_write=3.75, location=HERE),)


def budget(metric: Metric, limit: float, bound: str = "at most") -> BudgetAssertion:
    return BudgetAssertion(metric, bound, limit, f"{metric.value} {bound} {limit:g}", HERE)  # type: ignore[arg-type]


def with_usage(*usages: Usage | None):  # type: ignore[no-untyped-def]
    turns = claude_code_run()
    return build_trajectory([replace(t, response=replace(t.response, usage=u))  # type: ignore[arg-type]
                             for t, u in zip(turns, usages, strict=True)])


USED = (Usage(1000, 50), Usage(40, 5), Usage(300, 20, cache_read_tokens=200), Usage(400, 30), Usage(1200, 60))


class TestCounts:
    def test_model_calls(self) -> None:
        traj = build_trajectory(claude_code_run())
        assert evaluate_budget(budget(Metric.MODEL_CALLS, 5), traj, ()).passed
        result = evaluate_budget(budget(Metric.MODEL_CALLS, 4), traj, ())
        assert not result.passed and "the run used 5" in result.message
        assert evaluate_budget(budget(Metric.MODEL_CALLS, 6, "at least"), traj, ()).passed is False

    def test_abandoned_calls_are_not_counted(self) -> None:
        turns = claude_code_run()
        turns[1] = replace(turns[1], abandoned=True)
        assert evaluate_budget(budget(Metric.MODEL_CALLS, 4), build_trajectory(turns), ()).passed

    def test_tool_calls(self) -> None:
        assert evaluate_budget(budget(Metric.TOOL_CALLS, 2), build_trajectory(claude_code_run()), ()).passed


class TestTokens:
    def test_tokens_are_input_plus_output_over_every_thread(self) -> None:
        traj = with_usage(*USED)
        total = sum(u.total for u in USED)
        assert evaluate_budget(budget(Metric.TOKENS, total), traj, ()).passed
        result = evaluate_budget(budget(Metric.TOKENS, total - 1), traj, ())
        assert not result.passed and f"the run used {total}" in result.message
        assert "turn 4 (claude-x): 1260" in result.message  # the largest turn first
        assert [m.matcher for m in result.mismatches] == ["budget"]

    def test_input_and_output(self) -> None:
        traj = with_usage(*USED)
        assert evaluate_budget(budget(Metric.INPUT_TOKENS, 2940), traj, ()).passed
        assert not evaluate_budget(budget(Metric.OUTPUT_TOKENS, 164), traj, ()).passed

    def test_a_turn_without_usage_fails_naming_it(self) -> None:
        result = evaluate_budget(budget(Metric.TOKENS, 10**9), with_usage(USED[0], None, *USED[2:]), ())
        assert not result.passed
        assert "turn 1 (anthropic, claude-x) reported no usage" in result.message
        assert [(m.matcher, m.turn) for m in result.mismatches] == [("usage", 1)]


class TestCost:
    def test_cost_from_pricing_with_cache_prices(self) -> None:
        traj = with_usage(*USED)
        expected = sum(turn_cost(t, u, PRICES[0]).usd for t, u in zip(traj.turns, USED, strict=True))
        # turn 2: 100 uncached at 3, 200 cache reads at 0.3, 20 out at 15 (per million)
        assert turn_cost(traj.turns[2], USED[2], PRICES[0]).usd == pytest.approx((100 * 3 + 200 * 0.3 + 20 * 15) / 1e6)
        assert evaluate_budget(budget(Metric.COST, expected), traj, PRICES).passed
        result = evaluate_budget(budget(Metric.COST, 0.001), traj, PRICES)
        assert not result.passed and "the run used $0.0" in result.message

    def test_an_unpriced_model_is_a_spec_error_naming_it(self) -> None:
        prices = (Price("gpt-4o-mini", 0.15, 0.6, None, None, HERE),)
        result = evaluate_budget(budget(Metric.COST, 1), with_usage(*USED), prices)
        assert not result.passed and result.spec_error
        assert result.message.startswith("turn 0 called model claude-x, which has no price")
        assert "add `claude-x: {input: <usd>, output: <usd>}`" in result.message

    def test_glob_prices_and_exact_names_first(self) -> None:
        glob = Price("claude-*", 1, 1, None, None, HERE)
        exact = Price("claude-x", 2, 2, None, None, HERE)
        assert price_of("claude-x", (glob, exact)) is exact
        assert price_of("claude-y", (glob, exact)) is glob
        assert price_of("gpt", (glob,)) is None
