"""The proxy's one lifecycle: a mitmdump per kind of proxy, a session on it per flow.

Every flow runs as a *session* on a mitmdump started with a control socket
(``flowproof_control``; `flowproof.addon.warm` has the protocol). Opening a
session sends the flow's `flowproof.options.ProxyOptions` (resolved: the addon
never reads the spec) and gets back the ports of the flow's own listeners; the
flow's event log then gets ``ready``, its calls, and at `FlowProxy.stop` the
``done`` event of a clean shutdown (the recording written, unconsumed turns
listed). A run of several flows shares a `ProxyPool`; a single flow is a pool of
one (`start_proxy`), so there is no second way to start a proxy.

The process is started so that it never outlives the runner: its own process
group (a terminal's Ctrl-C does not reach it; the runner stops it), killed by
the kernel if the runner dies however it dies (``PR_SET_PDEATHSIG``), and its
scratch folder swept by the next run (`sweep_scratch`). It listens on 127.0.0.1
only. ``$FLOWPROOF_ADDON_SCRIPT`` loads another ``mitmdump -s`` script (debugging,
the runner's tests); it must speak the same protocol (the bundled addon does).

The runner and the addon share nothing else but the flow's JSON-lines event log
(``flowproof_report``, docs/internals.md), which `FlowProxy.events` reads.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from flowproof import ports
from flowproof.errors import ProxyError
from flowproof.runner import spawn
from flowproof.runner.eventtail import EventTail
from flowproof.runner.spawn import Spawned, scratch_prefix

if TYPE_CHECKING:
    from flowproof.options import ProxyOptions

__all__ = [
    "FlowProxy",
    "ProxyKind",
    "ProxyPool",
    "ProxyProcess",
    "default_ca_dir",
    "free_port",
    "mitmdump_executable",
    "read_events",
    "scratch_prefix",
    "session_request",
    "start_proxy",
    "sweep_scratch",
    "warm_enabled",
]

#: Bounded capture of mitmdump's output, for the error message when it dies.
_STDERR_TAIL = 4000


def default_ca_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$FLOWPROOF_CA_DIR``, else ``$XDG_DATA_HOME/flowproof/ca``, else ``~/.local/share/flowproof/ca``."""
    return Path(spawn.ca_dir(os.environ if environ is None else environ))


def warm_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """False when ``FLOWPROOF_WARM_PROXY=0``: the flows of a run then get a proxy each (a pool
    of one per flow, as a single flow has) instead of sharing one (docs/runner.md)."""
    env = os.environ if environ is None else environ
    return env.get("FLOWPROOF_WARM_PROXY", "1").strip() != "0"


#: Ports `free_port` handed out lately: the kernel calls a port free until the proxy binds it.
_handed_out: deque[int] = deque(maxlen=256)
_handing_out = threading.Lock()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it), and not one handed out
    lately: flows run side by side (``-j``) pick their listeners' ports before the proxy binds
    them, and the kernel may offer one port to both (the proxy then refuses the second flow)."""
    with _handing_out:
        port = ports.free_port(_handed_out)
        _handed_out.append(port)
        return port


def mitmdump_executable() -> str:
    """The ``mitmdump`` console script of the running interpreter's environment."""
    found = spawn.mitmdump_executable()
    if found is None:
        raise ProxyError(
            "mitmdump was not found next to the Python interpreter nor on PATH — "
            "install flowproof with its dependencies (pip install flowproof)"
        )
    return found


def read_events(path: Path) -> list[dict[str, Any]]:
    """Parse a JSON-lines event log; a partial or garbled last line is skipped (still being written).

    One whole read: pollers keep an `EventTail`, which parses only what was appended."""
    return EventTail(path).read()


# ------------------------------------------------------------------ orphan-proofing


def sweep_scratch(root: Path | None = None) -> list[Path]:
    """Remove scratch folders left by runners that no longer exist (killed with SIGKILL);
    return what was removed. A folder of a live process is never touched."""
    return [Path(p) for p in spawn.sweep_scratch(str(root) if root is not None else None)]


