"""The command line: ``flowproof-run`` and ``flowproof run|init|doctor|check|diff|show|env``.

Names, options and exit codes are a contract (docs/runner.md).
Every `FlowproofError` is caught here and printed as one paragraph with no
traceback; the process exits with the error's ``exit_code``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import replace
from functools import wraps
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from flowproof import __version__
from flowproof.cassette import load_cassette
from flowproof.cassette_check import check_cassette, error_turns
from flowproof.errors import EXIT_ASSERTION, EXIT_OK, EXIT_USAGE, FlowproofError, Interrupted, OtelError, SpecError
from flowproof.heal import diff_cassettes
from flowproof.log import configure as configure_logging
from flowproof.options import Mode, Route, base_url_ports, host_settings
from flowproof.printable import printable
from flowproof.redact import secret_values
from flowproof.report.cassette import show_cassette
from flowproof.report.json_report import render_json
from flowproof.report.text import interrupted_step, render_text, worst_exit
from flowproof.runner.collect import collect_specs
from flowproof.runner.env import agent_env, default_ca_dir, ensure_ca, export_lines
from flowproof.runner.flags import check_cassette_flag, check_one_writer, check_proxy_port, one_mode
from flowproof.runner.flow import STAGED, Cancel, RunOptions, run_flow
from flowproof.runner.progress import Progress, status_line_enabled
from flowproof.runner.proxy import ProxyPool, warm_enabled
from flowproof.spec import load_spec, unresolved_problems

F = TypeVar("F", bound=Callable[..., Any])

#: `flowproof diff`'s exit when the cassettes differ, as diff(1) and `git diff --exit-code`:
#: a script can ask "did the trajectory change?" without reading the text.
EXIT_DIFFERENT = 1


class _Exit(click.ClickException):
    """A FlowproofError as click sees it: printed without a traceback, exits with its code."""

    def __init__(self, error: FlowproofError) -> None:
        super().__init__(str(error))
        self.exit_code = error.exit_code  # type: ignore[misc]  # click reads it per instance
        self.program = _program()  # while the command's context is still current

    def show(self, file: Any = None) -> None:
        click.echo(f"{self.program}: {self.format_message()}", err=True)


def _program() -> str:
    """The name the user typed (``flowproof-run``, or ``flowproof`` for ``flowproof run``),
    which starts every message of the run: a message signed by another command's name sends
    the reader to the wrong ``--help``."""
    ctx = click.get_current_context(silent=True)
    return (ctx.find_root().info_name if ctx is not None else None) or "flowproof"


def _edge(func: F) -> F:
    """Translate FlowproofError into a clean exit at the command boundary."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except FlowproofError as e:
            raise _Exit(e) from None

    return wrapper  # type: ignore[return-value]


def parse_shard(value: str | None) -> tuple[int, int] | None:
    """``I/N`` (1-based) -> (I, N)."""
    if value is None:
        return None
    try:
        index_s, total_s = value.split("/")
        index, total = int(index_s), int(total_s)
    except ValueError:
        raise FlowproofError(f"bad --shard `{value}` — write I/N with 1 <= I <= N, e.g. 2/4") from None
    if total < 1 or not 1 <= index <= total:
        raise FlowproofError(f"bad --shard `{value}` — write I/N with 1 <= I <= N, e.g. 2/4")
    return index, total


def select_shard(specs: Sequence[Path], shard: tuple[int, int] | None) -> list[Path]:
    """The specs of one shard: deterministic, by sorted path, round-robin."""
    ordered = sorted(dict.fromkeys(specs), key=lambda p: str(p))
    if shard is None:
        return ordered
    index, total = shard
    return [p for i, p in enumerate(ordered) if i % total == index - 1]


