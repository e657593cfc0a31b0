"""Model APIs over a WebSocket: the frame transcript at record and compare, strict replay.

mitmproxy hands a WebSocket connection to its hooks as one flow: ``request`` for
the upgrade, then ``websocket_start``, one ``websocket_message`` per message
(the newest is ``flow.websocket.messages[-1]``; it is forwarded after the hook
unless dropped) and ``websocket_end``. A frame codec (`flowproof.wire.frames`)
says which client frame starts a turn and which server frame ends it.

- `LiveSockets` (record, compare): the upgrade goes upstream (mapped like any
  call of its host); each request frame goes through the hash path
  (`Shared.prepare_body`) and opens a `PendingFrames`; the server frames pass
  on to the client as they arrive (never held) while a copy is kept; the
  terminal frame makes the turn, handed to the concern like an HTTP turn
  (`LiveCalls.on_turn`). A client that closes first abandoned the turn; a server
  that closes first is an upstream fault (an error, nothing recorded). Each
  connection's transcript is a `RecordedConnection`.
- `ReplaySockets` (replay): the upgrade is accepted locally (101 from the
  hold server, `flowproof.addon.hold`: mitmproxy relays messages only between
  two connections), no model host is ever dialled; every client frame is dropped, a request frame is matched by
  `Replayer.decide` exactly like an HTTP body, and the recorded frames are
  injected back (an abandoned turn's frames, then nothing). A frame that matches
  nothing is a divergence, and the client gets the API's error frame (with
  ``status``: codex ends its turn on it at once).

A cassette recorded without WebSocket connections (before this existed, or with
``transport: http``) keeps being replayed the way it was recorded: the upgrade is
answered 426 and the agent falls back to HTTP.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mitmproxy import ctx, http
from wsproto.utilities import generate_accept_token

from flowproof.addon.hold import HOLD_HEADER, Held, HoldServer
from flowproof.addon.shared import Shared, log, refuse_websocket
from flowproof.cassette import LooseFrame, RecordedConnection, RecordedTurn, TurnRef
from flowproof.log_events import DivergenceEvent, ErrorEvent, ErrorKind, ReplayedTurnEvent, TurnEvent
from flowproof.recorder import PendingFrames
from flowproof.redact import filter_headers
from flowproof.replay import Miss
from flowproof.wire import codec_by_name
from flowproof.wire.base import Frame, FrameCodec

if TYPE_CHECKING:
    from flowproof.addon.live import LiveCalls

__all__ = ["LiveSockets", "ReplaySockets", "websocket_url"]


def websocket_url(flow: http.HTTPFlow) -> str:
    """The upgrade's URL as the agent asked for it, ``wss://`` (or ``ws://``)."""
    url = flow.request.pretty_url
    if url.startswith("https://"):
        return "wss://" + url[len("https://"):]
    if url.startswith("http://"):
        return "ws://" + url[len("http://"):]
    return url


def _path(url: str) -> str:
    rest = url.split("://", 1)[-1]
    return "/" + rest.split("/", 1)[1].split("?", 1)[0] if "/" in rest else "/"


def _newest(flow: http.HTTPFlow) -> tuple[Frame, bool] | None:
    """The message the hook is for: its frame, and whether the client sent it."""
    if flow.websocket is None or not flow.websocket.messages:
        return None
    message = flow.websocket.messages[-1]
    return Frame.of(message.content, message.is_text), message.from_client


@dataclass(slots=True)
class _Slot:
    """A turn's place in a live transcript, filled with its index once the turn is settled."""

    turn: int | None = None


