"""What the fake server received and sent: requests and exchanges, captured byte for byte."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ReceivedRequest:
    """One request the server received, in arrival order.

    ``headers`` has lowercase keys; ``json`` is the parsed body or ``None`` when
    it is not JSON; ``api`` is the provider id it was answered as, or ``None``;
    ``http_version`` is ``HTTP/1.1`` (or what an HTTP/1 client said) or
    ``HTTP/2``; ``tls`` says whether the connection was TLS. A request frame received on a
    WebSocket has ``method`` ``"WEBSOCKET"``, the upgrade's path and headers, and ``websocket``
    the connection's number (1 for the first upgraded connection); ``None`` for HTTP requests.
    """

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    json: Any
    api: str | None
    http_version: str = "HTTP/1.1"
    tls: bool = False
    websocket: int | None = None


@dataclass(frozen=True, slots=True)
class SentResponse:
    """What the server wrote back for one request, as handed to the socket.

    ``headers`` are the response headers in the order sent (lowercase names).
    ``chunks`` are the payloads written: the whole body for a plain answer, one
    element per stream event (or JSON-array piece) for a stream, WITHOUT the
    chunked transfer framing; ``body`` joins them, i.e. the de-chunked payload a
    client reads. ``complete`` is False when a scripted cut (``cut_after``) or a
    stop ended the answer early, or while the answer is still being written.
    """

    status: int
    headers: tuple[tuple[str, str], ...]
    chunks: tuple[bytes, ...]
    complete: bool

    @property
    def body(self) -> bytes:
        """The payload bytes exactly as written, chunk framing removed."""
        return b"".join(self.chunks)

    @property
    def content_type(self) -> str:
        """The ``content-type`` header sent, or ``""``."""
        return next((v for k, v in self.headers if k.lower() == "content-type"), "")


#: How an exchange ended (`Exchange.outcome`); ``None`` while the answer is still being written.
ENDED = "ended"  # the server wrote the whole answer and ended the body
CUT = "cut"  # a scripted ``cut_after`` ended it early (the server closed or reset)
CLIENT_CLOSED = "client-closed"  # the client closed its connection before the body ended
CLIENT_RESET = "client-reset"  # the client reset its HTTP/2 stream (RST_STREAM) before the body ended
STOPPED = "stopped"  # the server was stopped mid-answer
OUTCOMES = (ENDED, CUT, CLIENT_CLOSED, CLIENT_RESET, STOPPED)


@dataclass(frozen=True, slots=True)
class Exchange:
    """One received request with the response written for it (``None`` until its headers went out).

    ``outcome`` says how it ended (one of `OUTCOMES`, ``None`` while in
    progress); a client that leaves is normal traffic, never a server fault.
    ``reset_code`` is the HTTP/2 error code of a client's RST_STREAM (8 is
    CANCEL), else ``None``.
    """

    request: ReceivedRequest
    response: SentResponse | None
    outcome: str | None = None
    reset_code: int | None = None


class ExchangeRecord:
    """The mutable, lock-guarded record behind one `Exchange`, filled in by the handler thread."""

    __slots__ = ("chunks", "complete", "headers", "lock", "outcome", "request", "reset_code", "settled", "status")

    def __init__(self, request: ReceivedRequest) -> None:
        self.request = request
        self.lock = threading.Lock()
        self.status: int | None = None
        self.headers: tuple[tuple[str, str], ...] = ()
        self.chunks: list[bytes] = []
        self.complete = False
        self.outcome: str | None = None
        self.reset_code: int | None = None
        self.settled = threading.Event()

    def start(self, status: int, headers: Iterable[tuple[str, str]]) -> None:
        with self.lock:
            self.status, self.headers = status, tuple(headers)

    def add(self, payload: bytes, *, last: bool) -> None:
        # Recorded BEFORE the bytes are written, so a client that has read them
        # always finds them here (no race with the handler thread).
        with self.lock:
            self.chunks.append(payload)
            self.complete = self.complete or last

    def finish(self) -> None:
        with self.lock:
            self.complete = True

    def settle(self, outcome: str, reset_code: int | None = None) -> None:
        """Say how the exchange ended; the first word stands."""
        with self.lock:
            if self.outcome is None:
                self.outcome, self.reset_code = outcome, reset_code
        self.settled.set()

    def snapshot(self) -> Exchange:
        with self.lock:
            if self.status is None:
                return Exchange(self.request, None, self.outcome, self.reset_code)
            response = SentResponse(self.status, self.headers, tuple(self.chunks), self.complete)
            return Exchange(self.request, response, self.outcome, self.reset_code)
