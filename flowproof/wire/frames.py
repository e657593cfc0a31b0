"""Model APIs spoken over a WebSocket: frames, and a frame codec per API.

A WebSocket connection to a model API carries turns as frames: a client frame
asks (OpenAI Responses: ``response.create``), and the server's frames up to the
API's terminal event answer it. A `FrameCodec` says, for one API, which upgrade
it is, which client frame starts a turn, which server frame ends it, what the
error frame the API sends looks like, and how the server frames read as the
events of its HTTP codec (``codec.parse_events``), so everything above ``wire/``
reads a WebSocket turn exactly like an HTTP one.

Only the Responses API has a frame codec today (`flowproof.wire.openai_responses`);
the Realtime API or Gemini Live would each add one (docs/cassette.md, "WebSocket
connections").

Pure.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from flowproof.wire import openai_responses
from flowproof.wire.base import Frame, FrameCodec
from flowproof.wire.sse import SSEEvent, make_event

__all__ = ["Frame", "FrameCodec", "detect_frames", "frame_codec_by_name", "frames_as_events"]


def frames_as_events(frames: Sequence[Frame]) -> tuple[SSEEvent, ...]:
    """Server frames as the events of an SSE stream, for the HTTP codec's ``parse_events``
    (the Responses API sends the same JSON events either way); binary frames are skipped."""
    return tuple(make_event(f.text) for f in frames if f.text is not None)


#: Every frame codec, in detection order.
_CODECS: tuple[FrameCodec, ...] = (openai_responses.FRAMES,)


def detect_frames(host: str, path: str, extra_hosts: Collection[str] = ()) -> FrameCodec | None:
    """The frame codec of a WebSocket upgrade to a model API, or None (any host serves the
    APIs, as for HTTP; ``extra_hosts`` changes nothing here, the path decides)."""
    path = path.split("?", 1)[0]
    for codec in _CODECS:
        if codec.matches_upgrade(host, path):
            return codec
    return None


def frame_codec_by_name(name: str) -> FrameCodec | None:
    """The frame codec whose turns a cassette names ``name`` (its provider), if any."""
    return next((c for c in _CODECS if c.name == name), None)
