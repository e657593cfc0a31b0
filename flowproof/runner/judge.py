"""Judging one run, for every way in: flowproof-run, the pytest flow item, the fixture.

The edge around the pure judge (`flowproof.verdict.judge`): it reads the
proxy's events once (`flowproof.run_record.read_run`, with the cassette the
runner loaded and the views its check built), judges them, builds the
`FlowResult` every report reads, and carries out the verdict on a staged
recording (`runner.recording.Staging`: keep it as the cassette with its heal
diff, or keep it aside as rejected).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from flowproof.cassette import Cassette, load_cassette
from flowproof.errors import FlowproofError
from flowproof.log_events import Event
from flowproof.run_record import read_run
from flowproof.runner.recording import Staging
from flowproof.spec import FlowSpec
from flowproof.turns import Turn
from flowproof.verdict import Advice, AgentOutcome, FlowResult, call_label, judge, usage_summary

__all__ = ["judge_flow"]


def judge_flow(
    events: Sequence[Event],
    agent: AgentOutcome,
    *,
    spec_path: Path,
    name: str,
    mode: str,
    cassette: Path,
    record_command: str,
    advice: Advice,
    existing: Cassette | None,
    views: Sequence[Turn] | None = None,
    staging: Staging | None = None,
    spec: FlowSpec | None = None,
    handler: str | None = None,
    timeout: float = 0.0,
    allow_error_turns: bool = False,
    test_failed: bool = False,
    strict_mocks: bool = False,
    startup: float | None = None,
    duration: float = 0.0,
    before_keep: Callable[[], None] | None = None,
) -> FlowResult:
    """The `FlowResult` of one run whose proxy logged ``events``; a staged recording is kept
    or rejected as the verdict says (``before_keep`` runs just before a keep: a signal that
    arrived during the assertions raises there, and nothing is recorded)."""
    record = read_run(events, existing, views=views)
    # The recording as the proxy wrote it: its MCP exchanges are in no event.
    recording = load_cassette(staging.path) if staging is not None and staging.path.exists() else None
    verdict = judge(
        record, agent, mode, advice=advice, spec=spec, timeout=timeout, handler=handler,
        allow_error_turns=allow_error_turns, test_failed=test_failed, strict_mocks=strict_mocks,
        recording=recording,
    )
    trajectory = verdict.trajectory
    # What the agent did is reported once the ladder reached the steps (a diverged run's
    # later calls follow from the divergence).
    checked = verdict.steps is not None and trajectory is not None
    result = FlowResult(
        spec_path=spec_path,
        name=name,
        mode=mode,
        exit_code=verdict.exit_code,
        cassette=cassette,
        record_command=record_command,
        steps=verdict.steps or (),
        divergences=verdict.divergences,
        drifts=verdict.drifts,
        missing=verdict.missing,
        errors=verdict.errors,
        error=verdict.error,
        reply=trajectory.reply if checked and trajectory is not None else None,
        tool_calls=tuple(call_label(c) for c in trajectory.tool_calls) if checked and trajectory else (),
        turns=len(record.turns) if checked else 0,
        guards=verdict.guards,
        unused_mocks=verdict.unused_mocks,
        mocked_tools=tuple(spec.tool_results) if spec is not None else (),
        subagents=tuple(s.to_json() for s in trajectory.agents.subagents) if checked and trajectory else (),
        agent_tree=tuple(trajectory.agents.lines()) if checked and trajectory else (),
        usage=usage_summary(trajectory.turns) if checked and trajectory else None,
        # What the proxy saw beyond model calls is reported in every mode, whatever was asserted.
        egress=tuple(e.to_json() for e in record.witness.egress),
        secret_leaks=tuple(leak.to_json() for leak in record.witness.leaks),
        notes=verdict.notes,
        compare=verdict.compare,
        agent_stdout=agent.stdout,
        agent_stderr=agent.stderr,
        agent_returncode=agent.returncode,
        startup_seconds=startup,
        duration=duration,
        failure=verdict.failure,
        run=record,
        trajectory=trajectory,
    )
    if staging is None or verdict.recording == "none":
        return result
    if verdict.recording == "reject":
        return replace(result, rejected=staging.reject())
    if before_keep is not None:
        before_keep()
    try:
        heal = staging.keep(len(record.turns), existing)
    except FlowproofError as e:
        return replace(result, exit_code=e.exit_code, error=str(e))
    if verdict.error_turns:
        heal = "\n".join([*verdict.error_turns, heal or ""]).strip()
    return replace(result, heal_diff=heal)
