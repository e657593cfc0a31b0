"""One flow run: spec -> proxy -> agent -> event log -> trajectory -> verdict.

Orchestration only: the verdict is `flowproof.verdict.decide_exit`, the staged
recording is `runner.recording.Staging`, the report is `runner.report`.
`run_flow` never raises for a user-caused problem: every `FlowproofError` becomes
a `FlowResult` with that error's exit code and message, so several flows can
run and be reported together (the CLI exits with the worst code).
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from flowproof.assertions import AssertionResult, describe_assertion, evaluate
from flowproof.cassette import Cassette, load_cassette, turn_views
from flowproof.cassette_check import check_cassette, error_turns
from flowproof.commands import record_command
from flowproof.compare import CompareResult
from flowproof.coverage import unused_mocks
from flowproof.errors import (
    EXIT_AGENT,
    EXIT_OK,
    AgentError,
    CassetteError,
    CassetteNotFoundError,
    FlowproofError,
    Interrupted,
)
from flowproof.events import DivergenceEvent, Event, McpRejectedEvent, TurnEvent, parse_events, witness_of
from flowproof.genai_spans import RunFacts, SpanRecord, run_spans
from flowproof.guard import guard_evidence
from flowproof.mcp import calls_from_events
from flowproof.model import Turn
from flowproof.options import Mode, ProxyOptions, Route, Transport, Upstream, choose, listeners_for, with_spec
from flowproof.redact import redact_text, secret_values
from flowproof.runner.agents import AgentRun, EventSource, run_command_agent, run_url_agent
from flowproof.runner.env import (
    CAFiles,
    agent_env,
    default_ca_dir,
    ensure_ca,
    handle_values,
    interpreter_first_path,
)
from flowproof.runner.lock import cassette_lock
from flowproof.runner.mcp import (
    agent_variables,
    check_reachable,
    plan_listeners,
    replay_environ,
    reverse_listeners,
)
from flowproof.runner.mcp_stdio import check_agent, write_standins
from flowproof.runner.progress import Progress
from flowproof.runner.proxy import FlowProxy, ProxyPool, free_port, scratch_prefix, start_proxy
from flowproof.runner.recording import Staging
from flowproof.spec import FlowSpec, load_spec, resolve_variables
from flowproof.spec.types import AgentSpec, ParallelCallsAssertion, SubagentAssertion, ToolCallAssertion
from flowproof.spec.variables import resolve_handles
from flowproof.trajectory import MCP, boundary_of, build_trajectory
from flowproof.verdict import StepResult, decide_exit

#: Staging files of the recordings in progress: a runner that must exit at once after a
#: signal (a flow stuck where it cannot see the cancel) removes them on its way out.
STAGED: set[Path] = set()


class Cancel:
    """Set (from a SIGINT/SIGTERM handler) to stop every running flow: agents and proxies are
    stopped, nothing is recorded, and each flow reports `Interrupted`."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signum: int | None = None

    def set(self, signum: int = signal.SIGINT) -> None:
        if self.signum is None:
            self.signum = int(signum)
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()


@dataclass(frozen=True, slots=True)
class RunOptions:
    """How to run flows (from the command line, a pytest item). ``environ`` defaults to
    ``os.environ``; ``upstream`` and ``extra_hosts`` come from `flowproof.options.host_settings`
    at every entry point (flags and ``FLOWPROOF_UPSTREAM``/``FLOWPROOF_EXTRA_HOSTS``)."""

    mode: Mode | str = Mode.REPLAY
    cassette: Path | None = None
    upstream: Mapping[str, Upstream] = field(default_factory=dict)
    extra_hosts: tuple[str, ...] = ()
    proxy_port: int = 0
    timeout: float | None = None
    compare_handler: str | None = None
    #: ``http``: refuse WebSocket upgrades to model APIs for every flow (``--transport http``).
    transport: str | None = None
    ca_dir: Path | None = None
    environ: Mapping[str, str] | None = None
    proxy_timeout: float = 20.0
    #: Set by the CLI's signal handler: running flows stop at once (see `Cancel`).
    cancel: Cancel | None = None
    #: Keep a recording whose turns hold an HTTP error status (the flow tests error handling).
    allow_error_turns: bool = False
    #: The proxies shared by the flows of a run: each flow opens a session on one (None: the
    #: flow gets a proxy of its own, a pool of one, as a single flow does).
    proxies: ProxyPool | None = None
    #: The per-call log lines and the status line (`runner.progress`); None: neither.
    progress: Progress | None = None
    #: A tools:/mcp: mock that never fired fails the flow (also `strict_mocks: true` in a spec).
    strict_mocks: bool = False
    #: Build the run's GenAI spans (`FlowResult.spans`, docs/otel.md); with ``otel_content``
    #: they carry the tool calls' arguments and results, masked as reports are.
    otel: bool = False
    otel_content: bool = False


