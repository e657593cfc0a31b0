"""HTTP/2 for the fake server: one connection, many streams, each answered in its own thread.

Real model APIs speak HTTP/2 and real clients (Codex CLI) use it to end a call
their own way: RST_STREAM(CANCEL) right after the terminal event. This session
serves the same script over HTTP/2 (over TLS when ALPN picked ``h2``, or with
prior knowledge on the plain port), and records a client's stream reset as an
exchange outcome, never as a server fault. Built on ``h2``, the HTTP/2 state
machine mitmproxy itself uses.
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions

from flowproof.testing.capture import CLIENT_CLOSED, CLIENT_RESET, STOPPED
from flowproof.testing.transport import Gone, Transport

__all__ = ["H2Session"]

SERVER_NAME = "flowproof-fake-model"
# Headers that only mean something on an HTTP/1.1 connection and are forbidden in HTTP/2.
_CONNECTION_HEADERS = frozenset({"transfer-encoding", "connection", "keep-alive", "upgrade", "proxy-connection"})
_POLL = 0.02
IDLE_TIMEOUT = 30.0


class Respond(Protocol):
    """The server's request entry point (`FakeModelServer._respond`)."""

    def __call__(self, transport: Transport, method: str, target: str, headers: Sequence[tuple[str, str]],
                 body: bytes | None, *, http_version: str, tls: bool) -> None: ...


class _Stream:
    """One request stream: what arrived, and why it cannot be answered any more (``gone``)."""

    def __init__(self, stream_id: int, headers: Sequence[tuple[str, str]]) -> None:
        self.stream_id = stream_id
        self.headers = list(headers)
        self.body = bytearray()
        self.gone: Gone | None = None


class H2Session:
    """Serve one HTTP/2 connection until the client closes it, it idles out, or the server stops."""

    def __init__(self, sock: socket.socket, respond: Respond, stopping: threading.Event, *,
                 tls: bool, decode: Callable[[bytes, str], bytes] | None = None) -> None:
        self.sock = sock
        self.respond = respond
        self.stopping = stopping
        self.tls = tls
        self.decode = decode
        config = h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        self.conn = h2.connection.H2Connection(config=config)
        # Guards the h2 state machine and every socket write; notified when a window opens or a stream goes.
        self.lock = threading.Condition()
        self.streams: dict[int, _Stream] = {}
        self.workers: list[threading.Thread] = []

    # the connection ------------------------------------------------------------

    def run(self) -> None:
        """Read frames and dispatch requests until the connection ends; then wait for the answers."""
        self.sock.settimeout(5.0)  # reads happen when select says there is data; writes may block this long
        with self.lock:
            self.conn.initiate_connection()
            self._flush()
        last_activity = time.monotonic()
        try:
            while not self.stopping.is_set():
                pending = isinstance(self.sock, ssl.SSLSocket) and self.sock.pending() > 0
                if not pending:
                    readable, _, _ = select.select([self.sock], [], [], _POLL)
                    if not readable:
                        idle = not any(w.is_alive() for w in self.workers)
                        if idle and time.monotonic() - last_activity > IDLE_TIMEOUT:
                            with self.lock:
                                self.conn.close_connection()
                                self._flush()
                            return
                        continue
                last_activity = time.monotonic()
                with self.lock:
                    data = self._read_available()
                    if data is None:
                        continue
                    if not data:
                        return
                    try:
                        events = self.conn.receive_data(data)
                    except h2.exceptions.ProtocolError:
                        self._flush()
                        return
                    ended = False
                    for event in events:
                        ended = self._on_event(event) or ended
                    self._flush()
                    self.lock.notify_all()
                if ended:
                    return
        finally:
            self._all_gone(STOPPED if self.stopping.is_set() else CLIENT_CLOSED)
            for worker in self.workers:
                worker.join(timeout=5)

    def _read_available(self) -> bytes | None:
        """Everything readable now (lock held): ``b""`` at the end of the connection, ``None`` for nothing yet.

        TLS hands out one record per read, and records already taken off the
        socket no longer wake select(): read until the socket has no more.
        """
        data = bytearray()
        self.sock.setblocking(False)
        try:
            while True:
                try:
                    piece = self.sock.recv(65536)
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                    break
                except OSError:
                    return bytes(data) or b""
                if not piece:
                    return bytes(data)  # the end follows what was read; the next read sees it again
                data += piece
        finally:
            try:
                self.sock.settimeout(5.0)
            except OSError:
                pass
        return bytes(data) if data else None

    def _on_event(self, event: h2.events.Event) -> bool:
        """Handle one frame event (lock held); True when the connection is over."""
        if isinstance(event, h2.events.RequestReceived):
            stream = _Stream(event.stream_id, [(str(k), str(v)) for k, v in event.headers or ()])
            self.streams[event.stream_id] = stream
            if event.stream_ended is not None:
                self._dispatch(stream)
        elif isinstance(event, h2.events.DataReceived):
            stream_or_none = self.streams.get(event.stream_id)
            if stream_or_none is not None and event.data:
                stream_or_none.body += event.data
            if event.flow_controlled_length:
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            if event.stream_ended is not None and stream_or_none is not None:
                self._dispatch(stream_or_none)
        elif isinstance(event, h2.events.StreamEnded):
            pass  # dispatched with the frame that carried END_STREAM (above)
        elif isinstance(event, h2.events.StreamReset):
            stream_or_none = self.streams.get(event.stream_id)
            if stream_or_none is not None and stream_or_none.gone is None:
                stream_or_none.gone = Gone(CLIENT_RESET, int(event.error_code))
        elif isinstance(event, h2.events.ConnectionTerminated):
            return True
        return False

    def _dispatch(self, stream: _Stream) -> None:
        worker = threading.Thread(target=self._serve, args=(stream,), daemon=True,
                                  name=f"fake-model-h2-stream-{stream.stream_id}")
        self.workers.append(worker)
        worker.start()

    def _serve(self, stream: _Stream) -> None:
        pseudo = {k: v for k, v in stream.headers if k.startswith(":")}
        headers = [(k, v) for k, v in stream.headers if not k.startswith(":")]
        if ":authority" in pseudo and not any(k == "host" for k, _ in headers):
            headers.insert(0, ("host", pseudo[":authority"]))
        encoding = next((v for k, v in headers if k == "content-encoding"), "")
        body: bytes | None = bytes(stream.body)
        if self.decode is not None and body is not None:
            try:
                body = self.decode(body, encoding)
            except (OSError, ValueError, EOFError):
                body = None
        self.respond(_StreamTransport(self, stream), pseudo.get(":method", "GET"), pseudo.get(":path", "/"),
                     headers, body, http_version="HTTP/2", tls=self.tls)
        with self.lock:  # a stream the answer left open (it cannot, unless the server broke) is reset
            self._reset(stream, h2.errors.ErrorCodes.INTERNAL_ERROR)

    def _flush(self) -> None:
        """Send what the state machine has queued (lock held); a dead socket ends every stream."""
        data = self.conn.data_to_send()
        if not data:
            return
        try:
            self.sock.sendall(data)
        except OSError:
            self._all_gone(STOPPED if self.stopping.is_set() else CLIENT_CLOSED)

    def _all_gone(self, outcome: str) -> None:
        with self.lock:
            for stream in self.streams.values():
                if stream.gone is None:
                    stream.gone = Gone(outcome)
            self.lock.notify_all()

    def _reset(self, stream: _Stream, code: h2.errors.ErrorCodes) -> None:
        """Reset a stream that is still open on our side (lock held); a closed one is left alone."""
        try:
            self.conn.reset_stream(stream.stream_id, error_code=code)
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError, KeyError):
            return
        self._flush()