@dataclass(slots=True)
class _LiveConnection:
    index: int
    frames: FrameCodec
    url: str
    headers: tuple[tuple[str, str], ...]
    transcript: list[_Slot | LooseFrame] = field(default_factory=list)
    current: PendingFrames | None = None
    slot: _Slot | None = None
    call_id: str = ""
    started: float = 0.0
    requests: int = 0

    def recorded(self, closed_by: str | None, close_code: int | None) -> RecordedConnection:
        entries: list[TurnRef | LooseFrame] = []
        for entry in self.transcript:
            if isinstance(entry, LooseFrame):
                entries.append(entry)
            elif entry.turn is not None:
                entries.append(TurnRef(entry.turn))
        return RecordedConnection(
            self.index, self.frames.name, self.url, filter_headers(self.headers, request=True), tuple(entries),
            closed_by, close_code,
        )


class LiveSockets:
    """Record and compare: forwards each model WebSocket and turns its frames into turns."""

    def __init__(self, owner: LiveCalls) -> None:
        self.owner = owner
        self.shared: Shared = owner.shared
        #: Upgrades forwarded, by flow id, until the connection opens.
        self._upgrades: dict[str, tuple[FrameCodec, str, tuple[tuple[str, str], ...]]] = {}
        self._open: dict[str, _LiveConnection] = {}
        self._opened = 0
        #: Every connection that ended, by index (`done` saves them with the turns).
        self.connections: dict[int, RecordedConnection] = {}

    def upgrade(self, flow: http.HTTPFlow, frames: FrameCodec) -> None:
        """An upgrade to a model API: remember what the agent asked for, then send it upstream."""
        req = flow.request
        self._upgrades[flow.id] = (frames, websocket_url(flow), tuple(req.headers.items(multi=True)))
        mapped = self.shared.map_upstream(req)
        log.debug("websocket_forwarded", flow_id=flow.id, provider=frames.name, mapped=mapped)

    # ------------------------------------------------------------------ hooks

    def websocket_start(self, flow: http.HTTPFlow) -> None:
        upgrade = self._upgrades.pop(flow.id, None)
        if upgrade is None:
            return
        frames, url, headers = upgrade
        self._open[flow.id] = _LiveConnection(self._opened, frames, url, headers)
        self._opened += 1

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        conn = self._open.get(flow.id)
        if conn is None:
            return
        newest = _newest(flow)
        if newest is None:
            return
        frame, from_client = newest
        try:
            if from_client:
                self._client_frame(flow, conn, frame)
            else:
                self._server_frame(flow, conn, frame)
        except Exception as e:  # noqa: BLE001 — see Shared.hook_failed
            self.shared.hook_failed(flow, "websocket_message", e)

    def _client_frame(self, flow: http.HTTPFlow, conn: _LiveConnection, frame: Frame) -> None:
        if not conn.frames.is_request(frame):
            conn.transcript.append(LooseFrame(True, frame))
            return
        if conn.current is not None:
            # A new request before the last one's terminal frame: the client gave up on it.
            self._settle(conn, abandoned_by_client=True)
        conn.requests += 1
        conn.call_id = f"{flow.id}.{conn.requests}"
        conn.started = time.time()
        codec = codec_by_name(conn.frames.name)
        prepared = self.shared.prepare_body(conn.call_id, codec, frame.content, _path(conn.url), at=conn.started)
        if prepared.rewrite_error is None and prepared.forwarded != frame.content:
            flow.websocket.messages[-1].content = prepared.forwarded  # type: ignore[union-attr]
        conn.current = PendingFrames.start(conn.frames, codec, conn.url, conn.headers, prepared, conn.index)
        conn.slot = _Slot()
        conn.transcript.append(conn.slot)

    def _server_frame(self, flow: http.HTTPFlow, conn: _LiveConnection, frame: Frame) -> None:
        if conn.current is None:
            conn.transcript.append(LooseFrame(False, frame))
            return
        if conn.current.add(frame):
            self._settle(conn)

    def _settle(self, conn: _LiveConnection, *, abandoned_by_client: bool = False) -> None:
        """Turn the current call into a turn (complete, or abandoned by its client)."""
        call, slot = conn.current, conn.slot
        conn.current = conn.slot = None
        if call is None or slot is None:
            return
        owner = self.owner
        turn = call.turn(owner.completed, self.shared.config.normalizer)
        owner.completed += 1
        self.shared.learn_calls(turn)
        slot.turn = turn.index
        ms = round((time.time() - conn.started) * 1000, 1)
        self.shared.events.write(TurnEvent(conn.call_id, owner.mode, turn, ms))
        if turn.abandoned:
            owner.on_abandoned(conn.call_id, turn)
        else:
            owner.on_turn(conn.call_id, turn)

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        conn = self._open.pop(flow.id, None)
        if conn is None:
            return
        ws = flow.websocket
        by_client = ws.closed_by_client if ws is not None else None
        code = ws.close_code if ws is not None else None
        if conn.current is not None:
            if by_client is False:
                # The upstream went away mid-answer: a fault, as for an HTTP stream it cut.
                reason = f"the server closed the connection (code {code})" if code else "the connection failed"
                text = f"the model call on the WebSocket to {conn.url} failed before it completed: {reason}"
                self.shared.events.write(ErrorEvent(text, ErrorKind.UPSTREAM, id=conn.call_id))
                log.warning("websocket_call_failed", flow_id=flow.id, provider=conn.frames.name)
                conn.current = conn.slot = None
            else:
                self._settle(conn, abandoned_by_client=True)
        closed_by = None if by_client is None else ("client" if by_client else "server")
        self.connections[conn.index] = conn.recorded(closed_by, code)

    def finish(self) -> None:
        """At shutdown: connections still open were left by their agent (it has exited)."""
        for flow_id, conn in list(self._open.items()):
            self._open.pop(flow_id, None)
            self._settle(conn, abandoned_by_client=True)
            self.connections[conn.index] = conn.recorded(None, None)

    def recorded(self) -> tuple[RecordedConnection, ...]:
        """Every connection so far, in the order they opened."""
        return tuple(self.connections[i] for i in sorted(self.connections))


