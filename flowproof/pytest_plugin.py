"""The pytest plugin: every ``*.flow.yaml`` pytest is pointed at is one test.

Registered through the ``pytest11`` entry point, so installing flowproof is
enough: ``pytest specs/`` runs each flow as ``flowproof-run`` would, and a
failing flow's report is the failure text — no Python traceback. The flows of
one pytest process share one warm proxy (a session each, with its own listeners
on free ports), so under pytest-xdist each worker starts one proxy and
``pytest -n 4`` is safe. The mode is
``--flowproof-mode record|replay|compare`` (default replay).

Python tests that drive their agent in-process use the ``flowproof_proxy``
fixture: ``flowproof_proxy.session("cassettes/x.json")`` starts a proxy for that
cassette in the ``--flowproof-mode`` mode and points this process's SDK clients
at it (`flowproof.runner.session`); ``flowproof_proxy.trajectory()`` is what the
agent did, checked with the same matchers as a spec
(``flowproof.assert_tool_call(trajectory, "…")``, `flowproof.expect`). A replay
divergence fails the test with flowproof's report instead of the SDK error it
caused.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

# Private to pytest, and the only shapes xdist carries intact: see failure_repr.
from _pytest._code.code import ReprExceptionInfo, ReprFileLocation, ReprTracebackNative

from flowproof.advice import record_under_pytest
from flowproof.errors import EXIT_USAGE, FlowFailure, FlowproofError, OtelError
from flowproof.options import Mode, Route, host_settings
from flowproof.redact import secret_values
from flowproof.report.text import flow_report
from flowproof.runner.collect import FLOW_SUFFIX
from flowproof.runner.env import CAFiles, default_ca_dir, ensure_ca
from flowproof.runner.flags import WriterClaims
from flowproof.runner.flow import RunOptions, run_flow
from flowproof.runner.otel import check_otel, export_runs
from flowproof.runner.proxy import ProxyPool, warm_enabled
from flowproof.runner.session import ProxySession, session_report
from flowproof.spec import load_spec
from flowproof.trajectory import Trajectory
from flowproof.verdict import FlowResult

__all__ = ["FlowFile", "FlowItem", "FlowproofProxy", "flowproof_proxy"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("flowproof", "flowproof flow specs (*.flow.yaml)")
    group.addoption(
        "--flowproof-mode",
        choices=[m.value for m in Mode],
        default=Mode.REPLAY.value,
        help="How *.flow.yaml items run: replay the cassette strictly (default), record a "
        "new one (kept only if the flow passes), or compare live against it.",
    )
    group.addoption(
        "--flowproof-otel",
        action="store_true",
        help="Send the OpenTelemetry GenAI spans of each *.flow.yaml item and each flowproof_proxy "
        "session to the OTLP/HTTP endpoint of OTEL_EXPORTER_OTLP_ENDPOINT, as flowproof-run --otel "
        "does (docs/otel.md).",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("flowproof_otel", False):
        try:
            check_otel(os.environ)
        except FlowproofError as e:
            raise pytest.UsageError(f"--flowproof-otel: {e}") from None


#: The proxies of this pytest process (one per xdist worker), closed at unconfigure.
_POOL = pytest.StashKey[ProxyPool]()


def proxy_pool(config: pytest.Config) -> ProxyPool | None:
    """This pytest process's proxies, created on the first flow; None with
    ``FLOWPROOF_WARM_PROXY=0`` (every flow and fixture session then gets its own)."""
    if not warm_enabled():
        return None
    pool = config.stash.get(_POOL, None)
    if pool is None:
        pool = config.stash[_POOL] = ProxyPool()
    return pool


def pytest_unconfigure(config: pytest.Config) -> None:
    pool = config.stash.get(_POOL, None)
    if pool is not None:
        pool.close()


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.name.endswith(FLOW_SUFFIX):
        flow_file: FlowFile = FlowFile.from_parent(parent, path=file_path)
        return flow_file
    return None


#: Who records each cassette in this pytest process: the flow items (claimed at collection)
#: and the fixture's sessions (claimed as each opens).
_CLAIMS = pytest.StashKey[WriterClaims]()


def writer_claims(config: pytest.Config) -> WriterClaims:
    """This pytest process's cassette claims (`flowproof.runner.flags.WriterClaims`)."""
    claims = config.stash.get(_CLAIMS, None)
    if claims is None:
        claims = config.stash[_CLAIMS] = WriterClaims()
    return claims


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """In record mode, two selected flows recording one cassette both fail, naming each other,
    before either runs, as flowproof-run refuses them: one recording would replace the other.

    Claimed once the selection is final (after ``-k``, ``-m`` and ``--deselect``), so a flow
    left out claims nothing. Under pytest-xdist every worker collects every item, so each
    worker finds the same pairs whichever worker runs them.
    """
    if str(session.config.getoption("flowproof_mode")) != Mode.RECORD.value:
        return
    claims = writer_claims(session.config)
    items = [i for i in session.items if isinstance(i, FlowItem) and i.cassette is not None]
    by_file = {item.spec_file: item for item in items}
    for item in items:
        assert item.cassette is not None
        try:
            claims.claim(item.spec_file, item.cassette, shown=_shown(session.config, item.cassette))
        except FlowproofError as e:
            item.refused = str(e)
            first = by_file.get(claims.first(item.cassette) or "")
            if first is not None and first.refused is None:
                first.refused = str(e)