@dataclass(frozen=True, slots=True)
class FlowResult:
    """The verdict on one flow, with everything the reports show."""

    spec_path: Path
    name: str
    mode: str
    exit_code: int
    cassette: Path | None = None
    steps: tuple[StepResult, ...] = ()
    divergences: tuple[str, ...] = ()
    drifts: tuple[str, ...] = ()
    missing: str | None = None
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
    events: tuple[Event, ...] = field(default=(), compare=False, repr=False)
    #: Why an exit-5 flow failed, for advice that fits: "timeout", "upstream", "crash" or None.
    failure: str | None = None
    #: Every host the agent tried to reach (`flowproof.witness.EgressHost.to_json`), any mode.
    egress: tuple[dict[str, Any], ...] = ()
    #: Where a declared secret went (`flowproof.witness.SecretLeak.to_json`; never the value).
    secret_leaks: tuple[dict[str, Any], ...] = ()
    #: The spec's mocks that never fired (`flowproof.coverage.UnusedMock.to_json`).
    unused_mocks: tuple[dict[str, Any], ...] = ()
    #: The sub-agents, each with its parent (`flowproof.subagents.SubAgent.to_json`).
    subagents: tuple[dict[str, Any], ...] = ()
    #: The sub-agent tree as indented text lines (empty without sub-agents).
    agent_tree: tuple[str, ...] = ()
    #: Tokens the responses reported: input, output, and the turns that reported none.
    usage: dict[str, Any] | None = None
    #: With `RunOptions.otel`: the run's GenAI spans, for `runner.otel.export_runs`.
    spans: tuple[SpanRecord, ...] = field(default=(), compare=False, repr=False)

    @property
    def passed(self) -> bool:
        return self.exit_code == EXIT_OK

    @property
    def record_command(self) -> str:
        return record_command(self.spec_path)


def run_flow(spec_path: Path | str, options: RunOptions) -> FlowResult:
    """Run one flow spec and return its verdict (never raises a FlowproofError)."""
    started = time.monotonic()
    spec_path = Path(spec_path)
    try:
        if options.cancel is not None and options.cancel.is_set():
            raise Interrupted(options.cancel.signum)
        result = _run(spec_path, options)
    except FlowproofError as e:
        result = FlowResult(
            spec_path=spec_path,
            name=spec_path.name,
            mode=options.mode,
            exit_code=e.exit_code,
            error=str(e),
        )
    return _with(result, duration=time.monotonic() - started)


def _with(result: FlowResult, **changes: Any) -> FlowResult:
    return replace(result, **changes)


