"""One flow run: spec -> proxy -> agent -> event log -> trajectory -> verdict.

`run_flow` never raises for a user-caused problem: every `FlowproofError` becomes
a `FlowResult` with that error's exit code and message, so several flows can
run and be reported together (the CLI exits with the worst code).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowproof.errors import (
    EXIT_AGENT,
    EXIT_ASSERTION,
    EXIT_DIVERGENCE,
    EXIT_DRIFT,
    EXIT_OK,
    AgentError,
    CassetteError,
    CassetteNotFoundError,
    FlowproofError,
    ProxyError,
)
from flowproof.cassette_check import check_cassette, error_turns
from flowproof.runner.agents import AgentRun, run_command_agent, run_url_agent
from flowproof.runner.env import agent_env, default_ca_dir, ensure_ca, interpreter_first_path
from flowproof.runner.lock import cassette_lock
from flowproof.runner.proxy import ProxySettings, RunningProxy, scratch_prefix, start_proxy

MODES = ("replay", "record", "compare")
#: Staging files of the recordings in progress: a runner that must exit at once after a
#: signal (a flow stuck where it cannot see the cancel) removes them on its way out.
STAGED: set[Path] = set()
#: Reverse listeners opened for ``agent.route: base_url``.
REVERSE_HOSTS = ("api.openai.com", "api.anthropic.com", "generativelanguage.googleapis.com")


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


class Interrupted(FlowproofError):
    """flowproof-run itself got SIGINT/SIGTERM; exits 128 + the signal number (130, 143)."""

    def __init__(self, signum: int | None) -> None:
        signum = int(signum or signal.SIGINT)
        self.exit_code = 128 + signum  # type: ignore[misc]  # per instance: 130 or 143
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        super().__init__(
            f"interrupted by {name}: the agent and the proxy were stopped and nothing was recorded"
        )


@dataclass(frozen=True, slots=True)
class RunOptions:
    """How to run flows (from the command line). ``environ`` defaults to ``os.environ``."""

    mode: str = "replay"
    cassette: Path | None = None
    upstream: tuple[str, ...] = ()
    extra_hosts: tuple[str, ...] = ()
    proxy_port: int = 0
    timeout: float | None = None
    compare_handler: str | None = None
    ca_dir: Path | None = None
    environ: Mapping[str, str] | None = None
    addon_script: Path | None = None
    proxy_timeout: float = 20.0
    #: Set by the CLI's signal handler: running flows stop at once (see `Cancel`).
    cancel: Cancel | None = None
    #: Keep a recording whose turns hold an HTTP error status (the flow tests error handling).
    allow_error_turns: bool = False


@dataclass(frozen=True, slots=True)
class StepResult:
    """One line of the report: a checked step (or the strict check)."""

    passed: bool
    message: str
    location: str | None
    source: str


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
    startup_seconds: float | None = None
    duration: float = 0.0
    turns: int = 0
    events: tuple[dict[str, Any], ...] = field(default=(), compare=False, repr=False)
    #: Why an exit-5 flow failed, for advice that fits: "timeout", "upstream", "crash" or None.
    failure: str | None = None

    @property
    def passed(self) -> bool:
        return self.exit_code == EXIT_OK

    @property
    def record_command(self) -> str:
        return record_command(self.spec_path)


def record_command(spec_path: Path | str) -> str:
    """The exact command that (re-)records a spec's cassette."""
    return f"flowproof-run {shlex.quote(str(spec_path))} --record"


def staging_path(cassette: Path) -> Path:
    """Where a recording is written before its assertions pass: ``x.cassette.recording.json``."""
    return cassette.with_name(f"{cassette.stem}.recording.json")


def rejected_path(cassette: Path) -> Path:
    """Where a recording whose assertions failed is kept for inspection."""
    return cassette.with_name(f"{cassette.stem}.rejected.json")


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
    from dataclasses import replace

    return replace(result, **changes)


