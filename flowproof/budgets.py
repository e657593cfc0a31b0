"""Budgets: model calls, tool calls, tokens and cost, counted from the run's own turns.

``model calls`` counts completed model calls in every thread (abandoned calls
are not part of the trajectory, so they are not counted); ``tool calls`` the
trajectory's tool calls. Tokens come from each response's usage, as its
provider reported it (`flowproof.wire.usage`): a turn whose response carried no
usage fails a token or cost budget, naming the turn, since a count that
silently treated it as zero would pass a budget it may break. Cost is the
tokens times the spec's ``pricing:`` (USD per million tokens, by the model
name the request gives; cache reads and writes at their own prices when the
spec gives them, else at the input price). A model the run called with no price
is the spec's mistake, not the agent's: the result says so (``spec_error``).

Pure.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass

from flowproof.outcome import AssertionResult, Mismatch
from flowproof.spec.types import BudgetAssertion, Metric, Price
from flowproof.trajectory import Trajectory
from flowproof.turns import Turn, Usage

__all__ = ["TurnCost", "evaluate_budget", "price_of", "turn_cost", "usage_of"]

#: Turns listed in a failure message (the largest first).
_SHOWN = 8


def usage_of(turn: Turn) -> Usage | None:
    return turn.response.usage if turn.response is not None else None


def _model(turn: Turn) -> str:
    return turn.request.model or (turn.response.model if turn.response is not None else None) or "?"


def price_of(model: str, pricing: Sequence[Price]) -> Price | None:
    """The price for ``model``: an entry with its exact name, else the first whose name is a
    glob matching it (``claude-sonnet-4-*``)."""
    for price in pricing:
        if price.model == model:
            return price
    for price in pricing:
        if any(c in price.model for c in "*?[") and fnmatch.fnmatchcase(model, price.model):
            return price
    return None


@dataclass(frozen=True, slots=True)
class TurnCost:
    index: int
    model: str
    usage: Usage
    usd: float


def turn_cost(turn: Turn, usage: Usage, price: Price) -> TurnCost:
    read = price.cache_read if price.cache_read is not None else price.input
    write = price.cache_write if price.cache_write is not None else price.input
    uncached = max(usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens, 0)
    usd = (uncached * price.input + usage.cache_read_tokens * read + usage.cache_write_tokens * write
           + usage.output_tokens * price.output) / 1_000_000
    return TurnCost(turn.index, _model(turn), usage, usd)


def _amount(metric: Metric, usage: Usage) -> int:
    if metric is Metric.INPUT_TOKENS:
        return usage.input_tokens
    if metric is Metric.OUTPUT_TOKENS:
        return usage.output_tokens
    return usage.total


def _within(value: float, step: BudgetAssertion) -> bool:
    # A cost is a float sum: a cent's fraction of rounding must not flip the verdict.
    slack = 1e-9 if step.metric is Metric.COST else 0.0
    return value <= step.limit + slack if step.bound == "at most" else value + slack >= step.limit


def _number(value: float, metric: Metric) -> str:
    return f"${value:.6f}".rstrip("0").rstrip(".") if metric is Metric.COST else f"{value:g}"


def evaluate_budget(step: BudgetAssertion, trajectory: Trajectory,
                    pricing: Sequence[Price]) -> AssertionResult:
    """Check one budget against the run (or the ``in:`` scope) ``trajectory`` covers."""
    metric, turns = step.metric, trajectory.turns
    bound = f"{step.bound} {_number(step.limit, metric)}"
    if metric in (Metric.MODEL_CALLS, Metric.TOOL_CALLS):
        count = len(turns) if metric is Metric.MODEL_CALLS else len(trajectory.tool_calls)
        return _verdict(step, float(count), bound, [])
    lacking = [t for t in turns if usage_of(t) is None]
    if lacking:
        names = ", ".join(f"turn {t.index} ({t.request.provider}, {_model(t)})" for t in lacking)
        message = (f"expected {metric.value} {bound}\n  {names} reported no usage, so "
                   f"{metric.value} cannot be counted (the provider's response has no usage "
                   "fields: a stream without its usage chunk, or a server that sends none)")
        why = tuple(Mismatch("usage", expected=metric.value, turn=t.index) for t in lacking)
        return AssertionResult(step, False, message, step.location, why)
    if metric is not Metric.COST:
        amounts = [(t.index, _model(t), float(_amount(metric, usage_of(t) or Usage(0, 0)))) for t in turns]
        return _verdict(step, sum(a for _, _, a in amounts), bound, amounts)
    costs: list[TurnCost] = []
    for turn in turns:
        price = price_of(_model(turn), pricing)
        usage = usage_of(turn)
        assert usage is not None  # lacking is empty
        if price is None:
            known = ", ".join(p.model for p in pricing) or "none"
            message = (f"turn {turn.index} called model {_model(turn)}, which has no price in the "
                       f"spec's `pricing:` (priced: {known}) — add `{_model(turn)}: {{input: <usd>, "
                       "output: <usd>}` (USD per million tokens)")
            why = (Mismatch("price", expected=_model(turn), actual=known, turn=turn.index),)
            return AssertionResult(step, False, message, step.location, why, spec_error=True)
        costs.append(turn_cost(turn, usage, price))
    return _verdict(step, sum(c.usd for c in costs), bound, [(c.index, c.model, c.usd) for c in costs])


def _verdict(step: BudgetAssertion, value: float, bound: str,
             per_turn: list[tuple[int, str, float]]) -> AssertionResult:
    metric = step.metric
    shown = _number(value, metric)
    if _within(value, step):
        return AssertionResult(step, True, f"{metric.value}: {shown} ({bound})", step.location)
    lines = [f"expected {metric.value} {bound}", f"  the run used {shown}"]
    largest = sorted(per_turn, key=lambda a: -a[2])[:_SHOWN]
    lines.extend(f"  - turn {i} ({model}): {_number(a, metric)}" for i, model, a in largest)
    if len(per_turn) > _SHOWN:
        lines.append(f"  … and {len(per_turn) - _SHOWN} more turn(s)")
    why = (Mismatch("budget", expected=f"{step.bound} {step.limit:g}", actual=value),)
    return AssertionResult(step, False, "\n".join(lines), step.location, why)
