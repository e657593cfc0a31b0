"""The seam between provider bytes and the normalized model: the `Codec` protocol.

One codec per model API (``openai_chat``, ``openai_responses``, ``anthropic``,
``gemini``). Every method is pure: bytes in, `flowproof.model` values or bytes
out. A body that is not what the codec expects raises `flowproof.errors.WireError`
naming the provider and the field, never a raw KeyError/TypeError.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from flowproof.model import RequestView, ResponseView
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

    def rewrite_tool_results(self, body: bytes, results: Mapping[str, Any]) -> bytes:
        """Replace the content of every tool result whose tool name is in ``results``.

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