def _run(spec_path: Path, options: RunOptions) -> FlowResult:
    from flowproof.spec import load_spec, resolve_variables

    if options.mode not in MODES:
        raise FlowproofError(f"unknown mode `{options.mode}` — use one of: {', '.join(MODES)}")
    environ = dict(os.environ if options.environ is None else options.environ)
    spec = resolve_variables(load_spec(spec_path), environ)
    cassette = options.cassette or spec.cassette
    mode = options.mode
    agent = spec.agent
    prompts = [p.text for p in spec.prompts]
    timeout = options.timeout if options.timeout is not None else agent.timeout

    existing = None
    if mode in ("replay", "compare"):
        existing = _load_existing(cassette, spec_path, agent.route, required=True)
    elif cassette.exists():
        existing = _load_existing(cassette, spec_path, agent.route, required=False)

    if agent.url and not options.proxy_port:
        raise FlowproofError(
            f"{agent.location}: a `url:` agent is already running, so it cannot be told a new "
            "proxy port — start it with the exports of `flowproof env --proxy-port N` and run "
            "flowproof-run with the same --proxy-port N"
        )

    if agent.command and agent.cwd is not None and not agent.cwd.is_dir():
        # Checked before the proxy starts: nothing to stop, and no recording is staged.
        raise AgentError(
            f"{agent.location}: the agent's working directory {agent.cwd} does not exist — "
            "fix `agent.cwd` in the spec"
        )

    ca = ensure_ca(options.ca_dir or default_ca_dir(environ))
    # One writer per cassette: held until the recording is kept or rejected (the staging
    # path is shared too, so it is only touched under the lock).
    held = ExitStack()
    if mode == "record":
        held.enter_context(cassette_lock(cassette))
    target = staging_path(cassette) if mode == "record" else cassette
    if mode == "record":
        target.unlink(missing_ok=True)
        STAGED.add(target)
    handler = options.compare_handler or spec.on_compare
    upstream = tuple(options.upstream)
    cancel = options.cancel
    try:
        with tempfile.TemporaryDirectory(prefix=scratch_prefix("run")) as scratch:
            settings = ProxySettings(
                mode=mode,
                cassette=target,
                report=Path(scratch) / "events.jsonl",
                confdir=ca.cert.parent,
                spec=spec_path.resolve(),
                upstream=upstream,
                extra_hosts=tuple(options.extra_hosts),
                route=agent.route,
                port=options.proxy_port,
                reverse_hosts=REVERSE_HOSTS if agent.route == "base_url" else (),
                compare_handler=handler,
                addon_script=options.addon_script,
            )
            proxy = start_proxy(settings, timeout=options.proxy_timeout)
            try:
                model_hosts = [u.split("=", 1)[0] for u in upstream] + list(options.extra_hosts)
                # No request reaches a real provider in replay, nor with a mapped upstream (a local
                # model or gateway), so an SDK that insists on a key gets a placeholder there.
                placeholders = mode == "replay" or bool(upstream)
                run = _drive(
                    proxy, spec.agent, prompts, environ, ca, placeholders, model_hosts, timeout,
                    cancelled=cancel.is_set if cancel is not None else None,
                )
            finally:
                proxy.stop()
            events = proxy.events()
        if cancel is not None and cancel.is_set():
            raise Interrupted(cancel.signum)
        return _verdict(
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
            cancel=cancel,
            allow_error_turns=options.allow_error_turns or spec.allow_error_turns,
        )
    finally:
        # A verdict keeps (os.replace) or rejects the staging file; on any other way out
        # (an agent that could not start, an error, Ctrl-C) nothing may be left behind.
        if mode == "record":
            target.unlink(missing_ok=True)
            STAGED.discard(target)
        held.close()


def _load_existing(cassette: Path, spec_path: Path, route: str, *, required: bool) -> Any:
    from flowproof.cassette import load_cassette

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
    proxy: RunningProxy,
    agent: Any,
    prompts: Sequence[str],
    environ: Mapping[str, str],
    ca: Any,
    placeholder_keys: bool,
    model_hosts: Sequence[str],
    timeout: float,
    cancelled: Any = None,
) -> AgentRun:
    if agent.url:
        return run_url_agent(agent.url, prompts=prompts, timeout=timeout, events=proxy.events)
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
        events=proxy.events,
        cancelled=cancelled,
    )


