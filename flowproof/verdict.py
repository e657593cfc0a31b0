"""The one judge of a run: from its record and the agent's outcome to an exit code, the
checked steps and the fate of a recording.

`flowproof-run`, the pytest flow item and the ``flowproof_proxy`` fixture all
judge here (docs/runner.md). `judge` builds the trajectory once from the
`RunRecord`, runs the ladder (`decide_exit`):

1. a replay divergence (it explains whatever the agent did next) → 3;
2. the agent failed (timed out, exited non-zero) → 5, then any proxy error → 5;
3. no ``done`` event: record → 5 (nothing saved), replay and compare → 5 (missing calls
   unchecked);
4. recorded calls never made (replay) → 3; compare: without a handler any unequal
   result (changed, extra, missing) → 4, with one any result it rejected → 4;
5. a step the spec cannot support (a model the run called has no price) → 2;
6. a failed step → 1; else 0;

and decides what happens to a staged recording (`Verdict.recording`): rejected on
1-6, and on a pass kept unless the caller's test failed, it holds an HTTP error
turn the flow did not allow, or no model call went through the proxy. The steps
are evaluated only when the ladder reaches them, exactly as a run that diverged
reports no steps.

Text that depends on where the run was started (the command that records again,
how to allow error turns) is data the edge passes in (`Advice`, `FlowResult.record_command`).

Pure: plain data in, a `Verdict` out — testable without a proxy or an agent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from flowproof.advice import record_command as flow_record_command
from flowproof.assertions import AssertionResult, Mismatch, describe_assertion, evaluate
from flowproof.cassette import Cassette
from flowproof.cassette_check import error_turns
from flowproof.coverage import unused_mocks
from flowproof.errors import (
    EXIT_AGENT,
    EXIT_ASSERTION,
    EXIT_DIVERGENCE,
    EXIT_DRIFT,
    EXIT_OK,
    EXIT_USAGE,
    FlowproofError,
    WireError,
)
from flowproof.guard import guard_evidence
from flowproof.log_events import ErrorKind
from flowproof.options import Mode
from flowproof.run_record import EMPTY_RUN, Miss, MissingCalls, RunRecord
from flowproof.spec.types import FlowSpec, ParallelCallsAssertion, SubagentAssertion, ToolCallAssertion
from flowproof.trajectory import MCP, Trajectory, boundary_of
from flowproof.turns import ToolCall, Turn
from flowproof.wire import codec_by_name

if TYPE_CHECKING:  # the spans (and their module) are built only with --otel
    from flowproof.compare import CompareResult  # the compare engine loads for --compare alone
    from flowproof.genai_spans import SpanRecord

__all__ = [
    "Advice",
    "AgentOutcome",
    "FlowResult",
    "RecordingFate",
    "StepResult",
    "Verdict",
    "agent_error",
    "call_label",
    "decide_exit",
    "judge",
    "result_line",
    "step_line",
    "unreadable_turn",
    "upstream_cause",
    "usage_summary",
]

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
class Advice:
    """How the edge that started a run words what its user can do about a refused recording."""

    #: How to keep a recording that holds HTTP error turns (``pass --allow-error-turns …``).
    allow_error_turns: str
    #: What to check when no model call went through the proxy at record.
    no_model_call: str


@dataclass(frozen=True, slots=True)
class Verdict:
    """How a run ends, and what of its record the report shows."""

    exit_code: int
    recording: RecordingFate = "none"
    error: str | None = None
    divergences: tuple[Miss, ...] = ()
    #: Compare: the texts of the results a compare handler rejected.
    drifts: tuple[str, ...] = ()
    missing: MissingCalls | None = None
    errors: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    #: The evaluated steps, or None when the ladder stopped before them.
    steps: tuple[StepResult, ...] | None = None
    #: Compare: every result (paired, extra, missing) in the order the proxy delivered them.
    compare: tuple[CompareResult, ...] = ()
    #: Why an exit-5 run failed, so the advice fits: "timeout", "upstream", "unreachable" (a model
    #: host the proxy could not reach), "crash", "request" (a model call no codec reads) or None.
    failure: str | None = None
    #: What the agent did, built once from the record (None when a turn cannot be read).
    trajectory: Trajectory | None = field(default=None, compare=False)
    #: The evidence behind each assert_no_tool_call (`GuardEvidence.to_json`), with the steps.
    guards: tuple[dict[str, Any], ...] = ()
    #: The spec's mocks that never fired (`flowproof.coverage.UnusedMock.to_json`), with the steps.
    unused_mocks: tuple[dict[str, Any], ...] = ()
    #: A kept recording's HTTP error turns (allowed by the flow), one line each.
    error_turns: tuple[str, ...] = ()


def upstream_cause(record: RunRecord) -> str | None:
    """What went wrong between the proxy and the model, when anything did: a model host the
    proxy could not reach, else a model call the upstream cut before it completed, else the
    first HTTP error status a live call was answered with (and the API's own error message,
    when the body is in its shape). None when the model side did nothing wrong: the agent's
    failure is then its own."""
    for kind in (ErrorKind.UPSTREAM_UNREACHABLE, ErrorKind.UPSTREAM):
        for error in record.errors:
            if error.kind is kind:
                return error.text
    for turn in record.turns:
        response = turn.recorded.response
        if turn.replayed or response is None or response.status < 400:
            continue
        request = turn.recorded.request
        cause = (f"the upstream answered HTTP {response.status} to model call {turn.recorded.index} "
                 f"({request.method} {request.url})")
        message = _api_error_text(turn.recorded.provider, response.body)
        return f"{cause}: {message[:300]}" if message else cause
    return None


def unreadable_turn(record: RunRecord) -> str | None:
    """What the first model call no codec reads was (which call, which body and field, what
    the codec said), or None when every call reads. Such a call is the agent's (or a shape
    this flowproof does not know), never the spec's: the run fails as the agent's, and the
    steps, which need every call read, are not checked."""
    turn = next((t for t in record.turns if t.problem is not None), None)
    if turn is None or turn.problem is None:
        return None
    request = turn.recorded.request
    call = f"model call {turn.recorded.index} ({request.method} {request.url})"
    problem = turn.problem
    if not isinstance(problem, WireError):
        return f"flowproof cannot read {call}: {problem}; the steps were not checked"
    what = f"the answer to {call}" if problem.part == "response" else call
    return (
        f"flowproof cannot read {what}: its {problem.part or 'body'} field `{problem.field}` {problem.reason} "
        f"(the {problem.provider} codec); the steps were not checked — if the API accepts this "
        "shape, flowproof does not know it yet; otherwise fix how the agent builds the request"
    )


def _api_error_text(provider: str, body: Any) -> str | None:
    """The API's error message in a JSON error body (an HTML page from a gateway is not quoted:
    its last line is markup, not a reason)."""
    if body is None:
        return None
    try:
        return codec_by_name(provider).error_text(body)
    except FlowproofError:
        return None  # a provider this flowproof does not know has no error shape to read


def agent_error(run: AgentOutcome, timeout: float, tls: Sequence[str], cause: str | None = None) -> str | None:
    """Why the agent run failed (a timeout, a non-zero exit); None when it finished cleanly.

    ``cause`` is what the model side did (`upstream_cause`): when there is one it leads, and
    the agent's failure follows from it. ``tls`` are the TLS failures on model hosts: one is
    named as the likely cause (the CA advice) only then."""
    if cause is not None:
        if run.timed_out:
            return f"{cause}; the agent then did not finish within {timeout:g}s and was stopped"
        if run.returncode not in (0, None):
            return f"{cause}; the agent then exited with code {run.returncode} — see the agent output below"
        return None
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
    record: RunRecord,
    run: AgentOutcome,
    steps: Callable[[], Sequence[StepResult]],
    mode: str,
    *,
    timeout: float,
    handler: str | None = None,
) -> Verdict:
    """The ladder's verdict on one run in ``mode`` (``record``, ``replay`` or ``compare``).

    ``record`` is the run's record, ``run`` the agent's outcome, ``steps`` evaluates the
    spec against the trajectory (called only when the ladder gets that far), ``handler``
    the compare handler in effect (it decides: only the results it rejected fail the run).
    """
    compared = record.compare if mode == Mode.COMPARE else ()
    # A plain unequal result is in `compared` already; a handler's rejection is a text of its own.
    drifts = record.rejected_by_handler if mode == Mode.COMPARE else ()
    errors = tuple(e.text for e in record.errors)
    # A TLS failure on a host that carries no model call (the agent's telemetry) stopped none.
    tls = tuple(f.text for f in record.tls_failures if f.model)
    other_tls = tuple(
        f"a TLS handshake with the proxy failed for {f.host}, which is not a model host (model calls "
        f"were not affected): {f.text}"
        for f in record.tls_failures if not f.model
    )
    missing = record.missing if mode == Mode.REPLAY else None
    notes: list[str] = _abandoned_notes(record) if mode == Mode.RECORD else []
    base = Verdict(
        EXIT_OK, divergences=record.misses, drifts=drifts, missing=missing, errors=errors, compare=compared
    )

    def failed(code: int, error: str | None = None, *, reject: bool = True, **changes: Any) -> Verdict:
        fate: RecordingFate = "reject" if reject and mode == Mode.RECORD else "none"
        fields: dict[str, Any] = {"notes": tuple(notes), **changes}
        return replace(base, exit_code=code, recording=fate, error=error, **fields)

    if record.misses:
        # Turns left unconsumed after a divergence are its cascade, not news: not reported.
        return failed(EXIT_DIVERGENCE, missing=None, notes=())
    cause = upstream_cause(record)
    why = agent_error(run, timeout, tls, cause)
    # An agent that dies after its model call failed upstream is a casualty, not the cause.
    kinds = {e.kind for e in record.errors}
    upstream = "unreachable" if ErrorKind.UPSTREAM_UNREACHABLE in kinds else (
        "upstream" if ErrorKind.UPSTREAM in kinds else None)
    unreadable = unreadable_turn(record)
    if why is not None:
        failure = upstream or ("upstream" if cause is not None else ("timeout" if run.timed_out else "crash"))
        return failed(EXIT_AGENT, why, notes=(*other_tls, *([unreadable] if unreadable else [])), failure=failure)
    if errors:
        return failed(EXIT_AGENT, cause or errors[0], notes=(), failure=upstream)
    if unreadable is not None:
        # Not a spec error (exit 2 would lose the flow and delete the recording): the
        # agent's request, kept aside as rejected with the agent's output shown.
        return failed(EXIT_AGENT, unreadable, notes=tuple(notes), failure="request")
    if not record.done:
        notes.append("the proxy did not report a clean shutdown (no `done` event)")
        if mode == Mode.RECORD:
            return failed(EXIT_AGENT, "the proxy did not finish writing the recording — nothing was saved")
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
    result = replace(base, steps=checked, notes=tuple(notes))
    if missing:
        return replace(result, exit_code=EXIT_DIVERGENCE)
    # With a handler it decides (a rejection is a drift text); without one, any unequal result.
    if drifts or (not handler and any(not r.equal for r in compared)):
        return replace(result, exit_code=EXIT_DRIFT)
    fate: RecordingFate = "reject" if mode == Mode.RECORD else "none"
    if any(s.spec_error and not s.passed for s in checked):
        return replace(result, exit_code=EXIT_USAGE, recording=fate)
    if not all(s.passed for s in checked):
        return replace(result, exit_code=EXIT_ASSERTION, recording=fate)
    return replace(result, recording="keep" if mode == Mode.RECORD else "none")


def judge(
    record: RunRecord,
    run: AgentOutcome,
    mode: str,
    *,
    advice: Advice,
    spec: FlowSpec | None = None,
    timeout: float = 0.0,
    handler: str | None = None,
    allow_error_turns: bool = False,
    test_failed: bool = False,
    strict_mocks: bool = False,
    recording: Cassette | None = None,
) -> Verdict:
    """The whole verdict on one run: the trajectory (built once), the ladder with ``spec``'s
    steps and guard evidence (none without a spec), and the fate of a recording.

    ``test_failed``: the caller's own test failed (the fixture), so a recording is not kept.
    ``strict_mocks``: a mock that never fired fails the run (``--strict-mocks``).
    ``recording``: the staged recording as the proxy wrote it, MCP exchanges included (an
    MCP server that refused every request is an error turn too); without it, the record's
    turns. A turn no codec reads fails the run as the agent's (exit 5, `unreadable_turn`).
    """
    mcp_tools = frozenset(t.name for server in spec.mcp for t in server.tools) if spec is not None else frozenset()
    mcp_servers = frozenset(s.name for s in spec.mcp) if spec is not None else frozenset()
    trajectory = record.trajectory(mcp_tools, mcp_servers) if record.readable() else None
    guards: list[dict[str, Any]] = []
    unused: list[dict[str, Any]] = []

    def steps() -> tuple[StepResult, ...]:
        checked = trajectory if trajectory is not None else record.trajectory(mcp_tools, mcp_servers)
        if spec is None:
            return ()
        guards.extend(g.to_json() for g in guard_evidence(spec, checked))
        unused.extend(u.to_json() for u in unused_mocks(spec, checked))
        return tuple(
            StepResult(
                passed=r.passed,
                message=r.message,
                location=str(r.location) if r.location else None,
                source=result_line(r),
                mismatches=r.mismatches,
                scope=r.scope,
                spec_error=r.spec_error,
            )
            for r in evaluate(spec, checked, witness=record.witness, strict_mocks=strict_mocks)
        )

    verdict = decide_exit(record, run, steps, mode, timeout=timeout, handler=handler)
    notes = (*verdict.notes, *record.mcp_rejected)
    verdict = replace(verdict, trajectory=trajectory, guards=tuple(guards), unused_mocks=tuple(unused), notes=notes)
    if verdict.recording != "keep":
        return verdict
    if test_failed:
        return replace(verdict, recording="reject")
    errors = error_turns(recording if recording is not None else Cassette(tuple(t.recorded for t in record.turns)))
    if errors and not allow_error_turns:
        # An error turn is usually a flaky upstream, not the behaviour the flow means to pin.
        return replace(
            verdict, exit_code=EXIT_AGENT, recording="reject", failure="upstream", notes=(*notes, *errors),
            error=f"{errors[0]}; a cassette with error turns is not kept — record again when the "
                  f"upstream is healthy, or {advice.allow_error_turns} if it tests error handling",
        )
    if not record.turns:
        # An empty recording must not replace a good cassette, nor be minted.
        return replace(
            verdict, exit_code=EXIT_AGENT, recording="reject",
            error=f"no model call went through the proxy, so there is nothing to record — {advice.no_model_call}",
        )
    return replace(verdict, notes=(*notes, *errors), error_turns=errors)


def _abandoned_notes(record: RunRecord) -> list[str]:
    """One note per call the agent abandoned at record: never a failure by itself, but worth
    knowing (docs/cassette.md, "Abandoned turns")."""
    return [
        f"turn {t.recorded.index} ({t.recorded.provider}) was abandoned by the agent before its answer "
        "ended; it is recorded as abandoned and counts for neither the reply nor the tool calls"
        for t in record.abandoned
    ]


def call_label(call: ToolCall) -> str:
    """A trajectory call as reports list it: the name, marked when it crossed the MCP boundary."""
    return f"{call.name} (mcp)" if boundary_of(call) == MCP else str(call.name)


def result_line(result: AssertionResult) -> str:
    """A checked step as the report lists it (`step_line`), after the ``in:`` scope it was
    checked in; the flow-level checks (``strict``, strict mocks) read as their option."""
    if result.step is None:
        line = "strict mocks" if result.message.startswith("strict mocks") else "strict: true"
    else:
        line = step_line(result.step)
    return f"{result.scope}: {line}" if result.scope else line


def usage_summary(turns: Sequence[Turn]) -> dict[str, Any]:
    """The tokens the run's responses reported, and the turns that reported none."""
    used = [t.response.usage for t in turns if t.response is not None and t.response.usage is not None]
    return {
        "input_tokens": sum(u.input_tokens for u in used),
        "output_tokens": sum(u.output_tokens for u in used),
        "cache_read_tokens": sum(u.cache_read_tokens for u in used),
        "cache_write_tokens": sum(u.cache_write_tokens for u in used),
        "turns_without_usage": [t.index for t in turns if t.response is None or t.response.usage is None],
    }


