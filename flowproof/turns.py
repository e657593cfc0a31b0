"""The normalized types every part of flowproof shares.

Wire codecs (``flowproof.wire``) turn provider bytes into these; everything above
``wire/`` (trajectory, assertions, replay reports, compare) reads only these and
never branches on the provider.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class FinishReason(StrEnum):
    """How a model turn ended, unified across providers (the raw reason is kept aside)."""

    STOP = "stop"
    TOOL_CALLS = "tool-calls"
    LENGTH = "length"
    CONTENT_FILTER = "content-filter"
    ERROR = "error"
    # A provider reason flowproof does not know yet; compare treats it like any other label.
    OTHER = "other"


_UNPARSED = object()


def parse_arguments(raw: str) -> Any | None:
    """Parse a tool call's wire argument string; ``None`` when it is not valid JSON."""
    try:
        return json.loads(raw)
    except (ValueError, TypeError, RecursionError):
        return None


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call the model asked for.

    ``arguments_raw`` is the argument string exactly as assembled from the wire
    (key order and whitespace included: the cassette pins it byte-exactly).
    ``arguments`` is its parsed JSON, or ``None`` when it is not valid JSON
    (``is_json`` tells the two ``None`` cases apart).
    """

    name: str
    arguments_raw: str
    call_id: str | None = None
    arguments: Any = field(default=_UNPARSED, compare=False)
    is_json: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        if self.arguments is _UNPARSED:
            try:
                parsed = json.loads(self.arguments_raw) if self.arguments_raw.strip() else {}
                ok = True
            except (ValueError, RecursionError):
                parsed, ok = None, False
            object.__setattr__(self, "arguments", parsed)
            object.__setattr__(self, "is_json", ok)

    def canonical_arguments(self) -> str:
        """Arguments as canonical JSON (sorted keys), or the raw string when not JSON."""
        if not self.is_json:
            return self.arguments_raw
        return json.dumps(self.arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A tool result the agent sends back to the model in a request.

    ``name`` is resolved through the call id where the provider does not repeat it.
    """

    call_id: str | None
    name: str | None
    content: str


@dataclass(frozen=True, slots=True)
class RequestView:
    """What a model request asks, provider-neutral. Built by a wire codec from exact bytes.

    ``system`` joins every system/developer instruction of the request into one
    string (the thread key of the reply rule). ``roles`` lists message roles in
    order, ``tools`` the tool names offered, in order. ``text_size`` counts the
    characters of request text (system, messages, tool schemas): the reply rule's
    tie-break. ``prompt`` is the text of the newest user message (not tool
    results), its text parts joined by newlines; "" when there is none.
    ``previous_response_id`` names the response a request continues (the Responses API:
    the request then carries only the new input), None when it starts from its own input.
    """

    provider: str
    model: str | None
    system: str
    tools: tuple[str, ...]
    roles: tuple[str, ...]
    tool_results: tuple[ToolResult, ...]
    stream: bool
    text_size: int
    prompt: str = ""
    previous_response_id: str | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    """The tokens one model call used, as its provider reported them (`flowproof.wire.usage`).

    ``input_tokens`` counts every input token, cache reads and writes included (the cache
    counts are parts of it); ``output_tokens`` every output token, reasoning included.
    """

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class ResponseView:
    """What the model answered, provider-neutral, from a JSON body or a complete SSE stream.

    ``usage`` is None when the response reported none (a stream without its usage chunk).
    ``response_id`` is the id a later request may continue from (``previous_response_id``),
    where the API has one."""

    text: str
    tool_calls: tuple[ToolCall, ...]
    finish_reason: FinishReason
    raw_finish_reason: str | None = None
    model: str | None = None
    usage: Usage | None = field(default=None, compare=False)
    response_id: str | None = None


@dataclass(frozen=True, slots=True)
class Turn:
    """One model call: the request and (unless the call failed) the response.

    ``index`` is the turn's position in the recording (the order calls completed in).
    An ``abandoned`` turn is a call the client gave up on before its response ended:
    ``response`` is what arrived, if it reads, and the trajectory never counts it.
    """

    index: int
    request: RequestView
    response: ResponseView | None
    abandoned: bool = False
    #: The request body as recorded (parsed JSON, volatile spans as placeholders), for the rules
    #: that read more than the view: conversations and the cache prefix. None when not given.
    body: Any = field(default=None, compare=False, repr=False)