def trajectory_turns(events: Sequence[dict[str, Any]]) -> list[Any]:
    """The normalized `Turn` of every ``turn`` event, via the cassette reader and codecs."""
    from flowproof.cassette import loads_cassette, turn_views

    raw = [e["turn"] for e in events if e.get("event") == "turn" and isinstance(e.get("turn"), dict)]
    if not raw:
        return []
    cassette = loads_cassette(json.dumps({"format": 1, "route": "proxy", "turns": raw}), "the proxy's event log")
    return [turn_views(t) for t in cassette.turns]


def _missing_text(events: Sequence[dict[str, Any]], existing: Any) -> str | None:
    done = next((e for e in reversed(events) if e.get("event") == "done"), None)
    if not done:
        return None
    unconsumed = [i for i in done.get("unconsumed") or [] if isinstance(i, int)]
    if not unconsumed:
        return None
    if done.get("text"):
        return str(done["text"])
    lines = [f"{len(unconsumed)} recorded call(s) were never made (missing calls):"]
    by_index = {t.index: t for t in existing.turns} if existing is not None else {}
    for index in unconsumed:
        turn = by_index.get(index)
        model = _model_of(turn) if turn is not None else None
        where = f" ({turn.provider}{', ' + model if model else ''})" if turn else ""
        lines.append(f"- turn {index}{where}")
    return "\n".join(lines)


def _model_of(turn: Any) -> str | None:
    """The model a recorded turn asked for, through its codec (Gemini names it in the path)."""
    from flowproof.cassette import turn_views
    from flowproof.errors import FlowproofError

    try:
        return turn_views(turn).request.model
    except FlowproofError:
        return None


def _verdict(
    *,
    spec: Any,
    spec_path: Path,
    mode: str,
    cassette: Path,
    existing: Any,
    run: AgentRun,
    events: list[dict[str, Any]],
    handler: str | None,
    timeout: float,
    startup: float,
    cancel: Cancel | None = None,
    allow_error_turns: bool = False,
) -> FlowResult:
    from flowproof.assertions import evaluate
    from flowproof.trajectory import build_trajectory

    def texts(kind: str) -> tuple[str, ...]:
        return tuple(str(e.get("text", "")) for e in events if e.get("event") == kind)

    divergences = texts("divergence")
    drifts = texts("drift") if mode == "compare" else ()
    errors = texts("error")
    tls = texts("tls_failed")
    missing = _missing_text(events, existing) if mode == "replay" else None
    notes: list[str] = []
    if mode == "compare":
        # Fewer live calls than recorded is a changed trajectory, which compare-never-writes
        # calls drift; a handler only sees per-call results, so it is noted for it instead.
        fewer = _missing_text(events, existing)
        if fewer:
            text = f"the live run made fewer model calls than the recording — {fewer}"
            if handler:
                notes.append(text)
            else:
                drifts = (*drifts, text)
    base = FlowResult(
        spec_path=spec_path,
        name=spec.name,
        mode=mode,
        exit_code=EXIT_OK,
        cassette=cassette,
        divergences=divergences,
        drifts=drifts,
        missing=missing,
        errors=errors,
        agent_stdout=run.stdout,
        agent_stderr=run.stderr,
        agent_returncode=run.returncode,
        startup_seconds=startup,
        events=tuple(events),
    )
    staging = staging_path(cassette)

    def reject(result: FlowResult) -> FlowResult:
        if mode == "record" and staging.exists():
            dest = rejected_path(cassette)
            os.replace(staging, dest)
            return _with(result, rejected=dest)
        return result

    # A divergence explains whatever the agent did next (a 4xx, an exit, a hang).
    if divergences:
        # Turns left unconsumed after a divergence are its cascade, not news: not reported.
        return reject(_with(base, exit_code=EXIT_DIVERGENCE, missing=None))
    agent_error = _agent_error(run, timeout, tls)
    # An agent that dies after its model call failed upstream is a casualty, not the cause.
    upstream = any(_UPSTREAM_FAULT in e for e in errors)
    if agent_error is not None:
        failure = "timeout" if run.timed_out else ("upstream" if upstream else "crash")
        return reject(_with(base, exit_code=EXIT_AGENT, error=agent_error, failure=failure))
    if errors:
        return reject(_with(base, exit_code=EXIT_AGENT, error=errors[0],
                            failure="upstream" if upstream else None))
    if not any(e.get("event") == "done" for e in events):
        notes.append("the proxy did not report a clean shutdown (no `done` event)")
        if mode == "record":
            message = "the proxy did not finish writing the recording — nothing was saved"
            return reject(_with(base, exit_code=EXIT_AGENT, error=message, notes=tuple(notes)))
        if mode == "replay":
            # The `done` event lists the recorded turns never requested: without it a run
            # that skipped calls would pass unchecked.
            message = (
                "the proxy stopped without its `done` event, so missing calls could not be "
                "checked — see the proxy's errors above, then run again"
            )
            return _with(base, exit_code=EXIT_AGENT, error=message, notes=tuple(notes))

    turns = trajectory_turns(events)
    trajectory = build_trajectory(turns)
    steps = tuple(
        StepResult(
            passed=r.passed,
            message=r.message,
            location=str(r.location) if r.location else None,
            source=_step_source(r.step),
        )
        for r in evaluate(spec, trajectory)
    )
    result = _with(
        base,
        steps=steps,
        reply=trajectory.reply,
        tool_calls=tuple(c.name for c in trajectory.tool_calls),
        turns=len(turns),
        notes=tuple(notes),
    )
    if missing:
        return _with(result, exit_code=EXIT_DIVERGENCE)
    if drifts and not handler:
        return _with(result, exit_code=EXIT_DRIFT)
    if not all(s.passed for s in steps):
        return reject(_with(result, exit_code=EXIT_ASSERTION))
    if cancel is not None and cancel.is_set():
        # A signal during the assertions: the verdict is moot and nothing may be recorded.
        raise Interrupted(cancel.signum)
    if mode == "record":
        return _keep_recording(result, cassette, existing, staging, allow_error_turns, reject)
    return result