# ------------------------------------------------------------------ the proxy started first


def _take_early(kind: ProxyKind | None) -> ProxyProcess | None:
    """The prestarted proxy when it is of ``kind`` and alive; any other is killed."""
    taken = None
    for early in spawn.take_early():
        if taken is None and ProxyKind.of(early.key) == kind and early.process.poll() is None:
            taken = ProxyProcess(ProxyKind.of(early.key), early)
        else:
            early.kill()
    return taken


# ------------------------------------------------------------------ the control connection


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall(json.dumps(message).encode("utf-8") + b"\n")


def _receive(sock: socket.socket) -> dict[str, Any]:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            raise ProxyError("the proxy closed the control connection")
        data += chunk
    reply = json.loads(data)
    if not isinstance(reply, dict):
        raise ProxyError(f"unexpected control reply {reply!r}")
    return reply


def session_request(options: ProxyOptions) -> dict[str, Any]:
    """The ``open`` message of a flow's session (`flowproof.addon.warm`)."""
    # Imported here, as in `ProxyProcess.open`: this module starts the proxy before the
    # runner imports the rest (`prestart`), and the options module with the normalizer and
    # the provider table is 0.1-0.2 s of imports (python -X importtime) that a session only
    # needs once the flow's options exist.
    from flowproof.options import to_json

    return {"op": "open", "options": to_json(options)}


# ------------------------------------------------------------------ one flow's session


@dataclass(slots=True)
class FlowProxy:
    """One flow's session on a `ProxyProcess`: the URLs to hand the agent, its event log,
    and `stop`. Use as a context manager, or call `stop` yourself."""

    options: ProxyOptions
    port: int
    reverse_ports: dict[str, int]
    startup_seconds: float
    process: ProxyProcess
    _sock: socket.socket
    _stopped: bool = False
    _tail: EventTail | None = None
    #: A pool of one (`start_proxy`): closed with the session.
    _owner: ProxyPool | None = None

    @property
    def url(self) -> str:
        """The explicit-proxy URL handed to the agent as HTTPS_PROXY."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def reverse_urls(self) -> dict[str, str]:
        """Model host -> the plain-http base URL of its reverse listener."""
        return {h: f"http://127.0.0.1:{p}" for h, p in self.reverse_ports.items()}

    def events(self) -> list[dict[str, Any]]:
        """Every complete event written to the flow's log so far (each line parsed once)."""
        if self._tail is None:
            assert self.options.report is not None  # a session always has its own log
            self._tail = EventTail(self.options.report)
        return self._tail.read()

    def is_alive(self) -> bool:
        """True while the proxy runs and the session is open."""
        return not self._stopped and self.process.is_alive()

    def stderr_tail(self) -> str:
        """The last few KB of the proxy's output."""
        return self.process.stderr_tail()

    def stop(self, timeout: float = 10.0) -> None:
        """Close the session: the proxy runs its ``done`` chain (the recording is written, the
        ``done`` event logged) and removes the flow's listeners. A proxy that does not answer
        within ``timeout`` is killed, so the next flow gets a new one."""
        if self._stopped:
            return
        self._stopped = True
        try:
            if self.process.is_alive():
                self._sock.settimeout(timeout)
                _send(self._sock, {"op": "close"})
                reply = _receive(self._sock)
                if not reply.get("ok"):
                    raise ProxyError(str(reply.get("error")))
        except (OSError, ProxyError, ValueError):
            self.process.kill()
        finally:
            self._sock.close()
            if self._owner is not None:
                self._owner.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


# ------------------------------------------------------------------ the process


