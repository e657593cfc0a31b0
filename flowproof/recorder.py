"""Record assembly: a forwarded model call's request and response as a `RecordedTurn`.

The one owner of the cassette form of a live call (record and compare alike).
The proxy adapter hands it plain data — the prepared request, the response
status and headers, then either the tapped SSE stream or the whole body — and
gets back the turn it logs and stores.

A stream is tapped, not buffered: each chunk goes on to the client unchanged
while a copy feeds an `SSEDecoder` (`StreamTap.feed`). The tap keeps every
event and whether one of them was the API's terminal event (`StreamTap.complete`,
from `Codec.is_terminal_event`).

A call is complete when its response carried the terminal event, or, not
streamed, its whole body (docs/design.md, "Complete and abandoned calls"). A
client that leaves after that point is normal: `PendingCall.left_turn` gives the
complete turn. A client that leaves before it abandoned the call:
`PendingCall.left_turn` gives an abandoned turn with what reached the client
(the status, headers and events; nothing when no response had started).

Pure: no I/O, no mitmproxy.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from flowproof.cassette import WEBSOCKET_METHOD, RecordedRequest, RecordedResponse, RecordedTurn
from flowproof.normalize import Normalizer
from flowproof.redact import filter_headers, redact_url
from flowproof.request_key import PreparedRequest, parse_body
from flowproof.wire import parse_sse
from flowproof.wire.base import Codec, Frame, FrameCodec
from flowproof.wire.sse import SSEDecoder, SSEEvent, encode_events

__all__ = [
    "PendingCall",
    "PendingFrames",
    "StreamTap",
    "is_event_stream",
    "response_from_body",
    "response_from_stream",
]

Headers = Iterable[tuple[str, str]]


def is_event_stream(content_type: str) -> bool:
    """True for a ``text/event-stream`` content type (any case, any parameters)."""
    return "text/event-stream" in content_type.lower()


@dataclass(slots=True)
class StreamTap:
    """The recorder's copy of an SSE response while the client receives it.

    `feed` is called with every chunk and once with ``b""`` at the end of the
    stream (mitmproxy's ``flow.response.stream`` contract); it returns the chunk
    unchanged. ``ended`` is True once that end was seen; ``complete`` once an
    event was ``codec``'s terminal event (without a codec: once the body ended).
    """

    codec: Codec | None = None
    decoder: SSEDecoder = field(default_factory=SSEDecoder)
    events: list[SSEEvent] = field(default_factory=list)
    ended: bool = False
    complete: bool = False

    def feed(self, chunk: bytes) -> bytes:
        """Decode a copy of ``chunk`` (``b""``: the stream ended) and pass it on unchanged."""
        if chunk:
            self._add(self.decoder.feed(chunk))
        else:
            self.finish()
        return chunk

    def _add(self, events: list[SSEEvent]) -> None:
        codec = self.codec
        if codec is not None and not self.complete:
            self.complete = any(codec.is_terminal_event(e) for e in events)
        self.events.extend(events)

    def finish(self) -> tuple[SSEEvent, ...]:
        """Flush the decoder (idempotent) and return every event seen."""
        self._add(self.decoder.close())
        self.ended = True
        if self.codec is None:
            self.complete = True
        return tuple(self.events)


@dataclass(slots=True)
class PendingCall:
    """A forwarded model call waiting for its response: the request as the cassette stores it."""

    codec: Codec
    request: RecordedRequest
    tap: StreamTap | None = None
    #: The response status and headers once they arrived (`response_started`).
    status: int | None = None
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def start(
        cls, codec: Codec, method: str, url: str, headers: Headers, prepared: PreparedRequest
    ) -> PendingCall:
        """The call for a request; ``url`` and ``headers`` are redacted here, before anything is kept."""
        request = RecordedRequest(
            method, redact_url(url), filter_headers(headers, request=True), prepared.sha256, prepared.body
        )
        return cls(codec, request)

    def response_started(self, status: int, headers: Headers) -> None:
        """The response's status and headers arrived (they are what a client saw first)."""
        self.status = status
        self.headers = tuple(headers)

    def tap_stream(self) -> StreamTap:
        """Start tapping the response stream (its content type said SSE)."""
        self.tap = StreamTap(self.codec)
        return self.tap

    @property
    def complete(self) -> bool:
        """True once the streamed response carried the API's terminal event."""
        return self.tap is not None and self.tap.complete

    def turn(self, index: int, response: RecordedResponse) -> RecordedTurn:
        """The completed call as turn ``index``."""
        return RecordedTurn(
            index=index, provider=self.codec.name, request=self.request, response=response
        )

    def left_turn(self, index: int, normalizer: Normalizer) -> RecordedTurn:
        """Turn ``index`` for a call whose client left (closed, reset, or the agent exited)
        before the response body ended: complete when the terminal event had arrived, else
        abandoned with what reached the client."""
        tap = self.tap
        if tap is not None and self.status is not None and self.complete:
            return self.turn(index, response_from_stream(self.status, self.headers, tap, normalizer))
        response: RecordedResponse | None = None
        if tap is not None and self.status is not None:
            # The complete events only: a half-received last event is not flushed into a whole one.
            response = _stream_response(self.status, self.headers, tuple(tap.events), normalizer)
        # A buffered (not streamed) response reaches the client only whole: nothing did.
        return RecordedTurn(
            index=index, provider=self.codec.name, request=self.request, response=response, abandoned=True
        )


@dataclass(slots=True)
class PendingFrames:
    """A turn spoken over a WebSocket: its request frame, then the server frames as they pass.

    Complete once a frame was the API's terminal frame (`FrameCodec.is_terminal`); a client
    that closes the connection before that abandoned the turn, as for an HTTP stream.
    """

    codec: Codec
    frames_codec: FrameCodec
    request: RecordedRequest
    connection: int
    frames: list[Frame] = field(default_factory=list)
    complete: bool = False

    @classmethod
    def start(
        cls, frames_codec: FrameCodec, codec: Codec, url: str, headers: Headers, prepared: PreparedRequest,
        connection: int,
    ) -> PendingFrames:
        """The turn of a request frame; ``url`` (the upgrade's) and ``headers`` are redacted here."""
        request = RecordedRequest(
            WEBSOCKET_METHOD, redact_url(url), filter_headers(headers, request=True), prepared.sha256, prepared.body
        )
        return cls(codec, frames_codec, request, connection)

    def add(self, frame: Frame) -> bool:
        """A server frame of this turn passed to the client; True once the turn is complete."""
        self.frames.append(frame)
        if self.frames_codec.is_terminal(frame):
            self.complete = True
        return self.complete

    def turn(self, index: int, normalizer: Normalizer) -> RecordedTurn:
        """Turn ``index``: complete, or abandoned with the frames that reached the client
        (no response at all when none did). Paths in the frames are made portable."""
        frames = tuple(_portable_frame(f, normalizer) for f in self.frames)
        response = RecordedResponse(101, {}, frames=frames) if frames or self.complete else None
        return RecordedTurn(
            index=index, provider=self.codec.name, request=self.request, response=response,
            abandoned=not self.complete, connection=self.connection,
        )


def _portable_frame(frame: Frame, normalizer: Normalizer) -> Frame:
    if frame.text is None or normalizer.is_identity:
        return frame
    return Frame(text=normalizer.portable(frame.content).decode("utf-8", "surrogateescape"))


def response_from_stream(
    status: int, headers: Headers, tap: StreamTap, normalizer: Normalizer
) -> RecordedResponse:
    """The recorded form of a tapped SSE response (paths made portable)."""
    return _stream_response(status, headers, tap.finish(), normalizer)


def _stream_response(
    status: int, headers: Headers, events: tuple[SSEEvent, ...], normalizer: Normalizer
) -> RecordedResponse:
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