def _keep_recording(result: FlowResult, cassette: Path, existing: Any, staging: Path,
                    allow_error_turns: bool = False,
                    reject: Callable[[FlowResult], FlowResult] | None = None) -> FlowResult:
    from flowproof.cassette import load_cassette

    if result.turns == 0:
        # The addon writes a cassette even with no turns: an empty one must not replace a
        # good cassette (nor be minted), whatever the spec's steps say.
        raise AgentError(
            "the agent made no model call, so there is nothing to record — check that it "
            "honours HTTPS_PROXY (or use `agent.route: base_url`) and that the prompt reached it"
        )
    if not staging.exists():
        raise ProxyError("the proxy did not write the recording — see its errors above")
    recorded = load_cassette(staging)
    # An error status is usually a flaky upstream, not the behaviour the flow means to pin.
    errors = error_turns(recorded)
    if errors and not allow_error_turns and reject is not None:
        return reject(_with(
            result, exit_code=EXIT_AGENT, notes=(*result.notes, *errors), failure="upstream",
            error=f"{errors[0]}; a cassette with error turns is not kept — record again when "
                  "the upstream is healthy, or pass --allow-error-turns (spec key "
                  "`allow_error_turns: true`) if this flow tests error handling"))
    heal = None
    if existing is not None:
        from flowproof.runner.report import diff_cassettes

        heal = diff_cassettes(existing, recorded)
    if errors:
        heal = "\n".join([*errors, heal or ""]).strip()
    os.replace(staging, cassette)
    return _with(result, heal_diff=heal, notes=(*result.notes, *errors))


#: How the proxy words a model call that the upstream broke off (a cut, a refused connection).
_UPSTREAM_FAULT = "failed before it completed"


def _step_source(step: Any) -> str:
    if step is None:
        return "strict: true"
    source = getattr(step, "source", None)
    if source:
        return str(source)
    return type(step).__name__


def _agent_error(run: AgentRun, timeout: float, tls: Sequence[str]) -> str | None:
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
        last = (run.stderr.strip() or run.stdout.strip()).splitlines()[-1:] if (run.stderr or run.stdout) else []
        if last:
            message += f": {last[0][:300]}"
        if tls:
            message += f" (the proxy saw a TLS failure: {tls[0]})"
        return message + " — see the agent output below"
    return None
