"""What the server needs from a connection to write one answer, whatever the HTTP version.

HTTP/1.1 (`flowproof.testing.server`) and HTTP/2 (`flowproof.testing.http2`)
each implement `Transport`; `write_answer` is the one place that decides when
each byte goes out, so delays, cuts and the late body end behave the same on
both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from flowproof.testing.base import Rendered
from flowproof.testing.capture import CLIENT_CLOSED, CUT, ENDED, ExchangeRecord
from flowproof.testing.script import Reply

__all__ = ["Gone", "Transport", "write_answer"]


class Gone(Exception):
    """The answer cannot go on: the client left (closed or reset) or the server is stopping."""

    def __init__(self, outcome: str, reset_code: int | None = None) -> None:
        super().__init__(outcome)
        self.outcome = outcome
        self.reset_code = reset_code


class Transport(Protocol):
    """One response on one connection (HTTP/1.1) or stream (HTTP/2). Every method may raise `Gone`."""

    def headers_sent(self, headers: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        """The headers `begin` will send for ``headers`` (its own added, framing ones adapted); no I/O."""
        ...

    def begin(self, status: int, headers: Sequence[tuple[str, str]]) -> None:
        """Send the status line / HEADERS frame with ``headers``."""
        ...

    def send(self, payload: bytes) -> None:
        """Send body bytes (one HTTP/1.1 chunk when the body is chunked)."""
        ...

    def end(self) -> None:
        """End the body (the terminating chunk, or END_STREAM)."""
        ...

    def abort(self) -> None:
        """Stop without ending the body: the connection is closed, or the stream reset."""
        ...

    def wait(self, seconds: float) -> None:
        """Pause ``seconds``, returning early by raising `Gone` when the client leaves or the server stops."""
        ...


def write_answer(transport: Transport, rendered: Rendered, reply: Reply | None, record: ExchangeRecord | None,
                 *, end_delay: float = 0.0) -> None:
    """Write ``rendered`` with the reply's delays and faults, and settle ``record`` with how it ended.

    Each payload is recorded BEFORE it is written, so a client that has read
    it always finds it in the exchange.
    """
    cut = reply.cut_after if reply else None
    first_chunk_delay = reply.first_chunk_delay if reply else 0.0
    chunk_delay = reply.chunk_delay if reply else 0.0
    if reply is not None and reply.end_delay is not None:
        end_delay = reply.end_delay
    try:
        transport.wait(reply.first_byte_delay if reply else 0.0)
        if rendered.events is None:
            transport.wait(first_chunk_delay)
            headers = [("content-type", rendered.content_type), ("content-length", str(len(rendered.body))),
                       *rendered.headers]
            body = rendered.body if cut is None else rendered.body[:cut]
            if record is not None:
                record.start(rendered.status, transport.headers_sent(headers))
                record.add(body, last=cut is None or cut >= len(rendered.body))
            transport.begin(rendered.status, headers)
            transport.send(body)
            if cut is not None:
                transport.abort()
                _settle(record, CUT)
                return
            transport.end()
            _settle(record, ENDED)
            return
        headers = [("content-type", rendered.content_type), ("cache-control", "no-cache"),
                   ("transfer-encoding", "chunked"), *rendered.headers]
        if record is not None:
            record.start(rendered.status, transport.headers_sent(headers))
            if not rendered.events:
                record.finish()
        transport.begin(rendered.status, headers)
        for i, event in enumerate(rendered.events):
            if cut is not None and i >= cut:
                transport.abort()
                _settle(record, CUT)
                return
            transport.wait(first_chunk_delay if i == 0 else chunk_delay)
            if record is not None:
                record.add(event, last=i == len(rendered.events) - 1)
            transport.send(event)
        # The late end: every event is out, the body is not over yet. A client that
        # stops reading at the terminal event leaves here, as it does with a real server.
        transport.wait(end_delay)
        transport.end()
        _settle(record, ENDED)
    except Gone as gone:
        _settle(record, gone.outcome, gone.reset_code)
        try:
            transport.abort()
        except Gone:
            pass
    except OSError:
        # A write to a connection the client already dropped (closed pipe, reset).
        _settle(record, CLIENT_CLOSED)


def _settle(record: ExchangeRecord | None, outcome: str, reset_code: int | None = None) -> None:
    if record is not None:
        record.settle(outcome, reset_code)