def _run(spec_path: Path, options: RunOptions) -> FlowResult:
    try:
        mode = choose(Mode, options.mode, "mode")
    except ValueError as e:
        raise FlowproofError(str(e)) from None
    environ = dict(os.environ if options.environ is None else options.environ)
    raw_spec = load_spec(spec_path)
    # An mcp: url variable left unset at replay gets a placeholder: replay dials no server.
    environ = replay_environ(raw_spec, environ, mode)
    spec = resolve_variables(raw_spec, environ)
    cassette = options.cassette or spec.cassette
    agent = spec.agent
    prompts = [p.text for p in spec.prompts]
    timeout = options.timeout if options.timeout is not None else agent.timeout

    existing: Cassette | None = None
    if mode in (Mode.REPLAY, Mode.COMPARE):
        existing = _load_existing(cassette, spec_path, agent.route, required=True)
    elif cassette.exists():
        existing = _load_existing(cassette, spec_path, agent.route, required=False)

    if agent.url and not options.proxy_port:
        raise FlowproofError(
            f"{agent.location}: a `url:` agent is already running, so it cannot be told a new "
            "proxy port — start it with the exports of `flowproof env --proxy-port N` and run "
            "flowproof-run with the same --proxy-port N"
        )

    check_agent(spec)
    if agent.command and agent.cwd is not None and not agent.cwd.is_dir():
        # Checked before the proxy starts: nothing to stop, and no recording is staged.
        raise AgentError(
            f"{agent.location}: the agent's working directory {agent.cwd} does not exist — "
            "fix `agent.cwd` in the spec"
        )

    listeners = plan_listeners(raw_spec, spec, free_port)
    if mode != Mode.REPLAY:
        check_reachable(listeners)

    ca = ensure_ca(options.ca_dir or default_ca_dir(environ))
    # One writer per cassette: held until the recording is kept or rejected (the staging
    # path is shared too, so it is only touched under the lock).
    held = ExitStack()
    if mode == Mode.RECORD:
        held.enter_context(cassette_lock(cassette))
    staging = Staging(cassette)
    target = staging.path if mode == Mode.RECORD else cassette
    if mode == Mode.RECORD:
        staging.discard()
        STAGED.add(staging.path)
    cancel = options.cancel
    watch = options.progress.watch(spec_path, spec.name, prompts) if options.progress else None
    try:
        with tempfile.TemporaryDirectory(prefix=scratch_prefix("run")) as scratch:
            route = Route(agent.route)
            proxy_options = with_spec(
                ProxyOptions(
                    mode=mode,
                    cassette=target,
                    report=Path(scratch) / "events.jsonl",
                    upstream=options.upstream,
                    extra_hosts=tuple(options.extra_hosts),
                    route=route,
                    compare_handler=options.compare_handler or "",
                    transport=Transport(options.transport or Transport.AUTO.value),
                    mcp=tuple(item.route for item in listeners),
                    listeners=listeners_for(route, options.proxy_port, reverse_listeners(listeners)),
                ),
                spec,
                cwd=str(Path.cwd()),
                # Portable paths are the agent's: a HOME set in `agent.env` wins over the runner's.
                home=dict(agent.env).get("HOME") or environ.get("HOME"),
            )
            # Messages name the spec as the runner was given it, made absolute.
            proxy_options = replace(proxy_options, spec=spec_path.resolve())
            handler = proxy_options.compare_handler or None
            proxy = _proxy_for(proxy_options, ca.cert.parent, options)
            try:
                # No request reaches a real provider in replay, nor with a mapped upstream (a local
                # model or gateway), so an SDK that insists on a key gets a placeholder there.
                placeholders = proxy_options.dials_lazily
                standins = write_standins(spec, Path(scratch) / "mcp", proxy.url, mode)
                agent_environ = {**environ, **agent_variables(listeners), **standins}
                agent_started = time.time()
                run = _drive(
                    proxy, spec.agent, prompts, agent_environ, ca, placeholders,
                    proxy_options.model_hosts, timeout,
                    cancelled=cancel.is_set if cancel is not None else None,
                    events=watch.source(proxy.events) if watch is not None else None,
                    written=raw_spec.agent,
                )
            finally:
                proxy.stop()
            agent_ended = time.time()
            raw_events = proxy.events()
            if watch is not None:
                watch.feed(raw_events)  # what arrived after the agent's last poll
            events = parse_events(raw_events)
        if cancel is not None and cancel.is_set():
            raise Interrupted(cancel.signum)
        result = _verdict(
            spec=spec,
            spec_path=spec_path,
            mode=mode,
            cassette=cassette,
            existing=existing,
            run=run,
            events=events,
            handler=handler,
            timeout=timeout,
            startup=proxy.startup_seconds,
            staging=staging,
            cancel=cancel,
            allow_error_turns=options.allow_error_turns or spec.allow_error_turns,
            strict_mocks=options.strict_mocks,
        )
        if options.otel:
            masking = secret_values(environ)
            content = (lambda text: redact_text(text, masking)) if options.otel_content else None
            # The verdict's words quote prompts and arguments: content, so opt-in like the rest.
            why = _first_failure(result) if content is not None else None
            facts = RunFacts(spec.name, mode, uuid.uuid4().hex, agent_started, agent_ended, result.exit_code,
                             content(why) if content is not None and why else None)
            result = _with(result, spans=run_spans(spec, events, facts, content=content))
        return result
    finally:
        # A verdict keeps or rejects the staging file; on any other way out (an agent
        # that could not start, an error, Ctrl-C) nothing may be left behind.
        if mode == Mode.RECORD:
            staging.discard()
            STAGED.discard(staging.path)
        held.close()
        if watch is not None:
            watch.finish()