class _StreamTransport:
    """`Transport` for one HTTP/2 stream."""

    def __init__(self, session: H2Session, stream: _Stream) -> None:
        self.session = session
        self.stream = stream

    def _check(self) -> None:
        if self.stream.gone is not None:
            raise self.stream.gone
        if self.session.stopping.is_set():
            raise Gone(STOPPED)

    def headers_sent(self, headers: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        return [("server", SERVER_NAME), *((k, v) for k, v in headers if k.lower() not in _CONNECTION_HEADERS)]

    def begin(self, status: int, headers: Sequence[tuple[str, str]]) -> None:
        with self.session.lock:
            self._check()
            try:
                self.session.conn.send_headers(self.stream.stream_id,
                                               [(":status", str(status)), *self.headers_sent(headers)])
            except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
                raise self.stream.gone or Gone(CLIENT_RESET) from None
            self.session._flush()

    def send(self, payload: bytes) -> None:
        session = self.session
        view = memoryview(payload)
        with session.lock:
            while True:
                self._check()
                try:
                    window = min(session.conn.local_flow_control_window(self.stream.stream_id),
                                 session.conn.max_outbound_frame_size)
                except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
                    raise self.stream.gone or Gone(CLIENT_RESET) from None
                if window <= 0 and len(view):
                    session.lock.wait(_POLL)  # the client has not opened its window yet
                    continue
                piece, view = view[:window], view[window:]
                try:
                    session.conn.send_data(self.stream.stream_id, bytes(piece))
                except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
                    raise self.stream.gone or Gone(CLIENT_RESET) from None
                session._flush()
                if not len(view):
                    return

    def end(self) -> None:
        with self.session.lock:
            self._check()
            try:
                self.session.conn.end_stream(self.stream.stream_id)
            except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
                raise self.stream.gone or Gone(CLIENT_RESET) from None
            self.session._flush()

    def abort(self) -> None:
        with self.session.lock:
            self.session._reset(self.stream, h2.errors.ErrorCodes.INTERNAL_ERROR)

    def wait(self, seconds: float) -> None:
        if seconds <= 0:
            return
        deadline = time.monotonic() + seconds
        with self.session.lock:
            while (remaining := deadline - time.monotonic()) > 0:
                self._check()
                self.session.lock.wait(min(remaining, _POLL))