def _shown(config: pytest.Config, path: Path) -> Path:
    """``path`` as a message shows it: from pytest's root directory when it lies below."""
    try:
        return path.resolve().relative_to(config.rootpath)
    except ValueError:
        return path


def flow_id(path: Path) -> str:
    """The item name ``pytest -v`` shows: the spec's ``name:``, or the file's stem when the
    spec does not load (the item then fails with the spec error)."""
    return _flow_facts(path)[0]


def _flow_facts(path: Path) -> tuple[str, Path | None]:
    """The item name (`flow_id`) and the spec's cassette (None when the spec does not load),
    from one load."""
    try:
        spec = load_spec(path)
    except FlowproofError:
        name, cassette = "", None
    else:
        name, cassette = spec.name, spec.cassette
    name = " ".join(name.split()) or path.name.removesuffix(FLOW_SUFFIX)
    # `::` separates the parts of a node id; `[`/`]` would read as parameters.
    return name.replace("::", ": ").replace("[", "(").replace("]", ")"), cassette


class FlowFile(pytest.File):
    """A spec file: one flow, so one item."""

    def collect(self) -> Iterator[pytest.Item]:
        name, cassette = _flow_facts(self.path)
        item: FlowItem = FlowItem.from_parent(self, name=name)
        item.cassette = cassette
        yield item


class FlowItem(pytest.Item):
    """One flow, run as ``flowproof-run`` runs it; fails with flowproof's report."""

    #: The spec's cassette (None when the spec does not load: the run reports the spec error).
    cassette: Path | None = None
    #: Set at collection when another collected spec records the same cassette: the item
    #: fails with it and runs nothing (`pytest_collection_finish`).
    refused: str | None = None

    @property
    def spec_file(self) -> str:
        """The spec as pytest names it (the file part of the node id)."""
        return self.nodeid.split("::", 1)[0]

    def runtest(self) -> None:
        if self.refused is not None:
            raise FlowFailure(self.refused, EXIT_USAGE)
        mode = str(self.config.getoption("flowproof_mode"))
        _shared_ca()
        pool = proxy_pool(self.config)
        # The same settings flowproof-run takes from the environment (FLOWPROOF_UPSTREAM, …).
        hosts = host_settings(os.environ)
        otel = bool(self.config.getoption("flowproof_otel"))
        # Under pytest the flow is recorded again through pytest: its errors and report say that command.
        options = RunOptions(mode=mode, upstream=hosts.upstream, extra_hosts=hosts.extra_hosts, proxies=pool,
                             otel=otel, rerecord=record_under_pytest(self.nodeid))
        result = run_flow(self.path, options)
        report = flow_report(result, secrets=secret_values(os.environ))
        if otel:
            export_spans(result, report)
        self.user_properties.append(("flowproof_exit_code", result.exit_code))
        # Which warm proxy served the flow (none when it needed one of its own): the proof
        # that a worker starts one proxy for all its flows.
        self.user_properties.append(("flowproof_proxy_pid", pool.pids[-1] if pool and pool.pids else 0))
        if not result.passed:
            raise FlowFailure(report, result.exit_code)
        # A pass has something to read too (the steps, a record's heal diff): `pytest -rP`.
        self.add_report_section("call", "flowproof", report)

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None
    ) -> str | Any:
        if isinstance(excinfo.value, FlowFailure):
            return failure_repr(excinfo.value.report, self.path, 0)
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"flow: {self.name}"


