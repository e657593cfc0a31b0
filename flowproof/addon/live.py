"""Live model calls (record and compare): forward upstream, tap the response, assemble the turn.

The mitmproxy side of `flowproof.recorder`: `LiveCalls` keeps a `PendingCall`
per forwarded flow, tees an SSE response through a `StreamTap`, and hands each
completed `RecordedTurn` to its subclass (`on_turn`).

A client that leaves before the body ends makes mitmproxy call ``error``:
after the API's terminal event that is a complete turn (openai-python's sync
stream closes at ``[DONE]``; codex resets its HTTP/2 stream after
``response.completed``), before it an abandoned one (`on_abandoned`). Only a
failure on the upstream side stays an error (`client_left` tells them apart).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from mitmproxy import http
from mitmproxy.connection import ConnectionState

from flowproof.addon.shared import Shared, content_of, elapsed_ms, log, refuse_unhandled
from flowproof.addon.websocket import LiveSockets
from flowproof.cassette import RecordedResponse, RecordedTurn
from flowproof.errors import FlowproofError
from flowproof.log_events import ErrorEvent, ErrorKind, TurnEvent
from flowproof.options import Mode
from flowproof.recorder import (
    PendingCall,
    is_event_stream,
    response_from_body,
    response_from_stream,
)
from flowproof.wire import is_model_host

__all__ = ["LiveCalls", "client_left", "connect_reason"]

# mitmproxy's messages for a client that went away: HTTP/1 ("Client disconnected."), an
# HTTP/2 stream reset ("stream reset by client (CANCEL)"), a whole HTTP/2 connection gone.
_CLIENT_GONE = ("client disconnected",)
_STREAM_RESET = "stream reset by client"
_CONNECTION_GONE = ("peer closed connection", "http/2 connection closed")


#: What the OS said when a connect failed, in words (mitmproxy passes on Python's OSError text).
_CONNECT_REASONS = (
    (("errno 111]", "connection refused"), "connection refused: nothing listens there"),
    (("errno -2]", "errno -3]", "errno -5]", "name or service not known", "name resolution",
      "nodename nor servname", "no address associated"), "the host name does not resolve"),
    (("errno 110]", "timed out"), "the connection timed out"),
    (("errno 101]", "errno 113]", "network is unreachable", "no route to host"), "the network is unreachable"),
)


def connect_reason(message: str) -> str:
    """A failed connect in words, with the OS's own message after them."""
    lowered = message.lower()
    for needles, words in _CONNECT_REASONS:
        if any(n in lowered for n in needles):
            return f"{words} ({message})"
    return message


def _closed(connection: object) -> bool:
    """True when a connection can no longer be read: the peer closed it."""
    state = getattr(connection, "state", None)
    return state is not None and not (state & ConnectionState.CAN_READ)


def client_left(flow: http.HTTPFlow) -> bool:
    """True when ``flow`` failed because its client went away, not because of the upstream.

    mitmproxy words an HTTP/2 stream reset the same way whichever side sent it
    ("stream reset by client"), so the connections decide: the client's closed
    means the client left; the upstream's closed means an upstream fault. A reset
    on an HTTP/2 upstream is the client's only when it is a CANCEL, which is what
    a client sends to drop a stream it no longer wants.
    """
    message = (flow.error.msg if flow.error is not None else "").lower()
    if message.startswith(_CLIENT_GONE) or _closed(flow.client_conn):
        return True
    if _closed(flow.server_conn):
        return False
    if message.startswith(_STREAM_RESET):
        upstream_h2 = flow.server_conn.alpn == b"h2"
        return not upstream_h2 or "(cancel)" in message
    if message.startswith(_CONNECTION_GONE):
        return flow.request.http_version == "HTTP/2.0" and flow.server_conn.alpn != b"h2"
    return False