@dataclass(frozen=True, slots=True)
class ProxyKind:
    """What one mitmdump is started with, so which flows it can serve: the CA folder, whether
    it dials upstream lazily (a mitmproxy option for the whole process:
    `ProxyOptions.dials_lazily`), and the ``-s`` script (None: the bundled addon)."""

    confdir: Path
    lazy: bool
    script: Path | None = None

    @property
    def key(self) -> tuple[str, bool, str | None]:
        """The kind as `flowproof.runner.spawn` takes it (paths as strings)."""
        return str(self.confdir), self.lazy, str(self.script) if self.script is not None else None

    @classmethod
    def of(cls, key: tuple[str, bool, str | None]) -> ProxyKind:
        confdir, lazy, script = key
        return cls(Path(confdir), lazy, Path(script) if script is not None else None)


@dataclass(slots=True)
class ProxyProcess:
    """A running mitmdump that serves flows through sessions."""

    kind: ProxyKind
    spawned: Spawned
    startup_seconds: float = 0.0
    _ready: bool = False

    @classmethod
    def start(cls, kind: ProxyKind, timeout: float = 20.0) -> ProxyProcess:
        """Start mitmdump and wait for its ``ready`` event; `ProxyError` with its output tail
        when it exits early or is not ready within ``timeout`` (nothing is left running)."""
        proxy = cls.spawn(kind)
        proxy.wait_ready(timeout)
        return proxy

    @classmethod
    def spawn(cls, kind: ProxyKind) -> ProxyProcess:
        """Start mitmdump and return at once; `wait_ready` waits for its ``ready`` event."""
        executable = mitmdump_executable()  # its own error message when there is none
        try:
            spawned = spawn.spawn(*kind.key)
        except OSError as e:
            raise ProxyError(f"could not start mitmdump ({executable}): {e}") from None
        return cls(kind, spawned)

    @property
    def process(self) -> subprocess.Popen[bytes]:
        return self.spawned.process

    @property
    def control(self) -> Path:
        return Path(self.spawned.control)

    def wait_ready(self, timeout: float = 20.0) -> None:
        """Wait for the ``ready`` event of a `spawn`ed proxy (at once when it came already);
        `ProxyError` with its output tail when it exits early or is not ready within
        ``timeout`` (the process is killed then)."""
        if self._ready:
            return
        process = self.process
        tail = EventTail(Path(self.spawned.scratch.name) / "proxy.jsonl")
        deadline = time.monotonic() + timeout
        while not any(e.get("event") == "ready" for e in tail.read()):
            if process.poll() is not None or time.monotonic() >= deadline:
                output = self.stderr_tail()
                self.kill()
                if process.returncode is not None and process.returncode != -signal.SIGKILL:
                    raise ProxyError(
                        f"the proxy (mitmdump) exited with code {process.returncode} — "
                        f"its last output: {output or '(none)'}"
                    )
                raise ProxyError(
                    f"the proxy (mitmdump) was not ready within {timeout:g}s — "
                    f"its last output: {output or '(none)'}"
                )
            time.sleep(0.01)
        self._ready = True
        self.startup_seconds = time.monotonic() - self.spawned.started

    @property
    def pid(self) -> int:
        return self.process.pid

    def is_alive(self) -> bool:
        return self.process.poll() is None

    def stderr_tail(self) -> str:
        """The last few KB of mitmdump's stdout/stderr."""
        try:
            data = (Path(self.spawned.scratch.name) / "mitmdump.log").read_bytes()
        except OSError:
            return ""
        return data[-_STDERR_TAIL:].decode("utf-8", "replace").strip()

    def open(self, options: ProxyOptions, timeout: float = 20.0) -> FlowProxy:
        """Open a session for one flow; `ProxyError` with the proxy's reason when it cannot."""
        started = time.monotonic()
        if options.report is None:
            raise ProxyError("a flow's proxy session needs an event log (ProxyOptions.report)")
        options.report.parent.mkdir(parents=True, exist_ok=True)
        options.report.unlink(missing_ok=True)  # a stale log would read as this flow's
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(str(self.control))
            _send(sock, session_request(options))
            reply = _receive(sock)
        except (OSError, ValueError) as e:
            sock.close()
            alive = self.is_alive()
            self.kill()
            if not alive:
                raise ProxyError(
                    f"the proxy (mitmdump) exited with code {self.process.returncode} — "
                    f"its last output: {self.stderr_tail() or '(none)'}"
                ) from None
            raise ProxyError(f"the proxy did not open the flow's session ({e})") from None
        except ProxyError:
            sock.close()
            self.kill()
            raise
        if not reply.get("ok"):
            sock.close()
            raise ProxyError(f"the proxy refused the flow: {reply.get('error')}")
        from flowproof.options import REVERSE_HOSTS  # see session_request

        port = 0
        reverse: dict[str, int] = {}
        for entry in reply.get("listen") or []:
            mode, entry_port = str(entry.get("mode", "")), int(entry.get("port", 0))
            if mode.startswith("regular"):
                port = port or entry_port
            for host in REVERSE_HOSTS:
                if mode.startswith(f"reverse:https://{host}@"):
                    reverse[host] = entry_port
        if not port:
            sock.close()
            raise ProxyError("the proxy's answer does not say which port the flow's proxy listens on")
        return FlowProxy(options, port, reverse, time.monotonic() - started, self, sock)

    def kill(self) -> None:
        """SIGKILL the proxy's process group (whatever mitmdump spawned dies with it) and remove
        its scratch folder (idempotent)."""
        self.spawned.kill()


