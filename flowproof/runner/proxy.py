"""The mitmdump lifecycle: start the flowproof addon in its own process group, wait
for it to listen, read its event log, and stop it so that no process survives.

The runner and the addon share nothing but the JSON-lines event log
(``flowproof_report``, see docs/internals.md): the addon writes a ``ready`` event
once it listens, ``turn``/``divergence``/``drift``/… while the agent runs and
``done`` at shutdown. `RunningProxy` polls that file.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import flowproof
from flowproof.errors import ProxyError
from flowproof.runner.eventtail import EventTail

#: Bounded capture of mitmdump's stderr, for the error message when it dies.
_STDERR_TAIL = 4000

#: Written when the repository's one-line script is absent (an installed wheel).
_ADDON_SHIM = "from flowproof.addon import Flowproof\n\naddons = [Flowproof()]\n"


@dataclass(frozen=True, slots=True)
class ProxySettings:
    """Everything needed to start one mitmdump for one flow run.

    ``port`` 0 lets the OS choose the explicit-proxy port (read back from the
    ``ready`` event). ``reverse_hosts`` adds one reverse-proxy listener per model
    host (``route="base_url"``). ``addon_script`` overrides the script given to
    ``mitmdump -s`` (tests use a stand-in addon).
    """

    mode: str
    cassette: Path
    report: Path
    confdir: Path
    spec: Path | None = None
    upstream: tuple[str, ...] = ()
    extra_hosts: tuple[str, ...] = ()
    route: str = "proxy"
    port: int = 0
    reverse_hosts: tuple[str, ...] = ()
    compare_handler: str | None = None
    #: ``http``: the proxy refuses WebSocket upgrades to model APIs (426); None: the spec decides.
    transport: str | None = None
    addon_script: Path | None = None
    extra_args: tuple[str, ...] = ()
    #: The agent's own HOME and working directory, made portable in cassettes (`«home»`,
    #: `«cwd»`); None leaves the addon's default (its own HOME, the spec's agent.cwd).
    home: str | None = None
    cwd: Path | None = None
    #: Variables added to mitmdump's environment (the spec it loads resolves ${VAR} there).
    env: tuple[tuple[str, str], ...] = ()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def mitmdump_executable() -> str:
    """The ``mitmdump`` console script of the running interpreter's environment."""
    beside = Path(sys.executable).parent / "mitmdump"
    if beside.exists():
        return str(beside)
    found = shutil.which("mitmdump")
    if found is None:
        raise ProxyError(
            "mitmdump was not found next to the Python interpreter nor on PATH — "
            "install flowproof with its dependencies (pip install flowproof)"
        )
    return found


def addon_script_path(scratch: Path) -> Path:
    """The ``mitmdump -s`` script: ``$FLOWPROOF_ADDON_SCRIPT``, else the repository's one-line
    script, else a shim written to ``scratch`` (an installed wheel has no ``addon/`` folder)."""
    override = os.environ.get("FLOWPROOF_ADDON_SCRIPT")
    if override:
        # A debugging aid (and the runner's tests): load a modified addon instead.
        return Path(override)
    repo_script = Path(flowproof.__file__).resolve().parent.parent / "addon" / "flowproof_addon.py"
    if repo_script.is_file():
        return repo_script
    shim = scratch / "flowproof_addon.py"
    if not shim.exists() or shim.read_text(encoding="utf-8") != _ADDON_SHIM:
        shim.write_text(_ADDON_SHIM, encoding="utf-8")
    return shim


def build_command(settings: ProxySettings, script: Path, reverse_ports: dict[str, int]) -> list[str]:
    """The mitmdump argv for ``settings`` (one reverse listener per entry of ``reverse_ports``)."""
    args = [
        mitmdump_executable(),
        "-q",
        "-s",
        str(script),
        "--listen-host",
        "127.0.0.1",
        "--listen-port",
        str(settings.port),
        "--set",
        f"confdir={settings.confdir}",
        "--set",
        f"flowproof_mode={settings.mode}",
        "--set",
        f"flowproof_cassette={settings.cassette}",
        "--set",
        f"flowproof_report={settings.report}",
        "--set",
        f"flowproof_route={settings.route}",
    ]
    if reverse_ports:
        # Several --mode flags make several listeners; the explicit proxy stays first.
        args += ["--mode", "regular"]
        for host, port in reverse_ports.items():
            args += ["--mode", f"reverse:https://{host}@{port}"]
    if settings.mode == "replay":
        # Replay never needs the upstream server: do not dial it before the request.
        args += ["--set", "connection_strategy=lazy"]
    if settings.spec is not None:
        args += ["--set", f"flowproof_spec={settings.spec}"]
    for item in settings.upstream:
        args += ["--set", f"flowproof_upstream={item}"]
    for host in settings.extra_hosts:
        args += ["--set", f"flowproof_extra_hosts={host}"]
    if settings.compare_handler:
        args += ["--set", f"flowproof_compare_handler={settings.compare_handler}"]
    if settings.transport:
        args += ["--set", f"flowproof_transport={settings.transport}"]
    if settings.home:
        args += ["--set", f"flowproof_home={settings.home}"]
    if settings.cwd is not None:
        args += ["--set", f"flowproof_cwd={settings.cwd}"]
    args += list(settings.extra_args)
    return args


