"""The seam between provider bytes and the normalized model: the `Codec` protocol.

One codec per model API (``openai_chat``, ``openai_responses``, ``anthropic``,
``gemini``). Every method is pure: bytes in, `flowproof.turns` values or bytes
out. A body that is not what the codec expects raises `flowproof.errors.WireError`
naming the provider and the field, never a raw KeyError/TypeError.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from flowproof.turns import RequestView, ResponseView
from flowproof.wire.sse import SSEEvent


class Codec(Protocol):
    """What flowproof needs from one model API."""

    #: Stable provider id stored in cassettes: "openai-chat", "openai-responses", "anthropic", "gemini".
    name: str

    def matches(self, method: str, host: str, path: str) -> bool:
        """True when this request (``path`` without the query string) is a model call of this API."""
        ...

    def is_stream_request(self, body: bytes, path: str, query: str) -> bool:
        """True when the request asks for an SSE stream (a body flag, or Gemini's path/``alt=sse``)."""
        ...

    def parse_request(self, body: bytes) -> RequestView:
        """The provider-neutral view of a request body."""
        ...

    def view_request(self, body: Any) -> RequestView:
        """`parse_request` of a body parsed already (a cassette stores parsed JSON: views
        never serialize it in order to parse it again)."""
        ...

    def parse_response(self, body: bytes) -> ResponseView:
        """The view of a complete non-streamed JSON response body."""
        ...

    def view_response(self, body: Any) -> ResponseView:
        """`parse_response` of a body parsed already."""
        ...

    def parse_events(self, events: Sequence[SSEEvent]) -> ResponseView:
        """The view of a complete SSE stream, assembled exactly as a client would."""
        ...

    def is_terminal_event(self, event: SSEEvent) -> bool:
        """True for the event that ends this API's stream: once a client has it, the call is
        complete, whatever happens to the connection after (docs/design.md, "Complete and
        abandoned calls")."""
        ...

    def path_fields(self, path: str) -> dict[str, str]:
        """Request fields this API names in the URL path rather than the body, keyed by their
        `RequestView` field name (Gemini: ``{"model": …}``); empty for the others. The replay
        key and the divergence report cover them like the body."""
        ...

    def rewrite_tool_results(
        self, body: bytes, results: Mapping[str, Any], call_names: Mapping[str, str] | None = None
    ) -> bytes:
        """Replace the content of every tool result whose tool name is in ``results``.

        ``call_names`` (call id -> tool name, from earlier responses) names the calls a body
        answers without carrying them: a Responses continuation by ``previous_response_id``
        sends only the tool output. APIs whose requests carry the calls ignore it.

        Deterministic: the same input gives the same bytes. When nothing is
        replaced the body is returned unchanged (the same bytes object content).
        """
        ...

    def error_body(self, status: int, message: str) -> bytes:
        """An error response body in this provider's own error format."""
        ...

    def error_text(self, body: Any) -> str | None:
        """The message of a parsed error response body (the inverse of `error_body`),
        or None when the body is not in this provider's error shape."""
        ...


@dataclass(frozen=True, slots=True)
class Frame:
    """One WebSocket message, reassembled: ``text`` for a text frame, else ``data`` (binary)."""

    text: str | None = None
    data: bytes | None = None

    @classmethod
    def of(cls, content: bytes, is_text: bool) -> Frame:
        """The frame of a message's bytes (text frames are UTF-8 by the protocol)."""
        return cls(text=content.decode("utf-8", "surrogateescape")) if is_text else cls(data=content)

    @property
    def is_text(self) -> bool:
        return self.text is not None

    @property
    def content(self) -> bytes:
        """The bytes to send back."""
        if self.text is not None:
            return self.text.encode("utf-8", "surrogateescape")
        return self.data or b""

    def to_json(self) -> dict[str, str]:
        """``{"text": …}`` or ``{"binary": <base64>}``, as the cassette stores it."""
        if self.text is not None:
            return {"text": self.text}
        return {"binary": base64.b64encode(self.data or b"").decode("ascii")}

    @classmethod
    def from_json(cls, obj: object) -> Frame:
        """The inverse of `to_json`; ValueError names what is wrong."""
        if isinstance(obj, dict) and isinstance(obj.get("text"), str) and len(obj) == 1:
            return cls(text=obj["text"])
        if isinstance(obj, dict) and isinstance(obj.get("binary"), str) and len(obj) == 1:
            try:
                return cls(data=base64.b64decode(obj["binary"], validate=True))
            except ValueError:
                raise ValueError("field 'binary' is not base64") from None
        raise ValueError('a frame is {"text": "…"} or {"binary": "<base64>"}')


class FrameCodec(Protocol):
    """What flowproof needs from one model API spoken over a WebSocket."""

    #: The HTTP codec whose views read this API's turns (stored as the turn's provider).
    name: str

    def matches_upgrade(self, host: str, path: str) -> bool:
        """True when a WebSocket upgrade of ``path`` (no query) is this API."""
        ...

    def is_request(self, frame: Frame) -> bool:
        """True for a client frame that starts a turn (it is the turn's request body)."""
        ...

    def is_terminal(self, frame: Frame) -> bool:
        """True for the server frame that ends a turn: once the client has it, the turn is complete."""
        ...

    def error_frame(self, status: int, message: str) -> Frame:
        """The frame this API sends to fail a turn, saying what HTTP status it stands for."""
        ...

    def error_status(self, frame: Frame) -> int | None:
        """The HTTP status an error frame stands for (the inverse of `error_frame`), else None."""
        ...
