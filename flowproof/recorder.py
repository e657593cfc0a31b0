"""Record assembly: a forwarded model call's request and response as a `RecordedTurn`.

The one owner of the cassette form of a live call (record and compare alike).
The proxy adapter hands it plain data — the prepared request, the response
status and headers, then either the tapped SSE stream or the whole body — and
gets back the turn it logs and stores.

A stream is tapped, not buffered: each chunk goes on to the client unchanged
while a copy feeds an `SSEDecoder` (`StreamTap.feed`). The tap keeps every
event and whether the stream reached its end (`StreamTap.ended`), so a caller
can tell a call that completed from one the client abandoned midway; today
both are assembled the same way, from the events seen.

Pure: no I/O, no mitmproxy.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from flowproof.cassette import RecordedRequest, RecordedResponse, RecordedTurn
from flowproof.normalize import Normalizer
from flowproof.redact import filter_headers, redact_url
from flowproof.request_key import PreparedRequest, parse_body
from flowproof.wire import parse_sse
from flowproof.wire.base import Codec
from flowproof.wire.sse import SSEDecoder, SSEEvent, encode_events

__all__ = ["PendingCall", "StreamTap", "is_event_stream", "response_from_body", "response_from_stream"]

Headers = Iterable[tuple[str, str]]


def is_event_stream(content_type: str) -> bool:
    """True for a ``text/event-stream`` content type (any case, any parameters)."""
    return "text/event-stream" in content_type.lower()


@dataclass(slots=True)
class StreamTap:
    """The recorder's copy of an SSE response while the client receives it.

    `feed` is called with every chunk and once with ``b""`` at the end of the
    stream (mitmproxy's ``flow.response.stream`` contract); it returns the chunk
    unchanged. ``ended`` is True once that end was seen.
    """

    decoder: SSEDecoder = field(default_factory=SSEDecoder)
    events: list[SSEEvent] = field(default_factory=list)
    ended: bool = False

    def feed(self, chunk: bytes) -> bytes:
        """Decode a copy of ``chunk`` (``b""``: the stream ended) and pass it on unchanged."""
        if chunk:
            self.events.extend(self.decoder.feed(chunk))
        else:
            self.finish()
        return chunk

    def finish(self) -> tuple[SSEEvent, ...]:
        """Flush the decoder (idempotent) and return every event seen."""
        self.events.extend(self.decoder.close())
        self.ended = True
        return tuple(self.events)


@dataclass(slots=True)
class PendingCall:
    """A forwarded model call waiting for its response: the request as the cassette stores it."""

    codec: Codec
    request: RecordedRequest
    tap: StreamTap | None = None

    @classmethod
    def start(cls, codec: Codec, method: str, url: str, headers: Headers, prepared: PreparedRequest) -> PendingCall:
        """The call for a request; ``url`` and ``headers`` are redacted here, before anything is kept."""
        request = RecordedRequest(method, redact_url(url), filter_headers(headers), prepared.sha256, prepared.body)
        return cls(codec, request)

    def tap_stream(self) -> StreamTap:
        """Start tapping the response stream (its content type said SSE)."""
        self.tap = StreamTap()
        return self.tap

    def turn(self, index: int, response: RecordedResponse) -> RecordedTurn:
        """The completed call as turn ``index``."""
        return RecordedTurn(index=index, provider=self.codec.name, request=self.request, response=response)


def response_from_stream(status: int, headers: Headers, tap: StreamTap, normalizer: Normalizer) -> RecordedResponse:
    """The recorded form of a tapped SSE response (paths made portable)."""
    events = tap.finish()
    if not normalizer.is_identity:
        data = encode_events(events)
        portable = normalizer.portable(data)
        if portable != data:
            events = tuple(parse_sse(portable))
    return RecordedResponse(status, filter_headers(headers), events=events)


def response_from_body(
    status: int, headers: Headers, content_type: str, content: bytes, normalizer: Normalizer
) -> RecordedResponse:
    """The recorded form of a buffered response: SSE events, a JSON body, or text."""
    data = normalizer.portable(content)
    ctype = content_type.lower()
    kept = filter_headers(headers)
    if is_event_stream(ctype):
        return RecordedResponse(status, kept, events=tuple(parse_sse(data)))
    if not data:
        return RecordedResponse(status, kept)
    parsed: Any = parse_body(data) if "json" in ctype else None
    if parsed is not None and not isinstance(parsed, str):
        return RecordedResponse(status, kept, body=parsed)
    return RecordedResponse(status, kept, text=data.decode("utf-8", "surrogateescape"))
