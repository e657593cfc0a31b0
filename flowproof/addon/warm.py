"""One proxy, many flows: a session per flow, found by the listener a connection arrived on.

`flowproof-run` over several specs (and the pytest plugin, per worker) starts one
mitmdump with ``flowproof_control`` naming a Unix socket, and opens one session
there per flow. A session is what a single-flow proxy builds in ``configure`` —
the flow's typed options, event log, replayer, MCP boundary and mode concern
(`flowproof.addon.core.FlowState`) — plus the listeners it owns: an explicit
proxy, and reverse listeners for the base-URL and MCP routes. mitmproxy's
``mode`` option is a list that may change on the running master, so opening a
session adds its listeners and closing it removes them. Every flow is handed to
the session whose listener its client connected to (``client_conn.sockname``);
a request on no open session's listener is answered 502 and never forwarded.

The protocol (docs/runner.md, "One warm proxy for many flows"): one JSON object
a line, one connection per session.

- ``{"op": "open", "options": {…}}`` → ``{"ok": true, "listen": [{"mode", "host", "port"}, …]}``
  or ``{"ok": false, "error": "…"}``. The options are `flowproof.options.to_json` of the
  flow's `ProxyOptions`: every ``flowproof_*`` option by field name, the spec's data
  resolved (tool results, volatile rules, MCP answers: the spec itself is never read
  here), and ``listeners`` (``["regular", "reverse:https://api.openai.com", …]``; one
  without ``@PORT`` gets a free port).
- ``{"op": "close"}`` → ``{"ok": true}`` once the session's ``done`` chain has
  run (the recording is written, the ``done`` event logged), as a single-flow
  proxy's shutdown would.

A connection that ends without ``close`` aborts its session: its listeners go,
and nothing more is written (its runner gave up on the flow, and a recording
written after the runner discarded the staging file would be left behind).

mitmproxy runs every hook on one event loop, shared by all sessions. A flow
whose hooks may run code the user wrote — its compare handler, a volatile
pattern of its spec's own (`AddonConfig.runs_user_code`) — or that compares
therefore runs them on the session's own worker thread, one hook at a time and in the order
mitmproxy delivered them, so a session's state needs no lock and no flow's
work can hold another flow's session or this control server. Every other
flow's hooks do only flowproof's own work (a hash, a lookup, assembling a
recording: linear in the body, as in a single-flow proxy) and run on the loop
itself while nothing of their session is queued: the trip to a worker and back
was most of what a replayed call cost, and it delayed a recorded stream's first
chunk. Writing the cassette (``done``) always runs on the worker. (The
WebSocket hooks keep the order but run on the loop, where mitmproxy injects
replayed frames; their work per frame is a hash and a lookup, and a volatile
pattern there is time-bounded.) A ``close`` waits at most `CLOSE_WAIT` for the
work still queued (a handler that never returns); then the session is aborted
with an ``error`` event saying what was still running.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mitmproxy import ctx, exceptions, http
from mitmproxy.proxy import mode_specs

from flowproof.addon.shared import JSON_HEADERS, Shared, log
from flowproof.log_events import ErrorEvent, ErrorKind, Listener, ReadyEvent
from flowproof.options import Mode, ProxyOptions, from_json
from flowproof.ports import free_port

__all__ = ["CLOSE_WAIT", "BuildState", "Session", "WarmSessions"]

#: Bound on one control line (options are paths and short strings; env may be a few KB).
_MAX_LINE = 1 << 20
#: Attempts at binding a session's listeners on fresh free ports before giving up.
_BIND_ATTEMPTS = 3
#: Hooks a session runs on the event loop rather than its worker (see `Session.hook`).
_ON_LOOP = frozenset({"websocket_start", "websocket_message", "websocket_end"})
#: Hooks that run on the worker even in a session without user code: ``done`` writes the
#: cassette (megabytes for a long recording), which must not stall the other sessions.
_ON_WORKER = frozenset({"done"})
#: How long a ``close`` waits for a session's queued work before aborting it: below the
#: runner's own wait for the reply (`runner.proxy.FlowProxy.stop`, 10 s), so the runner
#: hears why instead of giving the whole proxy up.
CLOSE_WAIT = 8.0


class _State(Protocol):
    """`flowproof.addon.core.FlowState`, seen from here (core imports this module)."""

    shared: Shared

    @property
    def addons(self) -> list[object]: ...


BuildState = Callable[[ProxyOptions], _State]


@dataclass(slots=True)
class Session:
    """One flow in a warm proxy: its state, and the listeners (mode specs and ports) it owns."""

    number: int
    state: _State
    specs: tuple[str, ...] = ()
    ports: frozenset[int] = frozenset()
    closed: bool = False
    listen: list[Listener] = field(default_factory=list)
    #: The hook running on the worker right now (``Compare.response``), for the abort message.
    running: str | None = None
    #: Every hook goes to the worker (a flow that may run user code), not only ``done``.
    #: `WarmSessions` sets it from the flow's options; the default is the safe one.
    offload: bool = True
    _worker: ThreadPoolExecutor | None = None
    _order: asyncio.Lock | None = None
    #: Hooks waiting for or holding ``_order``: while any is, a new hook queues behind them.
    _queued: int = 0

    @classmethod
    def of(cls, number: int, state: _State) -> Session:
        """Session ``number`` for ``state``, on the worker when its flow may run user code or
        compares: the compare engine's field diff of two bodies is not bounded by their size
        the way a hash is, and a live call's round trip dwarfs the hop."""
        config = state.shared.config
        return cls(number, state, offload=config.runs_user_code or config.mode is Mode.COMPARE)

    def run_hook(self, name: str, *args: object) -> None:
        """Invoke hook ``name`` on the session's chain in order, as mitmproxy would: one
        failing child is logged and does not stop the others."""
        for child in self.state.addons:
            hook = getattr(child, name, None)
            if hook is None:
                continue
            self.running = f"{type(child).__name__}.{name}"
            try:
                hook(*args)
            except Exception as e:  # noqa: BLE001 — mitmproxy's own policy for a failing hook
                log.error("session_hook_failed", session=self.number, hook=name, error=repr(e))
            finally:
                self.running = None

    def idle(self, name: str, flow: object) -> bool:
        """True when no child of the chain would act on hook ``name`` for ``flow``: each child
        that has the hook says so through its own ``idle(name, flow)`` (one without ``idle``
        always acts). Asked on the event loop, so a child reads there only what ``flow``'s own
        earlier hooks wrote (they have all returned) or a set it only ever adds to."""
        for child in self.state.addons:
            if getattr(child, name, None) is None:
                continue
            idle = getattr(child, "idle", None)
            if idle is None or not idle(name, flow):
                return False
        return True

    async def hook(self, name: str, *args: object) -> None:
        """`run_hook` after the session's earlier hooks (one at a time, in arrival order), on
        the session's worker thread; returns when it has run. The event loop serves every
        other session meanwhile. The WebSocket hooks run on the loop itself: a replayed frame
        is injected there (mitmproxy's ``inject.websocket`` makes a task on the running loop).

        A flow's hook that no child acts on (`idle`: a replayed call's ``responseheaders`` and
        ``response``, a host's second request) returns at once: the trip to the worker and
        back is most of what such a hook would cost, and there is nothing to keep in order.
        In a session that runs no user code (not `offload`), a hook other than ``done`` runs
        on the loop at once when nothing of the session is queued: it cannot overtake an
        earlier hook, and it finishes before the loop serves anything else."""
        if args and self.idle(name, args[0]):
            return
        on_loop = name in _ON_LOOP or (not self.offload and name not in _ON_WORKER)
        if on_loop and self._queued == 0:
            self.run_hook(name, *args)
            return
        if self._order is None:
            self._order = asyncio.Lock()
        self._queued += 1
        try:
            async with self._order:
                if on_loop:
                    self.run_hook(name, *args)
                    return
                if self._worker is None:
                    self._worker = ThreadPoolExecutor(1, thread_name_prefix=f"flowproof-session-{self.number}")
                await asyncio.get_running_loop().run_in_executor(self._worker, self.run_hook, name, *args)
        finally:
            self._queued -= 1

    async def drained(self, timeout: float) -> bool:
        """True once the hooks that arrived before now have run, False if they are still
        running after ``timeout`` seconds."""
        if self._order is None:
            return True
        try:
            await asyncio.wait_for(self._order.acquire(), timeout)
        except TimeoutError:
            return False
        self._order.release()
        return True

    def release(self) -> None:
        """Let the worker thread go once whatever it runs returns (it is never waited for)."""
        if self._worker is not None:
            self._worker.shutdown(wait=False, cancel_futures=True)


