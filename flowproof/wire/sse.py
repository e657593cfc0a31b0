"""Server-sent events: framing over arbitrary chunk boundaries, and exact re-emission."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One SSE event block.

    ``raw`` is the block's exact text including its terminating blank line, so
    ``b"".join(e.raw.encode() for e in events)`` reproduces the stream byte for
    byte. ``data`` joins the block's ``data:`` lines with ``\\n`` as the SSE spec says.
    """

    raw: str
    data: str
    event: str | None = None
    id: str | None = None
    retry: int | None = None