def step_line(step: Any) -> str:
    """A step as the report lists it, reading as what it checks: ``no call to issue_refund``
    (a bare name after ✓ would read as if the tool had been called), ``create_booking where
    flight.id equals KQ311``, ``reply contains booked``; ``strict: true`` for the strict check."""
    if step is None:
        return "strict: true"
    if isinstance(step, ToolCallAssertion):
        what = describe_assertion(step)
        return f"no call to {what}" if step.negated else what
    if isinstance(step, SubagentAssertion):
        return f"sub-agent {step.name}"
    if isinstance(step, ParallelCallsAssertion):
        return f"at once: {step.source}"
    source = getattr(step, "source", None)
    if source:
        return str(source)
    return type(step).__name__


@dataclass(frozen=True, slots=True)
class FlowResult:
    """One flow's verdict and everything the reports show (text, JSON, JUnit, HTML, pytest).

    ``record_command`` is the command that records the flow's cassette again, as the place
    the flow ran from words it (default: ``flowproof-run SPEC --record``); reports render
    the divergences with it.
    """

    spec_path: Path
    name: str
    mode: str
    exit_code: int
    cassette: Path | None = None
    record_command: str = ""
    steps: tuple[StepResult, ...] = ()
    divergences: tuple[Miss, ...] = ()
    drifts: tuple[str, ...] = ()
    missing: MissingCalls | None = None
    errors: tuple[str, ...] = ()
    #: A FlowproofError that stopped the flow (spec error, missing cassette, agent failure …).
    error: str | None = None
    reply: str | None = None
    tool_calls: tuple[str, ...] = ()
    agent_stdout: str = ""
    agent_stderr: str = ""
    agent_returncode: int | None = None
    heal_diff: str | None = None
    rejected: Path | None = None
    notes: tuple[str, ...] = ()
    #: The evidence behind each assert_no_tool_call (`flowproof.guard.GuardEvidence.to_json`).
    guards: tuple[dict[str, Any], ...] = ()
    startup_seconds: float | None = None
    duration: float = 0.0
    turns: int = 0
    #: Compare: every result (paired, extra, missing) in the order the proxy delivered them.
    compare: tuple[CompareResult, ...] = ()
    #: Why an exit-5 flow failed, for advice that fits: "timeout", "upstream", "unreachable",
    #: "crash", "request" or None.
    failure: str | None = None
    #: Every host the agent tried to reach (`flowproof.witness.EgressHost.to_json`), any mode.
    egress: tuple[dict[str, Any], ...] = ()
    #: Where a declared secret went (`flowproof.witness.SecretLeak.to_json`; never the value).
    secret_leaks: tuple[dict[str, Any], ...] = ()
    #: The spec's mocks that never fired (`flowproof.coverage.UnusedMock.to_json`).
    unused_mocks: tuple[dict[str, Any], ...] = ()
    #: The tools the spec mocks (``tools:`` with a ``result:``): the model read their results from the spec.
    mocked_tools: tuple[str, ...] = ()
    #: The sub-agents, each with its parent (`flowproof.subagents.SubAgent.to_json`).
    subagents: tuple[dict[str, Any], ...] = ()
    #: The sub-agent tree as indented text lines (empty without sub-agents).
    agent_tree: tuple[str, ...] = ()
    #: Tokens the responses reported: input, output, and the turns that reported none.
    usage: dict[str, Any] | None = None
    #: What the proxy reported, read once (`flowproof.run_record`).
    run: RunRecord = field(default=EMPTY_RUN, compare=False, repr=False)
    #: What the agent did, built once by the judge (None when the flow never ran, or a turn
    #: cannot be read).
    trajectory: Trajectory | None = field(default=None, compare=False, repr=False)
    #: With ``--otel``: the run's GenAI spans (`flowproof.runner.otel.flow_spans`, docs/otel.md).
    spans: tuple[SpanRecord, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.record_command:
            object.__setattr__(self, "record_command", flow_record_command(self.spec_path))

    @property
    def passed(self) -> bool:
        return self.exit_code == EXIT_OK

    def divergence_texts(self, *, command: bool = True) -> tuple[str, ...]:
        """Each divergence as the report shows it (ending with `record_command`; without it when
        ``command`` is false: the text report names it once, on its last line)."""
        shown = self.record_command if command else ""
        return tuple(m.render(shown) for m in self.divergences)

    def missing_text(self, *, command: bool = True) -> str | None:
        """The missing-calls report (ending with `record_command` unless ``command`` is false), or None."""
        shown = self.record_command if command else ""
        return self.missing.render(shown) if self.missing is not None else None
