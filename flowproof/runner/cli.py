"""The command line: ``flowproof-run`` and ``flowproof check|diff|show|env``.

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

from flowproof.cassette import load_cassette
from flowproof.cassette_check import check_cassette, error_turns
from flowproof.errors import EXIT_OK, EXIT_USAGE, FlowproofError, Interrupted, SpecError
from flowproof.heal import diff_cassettes
from flowproof.log import configure as configure_logging
from flowproof.options import Mode, Route, base_url_ports, host_settings
from flowproof.printable import printable
from flowproof.runner.collect import collect_specs
from flowproof.runner.env import agent_env, default_ca_dir, ensure_ca, export_lines
from flowproof.runner.flags import check_cassette_flag, check_one_writer, check_proxy_port
from flowproof.runner.flow import STAGED, Cancel, RunOptions, run_flow
from flowproof.runner.html import write_html
from flowproof.runner.progress import Progress, status_line_enabled
from flowproof.runner.proxy import ProxyPool, warm_enabled
from flowproof.runner.report import render_json, render_text, show_cassette, worst_exit, write_junit
from flowproof.spec import load_spec, unresolved_problems

F = TypeVar("F", bound=Callable[..., Any])


class _Exit(click.ClickException):
    """A FlowproofError as click sees it: printed without a traceback, exits with its code."""

    def __init__(self, error: FlowproofError) -> None:
        super().__init__(str(error))
        self.exit_code = error.exit_code  # type: ignore[misc]  # click reads it per instance

    def show(self, file: Any = None) -> None:
        click.echo(f"flowproof: {self.format_message()}", err=True)


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


#: After SIGINT/SIGTERM, how long the flows get to stop their agents and proxies and report
#: the interruption before the runner exits anyway ("signals always win").
CANCEL_GRACE = 0.7


def _run_flows(selected: Sequence[Path], options: Any, jobs: int, cancel: Any,
               run_flow: Callable[[Path, Any], Any]) -> list[Any]:
    """Run the flows on a pool; the main thread only waits, so a signal is handled at once.

    A flow can be busy where it cannot look at `cancel` (a regex search, a long
    assertion): once the grace has passed after a signal, the runner exits with
    128 + the signal number without waiting for it. Nothing is recorded then: a
    recording only becomes a cassette by an atomic rename, and the proxy dies with
    the runner (see runner/proxy.py).
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
                click.echo(f"flowproof: {Interrupted(cancel.signum)}", err=True)
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
_RUN_SPEC_ARG = click.argument("specs", nargs=-1, required=True, type=click.Path(path_type=Path))


@click.command(
    "flowproof-run",
    context_settings={"help_option_names": ["-h", "--help"]},
)
@_RUN_SPEC_ARG
@click.option("--replay", "mode", flag_value="replay", default=True, help="Replay the cassette strictly (default).")
@click.option("--record", "mode", flag_value="record", help="Record a new cassette (kept only if the spec passes).")
@click.option(
    "--compare", "mode", flag_value="compare", help="Run live and report drift from the cassette; never writes."
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
@click.option("-j", "jobs", type=click.IntRange(min=1), default=1, show_default=True, help="Flows to run in parallel.")
@click.option("--shard", metavar="I/N", help="Run only shard I of N (1-based, by sorted spec path).")
@click.option(
    "--compare-handler", metavar="MODULE:FUNC", help="Receive each compare result instead of failing on drift."
)
@click.option(
    "--allow-error-turns",
    is_flag=True,
    help="With --record: keep a recording whose turns hold an HTTP error status (the flow tests error handling).",
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
    mode: str,
    cassette: Path | None,
    upstream: tuple[str, ...],
    extra_hosts: tuple[str, ...],
    proxy_port: int,
    timeout: float | None,
    as_json: bool,
    junit: Path | None,
    html_path: Path | None,
    jobs: int,
    shard: str | None,
    compare_handler: str | None,
    allow_error_turns: bool,
    verbose: int,
    quiet: bool,
    log_json: bool,
) -> None:
    """Run flow SPECs against their agents: replay (default), --record or --compare."""

    verbosity = -1 if quiet else verbose
    configure_logging(verbosity, json_lines=log_json)

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
    if mode == Mode.RECORD and len(selected) > 1:
        check_one_writer(_cassettes_of(selected))
    cancel = Cancel()
    status = status_line_enabled(sys.stdout, json_report=as_json, quiet=quiet, environ=os.environ)
    progress = (Progress(total=len(selected), verbosity=verbosity, status=status, cancelled=cancel.is_set)
                if status or verbosity > 0 else None)
    options = RunOptions(
        mode=mode,
        cassette=cassette,
        upstream=hosts.upstream,
        extra_hosts=hosts.extra_hosts,
        proxy_port=proxy_port,
        timeout=timeout,
        compare_handler=compare_handler,
        cancel=cancel,
        allow_error_turns=allow_error_turns,
        progress=progress,
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
            results = _run_flows(selected, replace(options, proxies=pool), jobs, cancel, run_flow)
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
    if as_json:
        click.echo(render_json(results))
    elif selected:
        click.echo(render_text(results, verbose=verbose > 0))
    else:
        click.echo(f"shard {shard} has no specs; nothing to run")
    if junit is not None:
        try:
            write_junit(results, junit)
        except OSError as e:
            click.echo(
                f"flowproof: cannot write the JUnit report to {junit} ({e.strerror or e}) — "
                "choose a writable --junit path",
                err=True,
            )
            code = max(code, EXIT_USAGE)
    if html_path is not None:
        try:
            write_html(results, html_path)
        except OSError as e:
            click.echo(
                f"flowproof: cannot write the HTML report to {html_path} ({e.strerror or e}) — "
                "choose a writable --html path",
                err=True,
            )
            code = max(code, EXIT_USAGE)
    if code != EXIT_OK:
        sys.exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="flowproof")
def cli() -> None:
    """flowproof: test LLM agents at the model boundary."""


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


@cli.command("diff")
@click.argument("old", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.argument("new", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@_edge
def diff_command(old: Path, new: Path) -> None:
    """The heal diff between two cassettes, turn by turn."""

    before, after = load_cassette(old), load_cassette(new)
    check_cassette(before, old)
    check_cassette(after, new)
    text = "\n".join([*error_turns(after), diff_cassettes(before, after)]).strip()
    click.echo(printable(text) or "no change in the trajectory")


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


def _standalone(command: click.Command, argv: Sequence[str] | None) -> NoReturn:
    args = list(argv) if argv is not None else None
    try:
        code = command.main(args=args, standalone_mode=False)
    except click.UsageError as e:
        # A bad option value is one line like every other flowproof error (click's own
        # form is three: usage, a help hint and the error).
        click.echo(f"flowproof: {e.format_message()} — see --help", err=True)
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
    _standalone(run_command, argv)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point of ``flowproof``."""
    _standalone(cli, argv)


if __name__ == "__main__":  # pragma: no cover
    main()