def failure_repr(report: str, path: Path | str, lineno: int) -> ReprExceptionInfo:
    """A failed flow as pytest shows it: the whole report in the failure section, and only its
    headline in the short summary. A plain string would be both, and pytest prints the short
    summary unabridged on CI or at -vv, so the report (and its advice) would appear twice.

    pytest's repr classes, not a TerminalRepr of our own, because xdist serializes only
    these back to the controller; anything else arrives as one string again.
    """
    headline = report.splitlines()[0] if report else "flow failed"
    lines = [line + "\n" for line in report.splitlines()]
    return ReprExceptionInfo(
        reprtraceback=ReprTracebackNative(lines),
        reprcrash=ReprFileLocation(str(path), lineno, headline),
    )


def export_spans(result: FlowResult, report: str) -> None:
    """Send a judged run's GenAI spans (``--flowproof-otel``). As with flowproof-run, an output
    asked for that could not be written fails the run: `FlowFailure` with ``report``."""
    try:
        export_runs([result.spans])
    except OtelError as e:
        raise FlowFailure(f"{report}\n--flowproof-otel: {e}", e.exit_code) from None


def _shared_ca() -> CAFiles:
    """Create the CA under a file lock: xdist workers start flows at the same moment, and two
    first-time CA creations racing would leave a proxy and a trust bundle that disagree."""
    ca_dir = default_ca_dir(os.environ)
    ca_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(ca_dir.parent / f".{ca_dir.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return ensure_ca(ca_dir)


# --- the in-process fixture -------------------------------------------------------------------

_FIXTURE = pytest.StashKey["FlowproofProxy"]()
#: What to do about two tests recording one cassette.
FIXTURE_ADVICE = "give each test its own cassette, or record them in separate runs"


class FlowproofProxy:
    """What the ``flowproof_proxy`` fixture hands a test: a proxy session per cassette, and
    the trajectory of the model calls made through it.

    The test's outcome decides the recording: in record mode a cassette is kept only when the
    session passed and the test passed. Sessions still open when the test function returns
    are judged then; a replay divergence, missing calls, drift or a proxy error fail the test
    with flowproof's report (replacing the SDK error a divergence caused).
    """

    def __init__(self, item: pytest.Item, mode: str) -> None:
        self.mode = mode
        self._item = item
        self._sessions: list[ProxySession] = []

    def session(
        self,
        cassette: Path | str,
        *,
        route: Route | str = Route.PROXY,
        upstream: Sequence[str] = (),
        extra_hosts: Sequence[str] = (),
        allow_error_turns: bool = False,
    ) -> ProxySession:
        """Start a proxy for ``cassette`` (a relative path is taken from the test file's folder)
        and point this process's environment at it; build SDK clients after this call.

        ``route="base_url"`` sets the SDKs' base-URL variables instead of relying on
        HTTPS_PROXY alone; ``upstream`` sends a model host's calls elsewhere
        (``api.openai.com=http://127.0.0.1:8000``) and ``extra_hosts`` names gateway hosts,
        each on top of ``FLOWPROOF_UPSTREAM`` and ``FLOWPROOF_EXTRA_HOSTS`` as flowproof-run
        reads them. The session is served by this pytest process's proxy. A session still
        open is judged first: one set of variables at a time.
        """
        path = Path(cassette)
        if not path.is_absolute():
            path = self._item.path.parent / path
        if self.mode == Mode.RECORD.value:
            self._claim(path)
        for open_session in self._open():
            self._judge(open_session, None)
        session = ProxySession(
            path,
            mode=self.mode,
            route=route,
            upstream=upstream,
            extra_hosts=extra_hosts,
            ca=_shared_ca(),
            name=self._item.nodeid,
            rerecord=record_under_pytest(self._item.nodeid),
            allow_error_turns=allow_error_turns,
            pool=proxy_pool(self._item.config),
            otel=bool(self._item.config.getoption("flowproof_otel")),
        )
        session.start()
        self._sessions.append(session)
        return session

    def trajectory(self) -> Trajectory:
        """The trajectory of the latest session: the calls so far, all of them once it closed."""
        if not self._sessions:
            raise FlowproofError(
                "flowproof_proxy.trajectory() was called before any session — start one with "
                'flowproof_proxy.session("cassettes/NAME.json") before the agent runs'
            )
        return self._sessions[-1].trajectory()

    def finish(self, exc: BaseException | None) -> None:
        """Judge every open session once the test function returned (``exc``: how it failed)."""
        for session in self._open():
            self._judge(session, exc)

    def _claim(self, path: Path) -> None:
        """One writer per cassette, checked before anything starts: another test of this run
        recording ``path`` — or an earlier session of this test — would lose one recording
        (the cassette lock only stops writers at the same moment)."""
        shown = _shown(self._item.config, path)
        if any(os.path.abspath(s.cassette) == os.path.abspath(path) for s in self._sessions):
            raise FlowproofError(
                f"{self._item.nodeid} records {shown} in two sessions, so one recording would be lost — "
                "give each session its own cassette"
            )
        writer_claims(self._item.config).claim(self._item.nodeid, path, advice=FIXTURE_ADVICE, shown=shown)

    def _open(self) -> list[ProxySession]:
        return [s for s in self._sessions if s.result is None]

    def _judge(self, session: ProxySession, exc: BaseException | None) -> None:
        result = session.close(failed=exc is not None)
        # A skip or an interruption is not the test failing: the report does not say it failed.
        report = session_report(session, result, None if isinstance(exc, _NOT_REPLACED) else exc)
        if session.otel and not isinstance(exc, _NOT_REPLACED):
            export_spans(result, report)
        if not result.passed and not isinstance(exc, _NOT_REPLACED):
            raise FlowFailure(report, result.exit_code) from None
        # A pass (or a test failure of its own) has something to read too: `pytest -rP`.
        self._item.add_report_section("call", "flowproof", report)


#: Outcomes a session's failure does not replace: the user stopped the run, or skipped the test.
_NOT_REPLACED = (KeyboardInterrupt, SystemExit, pytest.skip.Exception)


@pytest.fixture
def flowproof_proxy(request: pytest.FixtureRequest) -> Iterator[FlowproofProxy]:
    """A flowproof proxy around an agent driven in-process (see `FlowproofProxy`)."""
    fixture = FlowproofProxy(request.node, str(request.config.getoption("flowproof_mode")))
    request.node.stash[_FIXTURE] = fixture
    try:
        yield fixture
    finally:
        # Sessions the call phase did not judge (a setup that failed after one started) only
        # stop: their proxy, environment and staged recording must not outlive the test.
        for session in fixture._open():
            session.close(failed=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    try:
        outcome = yield
    except BaseException as exc:
        fixture = item.stash.get(_FIXTURE, None)
        if fixture is not None:
            fixture.finish(exc)
        raise
    fixture = item.stash.get(_FIXTURE, None)
    if fixture is not None:
        fixture.finish(None)
    return outcome


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.excinfo is not None and item.stash.get(_FIXTURE, None) is not None:
        # flowproof's own words, not a traceback through the plugin.
        error = call.excinfo.value
        if isinstance(error, FlowFailure):
            path, lineno, _ = item.location
            report.longrepr = failure_repr(error.report, path, (lineno or 0) + 1)
        elif isinstance(error, FlowproofError):
            report.longrepr = str(error)
    return report