def _injector(proxyserver: Any) -> Callable[[http.HTTPFlow, bool, bytes, bool], None]:
    """The proxy server's own ``inject.websocket``, called directly. Through the command
    table every frame paid for binding the command's signature, about a fifth of a replayed
    frame's cost in the proxy; the method itself is wrapped by mitmproxy's ``@command``,
    which checks the arguments against ``inspect.signature`` at every call, about a tenth
    more: the function under the wrapper (``__wrapped__``) is the same code without it."""
    bound = proxyserver.inject_websocket
    unchecked = getattr(bound, "__wrapped__", None)
    if unchecked is None:
        return bound  # type: ignore[no-any-return]
    return functools.partial(unchecked, proxyserver)


class ReplaySockets:
    """Replay: the upgrade answered locally, each request frame matched, recorded frames sent back."""

    def __init__(self, shared: Shared, hold_server: HoldServer) -> None:
        self.shared = shared
        self.hold_server = hold_server
        self._frames: dict[str, FrameCodec] = {}
        self._requests: dict[str, int] = {}

    def accept(self, flow: http.HTTPFlow, frames: FrameCodec) -> None:
        """Accept the upgrade locally (101 from the hold server: no model host is dialled)
        when the recording spoke WebSocket; otherwise refuse it as the recording's proxy did
        (426: the agent falls back to HTTP)."""
        replayer = self.shared.replayer
        if replayer is None or not replayer.cassette.speaks_websocket:
            refuse_websocket(flow)
            log.info("websocket_refused", flow_id=flow.id, reason="the cassette has no WebSocket connection")
            return
        req = flow.request
        key = req.headers.get("sec-websocket-key", "")
        upgraded = Held(101, {
            "upgrade": "websocket",
            "connection": "Upgrade",
            "sec-websocket-accept": generate_accept_token(key.encode()).decode(),
        }, b"")
        req.headers[HOLD_HEADER] = self.hold_server.hold(upgraded)
        # The client's extensions are not offered on: replayed frames go out as recorded, uncompressed.
        req.headers.pop("sec-websocket-extensions", None)
        req.scheme, req.host, req.port = "http", "127.0.0.1", self.hold_server.port
        self._frames[flow.id] = frames
        log.debug("websocket_accepted", flow_id=flow.id, provider=frames.name)

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        frames = self._frames.get(flow.id)
        if frames is None or flow.websocket is None or not flow.websocket.messages:
            return
        message = flow.websocket.messages[-1]
        if message.injected or not message.from_client:
            # What replay itself sends back: the hook runs once a frame it injects, so it
            # returns before building anything.
            return
        frame = Frame.of(message.content, message.is_text)
        message.drop()  # there is no upstream
        if not frames.is_request(frame):
            log.debug("websocket_frame_ignored", flow_id=flow.id)
            return
        try:
            self._serve(flow, frames, frame)
        except Exception as e:  # noqa: BLE001 — see Shared.hook_failed
            self.shared.hook_failed(flow, "websocket_message", e)
            self._send(flow, [frames.error_frame(400, "flowproof could not handle this request; see its report")])

    def _serve(self, flow: http.HTTPFlow, frames: FrameCodec, frame: Frame) -> None:
        shared = self.shared
        number = self._requests[flow.id] = self._requests.get(flow.id, 0) + 1
        call_id = f"{flow.id}.{number}"
        started = time.time()
        codec = codec_by_name(frames.name)
        prepared = shared.prepare_body(call_id, codec, frame.content, flow.request.path.split("?", 1)[0], flush=False,
                                       at=started)
        assert shared.replayer is not None  # configure builds it for replay
        decision = shared.replayer.decide(codec.name, prepared.sha256, lambda: prepared.body, prepared.path_fields)
        ms = round((time.time() - started) * 1000, 1)
        if isinstance(decision, Miss):
            divergence = decision.divergence
            report = shared.config.report
            where = f"the flowproof report ({report})" if report else "the mitmproxy log"
            message = f"flowproof replay diverged: {divergence.summary()}. The full report is in {where}."
            self._send(flow, [frames.error_frame(400, message)])
            model = prepared.body.get("model") if isinstance(prepared.body, dict) else None
            shared.events.write(DivergenceEvent(call_id, divergence.to_json(), codec.name,
                                                model if isinstance(model, str) else None, ms))
            log.warning("websocket_request_unmatched", flow_id=flow.id, kind=divergence.kind)
            return
        turn = decision.turn
        shared.learn_calls(turn)
        self._send(flow, self._recorded_frames(turn))
        # The runner loaded this cassette too: the turn line names the turn, never copies it.
        shared.events.write(ReplayedTurnEvent(call_id, decision.position, turn.request.body_sha256, ms))
        log.info("turn_replayed", flow_id=flow.id, provider=codec.name, turn=turn.index, websocket=True, ms=ms)

    def _recorded_frames(self, turn: RecordedTurn) -> list[Frame]:
        """What the recorded turn's client received, paths restored: its frames (an abandoned
        turn's are partial, and nothing follows them: the silence the agent met at record)."""
        response = turn.response
        if response is None:
            return []
        restore = self.shared.config.normalizer.restore
        if response.frames is not None:
            return [Frame(text=restore(f.content).decode("utf-8", "surrogateescape")) if f.is_text else f
                    for f in response.frames]
        # A turn recorded over HTTP (an SSE stream) answers a frame with its events' data.
        return [Frame(text=restore(e.data.encode()).decode()) for e in response.events or ()]

    def _send(self, flow: http.HTTPFlow, frames: list[Frame]) -> None:
        inject = _injector(ctx.master.addons.get("proxyserver"))
        for frame in frames:
            inject(flow, True, frame.content, frame.is_text)

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        # The client left, as it did at record (a held, abandoned turn included): nothing to report.
        self._frames.pop(flow.id, None)
        self._requests.pop(flow.id, None)
