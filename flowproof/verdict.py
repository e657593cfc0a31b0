"""The run verdict: from the proxy's events and the agent's outcome to an exit code.

The one owner of the ladder that decides how a flow run ends (docs/runner.md):

1. a replay divergence (it explains whatever the agent did next) → 3;
2. the agent failed (timed out, exited non-zero) → 5, then any proxy error → 5;
3. no ``done`` event: record → 5 (nothing saved), replay and compare → 5 (missing calls
   unchecked);
4. recorded calls never made (replay) → 3; compare: without a handler any unequal
   result (changed, extra, missing) → 4, with one any result it rejected → 4;
5. a step the spec cannot support (a model the run called has no price) → 2;
6. a failed step → 1; else 0.

What happens to a staged recording follows from it (`Verdict.recording`):
it is rejected on 1-6 and kept on a pass. The steps are evaluated only when
the ladder reaches them (``steps`` is called then), exactly as a run that
diverged reports no steps.

Pure: plain data in, a `Verdict` out — testable without a proxy or an agent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from flowproof.assertions import Mismatch
from flowproof.cassette import Cassette, turn_views
from flowproof.compare import CompareResult
from flowproof.errors import (
    EXIT_AGENT,
    EXIT_ASSERTION,
    EXIT_DIVERGENCE,
    EXIT_DRIFT,
    EXIT_OK,
    EXIT_USAGE,
    FlowproofError,
)
from flowproof.events import (
    ComparedEvent,
    DivergenceEvent,
    DoneEvent,
    DriftEvent,
    ErrorEvent,
    Event,
    TlsFailedEvent,
    TurnEvent,
)
from flowproof.options import Mode

__all__ = [
    "AgentOutcome",
    "RecordingFate",
    "StepResult",
    "Verdict",
    "abandoned_notes",
    "agent_error",
    "compare_results",
    "decide_exit",
    "missing_text",
]

#: How the proxy words a model call that the upstream broke off (a cut, a refused connection).
UPSTREAM_FAULT = "failed before it completed"

#: What becomes of a staged recording: kept as the cassette, kept aside as rejected, or neither.
RecordingFate = Literal["keep", "reject", "none"]


class AgentOutcome(Protocol):
    """What the verdict needs to know about the agent run (`runner.agents.AgentRun` has it)."""

    @property
    def returncode(self) -> int | None: ...
    @property
    def stdout(self) -> str: ...
    @property
    def stderr(self) -> str: ...
    @property
    def timed_out(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class StepResult:
    """One line of the report: a checked step (or the strict check); a failure's
    ``mismatches`` say why as data (`flowproof.assertions.Mismatch`)."""

    passed: bool
    message: str
    location: str | None
    source: str
    mismatches: tuple[Mismatch, ...] = ()
    #: The ``in:`` scope the step was checked in ("" for the whole run).
    scope: str = ""
    #: The failure is the spec's (exit 2), not the agent's.
    spec_error: bool = False


@dataclass(frozen=True, slots=True)
class Verdict:
    """How a run ends, and everything from the event log that the report shows."""

    exit_code: int
    recording: RecordingFate = "none"
    error: str | None = None
    divergences: tuple[str, ...] = ()
    drifts: tuple[str, ...] = ()
    missing: str | None = None
    errors: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    #: The evaluated steps, or None when the ladder stopped before them.
    steps: tuple[StepResult, ...] | None = None
    #: Compare: every result (paired, extra, missing) in the order the proxy delivered them.
    compare: tuple[CompareResult, ...] = ()
    #: Why an exit-5 run failed, so the advice fits: "timeout", "upstream", "crash" or None.
    failure: str | None = None


def compare_results(events: Sequence[Event]) -> tuple[tuple[CompareResult, ...], tuple[str, ...]]:
    """The compare results of the ``compared``/``drift`` events in log order, and a problem
    text for each result the log holds that cannot be read back."""
    results: list[CompareResult] = []
    problems: list[str] = []
    for e in events:
        if isinstance(e, ComparedEvent | DriftEvent) and e.result:
            try:
                results.append(CompareResult.from_json(e.result))
            except (KeyError, ValueError, TypeError) as err:
                problems.append(f"the proxy logged a compare result flowproof cannot read: {err!r}")
    return tuple(results), tuple(problems)


def missing_text(events: Sequence[Event], existing: Cassette | None) -> str | None:
    """The missing-calls report from the last ``done`` event, or None when every recorded
    turn was requested. Falls back to a list of the turns (with their models) when the
    addon gave no text."""
    done = next((e for e in reversed(events) if isinstance(e, DoneEvent)), None)
    if done is None or not done.unconsumed:
        return None
    if done.text:
        return done.text
    lines = [f"{len(done.unconsumed)} recorded call(s) were never made (missing calls):"]
    by_index = {t.index: t for t in existing.turns} if existing is not None else {}
    for index in done.unconsumed:
        turn = by_index.get(index)
        if turn is None:
            lines.append(f"- turn {index}")
            continue
        try:
            model = turn_views(turn).request.model  # through the codec: Gemini names it in the path
        except FlowproofError:
            model = None
        lines.append(f"- turn {index} ({turn.provider}{', ' + model if model else ''})")
    return "\n".join(lines)


def abandoned_notes(events: Sequence[Event]) -> list[str]:
    """One note per call the agent abandoned at record: never a failure by itself, but worth
    knowing (docs/cassette.md, "Abandoned turns")."""
    return [
        f"turn {e.turn.index} ({e.turn.provider}) was abandoned by the agent before its answer "
        "ended; it is recorded as abandoned and counts for neither the reply nor the tool calls"
        for e in events
        if isinstance(e, TurnEvent) and e.turn.abandoned
    ]


def agent_error(run: AgentOutcome, timeout: float, tls: Sequence[str]) -> str | None:
    """Why the agent run failed (a timeout, a non-zero exit), naming a TLS failure as the
    likely cause; None when it finished cleanly."""
    if run.timed_out:
        message = f"the agent did not finish within {timeout:g}s and was stopped (its whole process group)"
        if tls:
            message += (
                f"; the likely cause: it does not trust the flowproof CA ({tls[0]}) — make sure it "
                "reads SSL_CERT_FILE / NODE_EXTRA_CA_CERTS, or see docs/proxy-env.md"
            )
        else:
            message += " — raise `agent.timeout` in the spec or --timeout if it is just slow"
        return message
    if run.returncode not in (0, None):
        message = f"the agent exited with code {run.returncode}"
        last = (
            (run.stderr.strip() or run.stdout.strip()).splitlines()[-1:]
            if (run.stderr or run.stdout)
            else []
        )
        if last:
            message += f": {last[0][:300]}"
        if tls:
            message += f" (the proxy saw a TLS failure: {tls[0]})"
        return message + " — see the agent output below"
    return None


def decide_exit(
    events: Sequence[Event],
    run: AgentOutcome,
    steps: Callable[[], Sequence[StepResult]],
    mode: str,
    *,
    timeout: float,
    handler: str | None = None,
    existing: Cassette | None = None,
) -> Verdict:
    """The verdict on one run in ``mode`` (``record``, ``replay`` or ``compare``).

    ``events`` is the proxy's typed event log, ``run`` the agent's outcome,
    ``steps`` evaluates the spec against the trajectory (called only when the
    ladder gets that far), ``handler`` the compare handler in effect (it decides:
    only the results it rejected fail the run), ``existing`` the recorded cassette (names missing calls).
    """
    divergences = tuple(e.text for e in events if isinstance(e, DivergenceEvent))
    compared, unreadable = compare_results(events) if mode == Mode.COMPARE else ((), ())
    # A plain unequal result is in `compared` already; only a handler's rejection (or a
    # drift without a result) is listed as text of its own.
    drifts = tuple(
        e.text for e in events if isinstance(e, DriftEvent) and (e.handled or not e.result)
    ) if mode == Mode.COMPARE else ()
    errors = tuple(e.text for e in events if isinstance(e, ErrorEvent)) + unreadable
    tls = tuple(e.text for e in events if isinstance(e, TlsFailedEvent))
    missing = missing_text(events, existing) if mode == Mode.REPLAY else None
    notes: list[str] = abandoned_notes(events) if mode == Mode.RECORD else []
    base = Verdict(
        EXIT_OK, divergences=divergences, drifts=drifts, missing=missing, errors=errors, compare=compared
    )

    def failed(
        code: int, error: str | None = None, *, reject: bool = True, **changes: Any
    ) -> Verdict:
        fate: RecordingFate = "reject" if reject and mode == Mode.RECORD else "none"
        fields: dict[str, Any] = {"notes": tuple(notes), **changes}
        return _replace(base, exit_code=code, recording=fate, error=error, **fields)

    if divergences:
        # Turns left unconsumed after a divergence are its cascade, not news: not reported.
        return failed(EXIT_DIVERGENCE, missing=None, notes=())
    why = agent_error(run, timeout, tls)
    # An agent that dies after its model call failed upstream is a casualty, not the cause.
    upstream = any(UPSTREAM_FAULT in e for e in errors)
    if why is not None:
        failure = "timeout" if run.timed_out else ("upstream" if upstream else "crash")
        return failed(EXIT_AGENT, why, notes=(), failure=failure)
    if errors:
        return failed(EXIT_AGENT, errors[0], notes=(), failure="upstream" if upstream else None)
    if not any(isinstance(e, DoneEvent) for e in events):
        notes.append("the proxy did not report a clean shutdown (no `done` event)")
        if mode == Mode.RECORD:
            return failed(
                EXIT_AGENT, "the proxy did not finish writing the recording — nothing was saved"
            )
        if mode in (Mode.REPLAY, Mode.COMPARE):
            # The recorded turns never requested are found at shutdown: without the `done`
            # event a run that skipped calls would pass unchecked.
            return failed(
                EXIT_AGENT,
                "the proxy stopped without its `done` event, so missing calls could not be "
                "checked — see the proxy's errors above, then run again",
                reject=False,
            )

    checked = tuple(steps())
    result = _replace(base, steps=checked, notes=tuple(notes))
    if missing:
        return _replace(result, exit_code=EXIT_DIVERGENCE)
    # With a handler it decides (a rejection is a drift text); without one, any unequal result.
    if drifts or (not handler and any(not r.equal for r in compared)):
        return _replace(result, exit_code=EXIT_DRIFT)
    fate: RecordingFate = "reject" if mode == Mode.RECORD else "none"
    if any(s.spec_error and not s.passed for s in checked):
        return _replace(result, exit_code=EXIT_USAGE, recording=fate)
    if not all(s.passed for s in checked):
        return _replace(result, exit_code=EXIT_ASSERTION, recording=fate)
    return _replace(result, recording="keep" if mode == Mode.RECORD else "none")


def _replace(verdict: Verdict, **changes: Any) -> Verdict:
    return replace(verdict, **changes)
