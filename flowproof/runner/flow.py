"""One flow run: spec -> proxy -> agent -> event log -> trajectory -> verdict.

Orchestration only: the run is judged by `runner.judge.judge_flow` (the one judge,
`flowproof.verdict`), the staged recording is `runner.recording.Staging`, the
report is `flowproof.report`.
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
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from flowproof.advice import record_command, shown_spec
from flowproof.cassette import Cassette, load_cassette
from flowproof.cassette_check import check_cassette
from flowproof.errors import (
    EXIT_USAGE,
    AgentError,
    CassetteError,
    CassetteNotFoundError,
    FlowproofError,
    Interrupted,
)
from flowproof.log_events import parse_events
from flowproof.options import (
    Mode,
    ProxyOptions,
    Route,
    Transport,
    Upstream,
    choose,
    listeners_for,
    python_path,
    with_spec,
)
from flowproof.runner.agents import AgentRun, EventSource, run_command_agent, run_url_agent
from flowproof.runner.env import (
    CAFiles,
    agent_env,
    default_ca_dir,
    ensure_ca,
    handle_values,
    interpreter_first_path,
)
from flowproof.runner.judge import judge_flow
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
from flowproof.spec import load_spec, resolve_variables
from flowproof.spec.types import AgentSpec
from flowproof.spec.variables import resolve_handles
from flowproof.turns import Turn
from flowproof.verdict import Advice, FlowResult

#: How flowproof-run words what to do about a recording it refused.
ADVICE = Advice(
    allow_error_turns="pass --allow-error-turns (spec key `allow_error_turns: true`)",
    no_model_call="check that the agent honours HTTPS_PROXY (or use `agent.route: base_url`) and that "
    "the prompt reached it",
)
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
    #: they carry the tool calls' arguments and results, the credentials of the environment masked.
    otel: bool = False
    otel_content: bool = False
    #: The command that records the flow again, as the place it runs from words it (the pytest
    #: plugin: pytest's); None: ``flowproof-run SPEC --record``, SPEC as `advice.shown_spec` shows it.
    rerecord: str | None = None


def run_flow(spec_path: Path | str, options: RunOptions) -> FlowResult:
    """Run one flow spec and return its verdict (never raises a FlowproofError)."""
    started = time.monotonic()
    spec_path = Path(spec_path)
    # Every command the flow's errors and reports name: a path inside the working directory
    # reads as the user would type it, not as the folder a CI machine checked out into.
    command = options.rerecord or record_command(shown_spec(spec_path, Path.cwd()))
    try:
        if options.cancel is not None and options.cancel.is_set():
            raise Interrupted(options.cancel.signum)
        result = _run(spec_path, options, command)
    except FlowproofError as e:
        result = FlowResult(
            spec_path=spec_path,
            name=spec_path.name,
            mode=options.mode,
            exit_code=e.exit_code,
            error=str(e),
            record_command=command,
        )
    except OSError as e:
        # The file system refused something no check above foresaw (a folder that turned
        # read-only, a full disk): this flow fails; the others and every report go on.
        # Only a file's error (it names the file); a socket's is not the user's to fix.
        if e.filename is None:
            raise
        result = FlowResult(
            spec_path=spec_path,
            name=spec_path.name,
            mode=options.mode,
            exit_code=EXIT_USAGE,
            error=file_error_text(e),
            record_command=command,
        )
    return _with(result, duration=time.monotonic() - started)


def file_error_text(error: OSError) -> str:
    """One line for a file-system error: the file, what the system said, what to do."""
    return (f"{error.filename}: {error.strerror or error} — check that the file's folder exists, is "
            "writable and has room, then run again")


def _with(result: FlowResult, **changes: Any) -> FlowResult:
    return replace(result, **changes)


def _run(spec_path: Path, options: RunOptions, command: str) -> FlowResult:
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
    views: tuple[Turn, ...] = ()
    if mode in (Mode.REPLAY, Mode.COMPARE):
        existing, views = _load_existing(cassette, command, agent.route, required=True)
    elif cassette.exists():
        existing, views = _load_existing(cassette, command, agent.route, required=False)

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
    # A replayed turn is logged as its place in the cassette: these are its views.
    replayed = views if mode == Mode.REPLAY else ()
    watch = options.progress.watch(spec_path, spec.name, prompts, replayed) if options.progress else None
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
                    handler_path=python_path(environ, str(Path.cwd())),
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
                    replayed=replayed,
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
        result = judge_flow(
            events,
            run,
            spec_path=spec_path,
            name=spec.name,
            mode=mode,
            cassette=cassette,
            record_command=command,
            advice=ADVICE,
            existing=existing,
            views=views,
            staging=staging if mode == Mode.RECORD else None,
            spec=spec,
            handler=handler,
            timeout=timeout,
            allow_error_turns=options.allow_error_turns or spec.allow_error_turns,
            strict_mocks=options.strict_mocks,
            startup=proxy.startup_seconds,
            before_keep=(lambda: _interrupted(cancel)) if cancel is not None else None,
        )
        if options.otel:
            # Imported here: the spans module is 15-40 ms of every run's start (python -X
            # importtime), and only --otel builds spans.
            from flowproof.runner.otel import flow_spans

            spans = flow_spans(result, started_at=agent_started, ended_at=agent_ended, environ=environ,
                               mocked=spec.tool_results.keys(), content=options.otel_content)
            result = _with(result, spans=spans)
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


def _interrupted(cancel: Cancel) -> None:
    if cancel.is_set():
        # A signal during the assertions: the verdict is moot and nothing may be recorded.
        raise Interrupted(cancel.signum)


def _proxy_for(proxy_options: ProxyOptions, confdir: Path, options: RunOptions) -> FlowProxy:
    """A session on the run's proxy of the flow's kind, else on a proxy of the flow's own."""
    if options.proxies is not None:
        return options.proxies.open(proxy_options, confdir, timeout=options.proxy_timeout)
    return start_proxy(proxy_options, confdir, timeout=options.proxy_timeout)


def _load_existing(
    cassette: Path, command: str, route: str, *, required: bool
) -> tuple[Cassette, tuple[Turn, ...]]:
    """The cassette and its turns' views (built by the check, read by the judge); ``command``
    records it again."""
    if required and not cassette.exists():
        raise CassetteNotFoundError(cassette, command)
    loaded = load_cassette(cassette, record_command=command)
    # A cassette is checked whole before the proxy serves any of it (exit 2, turn and field).
    views = check_cassette(loaded, cassette)
    if required and loaded.route != route:
        raise CassetteError(
            cassette,
            f"was recorded on route `{loaded.route}` but the spec's agent uses route `{route}` "
            "(agents send different requests per route)",
            f"re-record with: {command}",
        )
    return loaded, views


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
    replayed: Sequence[Turn] = (),
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
        replayed=replayed,
    )