def read_events(path: Path) -> list[dict[str, Any]]:
    """Parse a JSON-lines event log; a partial or garbled last line is skipped (still being written).

    One whole read: pollers keep an `EventTail`, which parses only what was appended."""
    return EventTail(path).read()


def _listen_entries(ready: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(mode, host, port) from a ``ready`` event, in either documented shape.

    internals.md says ``[[host, port], …]``; the addon may also write
    ``[{"mode", "host", "port"}, …]``. Lists carry no mode: they are in ``--mode`` order.
    """
    out: list[tuple[str, str, int]] = []
    for entry in ready.get("listen") or []:
        try:
            if isinstance(entry, dict):
                out.append((str(entry.get("mode", "")), str(entry["host"]), int(entry["port"])))
            elif isinstance(entry, (list, tuple)) and len(entry) >= 2:
                out.append(("", str(entry[0]), int(entry[1])))
        except (KeyError, TypeError, ValueError):
            continue
    return out


class ProxyEndpoints:
    """What a flow reads off its proxy, whether its own mitmdump (`RunningProxy`) or a session
    on a shared one (`runner.warm.WarmSession`): the URLs to hand the agent, and its event log."""

    __slots__ = ()
    settings: ProxySettings
    port: int
    reverse_ports: dict[str, int]
    _tail: EventTail | None

    @property
    def url(self) -> str:
        """The explicit-proxy URL handed to the agent as HTTPS_PROXY."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def reverse_urls(self) -> dict[str, str]:
        """Model host -> the plain-http base URL of its reverse listener."""
        return {h: f"http://127.0.0.1:{p}" for h, p in self.reverse_ports.items()}

    def events(self) -> list[dict[str, Any]]:
        """Every complete event written to the log so far (each line parsed once: `EventTail`)."""
        if self._tail is None:
            # Each subclass declares the `_tail` slot; the base's empty __slots__ keeps them slotted.
            self._tail = EventTail(self.settings.report)  # type: ignore[misc]
        return self._tail.read()


@dataclass(slots=True)
class RunningProxy(ProxyEndpoints):
    """A started mitmdump. Use as a context manager, or call `stop` yourself."""

    settings: ProxySettings
    process: subprocess.Popen[bytes]
    port: int
    reverse_ports: dict[str, int]
    startup_seconds: float
    _stderr_path: Path
    _scratch: tempfile.TemporaryDirectory[str] | None = None
    _stopped: bool = field(default=False)
    _tail: EventTail | None = None

    def is_alive(self) -> bool:
        """True while mitmdump is running."""
        return self.process.poll() is None

    def wait_for(
        self, predicate: Callable[[list[dict[str, Any]]], bool], timeout: float, interval: float = 0.02
    ) -> list[dict[str, Any]]:
        """Poll the log until ``predicate(events)`` holds; return the events, or raise ProxyError on timeout/exit."""
        deadline = time.monotonic() + timeout
        while True:
            events = self.events()
            if predicate(events):
                return events
            if not self.is_alive():
                raise ProxyError(
                    f"the proxy (mitmdump) exited with code {self.process.returncode} — "
                    f"its last output: {self.stderr_tail() or '(none)'}"
                )
            if time.monotonic() >= deadline:
                raise ProxyError(f"timed out after {timeout:g}s waiting for the proxy's event log")
            time.sleep(interval)

    def stderr_tail(self) -> str:
        """The last few KB of mitmdump's stdout/stderr."""
        try:
            data = self._stderr_path.read_bytes()
        except OSError:
            return ""
        return data[-_STDERR_TAIL:].decode("utf-8", "replace").strip()

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGINT the process group (mitmdump runs its ``done`` hooks), wait, then SIGKILL the group."""
        if self._stopped:
            return self.process.returncode
        self._stopped = True
        try:
            if self.process.poll() is None:
                _signal_group(self.process.pid, signal.SIGINT)
                deadline = time.monotonic() + timeout
                # Once the addon's `done` event is written its done hook has run (the
                # cassette is saved, the log complete); mitmproxy's own teardown after
                # that only costs time (~0.15 s a flow), so the group is killed then.
                while self.process.poll() is None and time.monotonic() < deadline:
                    if _log_ends_with_done(self.settings.report):
                        break
                    time.sleep(0.01)
            # Whatever mitmdump spawned dies with the group, even if mitmdump itself exited.
            _signal_group(self.process.pid, signal.SIGKILL)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not fail
                pass
        finally:
            if self._scratch is not None:
                self._scratch.cleanup()
        return self.process.returncode

    def __enter__(self) -> RunningProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _log_ends_with_done(path: Path) -> bool:
    """True when the last complete line of the event log is the ``done`` event."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - 65536))
            tail = fh.read()
    except OSError:
        return False
    if not tail.endswith(b"\n"):
        return False  # the line is still being written
    last = tail.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    return last.startswith(b'{"event": "done"')


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


_PR_SET_PDEATHSIG = 1
#: Scratch folders carry their owner's pid, so a later run can tell a crashed run's leftovers.
SCRATCH_PREFIXES = ("flowproof-proxy-", "flowproof-run-")
_SCRATCH_NAME = re.compile(r"flowproof-(?:proxy|run)-(\d+)-")


def scratch_prefix(kind: str) -> str:
    """``flowproof-<kind>-<pid>-``: the prefix of this process's scratch folders."""
    return f"flowproof-{kind}-{os.getpid()}-"


def _die_with_parent(runner: int) -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask the kernel to SIGKILL this process when the runner dies, however it dies.

    SIGKILL, not SIGTERM: an orphaned mitmdump that shut down cleanly would write its
    recording at the staging path after the runner is gone. If the runner already died
    before this line ran, exit now.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return  # not Linux: the stop() in a finally is then the only guard
    if os.getppid() != runner:
        os._exit(1)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_scratch(root: Path | None = None) -> list[Path]:
    """Remove scratch folders left by runners that no longer exist (killed with SIGKILL);
    return what was removed. A folder of a live process is never touched."""
    base = Path(root or tempfile.gettempdir())
    removed: list[Path] = []
    try:
        entries = list(base.iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = _SCRATCH_NAME.match(entry.name)
        if match is None or not entry.is_dir() or entry.is_symlink():
            continue
        pid = int(match.group(1))
        if pid == os.getpid() or _pid_alive(pid):
            continue
        try:
            if entry.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def start_proxy(settings: ProxySettings, timeout: float = 20.0) -> RunningProxy:
    """Start mitmdump with the flowproof addon and wait for its ``ready`` event.

    Raises `ProxyError` (with mitmdump's output tail) when it exits early or is
    not ready within ``timeout`` seconds; nothing is left running in that case.
    """
    started = time.monotonic()
    sweep_scratch()
    scratch = tempfile.TemporaryDirectory(prefix=scratch_prefix("proxy"))
    scratch_path = Path(scratch.name)
    script = settings.addon_script or addon_script_path(scratch_path)
    # Two listeners cannot both ask for port 0 (mitmproxy refuses duplicate addresses),
    # so reverse listeners get ports chosen here; the explicit proxy keeps the OS pick.
    # With a fixed port (an agent started by hand with `flowproof env --base-url`) the
    # reverse listeners take the ports right after it, so both sides agree.
    reverse_ports = {
        host: (settings.port + 1 + i if settings.port else free_port())
        for i, host in enumerate(settings.reverse_hosts)
    }
    settings.report.parent.mkdir(parents=True, exist_ok=True)
    # A stale log from an earlier run would produce a false `ready`.
    settings.report.unlink(missing_ok=True)
    stderr_path = scratch_path / "mitmdump.log"
    argv = build_command(settings, script, reverse_ports)
    env = {**os.environ, **dict(settings.env)}
    # The proxy itself must reach the upstream directly, never through another proxy
    # (the runner's own environment may carry one).
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY", "all_proxy"):
        env.pop(name, None)
    with stderr_path.open("wb") as log:
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
                # The proxy must not outlive the runner, even one killed with SIGKILL.
                preexec_fn=functools.partial(_die_with_parent, os.getpid()),
            )
        except OSError as e:
            scratch.cleanup()
            raise ProxyError(f"could not start mitmdump ({argv[0]}): {e}") from None
    proxy = RunningProxy(
        settings=settings,
        process=process,
        port=settings.port,
        reverse_ports=reverse_ports,
        startup_seconds=0.0,
        _stderr_path=stderr_path,
        _scratch=scratch,
    )
    try:
        events = proxy.wait_for(lambda evs: any(e.get("event") == "ready" for e in evs), timeout)
    except ProxyError as e:
        tail = proxy.stderr_tail()
        proxy.stop(timeout=3)
        if "timed out" in str(e):
            raise ProxyError(
                f"the proxy (mitmdump) was not ready within {timeout:g}s — "
                f"its last output: {tail or '(none)'}"
            ) from None
        raise
    ready = next(e for e in events if e.get("event") == "ready")
    entries = _listen_entries(ready)
    proxy.port = _main_port(entries, settings.port, set(reverse_ports.values()))
    if proxy.port == 0:
        proxy.stop(timeout=3)
        raise ProxyError(
            "the proxy's ready event does not say which port it listens on — "
            "pass an explicit --proxy-port N"
        )
    proxy.startup_seconds = time.monotonic() - started
    return proxy


def _main_port(entries: Sequence[tuple[str, str, int]], requested: int, reverse: set[int]) -> int:
    """The explicit-proxy port among the listen entries (the one that is not a reverse listener)."""
    for mode, _host, port in entries:
        if mode.startswith("regular") and port:
            return port
    for _mode, _host, port in entries:
        if port and port not in reverse:
            return port
    return requested


def iter_event_kinds(events: Sequence[dict[str, Any]], kind: str) -> Iterator[dict[str, Any]]:
    """The events of one ``event`` kind, in log order."""
    return (e for e in events if e.get("event") == kind)