def _first_failure(result: FlowResult) -> str | None:
    """The first line of why a flow failed, for its root span's status (None: it passed)."""
    if result.passed:
        return None
    failed = [s.message for s in result.steps if not s.passed]
    text = result.error or next(iter(result.divergences), None) or next(iter(failed), None) or result.missing
    return text.strip().splitlines()[0] if text and text.strip() else None


def _proxy_for(proxy_options: ProxyOptions, confdir: Path, options: RunOptions) -> FlowProxy:
    """A session on the run's proxy of the flow's kind, else on a proxy of the flow's own."""
    if options.proxies is not None:
        return options.proxies.open(proxy_options, confdir, timeout=options.proxy_timeout)
    return start_proxy(proxy_options, confdir, timeout=options.proxy_timeout)


def _load_existing(cassette: Path, spec_path: Path, route: str, *, required: bool) -> Cassette:
    command = record_command(spec_path)
    if required and not cassette.exists():
        raise CassetteNotFoundError(cassette, command)
    loaded = load_cassette(cassette, record_command=command)
    # A cassette is checked whole before the proxy serves any of it (exit 2, turn and field).
    check_cassette(loaded, cassette)
    if required and loaded.route != route:
        raise CassetteError(
            cassette,
            f"was recorded on route `{loaded.route}` but the spec's agent uses route `{route}` "
            "(agents send different requests per route)",
            f"re-record with: {command}",
        )
    return loaded


def _drive(
    proxy: FlowProxy,
    agent: AgentSpec,
    prompts: Sequence[str],
    environ: Mapping[str, str],
    ca: CAFiles,
    placeholder_keys: bool,
    model_hosts: Sequence[str],
    timeout: float,
    cancelled: Callable[[], bool] | None = None,
    events: EventSource | None = None,
    written: AgentSpec | None = None,
) -> AgentRun:
    events = events or proxy.events
    if written is not None:
        # `${flowproof.…}` handles (the proxy's URL, the CA, a base-URL listener) exist now.
        handles = handle_values(proxy.url, ca, proxy.reverse_urls)
        agent = resolve_handles(written, agent, environ, handles)
    if agent.url:
        return run_url_agent(agent.url, prompts=prompts, timeout=timeout, events=events)
    base = dict(environ)
    if prompts:
        base["FLOWPROOF_PROMPT"] = prompts[0]
    env = agent_env(
        base,
        proxy_url=proxy.url,
        ca=ca,
        route=agent.route,
        reverse_urls=proxy.reverse_urls,
        placeholder_keys=placeholder_keys,
        model_hosts=model_hosts,
        overrides=agent.env,
    )
    # `python` in a spec's command is the interpreter flowproof runs under (a virtualenv).
    path = interpreter_first_path(env.get("PATH"))
    if path is not None:
        env["PATH"] = path
    # The spec's own variables come last: they are the author's explicit intent.
    env.update(dict(agent.env))
    return run_command_agent(
        agent.command or "",
        prompts=prompts,
        env=env,
        cwd=agent.cwd,
        timeout=timeout,
        events=events,
        cancelled=cancelled,
    )


def trajectory_turns(events: Sequence[Event]) -> list[Turn]:
    """The normalized `Turn` of every ``turn`` event, through the codecs."""
    return [turn_views(e.turn) for e in events if isinstance(e, TurnEvent)]


