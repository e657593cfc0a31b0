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
    it is not JSON; ``api`` is the provider id it was answered as, or ``None``.
    """

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    json: Any
    api: str | None


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


@dataclass(frozen=True, slots=True)
class Exchange:
    """One received request with the response written for it (``None`` until its headers went out)."""

    request: ReceivedRequest
    response: SentResponse | None


class ExchangeRecord:
    """The mutable, lock-guarded record behind one `Exchange`, filled in by the handler thread."""

    __slots__ = ("chunks", "complete", "headers", "lock", "request", "status")

    def __init__(self, request: ReceivedRequest) -> None:
        self.request = request
        self.lock = threading.Lock()
        self.status: int | None = None
        self.headers: tuple[tuple[str, str], ...] = ()
        self.chunks: list[bytes] = []
        self.complete = False

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

    def snapshot(self) -> Exchange:
        with self.lock:
            if self.status is None:
                return Exchange(self.request, None)
            return Exchange(self.request, SentResponse(self.status, self.headers, tuple(self.chunks),
                                                       self.complete))
