"""Builders for the report tests: flow results of every outcome."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flowproof.assertions import Mismatch
from flowproof.cassette import Cassette, loads_cassette
from flowproof.compare import compare_responses, missing_result
from flowproof.divergence import Divergence, FieldChange
from flowproof.errors import EXIT_AGENT, EXIT_ASSERTION, EXIT_DIVERGENCE, EXIT_DRIFT, EXIT_OK
from flowproof.log_events import parse_events
from flowproof.run_record import MissingCalls, ReplayMiss
from flowproof.runner.agents import AgentRun
from flowproof.runner.flow import ADVICE
from flowproof.runner.judge import judge_flow
from flowproof.turns import FinishReason, ResponseView, ToolCall
from flowproof.verdict import FlowResult, StepResult

from ..runner.helpers import cassette_text


def result(code: int = EXIT_OK, **kw: Any) -> FlowResult:
    base: dict[str, Any] = dict(spec_path=Path("booking.flow.yaml"), name="Booking", mode="replay", exit_code=code,
                                cassette=Path("booking.cassette.json"))
    base.update(kw)
    return FlowResult(**base)


def cassette(turns: list[dict[str, Any]], route: str = "proxy") -> Cassette:
    return loads_cassette(cassette_text(turns, route), "c.json")


def judged(events: list[dict[str, Any]], turns: list[dict[str, Any]], mode: str = "replay") -> FlowResult:
    """The result of a flow whose proxy logged ``events`` against a cassette of ``turns``, judged
    as flowproof-run judges it (no spec: no steps)."""
    return judge_flow(
        parse_events(events), AgentRun(0, "", "", False, 0.0), spec_path=Path("booking.flow.yaml"), name="Booking",
        mode=mode, cassette=Path("booking.cassette.json"), record_command="flowproof-run booking.flow.yaml --record",
        advice=ADVICE, existing=cassette(turns),
    )


def miss(path: str, recorded: Any, replayed: Any, *, request: int = 2, closest: int = 1, **kw: Any) -> ReplayMiss:
    """A replay divergence at one field, as the run record holds it."""
    return ReplayMiss("f1", Divergence("unmatched", request, closest, fields=(FieldChange(path, recorded, replayed),),
                                       **kw))


def compare_run() -> FlowResult:
    """A compare flow: two equal turns, a changed argument, a reworded reply, a missing turn."""
    def book(flight: str) -> ResponseView:
        return ResponseView("", (ToolCall("book", f'{{"flight":"{flight}"}}'),), FinishReason.TOOL_CALLS)

    said = ResponseView("Booked.", (), FinishReason.STOP)
    results = (
        compare_responses(said, said, turn=0, live_call=0, thread=1, depth=2),
        compare_responses(book("KQ311"), book("KQ999"), turn=1, live_call=1, thread=0, depth=2),
        compare_responses(said, ResponseView("Done!", (), FinishReason.STOP), turn=2, live_call=2,
                          thread=0, depth=4),
        missing_result(said, turn=3, thread=0, depth=6, reason="no live call reached this place"),
    )
    return result(EXIT_DRIFT, mode="compare", compare=results)




def structured_results() -> list[FlowResult]:
    """One flow of every outcome, with the events and steps that produced it."""
    div = ReplayMiss("f1", Divergence("unmatched", 2, 1, fields=(
        FieldChange("messages.1.content", "{}", "{}", inner="flight.id"),), hint="re-record"))
    said = ResponseView("booked", (), FinishReason.STOP)
    drift = compare_responses(said, ResponseView("sold out", (), FinishReason.STOP), turn=0, live_call=0,
                              thread=0, depth=1)
    failed_step = StepResult(False, "expected create_booking", "b.flow.yaml:9:5", "assert_tool_call: create_booking",
                             (Mismatch("equals", "flight.id", "KQ999", "KQ311", "create_booking", 2),
                              Mismatch("reply contains", None, "booked", None)))
    return [
        result(steps=(StepResult(True, "ok", None, "assert: reply contains booked"),),
               guards=({"assertion": "assert_no_tool_call: issue_refund", "warning": "compliance, not enforcement"},)),
        result(EXIT_DIVERGENCE, divergences=(div,)),
        result(EXIT_DIVERGENCE, missing=MissingCalls((2,))),
        result(EXIT_DRIFT, mode="compare", compare=(drift,)),
        result(EXIT_ASSERTION, steps=(failed_step,)),
        result(EXIT_AGENT, error="the agent exited with code 1", agent_stdout="\x1b[31mboom\x1b[0m"),
        compare_run(),
    ]


def witnessed() -> FlowResult:
    """A flow that reached a stray host, leaked a secret (masked), left a mock unused and spawned
    a sub-agent."""
    return result(
        EXIT_ASSERTION,
        steps=(StepResult(True, "ok", None, "in subagent Explore #1: Grep", scope="in subagent Explore #1"),),
        egress=({"host": "api.openai.com", "port": 443, "role": "model", "via": "connect"},
                {"host": "exfil.example.test", "port": 80, "role": "other", "via": "http"}),
        secret_leaks=({"label": "${T}", "host": "exfil.example.test", "method": "POST",
                       "url": "http://exfil.example.test/c?t=«secret:T»", "where": "url", "path": "query",
                       "model_call": False},),
        unused_mocks=({"name": "search_hotels", "server": None, "has_result": True, "location": "b.flow.yaml:8:5",
                       "text": "search_hotels (tools:, b.flow.yaml:8:5): no request carried its result"},),
        subagents=({"number": 0, "name": "Explore", "label": "Explore #1", "family": "claude-code", "parent": None,
                    "spawn_turn": 0, "turns": [2, 3], "result_turn": 4,
                    "text": "Explore #1 (claude-code): spawned in turn 0, ran in turn(s) 2, 3, result in turn 4"},),
        agent_tree=("the agent",
                    "  └─ Explore #1 (claude-code): spawned in turn 0, ran in turn(s) 2, 3, result in turn 4"),
        usage={"input_tokens": 10, "output_tokens": 2, "cache_read_tokens": 0, "cache_write_tokens": 0,
               "turns_without_usage": [1]},
    )
