"""What every renderer shares: the rendered answer, its context, SSE framing, splitting and error bodies."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flowproof.testing.detect import ANTHROPIC, GEMINI
from flowproof.testing.livelike import LiveLike
from flowproof.testing.script import ScriptedCall

#: Every ``created`` / ``created_at`` timestamp the server emits: recordings must not depend on the clock.
FIXED_CREATED = 1700000000
#: The model named in responses when the request names none.
DEFAULT_MODEL = "fake-model"

@dataclass(frozen=True, slots=True)
class Rendered:
    """A response ready to write: a whole body, or a list of stream events (one HTTP chunk each)."""

    status: int
    content_type: str
    body: bytes = b""
    events: tuple[bytes, ...] | None = None
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Context:
    """What a renderer needs besides the reply: numbering, model, usage and request flags."""

    n: int  # 1-based number of this model call on this server
    call_ids: tuple[int, ...]  # one server-wide counter value per tool call
    model: str
    body: Mapping[str, Any]
    input_tokens: int
    output_tokens: int
    live: LiveLike | None = None

    def ident(self, plain: str, prefix: str, kind: str, index: int = 0, *, length: int = 24) -> str:
        """The counter id ``plain``, or in live-like mode a fresh ``prefix`` + random id."""
        if self.live is None or not self.live.ids:
            return plain
        return self.live.mint(prefix, self.n, kind, index, length=length)

    def tool_call_ids(self, calls: Sequence[ScriptedCall], plain_prefix: str, live_prefix: str,
                      *, length: int = 24) -> list[str | None]:
        """One id per call: fresh in live-like mode, else the scripted one, else ``plain_prefix`` + counter.

        An empty ``plain_prefix`` means the API sends no id unless one is
        scripted (Gemini): those calls get ``None``.
        """
        ids: list[str | None] = []
        for i, (call, k) in enumerate(zip(calls, self.call_ids, strict=True)):
            if self.live is not None and self.live.ids:
                ids.append(self.live.mint(live_prefix, self.n, "call", i, length=length))
            elif call.call_id is not None:
                ids.append(call.call_id)
            else:
                ids.append(f"{plain_prefix}{k}" if plain_prefix else None)
        return ids


def compact(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def pretty(data: Any) -> bytes:
    # OpenAI and Gemini pretty-print non-streamed bodies; mirror it.
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()


def sse(data: Any, event: str | None = None, eol: str = "\n") -> bytes:
    payload = data if isinstance(data, str) else compact(data)
    head = f"event: {event}{eol}" if event else ""
    return f"{head}data: {payload}{eol}{eol}".encode()


def split_text(text: str) -> list[str]:
    """Text cut into word-sized pieces that join back to exactly ``text``."""
    return [piece for piece in re.split(r"(?<=\s)(?=\S)", text) if piece]


def split_arguments(raw: str) -> list[str]:
    """An argument string cut into several pieces (at least two when it has two characters)."""
    if len(raw) < 2:
        return [raw] if raw else []
    size = max(1, min(16, math.ceil(len(raw) / 4)))
    return [raw[i : i + size] for i in range(0, len(raw), size)]


def arguments_object(call: ScriptedCall) -> dict[str, Any] | None:
    try:
        value = json.loads(call.arguments) if call.arguments.strip() else {}
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _status_word(status: int) -> str:
    return {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
            404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 499: "CANCELLED", 500: "INTERNAL",
            503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}.get(status, "UNKNOWN")


def error_body(api: str | None, status: int, message: str) -> bytes:
    """An error body in ``api``'s own format (OpenAI's shape when the API is unknown)."""
    if api == ANTHROPIC:
        kind = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                529: "overloaded_error"}.get(status, "api_error")
        return compact({"type": "error", "error": {"type": kind, "message": message}}).encode()
    if api == GEMINI:
        return pretty({"error": {"code": status, "message": message, "status": _status_word(status)}})
    kind = {400: "invalid_request_error", 401: "invalid_request_error", 403: "invalid_request_error",
            404: "invalid_request_error", 429: "requests"}.get(status, "server_error")
    code = "rate_limit_exceeded" if status == 429 else None
    return pretty({"error": {"message": message, "type": kind, "param": None, "code": code}})


def render_error(api: str | None, status: int, message: str, retry_after: float | None = None) -> Rendered:
    headers: tuple[tuple[str, str], ...] = ()
    if retry_after is not None:
        value = str(int(retry_after)) if float(retry_after).is_integer() else repr(float(retry_after))
        headers = (("retry-after", value),)
    return Rendered(status, "application/json", body=error_body(api, status, message), headers=headers)

