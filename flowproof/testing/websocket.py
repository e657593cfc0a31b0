"""The Responses API over a WebSocket (``GET /v1/responses`` upgraded), as OpenAI serves it.

After the upgrade the client sends ``response.create`` events (the body of
``POST /v1/responses`` plus ``"type": "response.create"``, ``stream`` implied)
and the server answers each with the same events a Responses stream carries,
one JSON text frame each, up to the terminal event (``response.completed``,
``response.incomplete``, ``response.failed``) or an ``error`` event. One
response is in flight at a time: the next request frame is read once the
answer is written.

- ``generate: false`` is a warm-up: it is answered ``response.created`` …
  ``response.completed`` with no output, without consuming a scripted reply.
- ``previous_response_id`` must name a response this server produced (over
  HTTP or a WebSocket); otherwise the answer is an ``error`` event with
  ``status: 400`` and code ``previous_response_not_found``.
- A scripted `Reply.error`, an exhausted script or a frame that is not a
  ``response.create`` is answered with the wrapped error event codex reads:
  ``{"type": "error", "status": S, "error": {"type", "code", "message", "param"}}``
  (``headers`` carries ``retry-after``).

Each request frame is one exchange (`flowproof.testing.capture`), its request
``method`` ``"WEBSOCKET"`` and ``websocket`` the connection's number; the sent
frames are its chunks. Pure wsproto over the HTTP/1.1 handler's socket:
nothing here imports ``flowproof.wire``.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from wsproto import ConnectionType
from wsproto.connection import Connection, ConnectionState
from wsproto.events import CloseConnection, Message, Ping, TextMessage
from wsproto.utilities import LocalProtocolError, generate_accept_token

import flowproof.testing.openai_responses as openai_responses
from flowproof.testing.base import compact
from flowproof.testing.capture import CLIENT_CLOSED, CUT, ENDED, STOPPED, ExchangeRecord, ReceivedRequest
from flowproof.testing.detect import OPENAI_RESPONSES
from flowproof.testing.script import Reply
from flowproof.testing.transport import Gone

if TYPE_CHECKING:
    from flowproof.testing.server import FakeModelServer

__all__ = ["WEBSOCKET_METHOD", "error_event", "is_upgrade", "serve"]

#: The ``method`` of a request frame received on a WebSocket (`ReceivedRequest.method`).
WEBSOCKET_METHOD = "WEBSOCKET"

_ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
                429: "rate_limit_exceeded"}


def is_upgrade(method: str, path: str, headers: Mapping[str, str]) -> bool:
    """True for a WebSocket upgrade of the Responses endpoint (``headers`` with lowercase names)."""
    return (
        method == "GET"
        and path.rstrip("/").endswith("/responses")
        and headers.get("upgrade", "").strip().lower() == "websocket"
        and bool(headers.get("sec-websocket-key"))
    )


def error_event(status: int, message: str, *, code: str | None = None, param: str | None = None,
                retry_after: float | None = None) -> dict[str, Any]:
    """The wrapped error event of Responses over WebSocket: ``status`` says what HTTP would have."""
    event: dict[str, Any] = {
        "type": "error",
        "status": status,
        "error": {"type": _ERROR_TYPES.get(status, "server_error"), "code": code, "message": message,
                  "param": param},
    }
    if retry_after is not None:
        value = str(int(retry_after)) if float(retry_after).is_integer() else repr(float(retry_after))
        event["headers"] = {"retry-after": value}
    return event


class _Session:
    """One upgraded connection: reads request frames, writes answers through the handler's socket."""

    def __init__(self, fake: FakeModelServer, handler: Any, path: str, headers: Mapping[str, str],
                 number: int) -> None:
        self.fake = fake
        self.handler = handler
        self.path = path
        self.headers = dict(headers)
        self.number = number
        self.ws = Connection(ConnectionType.SERVER)
        self.write_lock = threading.Lock()
        self.frames: queue.Queue[str | bytes | None] = queue.Queue()
        self.closed = threading.Event()

    # the socket -------------------------------------------------------------

    def _send(self, event: Any) -> None:
        if self.closed.is_set() and not isinstance(event, CloseConnection):
            raise Gone(CLIENT_CLOSED)
        try:
            with self.write_lock:
                self.handler.wfile.write(self.ws.send(event))
        except (OSError, LocalProtocolError):
            raise Gone(CLIENT_CLOSED) from None

    def _read(self) -> None:
        """The reader thread: every complete client message into ``frames``, pings answered,
        a close (or the connection's end) seen at once, even while an answer is being written."""
        conn = self.handler.connection
        parts: list[Any] = []
        try:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    data = b""
                with self.write_lock:
                    self.ws.receive_data(data or None)
                    events = list(self.ws.events())
                for event in events:
                    if isinstance(event, Ping):
                        self._send(event.response())
                    elif isinstance(event, CloseConnection):
                        self.closed.set()
                        if self.ws.state is ConnectionState.REMOTE_CLOSING:
                            self._send(event.response())
                        return
                    elif isinstance(event, Message):
                        parts.append(event.data)
                        if event.message_finished:
                            joined = "".join(parts) if isinstance(event, TextMessage) else b"".join(parts)
                            self.frames.put(joined)
                            parts = []
                if not data:
                    return
        except Gone:
            return
        finally:
            self.closed.set()
            self.frames.put(None)

    def _wait(self, seconds: float) -> None:
        if seconds <= 0:
            return
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            if self.fake._stopping.is_set():
                raise Gone(STOPPED)
            if self.closed.wait(min(remaining, 0.02)):
                raise Gone(CLIENT_CLOSED)

    # the protocol -------------------------------------------------------------

    def run(self) -> None:
        self.handler.close_connection = True
        self.handler.send_response(101)
        self.handler.send_header("upgrade", "websocket")
        self.handler.send_header("connection", "Upgrade")
        accept = generate_accept_token(self.headers["sec-websocket-key"].encode()).decode()
        self.handler.send_header("sec-websocket-accept", accept)
        self.handler.end_headers()
        # Idle between turns is normal (the agent runs its tools): only stop() or the client ends it.
        self.handler.connection.settimeout(None)
        reader = threading.Thread(target=self._read, name=f"fake-model-ws-{self.number}", daemon=True)
        reader.start()
        try:
            while (frame := self.frames.get()) is not None:
                if not self._turn(frame):
                    break
        finally:
            reader.join(timeout=5)

    def _turn(self, frame: str | bytes) -> bool:
        """Answer one request frame; False when the connection must end (a scripted cut, a client gone)."""
        raw = frame.encode() if isinstance(frame, str) else frame
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = None
        request = ReceivedRequest(
            method=WEBSOCKET_METHOD, path=self.path, query={}, headers=self.headers, body=raw, json=body,
            api=OPENAI_RESPONSES, http_version="HTTP/1.1", tls=self.handler.is_tls, websocket=self.number,
        )
        record = ExchangeRecord(request)
        self.fake._track(request, record)
        record.start(101, ())
        events, reply = self._answer(body, raw)
        outcome = self._write(events, reply, record)
        record.settle(outcome)
        return outcome == ENDED

    def _answer(self, body: Any, raw: bytes) -> tuple[list[dict[str, Any]], Reply | None]:
        fake = self.fake
        if not isinstance(body, Mapping) or body.get("type") != "response.create":
            kind = body.get("type") if isinstance(body, Mapping) else None
            what = f"an event of type {kind!r}" if kind is not None else "a frame that is not a JSON event"
            return [error_event(400, f"fake model: cannot answer {what}; send response.create",
                                code="invalid_event")], None
        previous = body.get("previous_response_id")
        if previous is not None and not fake._knows_response(previous):
            message = f"Previous response with id '{previous}' not found."
            return [error_event(400, message, code="previous_response_not_found",
                                param="previous_response_id")], None
        if body.get("generate") is False:
            response_id = fake._mint_warmup_id()
            ctx = fake._context(Reply.text(""), 0, (), body.get("model"), raw, body)
            events = openai_responses.stream_events(None, ctx, response_id=response_id)
            fake._remember_response(response_id)
            return events, None
        taken = fake._take(OPENAI_RESPONSES, body)
        if isinstance(taken, str):
            return [error_event(fake._exhausted_status, taken)], None
        reply, n, call_ids = taken
        if reply.is_error:
            return [error_event(reply.status, reply.message, retry_after=reply.retry_after)], reply
        if fake._live is not None:
            reply = fake._live.apply(reply, n)
        ctx = fake._context(reply, n, call_ids, reply.model or body.get("model"), raw, body)
        events = openai_responses.stream_events(reply, ctx)
        fake._remember_response(events[-1]["response"]["id"])
        return events, reply

    def _write(self, events: Sequence[dict[str, Any]], reply: Reply | None, record: ExchangeRecord) -> str:
        """Send ``events`` one text frame each with the reply's delays; how the answer ended."""
        cut = reply.cut_after if reply is not None and not reply.is_error else None
        first = (reply.first_byte_delay + reply.first_chunk_delay) if reply is not None else 0.0
        gap = reply.chunk_delay if reply is not None else 0.0
        try:
            for i, event in enumerate(events):
                if cut is not None and i >= cut:
                    self.handler.abort()
                    return CUT
                self._wait(first if i == 0 else gap)
                text = compact(event)
                record.add(text.encode(), last=i == len(events) - 1)
                self._send(TextMessage(text))
        except Gone as gone:
            return gone.outcome
        return ENDED


def serve(fake: FakeModelServer, handler: Any, path: str, headers: Mapping[str, str], number: int) -> None:
    """Take over ``handler``'s connection for a WebSocket session (it is closed afterwards)."""
    _Session(fake, handler, path, headers, number).run()