def _with_port(spec: str, taken: set[int]) -> tuple[str, bool]:
    """``spec`` with ``@PORT`` (a free one when it had none), and whether the port was chosen here.

    Two listeners may not both ask mitmproxy for port 0 (it refuses duplicate addresses),
    so the port is picked here; a bind that loses the race is retried on another. A port in
    ``taken`` (the listeners the proxy has or is setting up) is never picked, and the one
    picked joins it: the kernel calls a port free until its listener is bound, and a session
    opened side by side may not have bound its own yet (mitmproxy then refuses the whole
    mode list, and the flow failed to open)."""
    try:
        mode = mode_specs.ProxyMode.parse(spec)
    except ValueError as e:
        raise exceptions.OptionsError(f"bad listener {spec!r}: {e}") from None
    if mode.custom_listen_port is not None:
        return spec, False
    port = free_port(taken)
    taken.add(port)
    return f"{spec}@{port}", True


def _ports_of(modes: Sequence[str]) -> set[int]:
    """The ports the listeners ``modes`` name."""
    ports = set()
    for spec in modes:
        try:
            port = mode_specs.ProxyMode.parse(spec).custom_listen_port
        except ValueError:
            continue
        if port is not None:
            ports.add(port)
    return ports


class WarmSessions:
    """The router (the root addon's only child in a warm proxy) and the control server."""

    def __init__(self, control: Path, build: BuildState) -> None:
        self.control = control
        self._build = build
        self.by_port: dict[int, Session] = {}
        self._open_sessions: list[Session] = []
        self._numbers = 0
        self._server: asyncio.AbstractServer | None = None
        self._sock: socket.socket | None = None

    # ------------------------------------------------------------------ routing

    @property
    def open_sessions(self) -> tuple[Session, ...]:
        """The sessions open right now, oldest first."""
        return tuple(self._open_sessions)

    def session_of(self, client: Any) -> Session | None:
        """The open session whose listener ``client`` (a client connection) connected to."""
        sockname = getattr(client, "sockname", None)
        if not sockname:
            return None
        session = self.by_port.get(int(sockname[1]))
        if session is None or session.closed:
            return None
        return session

    async def request(self, flow: http.HTTPFlow) -> None:
        session = self.session_of(flow.client_conn)
        if session is None:
            if flow.response is None and flow.error is None:
                # Never forwarded: in replay that would reach the real API with the agent's key.
                flow.response = http.Response.make(
                    502,
                    json.dumps({"error": {"message": "flowproof: no flow is open on this listener"}}),
                    JSON_HEADERS,
                )
            return
        await session.hook("request", flow)

    async def http_connect(self, flow: http.HTTPFlow) -> None:
        await self._dispatch("http_connect", flow)

    async def http_connect_error(self, flow: http.HTTPFlow) -> None:
        await self._dispatch("http_connect_error", flow)

    async def requestheaders(self, flow: http.HTTPFlow) -> None:
        await self._dispatch("requestheaders", flow)

    async def responseheaders(self, flow: http.HTTPFlow) -> None:
        await self._dispatch("responseheaders", flow)

    async def response(self, flow: http.HTTPFlow) -> None:
        await self._dispatch("response", flow)

    async def error(self, flow: http.HTTPFlow) -> None:
        await self._dispatch("error", flow)

    async def websocket_start(self, flow: http.HTTPFlow) -> None:
        await self._dispatch("websocket_start", flow)

    async def websocket_message(self, flow: http.HTTPFlow) -> None:
        await self._dispatch("websocket_message", flow)

    async def websocket_end(self, flow: http.HTTPFlow) -> None:
        await self._dispatch("websocket_end", flow)

    async def _dispatch(self, name: str, flow: http.HTTPFlow) -> None:
        session = self.session_of(flow.client_conn)
        if session is not None:
            await session.hook(name, flow)

    # ------------------------------------------------------------------ control server

    def start(self) -> None:
        """Listen on the control socket (bound now, so the runner may connect at once)."""
        self.control.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(self.control))
        os.chmod(self.control, 0o600)  # only the runner's user may open flows (they write files)
        sock.listen(64)
        self._sock = sock
        loop = asyncio.get_running_loop()
        loop.create_task(self._serve(sock))

    async def _serve(self, sock: socket.socket) -> None:
        self._server = await asyncio.start_unix_server(self._handle, sock=sock, limit=_MAX_LINE)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session: Session | None = None
        try:
            while True:
                try:
                    line = await reader.readline()
                except (ValueError, ConnectionError):
                    break  # a line over the limit, or the runner went away
                if not line:
                    break
                try:
                    message = json.loads(line)
                    op = message.get("op") if isinstance(message, dict) else None
                except ValueError:
                    op = None
                if op == "open" and session is None:
                    try:
                        session = await self._open(message)
                        reply: dict[str, Any] = {
                            "ok": True,
                            "listen": [
                                {"mode": e.mode, "host": e.host, "port": e.port} for e in session.listen
                            ],
                        }
                    except exceptions.OptionsError as e:
                        reply = {"ok": False, "error": str(e)}
                    except Exception as e:  # noqa: BLE001 — one flow's problem must not stop the proxy
                        log.error("session_open_failed", error=repr(e))
                        reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
                elif op == "close" and session is not None:
                    await self._close(session, finish=True)
                    reply = {"ok": True}
                else:
                    reply = {"ok": False, "error": f"unexpected control message {op!r}"}
                writer.write(json.dumps(reply).encode() + b"\n")
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            if session is not None and not session.closed:
                await self._close(session, finish=False)
            writer.close()

    # ------------------------------------------------------------------ sessions

    async def _open(self, message: Mapping[str, Any]) -> Session:
        try:
            options = from_json(message.get("options"))
        except ValueError as e:
            raise exceptions.OptionsError(f"Cannot parse {e}") from None
        # Loading the flow's cassette (seconds for a big one) runs off the loop, like its hooks.
        state = await asyncio.to_thread(self._build, options)
        lazy = "connection_strategy" in ctx.options and ctx.options.connection_strategy == "lazy"
        if options.dials_lazily != lazy:
            # One strategy per process: a flow that needs the other one gets its own proxy.
            self._abort_state(state)
            raise exceptions.OptionsError(
                f"this warm proxy connects upstream {'lazily' if lazy else 'eagerly'}, which a "
                f"{state.shared.config.mode.value} flow with these upstreams must not do — "
                "open it on a proxy started for its mode"
            )
        self._numbers += 1
        session = Session.of(self._numbers, state)
        try:
            await self._listen(session, list(options.listeners))
        except exceptions.OptionsError:
            self._abort_state(state)
            raise
        for port in session.ports:
            self.by_port[port] = session
        self._open_sessions.append(session)
        state.shared.events.write(ReadyEvent(tuple(session.listen), state.shared.config.mode.value))
        log.info("session_opened", session=session.number, listeners=len(session.listen))
        return session

    async def _listen(self, session: Session, requested: list[str]) -> None:
        """Add the session's listeners to the running proxy; retry a chosen port that was taken."""
        proxyserver = ctx.master.addons.get("proxyserver")
        for attempt in range(_BIND_ATTEMPTS):
            # No await until the mode list holds these: a session opened meanwhile sees them.
            taken = _ports_of(ctx.options.mode)
            chosen = [_with_port(spec, taken) for spec in requested]
            specs = [spec for spec, _ in chosen]
            try:
                ctx.options.update(mode=[*ctx.options.mode, *specs])
            except exceptions.OptionsError as e:
                raise exceptions.OptionsError(f"cannot add the flow's listeners: {e}") from None
            await proxyserver.setup_servers()
            failed = []
            listen: list[Listener] = []
            for spec in specs:
                try:
                    instance = proxyserver.servers[spec]
                except KeyError:
                    failed.append(spec)
                    continue
                if instance.last_exception is not None or not instance.is_running:
                    failed.append(spec)
                    continue
                for addr in instance.listen_addrs:
                    entry = Listener(instance.mode.full_spec, str(addr[0]), int(addr[1]))
                    if entry not in listen:
                        listen.append(entry)
            if not failed:
                session.specs = tuple(specs)
                session.ports = frozenset(e.port for e in listen)
                session.listen = listen
                return
            await self._remove(specs)
            fixed = [spec for spec, mine in chosen if not mine and spec in failed]
            if fixed or attempt == _BIND_ATTEMPTS - 1:
                raise exceptions.OptionsError(
                    f"cannot listen for the flow on {', '.join(failed)} (the port is taken?)"
                )

    async def _remove(self, specs: tuple[str, ...] | list[str]) -> None:
        gone = set(specs)
        ctx.options.update(mode=[m for m in ctx.options.mode if m not in gone])
        proxyserver = ctx.master.addons.get("proxyserver")
        await proxyserver.setup_servers()

    async def _close(self, session: Session, *, finish: bool) -> None:
        """Finish (the ``done`` chain: recording written, ``done`` logged) or abort a session,
        then remove its listeners. Flows still on its connections are refused from here on."""
        if session.closed:
            return
        session.closed = True
        if finish and not await session.drained(CLOSE_WAIT):
            # User code that does not return (a compare handler): its flow cannot finish, and
            # waiting longer would make its runner give up the whole proxy.
            text = (
                f"the flow's {session.running or 'work'} hook was still running {CLOSE_WAIT:g}s "
                "after the agent finished, so its session was closed unfinished and nothing "
                "was recorded — make the compare handler (or the volatile patterns) return promptly"
            )
            session.state.shared.events.write(ErrorEvent(text, ErrorKind.SESSION))
            log.error("session_close_timed_out", session=session.number, running=session.running)
            finish = False
        if finish:
            await session.hook("done")
        else:
            self._abort_state(session.state)
        session.release()
        for port in session.ports:
            if self.by_port.get(port) is session:
                del self.by_port[port]
        if session in self._open_sessions:
            self._open_sessions.remove(session)
        log.info("session_closed", session=session.number, finished=finish)
        await self._remove(session.specs)

    @staticmethod
    def _abort_state(state: _State) -> None:
        """Drop a session without its ``done`` chain: stop what it runs, close its log."""
        for child in state.addons:
            hold = getattr(child, "hold_server", None)
            if hold is not None:
                hold.close()
        state.shared.events.close()

    def shutdown(self) -> None:
        """At proxy shutdown: every session still open is aborted (its runner is gone)."""
        for session in list(self._open_sessions):
            session.closed = True
            self._abort_state(session.state)
            session.release()
        self._open_sessions.clear()
        self.by_port.clear()
        if self._server is not None:
            self._server.close()
        if self._sock is not None:
            self._sock.close()
        self.control.unlink(missing_ok=True)
