"""Replay of an abandoned call: send what the client got at record, then hold the line.

At record the client gave up on the call: it saw the status, the headers and
some events (or nothing at all), then left. Replay reproduces exactly that: it
sends the same bytes and never ends the body, so the agent meets the same
silence and leaves the same way. Ending the body (or resetting it) instead
would hand the agent an answer or an error it never got at record, and SDKs
retry errors.

mitmproxy cannot stream a response an addon makes itself, so the replay concern
routes such a call to `HoldServer`, a small HTTP/1.1 server on 127.0.0.1 inside
the proxy process: the proxy streams its partial answer to the client and, when
the client leaves, closes the connection, which ends the hold. `close` ends
every hold at shutdown.

Replay of a WebSocket uses it too: mitmproxy relays WebSocket messages only
between two connections it holds, so a replayed upgrade is answered 101 from
here and the line held open, while the replay concern drops every client frame
and injects the recorded ones (`flowproof.addon.websocket`): nothing is ever
sent here after the upgrade, and the proxy closes the line when the client does.
"""

from __future__ import annotations

import itertools
import socket
import socketserver
import threading
from dataclasses import dataclass

from flowproof.addon.shared import log

__all__ = ["HOLD_HEADER", "Held", "HoldServer"]

#: The request header naming the held answer a request is for (set by the replay concern).
HOLD_HEADER = "x-flowproof-hold"

_STATUS_TEXT = {101: "Switching Protocols", 200: "OK"}


@dataclass(frozen=True, slots=True)
class Held:
    """What a client got of an abandoned call: ``status`` None when no response had started."""

    status: int | None
    headers: dict[str, str]
    content: bytes

    def head_and_body(self) -> bytes:
        """The HTTP/1.1 response head and the partial body as one chunk; the body never ends."""
        if self.status is None:
            return b""
        lines = [f"HTTP/1.1 {self.status} {_STATUS_TEXT.get(self.status, 'Status')}"]
        if self.status == 101:
            # An upgrade: the connection now carries WebSocket frames, it has no HTTP body.
            lines += [f"{name}: {value}" for name, value in self.headers.items()]
            return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        for name, value in self.headers.items():
            if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                lines.append(f"{name}: {value}")
        lines.append("transfer-encoding: chunked")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        if not self.content:
            return head
        return head + f"{len(self.content):x}\r\n".encode() + self.content + b"\r\n"


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        sock: socket.socket = self.request
        owner = self.server.owner
        owner.track(sock)
        try:
            token = _read_head(sock)
            held = owner.take(token) if token is not None else None
            if held is not None:
                sock.sendall(held.head_and_body())
            # Hold: read (and drop) until the proxy closes the line or the server stops.
            while sock.recv(65536):
                pass
        except OSError:
            pass
        finally:
            owner.untrack(sock)


def _read_head(sock: socket.socket) -> str | None:
    """Read the request head; the value of `HOLD_HEADER`, or None."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
        if len(data) > 1 << 20:
            return None
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    for line in head.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == HOLD_HEADER:
            return value.strip()
    return None


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, owner: HoldServer) -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", 0), _Handler)


class HoldServer:
    """Serves held answers (`Held`) to the requests the replay concern routes here."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, Held] = {}
        self._open: set[socket.socket] = set()
        self._tokens = itertools.count(1)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port it listens on (started on first use)."""
        with self._lock:
            if self._server is None:
                self._server = _Server(self)
                self._thread = threading.Thread(
                    target=self._server.serve_forever, name="flowproof-hold", daemon=True
                )
                self._thread.start()
            return int(self._server.server_address[1])

    def hold(self, held: Held) -> str:
        """Register ``held``; the token to send in `HOLD_HEADER`."""
        token = str(next(self._tokens))
        with self._lock:
            self._held[token] = held
        return token

    def take(self, token: str) -> Held | None:
        with self._lock:
            return self._held.pop(token, None)

    def track(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.add(sock)

    def untrack(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.discard(sock)

    @property
    def holding(self) -> int:
        """How many connections are being held right now."""
        with self._lock:
            return len(self._open)

    def close(self) -> None:
        """Stop serving and end every hold (idempotent)."""
        with self._lock:
            server, self._server = self._server, None
            open_socks = list(self._open)
        for sock in open_socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if server is not None:
            server.shutdown()
            server.server_close()
            log.debug("hold_server_closed", held=len(open_socks))
