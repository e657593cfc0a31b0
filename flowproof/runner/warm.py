"""One warm proxy for many flows: start mitmdump once, open a session per flow.

A cold flow (`runner.proxy.start_proxy`) pays a whole mitmdump start and stop.
`ProxyPool` starts one mitmdump per kind of proxy a run needs — its CA folder
and whether it dials upstream lazily (replay, or mapped upstreams) — and opens a
session on it for each flow over a Unix socket (`flowproof.addon.warm` has the
protocol): the flow gets its own listeners, event log, replayer or recorder,
exactly the options a cold proxy would get on its command line. Closing the
session runs what a cold proxy's shutdown runs (the recording is written, the
``done`` event logged) and removes its listeners.

`WarmSession` has the interface of `runner.proxy.RunningProxy` that a flow uses
(``url``, ``reverse_urls``, ``events``, ``stop``), so `runner.flow` drives either.
A proxy that died, or whose session would not close, is dropped: the next flow
starts a new one. The process is started like a cold proxy: own process group,
killed by the kernel if the runner dies (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from flowproof.errors import ProxyError
from flowproof.runner.eventtail import EventTail
from flowproof.runner.proxy import (
    ProxyEndpoints,
    ProxySettings,
    _die_with_parent,
    _signal_group,
    addon_script_path,
    mitmdump_executable,
    read_events,
    scratch_prefix,
    sweep_scratch,
)

__all__ = ["ProxyPool", "WarmSession", "WarmProxy", "session_request", "warm_enabled", "warm_key"]

_STDERR_TAIL = 4000
#: A Unix socket path must fit in sun_path (108 bytes on Linux).
_MAX_SOCKET_PATH = 100
_PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY", "all_proxy")


def warm_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """False when ``FLOWPROOF_WARM_PROXY=0``: every flow then starts its own proxy, as a
    single flow does (a way back if a warm proxy ever misbehaves, and the benchmark's
    baseline)."""
    env = os.environ if environ is None else environ
    return env.get("FLOWPROOF_WARM_PROXY", "1").strip() != "0"


def warm_key(settings: ProxySettings) -> tuple[str, bool] | None:
    """Which warm proxy can serve ``settings``: (its CA folder, lazy upstream dialling), or
    None when the flow needs a cold proxy of its own — a fixed port (an agent started by
    hand), another addon script (``$FLOWPROOF_ADDON_SCRIPT``, tests), or mitmdump
    arguments a session cannot carry."""
    if settings.port or settings.addon_script is not None or os.environ.get("FLOWPROOF_ADDON_SCRIPT"):
        return None
    if _extra(settings.extra_args) is None:
        return None
    lazy = settings.mode == "replay" or bool(settings.upstream)
    return str(settings.confdir), lazy


def _extra(args: Sequence[str]) -> tuple[list[str], list[str]] | None:
    """The listeners and ``flowproof_mcp`` values in ``extra_args`` (`runner.mcp.proxy_args`),
    or None for anything else."""
    listeners: list[str] = []
    mcp: list[str] = []
    items = list(args)
    if len(items) % 2:
        return None
    for flag, value in zip(items[::2], items[1::2], strict=True):
        if flag == "--mode":
            if value != "regular":  # every session has its explicit proxy first anyway
                listeners.append(value)
        elif flag == "--set" and value.startswith("flowproof_mcp="):
            mcp.append(value.removeprefix("flowproof_mcp="))
        else:
            return None
    return listeners, mcp


def session_request(settings: ProxySettings) -> dict[str, Any]:
    """The ``open`` message for ``settings``: the options a cold proxy gets as ``--set``."""
    extra = _extra(settings.extra_args)
    if extra is None:
        raise ProxyError("these proxy arguments need a proxy of their own")  # warm_key said so
    more_listeners, mcp = extra
    options: dict[str, Any] = {
        "mode": settings.mode,
        "cassette": str(settings.cassette),
        "report": str(settings.report),
        "route": settings.route,
        "spec": str(settings.spec) if settings.spec is not None else "",
        "upstream": list(settings.upstream),
        "extra_hosts": list(settings.extra_hosts),
        "compare_handler": settings.compare_handler or "",
        "transport": settings.transport or "",
        "home": settings.home or "",
        "cwd": str(settings.cwd) if settings.cwd is not None else "",
        "mcp": mcp,
    }
    listeners = ["regular", *(f"reverse:https://{h}" for h in settings.reverse_hosts), *more_listeners]
    # The spec the proxy loads resolves ${VAR} in the runner's environment, as a cold
    # proxy (which inherits it) would, plus the flow's own additions.
    env = {k: v for k, v in os.environ.items() if k not in _PROXY_VARIABLES}
    env.update(dict(settings.env))
    return {"op": "open", "options": options, "listeners": listeners, "env": env}


@dataclass(slots=True)
class WarmSession(ProxyEndpoints):
    """One flow's session on a `WarmProxy`; used like `runner.proxy.RunningProxy`."""

    settings: ProxySettings
    port: int
    reverse_ports: dict[str, int]
    startup_seconds: float
    proxy: WarmProxy
    _sock: socket.socket
    _stopped: bool = field(default=False)
    _tail: EventTail | None = None

    def is_alive(self) -> bool:
        """True while the proxy runs and the session is open."""
        return not self._stopped and self.proxy.is_alive()

    def stderr_tail(self) -> str:
        """The last few KB of the proxy's output."""
        return self.proxy.stderr_tail()

    def stop(self, timeout: float = 10.0) -> int | None:
        """Close the session: the proxy runs its ``done`` chain (the recording is written, the
        ``done`` event logged) and removes its listeners. A proxy that does not answer in
        ``timeout`` is killed, so the next flow gets a new one."""
        if self._stopped:
            return None
        self._stopped = True
        try:
            if self.proxy.is_alive():
                self._sock.settimeout(timeout)
                _send(self._sock, {"op": "close"})
                reply = _receive(self._sock)
                if not reply.get("ok"):
                    raise ProxyError(str(reply.get("error")))
        except (OSError, ProxyError, ValueError):
            self.proxy.kill()
        finally:
            self._sock.close()
        return None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


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