class LiveCalls:
    """Forwards model calls and assembles their turns; subclasses decide what a turn is for."""

    #: The flowproof mode named in ``turn`` events.
    mode: Mode

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self.calls: dict[str, PendingCall] = {}
        self.completed = 0  # model calls completed, the next turn index
        #: Model APIs spoken over a WebSocket (`flowproof.addon.websocket`).
        self.sockets = LiveSockets(self)

    def on_turn(self, flow_id: str, turn: RecordedTurn) -> None:
        """A live call completed (its ``turn`` event is already written)."""
        raise NotImplementedError

    def on_abandoned(self, flow_id: str, turn: RecordedTurn) -> None:
        """The client abandoned a live call (its ``turn`` event, marked abandoned, is written).

        Nothing to judge by default: the agent decides what an abandoned call means."""
        log.info("model_call_abandoned", flow_id=flow_id, provider=turn.provider, turn=turn.index)

    # ------------------------------------------------------------------ hooks

    def request(self, flow: http.HTTPFlow) -> None:
        try:
            self._request(flow)
        except Exception as e:  # noqa: BLE001 — see Shared.hook_failed
            self.calls.pop(flow.id, None)
            self.shared.hook_failed(flow, "request", e)
            refuse_unhandled(flow)

    def _request(self, flow: http.HTTPFlow) -> None:
        shared = self.shared
        detected = shared.detect(flow)
        if detected is None:
            return
        req = flow.request
        if detected.websocket is not None:
            self.sockets.upgrade(flow, detected.websocket)
            return
        codec = detected.codec
        if codec is None:
            # The user mapped this host (a gateway, a local model): its other traffic
            # (traces, settings) goes there too, never to the real host with their key.
            shared.map_upstream(req)
            return
        prepared = shared.prepare(flow, codec)
        if prepared is None:
            return
        # A declared secret in the URL never reaches the cassette (the body is masked by prepare).
        url = shared.config.normalizer.mask_text(req.pretty_url)
        self.calls[flow.id] = PendingCall.start(codec, req.method, url, req.headers.items(multi=True), prepared)
        # The recorder taps the stream as SSE text; a compressed stream could not be read.
        req.headers["accept-encoding"] = "identity"
        mapped = shared.map_upstream(req)
        log.debug("model_call_forwarded", flow_id=flow.id, provider=codec.name, mapped=mapped)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        call = self.calls.get(flow.id)
        if call is None or flow.response is None:
            return
        headers = flow.response.headers
        call.response_started(flow.response.status_code, headers.items(multi=True))
        if not is_event_stream(headers.get("content-type", "")):
            return
        encoding = headers.get("content-encoding", "").strip().lower()
        if encoding and encoding != "identity":
            return  # left buffered: mitmproxy decodes it and `response` parses the whole body
        flow.response.stream = call.tap_stream().feed

    def response(self, flow: http.HTTPFlow) -> None:
        try:
            self._response(flow)
        except Exception as e:  # noqa: BLE001 — see Shared.hook_failed
            self.calls.pop(flow.id, None)
            self.shared.hook_failed(flow, "response", e)

    def _response(self, flow: http.HTTPFlow) -> None:
        call = self.calls.pop(flow.id, None)
        if call is None or flow.response is None:
            return
        try:
            recorded = self._recorded_response(flow.response, call)
        except FlowproofError as e:
            text = f"cannot record the response to {call.request.url}: {e}"
            self.shared.events.write(ErrorEvent(text, ErrorKind.RESPONSE, id=flow.id))
            return
        turn = call.turn(self.completed, recorded)
        self.completed += 1
        self.shared.learn_calls(turn)
        # Compare logs the live turn too: the runner checks the spec against the live trajectory.
        self.shared.events.write(TurnEvent(flow.id, self.mode, turn, elapsed_ms(flow)))
        self.on_turn(flow.id, turn)

    def _recorded_response(self, response: http.Response, call: PendingCall) -> RecordedResponse:
        normalizer = self.shared.config.normalizer
        headers = response.headers.items(multi=True)
        if call.tap is not None:
            return response_from_stream(response.status_code, headers, call.tap, normalizer)
        content_type = response.headers.get("content-type", "")
        return response_from_body(
            response.status_code, headers, content_type, content_of(response), normalizer
        )

    def error(self, flow: http.HTTPFlow) -> None:
        call = self.calls.pop(flow.id, None)
        if call is None:
            return
        if call.complete or client_left(flow):
            # After the terminal event nothing is lost, whoever closed; before it, the client
            # abandoned the call: both are recorded, neither fails the run by itself.
            self._left(flow.id, call, elapsed_ms(flow))
            return
        reason = flow.error.msg if flow.error is not None else "unknown error"
        if flow.response is None and flow.server_conn.timestamp_tcp_setup is None:
            # No server connection was ever set up for the call: the proxy could not dial the
            # upstream (an established one that fails later has its setup time).
            address = f"{flow.request.host}:{flow.request.port}"
            self._unreachable(flow.id, address, urlsplit(call.request.url).hostname or "", reason)
            return
        text = f"the model call to {call.request.url} failed before it completed: {reason}"
        self.shared.events.write(ErrorEvent(text, ErrorKind.UPSTREAM, id=flow.id))
        log.warning("model_call_failed", flow_id=flow.id, provider=call.codec.name)

    def http_connect_error(self, flow: http.HTTPFlow) -> None:
        """A ``CONNECT`` to a model host failed: the proxy dials at ``CONNECT`` time unless it
        dials lazily (docs/runner.md), so the agent's call never becomes a flow of its own."""
        host, port = flow.request.host, flow.request.port
        if not is_model_host(host, self.shared.config.options.model_hosts):
            return  # another host the agent talks to: not the model boundary's to judge
        reason = flow.server_conn.error or (flow.error.msg if flow.error is not None else "")
        self._unreachable(None, f"{host}:{port}", host, reason or "the connection failed")

    def _unreachable(self, flow_id: str | None, address: str, host: str, reason: str) -> None:
        dialled = address.rsplit(":", 1)[0]
        where = f" (where the upstream mapping sends {host})" if host and host != dialled else ""
        text = f"the proxy could not reach the model host {address}{where}: {connect_reason(reason)}"
        self.shared.events.write(ErrorEvent(text, ErrorKind.UPSTREAM_UNREACHABLE, id=flow_id,
                                            address=address, host=host or None))
        log.warning("model_host_unreachable", address=address, host=host, reason=reason)

    def finish_in_flight(self) -> None:
        """At shutdown: every call still in flight was left by its client (the agent has exited).

        mitmproxy may stop before it has noticed the client's close, so these are settled
        here exactly as ``error`` would have: complete after the terminal event, else abandoned.
        WebSocket connections still open are settled the same way.
        """
        for flow_id, call in list(self.calls.items()):
            self.calls.pop(flow_id, None)
            self._left(flow_id, call)
        self.sockets.finish()

    def websocket_start(self, flow: http.HTTPFlow) -> None:
        self.sockets.websocket_start(flow)

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        self.sockets.websocket_message(flow)

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        self.sockets.websocket_end(flow)

    def _left(self, flow_id: str, call: PendingCall, ms: float | None = None) -> None:
        turn = call.left_turn(self.completed, self.shared.config.normalizer)
        self.completed += 1
        self.shared.events.write(TurnEvent(flow_id, self.mode, turn, ms))
        if turn.abandoned:
            self.on_abandoned(flow_id, turn)
        else:
            self.on_turn(flow_id, turn)