class ProxyPool:
    """The proxies of one run (or one pytest worker), one per `ProxyKind`, started on first use.

    Thread-safe (``-j N`` opens sessions from several threads). `starts` counts the
    proxies started, `pids` their process ids; `close` kills them all. ``script``
    loads another addon script than ``$FLOWPROOF_ADDON_SCRIPT`` or the bundled one.
    """

    def __init__(
        self,
        start: Callable[[ProxyKind, float], ProxyProcess] = ProxyProcess.start,
        script: Path | None = None,
    ) -> None:
        self._start = start
        self._script = script
        self._lock = threading.Lock()
        self._proxies: dict[ProxyKind, ProxyProcess] = {}
        self.starts = 0
        self.pids: list[int] = []

    def kind(self, options: ProxyOptions, confdir: Path) -> ProxyKind:
        """The kind of proxy that serves ``options``."""
        override = os.environ.get("FLOWPROOF_ADDON_SCRIPT")
        script = self._script or (Path(override) if override else None)
        return ProxyKind(Path(confdir), options.dials_lazily, script)

    def open(self, options: ProxyOptions, confdir: Path, timeout: float = 20.0) -> FlowProxy:
        """A session for ``options`` on the proxy of its kind (started when there is none, or
        when the last one died). Its ``startup_seconds`` include the proxy's start."""
        key = self.kind(options, confdir)
        started = time.monotonic()
        with self._lock:
            proxy = self._proxies.get(key)
            if proxy is None or not proxy.is_alive():
                if proxy is not None:
                    proxy.kill()
                proxy = _take_early(key)
                if proxy is not None:
                    proxy.wait_ready(timeout)
                else:
                    proxy = self._start(key, timeout)
                self._proxies[key] = proxy
                self.starts += 1
                self.pids.append(proxy.pid)
        session = proxy.open(options, timeout)
        session.startup_seconds = time.monotonic() - started
        return session

    def close(self) -> None:
        """Kill every proxy of the pool (their sessions are closed by then)."""
        with self._lock:
            proxies, self._proxies = list(self._proxies.values()), {}
        for proxy in proxies:
            proxy.kill()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def start_proxy(options: ProxyOptions, confdir: Path, *, timeout: float = 20.0,
                script: Path | None = None) -> FlowProxy:
    """A proxy of the flow's own: a pool of one, closed (the process killed) when the session
    stops. Raises `ProxyError`; nothing is left running then."""
    pool = ProxyPool(script=script)
    try:
        session = pool.open(options, confdir, timeout)
    except BaseException:
        pool.close()
        raise
    session._owner = pool
    return session
