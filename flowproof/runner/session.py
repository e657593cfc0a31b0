"""An in-process session: the proxy around an agent that runs inside the calling process.

`flowproof-run` starts the agent as a child process and hands it the proxy in
its environment. A Python test that drives its agent itself (an
``openai.OpenAI()`` client built in the test function) has no child process:
`ProxySession` starts the same proxy for one cassette, points *this* process's
environment at it (the variables of `runner.env.agent_env`: HTTPS_PROXY, the
CA bundle variables, placeholder keys, and the base-URL variables with
``route="base_url"``), and puts every variable back on `close`. SDK clients
read these variables when they are built, so a client must be built after the
session starts.

`close` judges the session as a flow run is judged (`flowproof.verdict`): a
replay divergence, missing calls, compare drift or a proxy error fail it, and
a recording is kept only when the session passed and the caller's test did
not fail (``failed=True``); otherwise the old cassette stays byte-identical.
The pytest fixture (`flowproof.pytest_plugin`) is the usual way in; see
docs/pytest.md. With ``otel=True`` the judged result carries the session's GenAI
spans (`FlowResult.spans`, built as a flow's are: `runner.otel.flow_spans`).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Self

from flowproof.cassette import Cassette, load_cassette
from flowproof.cassette_check import check_cassette
from flowproof.errors import (
    CassetteError,
    CassetteNotFoundError,
    FlowFailure,
    FlowproofError,
)
from flowproof.log_events import Event, parse_events
from flowproof.options import Mode, ProxyOptions, Route, choose, host_settings, listeners_for
from flowproof.redact import secret_values
from flowproof.report.text import flow_report
from flowproof.run_record import read_run
from flowproof.runner.env import CAFiles, agent_env, default_ca_dir, ensure_ca
from flowproof.runner.judge import judge_flow
from flowproof.runner.lock import cassette_lock
from flowproof.runner.otel import flow_spans
from flowproof.runner.proxy import FlowProxy, ProxyPool, scratch_prefix, start_proxy
from flowproof.runner.recording import Staging
from flowproof.trajectory import Trajectory
from flowproof.turns import Turn
from flowproof.verdict import Advice, FlowResult

__all__ = ["ProxySession", "session_report"]

#: How long `ProxySession.trajectory` waits for calls still in flight to be logged.
SETTLE_SECONDS = 5.0
#: How a session words what to do about a recording it refused.
ADVICE = Advice(
    allow_error_turns="pass allow_error_turns=True",
    no_model_call="build the SDK client after the session starts (clients read HTTPS_PROXY and "
    "the CA variables when they are built), or use route='base_url'",
)


@dataclass(frozen=True, slots=True)
class _InProcess:
    """The agent outcome the judge reads: the agent is the caller, which did not crash
    from flowproof's point of view (its own failure is the caller's test result)."""

    returncode: int | None = 0
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False


class ProxySession:
    """A flowproof proxy for one cassette, with this process's environment pointed at it.

    ``mode`` is ``replay`` (default), ``record`` or ``compare``. ``upstream`` maps a model
    host to another URL (``api.openai.com=http://127.0.0.1:8000``) and ``extra_hosts`` names
    gateway hosts, each on top of ``FLOWPROOF_UPSTREAM`` and ``FLOWPROOF_EXTRA_HOSTS``, read
    as flowproof-run reads them (`flowproof.options.host_settings`). ``rerecord`` is the
    command a report tells the user to run to record again. ``pool`` serves the session on
    a shared proxy (the pytest plugin's); without one it gets a proxy of its own. ``otel``
    builds the session's GenAI spans when it is judged (`FlowResult.spans`; docs/otel.md),
    from the start of the session to its close. Use as a context manager, or call `start`
    and `close` yourself.
    """

    def __init__(
        self,
        cassette: Path | str,
        *,
        mode: Mode | str = Mode.REPLAY,
        route: Route | str = Route.PROXY,
        upstream: Sequence[str] = (),
        extra_hosts: Sequence[str] = (),
        ca: CAFiles | None = None,
        name: str = "in-process session",
        rerecord: str | None = None,
        allow_error_turns: bool = False,
        proxy_timeout: float = 20.0,
        pool: ProxyPool | None = None,
        otel: bool = False,
    ) -> None:
        try:
            self.mode = choose(Mode, mode, "mode")
            self.route = choose(Route, route, "route")
        except ValueError as e:
            raise FlowproofError(str(e)) from None
        self.cassette = Path(cassette)
        hosts = host_settings(os.environ, upstream=upstream, extra_hosts=extra_hosts)
        self.upstream = hosts.upstream
        self.extra_hosts = hosts.extra_hosts
        self.name = name
        self.rerecord = rerecord or f"run this test again in record mode to record {self.cassette}"
        self.allow_error_turns = allow_error_turns
        self._ca = ca
        self._proxy_timeout = proxy_timeout
        self._pool = pool
        self.otel = otel
        self._proxy: FlowProxy | None = None
        self._existing: Cassette | None = None
        #: The views of the cassette's turns, built by its check (a replayed turn is logged by position).
        self._views: tuple[Turn, ...] = ()
        self._held = ExitStack()
        self._saved_env: dict[str, str | None] = {}
        self._events: list[Event] | None = None
        self._result: FlowResult | None = None
        self._started = 0.0
        #: When the agent could first reach the proxy (the wall clock spans are placed on).
        self._started_at = 0.0

    # --- life cycle -----------------------------------------------------------------------

    def start(self) -> Self:
        """Load and check the cassette, start the proxy and point the environment at it."""
        if self._proxy is not None or self._result is not None:
            raise FlowproofError("this session was already started; start a new one per cassette")
        self._started = time.monotonic()
        self._existing = self._load_existing()
        ca = self._ca or ensure_ca(default_ca_dir(os.environ))
        try:
            if self.mode == Mode.RECORD:
                self.cassette.parent.mkdir(parents=True, exist_ok=True)
                # One writer per cassette, and the staging file is touched only under the lock.
                self._held.enter_context(cassette_lock(self.cassette))
                self._staging.discard()
            scratch = Path(self._held.enter_context(
                tempfile.TemporaryDirectory(prefix=scratch_prefix("run"))
            ))
            options = ProxyOptions(
                mode=self.mode,
                cassette=self._staging.path if self.mode == Mode.RECORD else self.cassette,
                report=scratch / "events.jsonl",
                upstream=self.upstream,
                extra_hosts=self.extra_hosts,
                route=self.route,
                home=os.environ.get("HOME"),
                cwd=str(Path.cwd()),
                listeners=listeners_for(self.route),
            )
            if self._pool is not None:
                self._proxy = self._pool.open(options, ca.cert.parent, timeout=self._proxy_timeout)
            else:
                self._proxy = start_proxy(options, ca.cert.parent, timeout=self._proxy_timeout)
        except BaseException:
            self._release()
            raise
        env = agent_env(
            os.environ,
            proxy_url=self._proxy.url,
            ca=ca,
            route=self.route,
            reverse_urls=self._proxy.reverse_urls,
            # No request reaches a real provider in replay nor with a mapped upstream, so an
            # SDK that insists on a key gets a placeholder there (never the user's key).
            placeholder_keys=options.dials_lazily,
            model_hosts=options.model_hosts,
        )
        self._apply_env(env)
        self._started_at = time.time()
        return self

    def close(self, *, failed: bool = False) -> FlowResult:
        """Stop the proxy, restore the environment and judge the session (idempotent).

        ``failed`` says the caller's own test failed: a recording is then not kept.
        """
        if self._result is not None:
            return self._result
        proxy = self._proxy
        if proxy is None:
            raise FlowproofError("this session was never started")
        try:
            self._restore_env()
            proxy.stop()
            ended_at = time.time()
            self._events = parse_events(proxy.events())
            result = self._judge(self._events, proxy.startup_seconds, failed)
            if self.otel:
                # No spec: nothing is mocked, and the spans never carry content.
                spans = flow_spans(result, started_at=self._started_at, ended_at=ended_at, environ=os.environ)
                result = replace(result, spans=spans)
            self._result = result
        finally:
            self._release()
        return self._result

    def __enter__(self) -> Self:
        if self._proxy is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        result = self.close(failed=exc is not None)
        if not result.passed:
            # A divergence explains whatever the agent did next (an SDK error, a wrong answer):
            # the session's report replaces the exception it caused.
            raise FlowFailure(session_report(self, result, exc), result.exit_code) from None

    # --- reading ------------------------------------------------------------------------------

    @property
    def result(self) -> FlowResult | None:
        """The verdict, once `close` has run."""
        return self._result

    @property
    def proxy_url(self) -> str:
        """The explicit-proxy URL the environment points at (while the session is open)."""
        if self._proxy is None:
            raise FlowproofError("the session has not started")
        return self._proxy.url

    def events(self) -> list[Event]:
        """The proxy's typed events so far (all of them once closed)."""
        if self._events is not None:
            return list(self._events)
        if self._proxy is None:
            return []
        return parse_events(self._proxy.events())

    def trajectory(self) -> Trajectory:
        """The trajectory of the model calls so far (all of them once closed: the one the
        session was judged on), MCP calls included.

        While open, a call the proxy has seen begin but not yet logged (a streamed answer's
        turn is logged when its stream ends) is waited for, up to `SETTLE_SECONDS`.
        """
        if self._result is not None and self._result.trajectory is not None:
            return self._result.trajectory
        record = read_run(self.events(), self._existing, views=self._views)
        if self._events is None and self._proxy is not None:
            deadline = time.monotonic() + SETTLE_SECONDS
            while record.in_flight and time.monotonic() < deadline:
                time.sleep(0.02)
                record = read_run(self.events(), self._existing, views=self._views)
        return record.trajectory()

    # --- internals --------------------------------------------------------------------------

    @property
    def _staging(self) -> Staging:
        return Staging(self.cassette)

    def _load_existing(self) -> Cassette | None:
        if self.mode == Mode.RECORD and not self.cassette.exists():
            return None
        if not self.cassette.exists():
            raise CassetteNotFoundError(self.cassette, self.rerecord)
        loaded = load_cassette(self.cassette, record_command=self.rerecord)
        self._views = check_cassette(loaded, self.cassette)
        if self.mode != Mode.RECORD and loaded.route != self.route:
            raise CassetteError(
                self.cassette,
                f"was recorded on route `{loaded.route}` but this session uses route `{self.route}`",
                f"pass route={loaded.route!r}, or re-record: {self.rerecord}",
            )
        return loaded

    def _apply_env(self, env: Mapping[str, str]) -> None:
        for name, value in env.items():
            if os.environ.get(name) != value:
                self._saved_env.setdefault(name, os.environ.get(name))
                os.environ[name] = value

    def _restore_env(self) -> None:
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_env.clear()

    def _release(self) -> None:
        self._restore_env()
        if self.mode == Mode.RECORD:
            # Kept or rejected by the verdict; on every other way out nothing is left behind.
            self._staging.discard()
        self._held.close()

    def _judge(self, events: list[Event], startup: float, failed: bool) -> FlowResult:
        return judge_flow(
            events,
            _InProcess(),
            spec_path=Path(self.name),
            name=self.name,
            mode=self.mode,
            cassette=self.cassette,
            record_command=self.rerecord,
            advice=ADVICE,
            existing=self._existing,
            views=self._views,
            staging=self._staging if self.mode == Mode.RECORD else None,
            allow_error_turns=self.allow_error_turns,
            test_failed=failed,
            startup=startup,
            duration=time.monotonic() - self._started,
        )


def session_report(session: ProxySession, result: FlowResult, exc: BaseException | None = None) -> str:
    """The session's readable report (as a flow's), ending with the line that says what to do."""
    after = ""
    if exc is not None:
        # The exception's first sentence: an SDK's error text for a divergence goes on to name
        # the proxy's event log, a scratch file that is gone by now.
        first = (str(exc).strip().splitlines() or [""])[0].split(". ")[0][:200]
        said = "the test then failed with" if not result.passed else "the test failed with"
        after = f"\n  {said}: {type(exc).__name__}" + (f": {first}" if first else "")
    return flow_report(result, secrets=secret_values(os.environ), after=after, test_failed=exc is not None)