def _verdict(
    *,
    spec: FlowSpec,
    spec_path: Path,
    mode: str,
    cassette: Path,
    existing: Cassette | None,
    run: AgentRun,
    events: list[Event],
    handler: str | None,
    timeout: float,
    startup: float,
    staging: Staging,
    cancel: Cancel | None = None,
    allow_error_turns: bool = False,
    strict_mocks: bool = False,
) -> FlowResult:
    checked: dict[str, Any] = {}
    witness = witness_of(events)

    def steps() -> tuple[StepResult, ...]:
        turns = trajectory_turns(events)
        mcp_tools = {t.name for server in spec.mcp for t in server.tools}
        mcp_calls = calls_from_events([e.to_json() for e in events])
        trajectory = build_trajectory(turns, mcp_calls, mcp_tools, {s.name for s in spec.mcp})
        checked.update(
            reply=trajectory.reply,
            tool_calls=tuple(_call_label(c) for c in trajectory.tool_calls),
            turns=len(turns),
            guards=tuple(g.to_json() for g in guard_evidence(spec, trajectory)),
            unused_mocks=tuple(u.to_json() for u in unused_mocks(spec, trajectory)),
            subagents=tuple(s.to_json() for s in trajectory.agents.subagents),
            agent_tree=tuple(trajectory.agents.lines()),
            usage=usage_summary(trajectory.turns),
        )
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
            for r in evaluate(spec, trajectory, witness=witness, strict_mocks=strict_mocks)
        )

    verdict = decide_exit(
        events, run, steps, mode, timeout=timeout, handler=handler, existing=existing
    )
    result = FlowResult(
        spec_path=spec_path,
        name=spec.name,
        mode=mode,
        exit_code=verdict.exit_code,
        cassette=cassette,
        steps=verdict.steps or (),
        divergences=with_subagents(verdict.divergences, events, existing),
        drifts=verdict.drifts,
        missing=verdict.missing,
        errors=verdict.errors,
        error=verdict.error,
        notes=(*verdict.notes, *(e.text for e in events if isinstance(e, McpRejectedEvent))),
        compare=verdict.compare,
        agent_stdout=run.stdout,
        agent_stderr=run.stderr,
        agent_returncode=run.returncode,
        startup_seconds=startup,
        events=tuple(events),
        failure=verdict.failure,
        egress=tuple(e.to_json() for e in witness.egress),
        secret_leaks=tuple(leak.to_json() for leak in witness.leaks),
        **checked,
    )
    if verdict.recording == "reject":
        return _with(result, rejected=staging.reject())
    if verdict.recording == "keep":
        if cancel is not None and cancel.is_set():
            # A signal during the assertions: the verdict is moot and nothing may be recorded.
            raise Interrupted(cancel.signum)
        return _keep(result, staging, existing, allow_error_turns)
    return result


def with_subagents(texts: tuple[str, ...], events: Sequence[Event], existing: Cassette | None) -> tuple[str, ...]:
    """Each divergence text, saying which sub-agent the recorded turn it was compared with
    belongs to (docs/subagents.md): "an edit inside the sub-agent's prompt" reads as such."""
    diverged = [e for e in events if isinstance(e, DivergenceEvent)]
    if existing is None or not diverged or len(diverged) != len(texts):
        return texts
    try:
        agents = build_trajectory([turn_views(t) for t in existing.turns]).agents
    except FlowproofError:
        return texts  # a turn no codec reads: the divergence speaks for itself
    out = []
    for text, event in zip(texts, diverged, strict=True):
        closest = (event.divergence or {}).get("closest_index")
        number = agents.agent_of.get(closest) if isinstance(closest, int) else None
        if number is not None:
            label, spawn = agents.subagents[number].label(), agents.subagents[number].spawn_turn
            text += (f"\nthe recorded turn {closest} it was compared with is sub-agent {label}'s "
                     f"(spawned in turn {spawn}): the change is inside that sub-agent")
        out.append(text)
    return tuple(out)


def _call_label(call: Any) -> str:
    """A trajectory call as reports list it: the name, marked when it crossed the MCP boundary."""
    return f"{call.name} (mcp)" if boundary_of(call) == MCP else str(call.name)


def _keep(result: FlowResult, staging: Staging, existing: Cassette | None,
          allow_error_turns: bool) -> FlowResult:
    """Keep a passing recording, unless it holds an HTTP error status the flow did not ask for:
    an error turn is usually a flaky upstream, not the behaviour the flow means to pin."""
    errors = error_turns(load_cassette(staging.path)) if staging.path.exists() else ()
    if errors and not allow_error_turns:
        return _with(
            result, exit_code=EXIT_AGENT, failure="upstream", notes=(*result.notes, *errors),
            error=f"{errors[0]}; a cassette with error turns is not kept — record again when "
                  "the upstream is healthy, or pass --allow-error-turns (spec key "
                  "`allow_error_turns: true`) if this flow tests error handling",
            rejected=staging.reject(),
        )
    heal = staging.keep(result.turns, existing)
    if errors:
        heal = "\n".join([*errors, heal or ""]).strip()
    return _with(result, heal_diff=heal, notes=(*result.notes, *errors))


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


def result_line(result: AssertionResult) -> str:
    """A checked step as the report lists it (`step_line`), after the ``in:`` scope it was
    checked in; the flow-level checks (``strict``, strict mocks) read as their option."""
    if result.step is None:
        line = "strict mocks" if result.message.startswith("strict mocks") else "strict: true"
    else:
        line = step_line(result.step)
    return f"{result.scope}: {line}" if result.scope else line


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