@dataclass(slots=True)
class WarmProxy:
    """A running mitmdump that serves flows through sessions."""

    process: subprocess.Popen[bytes]
    control: Path
    log: Path
    startup_seconds: float
    _scratch: tempfile.TemporaryDirectory[str]
    _socket_dir: Path | None = None
    sessions_opened: int = 0

    @classmethod
    def start(cls, confdir: str, lazy: bool, timeout: float = 20.0) -> WarmProxy:
        """Start mitmdump with a control socket and wait for its ``ready`` event."""
        started = time.monotonic()
        sweep_scratch()
        scratch = tempfile.TemporaryDirectory(prefix=scratch_prefix("proxy"))
        scratch_path = Path(scratch.name)
        socket_dir: Path | None = None
        control = scratch_path / "control.sock"
        if len(str(control)) > _MAX_SOCKET_PATH:
            # A long $TMPDIR: the socket alone goes to a short private folder.
            socket_dir = Path(tempfile.mkdtemp(prefix=scratch_prefix("proxy"), dir="/tmp"))
            control = socket_dir / "control.sock"
        log = scratch_path / "proxy.jsonl"
        stderr_path = scratch_path / "mitmdump.log"
        argv = [
            mitmdump_executable(), "-q", "-s", str(addon_script_path(scratch_path)),
            "--listen-host", "127.0.0.1", "--listen-port", "0",
            "--set", f"confdir={confdir}",
            "--set", f"flowproof_control={control}",
            "--set", f"flowproof_report={log}",
        ]
        if lazy:
            argv += ["--set", "connection_strategy=lazy"]
        env = {k: v for k, v in os.environ.items() if k not in _PROXY_VARIABLES}
        with stderr_path.open("wb") as out:
            try:
                process = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True, env=env,
                    # The proxy must not outlive the runner, even one killed with SIGKILL.
                    preexec_fn=functools.partial(_die_with_parent, os.getpid()),
                )
            except OSError as e:
                scratch.cleanup()
                raise ProxyError(f"could not start mitmdump ({argv[0]}): {e}") from None
        proxy = cls(process, control, log, 0.0, scratch, socket_dir)
        deadline = time.monotonic() + timeout
        while not any(e.get("event") == "ready" for e in read_events(log)):
            if process.poll() is not None or time.monotonic() >= deadline:
                tail = proxy.stderr_tail()
                proxy.kill()
                if process.returncode is not None and process.returncode != -signal.SIGKILL:
                    raise ProxyError(
                        f"the proxy (mitmdump) exited with code {process.returncode} — "
                        f"its last output: {tail or '(none)'}"
                    )
                raise ProxyError(
                    f"the proxy (mitmdump) was not ready within {timeout:g}s — "
                    f"its last output: {tail or '(none)'}"
                )
            time.sleep(0.01)
        proxy.startup_seconds = time.monotonic() - started
        return proxy

    @property
    def pid(self) -> int:
        return self.process.pid

    def is_alive(self) -> bool:
        return self.process.poll() is None

    def stderr_tail(self) -> str:
        try:
            data = (Path(self._scratch.name) / "mitmdump.log").read_bytes()
        except OSError:
            return ""
        return data[-_STDERR_TAIL:].decode("utf-8", "replace").strip()

    def open(self, settings: ProxySettings, timeout: float = 20.0) -> WarmSession:
        """Open a session for one flow; `ProxyError` with the proxy's reason when it cannot."""
        started = time.monotonic()
        settings.report.parent.mkdir(parents=True, exist_ok=True)
        settings.report.unlink(missing_ok=True)  # a stale log would read as this flow's
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(str(self.control))
            _send(sock, session_request(settings))
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
            raise ProxyError(f"the warm proxy did not open the flow's session ({e})") from None
        except ProxyError:
            sock.close()
            self.kill()
            raise
        if not reply.get("ok"):
            sock.close()
            raise ProxyError(f"the proxy refused the flow: {reply.get('error')}")
        port = 0
        reverse: dict[str, int] = {}
        for entry in reply.get("listen") or []:
            mode, entry_port = str(entry.get("mode", "")), int(entry.get("port", 0))
            if mode.startswith("regular"):
                port = port or entry_port
            for host in settings.reverse_hosts:
                if mode.startswith(f"reverse:https://{host}@"):
                    reverse[host] = entry_port
        self.sessions_opened += 1
        return WarmSession(settings, port, reverse, time.monotonic() - started, self, sock)

    def kill(self) -> None:
        """SIGKILL the proxy's process group and remove its scratch folder (idempotent)."""
        _signal_group(self.process.pid, signal.SIGKILL)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not fail
            pass
        self._scratch.cleanup()
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)


class ProxyPool:
    """The warm proxies of one run (or one pytest worker), started on first use.

    Thread-safe (``-j N`` opens sessions from several threads). `starts` counts the
    proxies started; `close` kills them all.
    """

    def __init__(self, start: Callable[[str, bool, float], WarmProxy] = WarmProxy.start) -> None:
        self._start = start
        self._lock = threading.Lock()
        self._proxies: dict[tuple[str, bool], WarmProxy] = {}
        self.starts = 0
        self.pids: list[int] = []

    def open(self, settings: ProxySettings, timeout: float = 20.0) -> WarmSession:
        """A session for ``settings`` on the proxy of its kind (started when there is none,
        or when the last one died)."""
        key = warm_key(settings)
        if key is None:
            raise ProxyError("this flow needs a proxy of its own")  # callers check warm_key
        started = time.monotonic()
        with self._lock:
            proxy = self._proxies.get(key)
            if proxy is None or not proxy.is_alive():
                if proxy is not None:
                    proxy.kill()
                proxy = self._start(key[0], key[1], timeout)
                self._proxies[key] = proxy
                self.starts += 1
                self.pids.append(proxy.pid)
        session = proxy.open(settings, timeout)
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