def _on_signals(cancel: Any) -> Callable[[], None]:
    """Route SIGINT/SIGTERM to ``cancel`` (every running flow stops its agent and proxy and
    reports the interruption); returns the function that restores the previous handlers."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda signum, _frame: cancel.set(signum))

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


def _cassettes_of(specs: Sequence[Path]) -> list[tuple[Path, Path]]:
    """(spec, cassette) of each spec that loads; a spec that does not is reported by its flow."""
    pairs = []
    for path in specs:
        try:
            pairs.append((path, load_spec(path).cassette))
        except FlowproofError:
            continue
    return pairs


#: `--record-missing`: not a proxy mode but a choice per flow, between record and replay.
RECORD_MISSING = "record-missing"


def _modes_of(specs: Sequence[Path], mode: str, cassette: Path | None) -> dict[Path, Mode]:
    """The mode each spec runs in: ``mode`` itself, except that ``record-missing`` records the
    specs whose cassette does not exist yet and replays the others. A spec that does not load
    replays, so its flow reports the spec error (and records nothing)."""
    if mode != RECORD_MISSING:
        return dict.fromkeys(specs, Mode(mode))
    modes = dict.fromkeys(specs, Mode.REPLAY)
    for path, own in _cassettes_of(specs):
        if not (cassette or own).exists():
            modes[path] = Mode.RECORD
    return modes


#: After SIGINT/SIGTERM, how long the flows get to stop their agents and proxies and report
#: the interruption before the runner exits anyway ("signals always win").
CANCEL_GRACE = 0.7


def _run_flows(selected: Sequence[Path], options: Any, jobs: int, cancel: Any,
               run_flow: Callable[[Path, Any], Any]) -> list[Any]:
    """Run the flows on a pool; the main thread only waits, so a signal is handled at once.

    A flow can be busy where it cannot look at `cancel` (a regex search, a long
    assertion): once the grace has passed after a signal, the runner exits with
    128 + the signal number without waiting for it. Nothing more is recorded then: a
    recording only becomes a cassette by an atomic rename, and the proxy dies with
    the runner (see runner/proxy.py); the cassettes flows kept before the signal are named.
    """
    pool = ThreadPoolExecutor(max_workers=jobs)
    futures = [pool.submit(run_flow, p, options) for p in selected]
    signalled_at: float | None = None
    try:
        pending = set(futures)
        while pending:
            # Only the unfinished futures: waiting on a finished one returns at once, and the
            # main thread would spin for as long as the slowest flow runs.
            _done, pending = wait(pending, timeout=0.05, return_when=FIRST_COMPLETED)
            if cancel.is_set() and signalled_at is None:
                signalled_at = time.monotonic()
            if signalled_at is not None and time.monotonic() - signalled_at > CANCEL_GRACE:
                for staged in list(STAGED):
                    staged.unlink(missing_ok=True)
                # Flows that finished before the signal may have replaced their cassettes.
                finished = [f.result() for f in futures if f.done() and f.exception() is None]
                unfinished = [p for p, f in zip(selected, futures, strict=True) if not f.done()]
                kept = interrupted_step(finished, unfinished)
                click.echo(kept or f"{_program()}: {Interrupted(cancel.signum)}", err=True)
                sys.stderr.flush()
                sys.stdout.flush()
                # Not sys.exit: it would wait for the busy worker threads.
                os._exit(Interrupted(cancel.signum).exit_code)
        return [f.result() for f in futures]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


_SPEC_ARG = click.argument(
    "specs", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False)
)
#: flowproof-run also takes directories and (quoted) globs: `collect_specs` expands them.
_RUN_SPEC_ARG = click.argument("specs", nargs=-1, required=True, type=click.Path(path_type=Path), metavar="SPEC...")


@click.command(
    "flowproof-run",
    context_settings={"help_option_names": ["-h", "--help"]},
)
@_RUN_SPEC_ARG
# One flag per mode, not one shared destination: with a shared one the last flag wins, and
# `--compare --record` would silently record. Two of them are a usage error (`one_mode`).
@click.option("--replay", is_flag=True, help="Replay the cassette strictly (default).")
@click.option("--record", is_flag=True, help="Record a new cassette (kept only if the spec passes).")
@click.option("--compare", is_flag=True, help="Run live and report drift from the cassette; never writes.")
@click.option(
    "--record-missing",
    is_flag=True,
    help="Record only the flows that have no cassette yet; replay the others.",
)
@click.option("--cassette", type=click.Path(path_type=Path, dir_okay=False), help="Cassette path (one spec only).")
@click.option(
    "--upstream", multiple=True, metavar="HOST=URL", help="Send HOST's model calls to URL (also FLOWPROOF_UPSTREAM)."
)
@click.option(
    "--extra-host",
    "extra_hosts",
    multiple=True,
    metavar="HOST",
    help="An OpenAI-compatible gateway host whose calls are model calls (also FLOWPROOF_EXTRA_HOSTS).",
)
@click.option(
    "--proxy-port", type=click.IntRange(0, 65535), default=0, show_default=True, help="Proxy port (0: any free port)."
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    help="Agent wall-clock timeout in seconds (overrides the spec).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable JSON report.")
@click.option("--junit", type=click.Path(path_type=Path, dir_okay=False), help="Also write JUnit XML here.")
@click.option(
    "--html",
    "html_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Also write a self-contained HTML report of the run here (docs/report.md).",
)
@click.option(
    "--markdown",
    "markdown_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Also write a short GitHub-flavoured Markdown summary here; appended when PATH is "
    "$GITHUB_STEP_SUMMARY (docs/report.md).",
)
@click.option("-j", "jobs", type=click.IntRange(min=1), default=1, show_default=True, help="Flows to run in parallel.")
@click.option("--shard", metavar="I/N", help="Run only shard I of N (1-based, by sorted spec path).")
@click.option(
    "--compare-handler", metavar="MODULE:FUNC", help="Receive each compare result instead of failing on drift."
)
@click.option(
    "--transport",
    type=click.Choice(["http"]),
    help="http: answer a WebSocket upgrade to a model API with 426, so the agent speaks HTTP "
    "(default: record what the agent speaks; a spec may say transport: http).",
)
@click.option(
    "--allow-error-turns",
    is_flag=True,
    help="With --record: keep a recording whose turns hold an HTTP error status (the flow tests error handling).",
)
@click.option(
    "--strict-mocks",
    is_flag=True,
    help="Fail a flow whose tools: or mcp: mocks did not all fire (spec key: strict_mocks: true).",
)
@click.option(
    "--otel",
    is_flag=True,
    help="Send each run's OpenTelemetry GenAI spans (agents, model calls, tool calls) to the OTLP/HTTP "
    "endpoint of OTEL_EXPORTER_OTLP_ENDPOINT (docs/otel.md).",
)
@click.option(
    "--otel-content",
    is_flag=True,
    help="With --otel: the spans also carry the tool calls' arguments and results, the environment's "
    "credentials masked.",
)
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="Show every step, the agent output and timings, and log each intercepted call (-vv: every proxy event).",
)
@click.option("-q", "--quiet", is_flag=True, help="Log errors only, and draw no status line.")
@click.option("--log-json", is_flag=True, help="Log one JSON object a line (on stderr) instead of readable lines.")
@_edge
def run_command(
    specs: tuple[Path, ...],
    replay: bool,
    record: bool,
    compare: bool,
    record_missing: bool,
    cassette: Path | None,
    upstream: tuple[str, ...],
    extra_hosts: tuple[str, ...],
    proxy_port: int,
    timeout: float | None,
    as_json: bool,
    junit: Path | None,
    html_path: Path | None,
    markdown_path: Path | None,
    jobs: int,
    shard: str | None,
    compare_handler: str | None,
    transport: str | None,
    allow_error_turns: bool,
    strict_mocks: bool,
    otel: bool,
    otel_content: bool,
    verbose: int,
    quiet: bool,
    log_json: bool,
) -> None:
    """Run flow SPECs against their agents: replay (default), --record or --compare."""

    verbosity = -1 if quiet else verbose
    configure_logging(verbosity, json_lines=log_json)
    flags = (("--replay", replay), ("--record", record), ("--compare", compare), ("--record-missing", record_missing))
    mode = one_mode([flag for flag, given in flags if given]).removeprefix("--")

    if cassette is not None and len(specs) > 1:
        raise FlowproofError("--cassette names one cassette, so it takes exactly one spec")
    specs = tuple(collect_specs(specs))
    if cassette is not None and len(specs) > 1:
        raise FlowproofError("--cassette names one cassette, so it takes exactly one spec")
    if proxy_port and (jobs > 1) and len(specs) > 1:
        raise FlowproofError("--proxy-port fixes one port, so it cannot be used with -j N > 1")
    selected = select_shard(specs, parse_shard(shard))
    # Every flag is checked before any flow starts (exit 2, one line; URLs shown redacted).
    hosts = host_settings(os.environ, upstream=upstream, extra_hosts=extra_hosts)
    check_proxy_port(proxy_port)
    if cassette is not None:
        check_cassette_flag(str(cassette))
    if otel_content and not otel:
        raise FlowproofError("--otel-content says what the --otel spans carry, so it needs --otel")
    if otel:
        from flowproof.runner.otel import check_otel  # only --otel needs the spans (see runner/flow.py)

        check_otel(os.environ)
    modes = _modes_of(selected, mode, cassette)
    recorded = [p for p in selected if modes[p] == Mode.RECORD]
    if len(recorded) > 1:
        check_one_writer(_cassettes_of(recorded))
    cancel = Cancel()
    status = status_line_enabled(sys.stdout, json_report=as_json, quiet=quiet, environ=os.environ)
    progress = (Progress(total=len(selected), verbosity=verbosity, status=status, cancelled=cancel.is_set)
                if status or verbosity > 0 else None)
    # Each flow's mode is its entry in `modes` (set as it starts).
    options = RunOptions(
        cassette=cassette,
        upstream=hosts.upstream,
        extra_hosts=hosts.extra_hosts,
        proxy_port=proxy_port,
        timeout=timeout,
        compare_handler=compare_handler,
        transport=transport,
        cancel=cancel,
        allow_error_turns=allow_error_turns,
        progress=progress,
        strict_mocks=strict_mocks,
        otel=otel,
        otel_content=otel_content,
    )
    results = []
    if selected:
        # Each flow has its own listeners, log, state and agent, so flows are independent;
        # they share one proxy (a session each) instead of one mitmdump each.
        # Ctrl-C / SIGTERM reach the flows through `cancel`: the agents and proxies run in
        # their own sessions, so only the runner can stop them.
        pool = ProxyPool() if warm_enabled() else None
        restore = _on_signals(cancel)
        try:
            results = _run_flows(selected, replace(options, proxies=pool), jobs, cancel,
                                 lambda path, opts: run_flow(path, replace(opts, mode=modes[path])))
        finally:
            restore()
            if pool is not None:
                pool.close()
            if progress is not None:
                progress.close()  # the status line is wiped before the report
    code = worst_exit(results)
    if cancel.is_set():
        # A flow that finished before the signal does not hide it: the run was interrupted.
        code = 128 + int(cancel.signum or signal.SIGINT)
    # Every output masks the credentials the log lines mask (the agent may print its key).
    secrets = secret_values(os.environ)
    if as_json:
        click.echo(render_json(results, secrets=secrets))
    elif selected:
        click.echo(render_text(results, verbose=verbose > 0, secrets=secrets))
    else:
        click.echo(f"shard {shard} has no specs; nothing to run")
    if junit is not None or html_path is not None or markdown_path is not None:
        # Imported here: the JUnit, HTML and Markdown writers (xml.etree, html) are 10-25 ms of
        # every run's start (python -X importtime), and only these flags use them.
        from flowproof.report.files import write_html, write_junit, write_markdown
        reports: tuple[tuple[str, str, Path | None, Callable[[Path], None]], ...] = (
            ("JUnit", "--junit", junit, lambda path: write_junit(results, path, secrets=secrets)),
            ("HTML", "--html", html_path, lambda path: write_html(results, path, secrets=secrets)),
            ("Markdown", "--markdown", markdown_path,
             lambda path: write_markdown(results, path, secrets=secrets,
                                         step_summary=os.environ.get("GITHUB_STEP_SUMMARY"))),
        )
        for label, flag, path, write in reports:
            if path is None:
                continue
            try:
                write(path)
            except OSError as e:
                click.echo(
                    f"{_program()}: cannot write the {label} report to {path} ({e.strerror or e}) — "
                    f"choose a writable {flag} path",
                    err=True,
                )
                code = max(code, EXIT_USAGE)
    if otel:
        from flowproof.runner.otel import export_runs

        try:
            export_runs([r.spans for r in results])
        except OtelError as e:
            click.echo(f"{_program()}: {e}", err=True)
            code = max(code, EXIT_USAGE)
    if code != EXIT_OK:
        sys.exit(code)


@click.group("flowproof", context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="flowproof")
def cli() -> None:
    """flowproof: test LLM agents at the model boundary.

    `flowproof run SPEC...` is `flowproof-run SPEC...`: run flows (replay, --record, --compare).
    """


cli.add_command(run_command, "run")


@cli.command("check")
@_SPEC_ARG
@_edge
def check_command(specs: tuple[Path, ...]) -> None:
    """Validate SPECs without running anything."""

    bad = 0
    for path in specs:
        try:
            spec = load_spec(path)
        except SpecError as e:
            bad += 1
            for problem in e.problems:
                click.echo(str(problem), err=True)
            continue
        # flowproof-run refuses these with the same words; here the environment may
        # legitimately differ from the one the flow will run in, so they only warn.
        for problem in unresolved_problems(spec, os.environ):
            click.echo(f"warning: {problem}", err=True)
    ok = len(specs) - bad
    click.echo(f"{ok} spec{'s' if ok != 1 else ''} OK" + (f", {bad} invalid" if bad else ""))
    if bad:
        sys.exit(EXIT_USAGE)


@cli.command("init", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED, metavar="COMMAND...")
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False),
              help="Where to write the spec (default: beside the agent's file, NAME.flow.yaml).")
@click.option("--name", help="The flow's name (default: from the agent's file name).")
@click.option("--prompt", help="The first prompt (default: a line to replace).")
@_edge
def init_command(command: tuple[str, ...], output: Path | None, name: str | None, prompt: str | None) -> None:
    """Write a first flow spec for the agent COMMAND starts (e.g. `flowproof init agent.py`).

    It infers what it can: the command, the model SDKs the agent's file imports, a name; and
    never overwrites a file.
    """

    from flowproof.runner.init import write_first_spec  # only `init` needs the scaffold (see run_command)

    written = write_first_spec(command, cwd=Path.cwd(), output=output, name=name, prompt=prompt)
    shown = os.path.relpath(written.path)
    apis = ", ".join(f"{s.module} ({s.host})" for s in written.sdks)
    click.echo(f"wrote {shown}: command `{written.command}`" + (f", imports {apis}" if apis else ""))
    keys = " ".join(f"{s.key_var}=..." for s in written.sdks) or "<YOUR_PROVIDER>_API_KEY=..."
    click.echo(f"Next: put the prompt and the checks in {shown}, then")
    click.echo(f"  flowproof check {shown}")
    click.echo(f"  {keys} flowproof-run {shown} --record   # once, live")
    click.echo(f"  flowproof-run {shown}                    # replay: offline, no key")


@cli.command("doctor")
@click.argument("spec", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True),
              help="Agent wall-clock timeout in seconds (overrides the spec).")
@_edge
def doctor_command(spec: Path, timeout: float | None) -> None:
    """Start SPEC's agent against a stand-in model (no key, no network) and say what works.

    Exits 0 when the agent's calls went through flowproof and it finished, 1 otherwise.
    """

    # Imported here: the stand-in model server (flowproof.testing) adds about 0.25 s to the
    # start of every flowproof command (python -X importtime), and only doctor needs it.
    from flowproof.doctor import healthy, record_hint
    from flowproof.runner.doctor import run_doctor

    click.echo(f"flowproof doctor: {spec} — its agent against a stand-in model (no key, no network)")
    ran = run_doctor(spec, timeout=timeout)
    for check in ran.checks:
        click.echo(check.render())
    if healthy(ran.checks):
        click.echo(f"Ready to record: {record_hint(ran.facts, str(spec))}")
        return
    click.echo("Fix the ✗ lines, then run flowproof doctor again.")
    sys.exit(EXIT_ASSERTION)


@cli.command("diff")
@click.argument("old", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.argument("new", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@_edge
def diff_command(old: Path, new: Path) -> None:
    """The heal diff between two cassettes, turn by turn.

    Exits like diff(1): 0 when the trajectories are the same, 1 when they differ, 2 on error.
    """

    before, after = load_cassette(old), load_cassette(new)
    check_cassette(before, old)
    check_cassette(after, new)
    changes = diff_cassettes(before, after)
    text = "\n".join([*error_turns(after), changes]).strip()
    click.echo(printable(text) or "no change in the trajectory")
    if changes:
        sys.exit(EXIT_DIFFERENT)


@cli.command("show")
@click.argument("cassette", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option(
    "--thread",
    type=click.IntRange(min=0),
    help="Only this thread's turns (threads are numbered by their first turn, from 0).",
)
@click.option("--turn", type=click.IntRange(min=0), help="Only the turn with this index.")
@_edge
def show_command(cassette: Path, thread: int | None, turn: int | None) -> None:
    """A cassette as a readable conversation."""

    loaded = load_cassette(cassette)
    check_cassette(loaded, cassette)
    click.echo(show_cassette(loaded, cassette, thread=thread, turn=turn))


@cli.command("env")
@click.option("--proxy-port", type=click.IntRange(1, 65535), default=8080, show_default=True)
@click.option("--base-url", is_flag=True, help="Also export base-URL variables (reverse listeners on the next ports).")
@_edge
def env_command(proxy_port: int, base_url: bool) -> None:
    """Print the exports an agent started by hand needs (eval "$(flowproof env)")."""

    ca = ensure_ca(default_ca_dir())
    reverse = {h: f"http://127.0.0.1:{p}" for h, p in base_url_ports(proxy_port).items()} if base_url else {}
    env = agent_env(
        dict(os.environ),
        proxy_url=f"http://127.0.0.1:{proxy_port}",
        ca=ca,
        route=Route.BASE_URL if base_url else Route.PROXY,
        reverse_urls=reverse,
    )
    for line in export_lines(env, os.environ):
        click.echo(line)


def _standalone(command: click.Command, argv: Sequence[str] | None, program: str) -> NoReturn:
    args = list(argv) if argv is not None else None
    try:
        code = command.main(args=args, prog_name=program, standalone_mode=False)
    except click.UsageError as e:
        # A bad option value is one line like every other flowproof error (click's own
        # form is three: usage, a help hint and the error), naming the command it is about.
        where = e.ctx.command_path if e.ctx is not None else program
        click.echo(f"{program}: {e.format_message().rstrip('.')} — see {where} --help", err=True)
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("Aborted!", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else EXIT_OK)


def run_main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point of ``flowproof-run``."""
    _standalone(run_command, argv, "flowproof-run")


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point of ``flowproof``."""
    _standalone(cli, argv, "flowproof")


if __name__ == "__main__":  # pragma: no cover
    main()
