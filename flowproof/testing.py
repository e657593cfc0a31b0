"""A scripted fake model server for tests: the upstream every flowproof end-to-end test talks to.

`FakeModelServer` answers the four model APIs flowproof knows — OpenAI Chat
Completions, OpenAI Responses, Anthropic Messages and Gemini generateContent —
in their real wire formats, streaming or not as the request asks, from a script
of `Reply` values served in order::

    from flowproof.testing import FakeModelServer, Reply

    with FakeModelServer([Reply.tool_call("get_weather", {"city": "Paris"}),
                          Reply.text("It is sunny in Paris.")]) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="test-key")
        ...
        assert server.requests[0].json["model"] == "gpt-4o"
        exchange = server.exchanges[0]  # the request and the exact response bytes sent

It is deliberately stdlib only and imports nothing from ``flowproof.wire``: it is
an independent producer of each provider's bytes, so codec tests against it mean
something. Ids are counters and timestamps are fixed, so the same script and the
same requests give the same bytes on every run (cassettes recorded against it are
committed). Streams are written one event per HTTP chunk, each flushed, so a proxy
in between can be measured for time to first chunk.

Run it from a shell with ``python -m flowproof.testing --port N --script FILE.json``;
the script format is documented in ``docs/testing.md``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
import signal
import socket
import sys
import threading
import zlib
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any, NotRequired, TextIO, TypedDict, Unpack
from urllib.parse import parse_qsl, urlsplit

from flowproof.errors import FlowproofError

__all__ = [
    "Exchange",
    "FakeModelServer",
    "ReceivedRequest",
    "Reply",
    "Script",
    "ScriptError",
    "ScriptedCall",
    "SentResponse",
    "load_script",
    "main",
]

#: Every ``created`` / ``created_at`` timestamp the server emits: recordings must not depend on the clock.
FIXED_CREATED = 1700000000
#: The model named in responses when the request names none.
DEFAULT_MODEL = "fake-model"

# Provider ids, spelled as flowproof's codecs and cassettes spell them.
OPENAI_CHAT = "openai-chat"
OPENAI_RESPONSES = "openai-responses"
ANTHROPIC = "anthropic"
GEMINI = "gemini"

_GEMINI_PATH = re.compile(
    r"/models/(?P<model>[^/:]+):(?P<method>generateContent|streamGenerateContent)$"
)


class ScriptError(FlowproofError, ValueError):
    """A fake-server script (a `Reply` or a script JSON file) is malformed."""

    def __init__(self, where: str, reason: str) -> None:
        self.where = where
        self.reason = reason
        super().__init__(f"{where}: {reason} — see docs/testing.md for the script format")


# --------------------------------------------------------------------------- script


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    """One tool call a scripted reply makes.

    ``arguments`` is the wire argument string, sent exactly as given (it may be
    invalid JSON on purpose). ``call_id`` overrides the server's counter-based id.
    """

    name: str
    arguments: str
    call_id: str | None = None

    @classmethod
    def make(cls, name: str, arguments: Mapping[str, Any] | str, call_id: str | None = None) -> ScriptedCall:
        """A call from a name and arguments given as a dict (dumped as compact JSON) or a raw string."""
        if not isinstance(name, str) or not name:
            raise ScriptError("tool call", f"the tool name must be a non-empty string, got {name!r}")
        if isinstance(arguments, str):
            raw = arguments
        elif isinstance(arguments, Mapping):
            # Compact separators: what OpenAI models emit, so byte-level tests look realistic.
            raw = json.dumps(dict(arguments), separators=(",", ":"), ensure_ascii=False)
        else:
            raise ScriptError(
                f"tool call {name!r}",
                f"arguments must be a dict or a JSON string, got {type(arguments).__name__}",
            )
        return cls(name=name, arguments=raw, call_id=call_id)


class ReplyOptions(TypedDict):
    """Options every `Reply` factory accepts (all optional)."""

    cut_after: NotRequired[int | None]
    first_chunk_delay: NotRequired[float]
    chunk_delay: NotRequired[float]
    max_tokens: NotRequired[bool]
    model: NotRequired[str | None]


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted answer of the fake model.

    A reply carries ``content`` (text), ``calls`` (tool calls), or both; or it is
    an error (``status`` >= 400, with ``message`` and an optional ``retry_after``).
    Build one with `Reply.text`, `Reply.tool_call`, `Reply.tool_calls` or
    `Reply.error`.

    Faults, on any reply:

    - ``cut_after``: a stream is cut after this many events (the connection is
      closed without finishing the body); a non-streamed body after this many bytes.
    - ``first_chunk_delay``: seconds before the first event of a stream (headers
      go out at once), or before a non-streamed response.
    - ``chunk_delay``: seconds between stream events.

    ``max_tokens`` ends the turn as if the token limit was hit (``length``,
    ``max_tokens``, ``MAX_TOKENS``, or an incomplete response). ``model``
    overrides the model echoed from the request.
    """

    content: str = ""
    calls: tuple[ScriptedCall, ...] = ()
    status: int = 200
    message: str = ""
    retry_after: float | None = None
    cut_after: int | None = None
    first_chunk_delay: float = 0.0
    chunk_delay: float = 0.0
    max_tokens: bool = False
    model: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.content, str):
            raise ScriptError("reply", f"text must be a string, got {type(self.content).__name__}")
        if not 200 <= self.status <= 599:
            raise ScriptError("reply", f"status must be 200..599, got {self.status}")
        if self.status >= 400 and (self.content or self.calls):
            raise ScriptError("reply", "an error reply carries no text or tool calls")
        if self.status < 400 and (self.message or self.retry_after is not None):
            raise ScriptError("reply", "message and retry_after belong to error replies")
        if self.cut_after is not None and self.cut_after < 0:
            raise ScriptError("reply", f"cut_after must be >= 0, got {self.cut_after}")
        if self.first_chunk_delay < 0 or self.chunk_delay < 0:
            raise ScriptError("reply", "delays must be >= 0 seconds")
        if self.retry_after is not None and self.retry_after < 0:
            raise ScriptError("reply", "retry_after must be >= 0 seconds")

    @property
    def is_error(self) -> bool:
        """True for an error answer (HTTP status >= 400)."""
        return self.status >= 400

    @classmethod
    def text(cls, text: str, **options: Unpack[ReplyOptions]) -> Reply:
        """A plain text answer."""
        return cls(content=text, **options)

    @classmethod
    def tool_call(
        cls,
        name: str,
        arguments: Mapping[str, Any] | str,
        *,
        call_id: str | None = None,
        text: str = "",
        **options: Unpack[ReplyOptions],
    ) -> Reply:
        """An answer that calls one tool (optionally after some ``text``)."""
        return cls(content=text, calls=(ScriptedCall.make(name, arguments, call_id),), **options)

    @classmethod
    def tool_calls(
        cls,
        calls: Iterable[ScriptedCall | tuple[str, Mapping[str, Any] | str] | tuple[str, Mapping[str, Any] | str, str]],
        *,
        text: str = "",
        **options: Unpack[ReplyOptions],
    ) -> Reply:
        """An answer with parallel tool calls: ``[(name, args), (name, args, call_id), ...]``."""
        made: list[ScriptedCall] = []
        for call in calls:
            if isinstance(call, ScriptedCall):
                made.append(call)
            elif isinstance(call, tuple) and len(call) in (2, 3):
                made.append(ScriptedCall.make(*call))
            else:
                raise ScriptError("tool calls", f"expected (name, arguments[, call_id]), got {call!r}")
        if not made:
            raise ScriptError("tool calls", "give at least one call")
        return cls(content=text, calls=tuple(made), **options)

    @classmethod
    def error(
        cls,
        status: int,
        message: str = "fake model: scripted error",
        *,
        retry_after: float | None = None,
        first_chunk_delay: float = 0.0,
    ) -> Reply:
        """An HTTP error answer in the provider's own error format (``retry-after`` header when given)."""
        if status < 400:
            raise ScriptError("error reply", f"status must be >= 400, got {status}")
        return cls(status=status, message=message, retry_after=retry_after, first_chunk_delay=first_chunk_delay)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "reply") -> Reply:
        """A reply from its JSON form (see docs/testing.md); ``where`` names it in errors."""
        if not isinstance(data, Mapping):
            raise ScriptError(where, f"a reply must be an object, got {type(data).__name__}")
        unknown = set(data) - _REPLY_KEYS
        if unknown:
            raise ScriptError(where, f"unknown keys {sorted(unknown)}; allowed: {sorted(_REPLY_KEYS)}")
        options: dict[str, Any] = {}
        for key, kind in (("cut_after", int), ("first_chunk_delay", (int, float)),
                          ("chunk_delay", (int, float)), ("max_tokens", bool), ("model", str)):
            if key in data and data[key] is not None:
                value = data[key]
                if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                    raise ScriptError(where, f"{key} has the wrong type ({type(value).__name__})")
                options[key] = value
        try:
            if "error" in data:
                if "text" in data or "tool_calls" in data:
                    raise ScriptError(where, "an error reply carries no text or tool calls")
                err = data["error"]
                if not isinstance(err, Mapping) or not isinstance(err.get("status"), int):
                    raise ScriptError(where, 'error must be {"status": int, "message"?: str, "retry_after"?: number}')
                extra = set(err) - {"status", "message", "retry_after"}
                if extra:
                    raise ScriptError(where, f"unknown error keys {sorted(extra)}")
                return cls.error(
                    err["status"],
                    str(err.get("message", "fake model: scripted error")),
                    retry_after=err.get("retry_after"),
                    first_chunk_delay=options.get("first_chunk_delay", 0.0),
                )
            text = data.get("text", "")
            if not isinstance(text, str):
                raise ScriptError(where, f"text must be a string, got {type(text).__name__}")
            raw_calls = data.get("tool_calls", [])
            if not isinstance(raw_calls, list):
                raise ScriptError(where, "tool_calls must be a list of {name, arguments, id?}")
            calls: list[ScriptedCall] = []
            for i, call in enumerate(raw_calls):
                if not isinstance(call, Mapping) or "name" not in call:
                    raise ScriptError(f"{where}.tool_calls[{i}]", "a tool call needs a name")
                extra = set(call) - {"name", "arguments", "id"}
                if extra:
                    raise ScriptError(f"{where}.tool_calls[{i}]", f"unknown keys {sorted(extra)}")
                calls.append(ScriptedCall.make(call["name"], call.get("arguments", {}), call.get("id")))
            if "text" not in data and not calls:
                raise ScriptError(where, 'a reply needs "text", "tool_calls" or "error"')
            return cls(content=text, calls=tuple(calls), **options)
        except ScriptError as exc:
            if exc.where.startswith(where):
                raise
            raise ScriptError(where, exc.reason) from None


_REPLY_KEYS = frozenset(
    {"text", "tool_calls", "error", "cut_after", "first_chunk_delay", "chunk_delay", "max_tokens", "model"}
)


@dataclass(frozen=True, slots=True)
class Script:
    """A whole script: the main replies plus optional lanes.

    A lane is keyed by a substring of the system prompt: a request whose system
    prompt contains the key is answered from that lane (first matching key
    wins), so concurrent side conversations (a session-title call) get their own
    answers whatever order they arrive in.
    """

    replies: tuple[Reply, ...] = ()
    lanes: Mapping[str, tuple[Reply, ...]] = field(default_factory=dict)


def load_script(path: str | Path) -> Script:
    """Read a script JSON file: a list of replies, or ``{"replies": [...], "lanes": {...}}``."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScriptError(str(path), f"cannot read the script: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ScriptError(str(path), f"not valid JSON: {exc}") from None
    return script_from_data(data, where=str(path))


def script_from_data(data: Any, *, where: str = "script") -> Script:
    """A `Script` from already-parsed JSON (the file format of `load_script`)."""
    if isinstance(data, list):
        data = {"replies": data}
    if not isinstance(data, Mapping):
        raise ScriptError(where, "a script is a list of replies or an object with replies/lanes")
    extra = set(data) - {"replies", "lanes"}
    if extra:
        raise ScriptError(where, f"unknown keys {sorted(extra)}; allowed: replies, lanes")
    replies = data.get("replies", [])
    lanes = data.get("lanes", {})
    if not isinstance(replies, list):
        raise ScriptError(where, "replies must be a list")
    if not isinstance(lanes, Mapping) or not all(isinstance(v, list) for v in lanes.values()):
        raise ScriptError(where, "lanes must map a system-prompt substring to a list of replies")
    return Script(
        replies=tuple(Reply.from_dict(r, where=f"{where}: replies[{i}]") for i, r in enumerate(replies)),
        lanes={
            key: tuple(Reply.from_dict(r, where=f"{where}: lanes[{key!r}][{i}]") for i, r in enumerate(items))
            for key, items in lanes.items()
        },
    )


# --------------------------------------------------------------------------- requests


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


class _ExchangeRecord:
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


def detect_api(method: str, path: str) -> str | None:
    """The provider id whose model endpoint ``path`` (without the query) is, or ``None``."""
    if method != "POST":
        return None
    if path.endswith("/chat/completions"):
        return OPENAI_CHAT
    if path.endswith("/responses"):
        return OPENAI_RESPONSES
    if path.endswith("/messages"):
        return ANTHROPIC
    if _GEMINI_PATH.search(path):
        return GEMINI
    return None


def _texts(content: Any) -> list[str]:
    """Every text in a message content: a string, or a list of parts carrying ``text``."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
    return []


def system_prompt(api: str, body: Any) -> str:
    """The request's system/developer instructions joined by newlines (the lane key)."""
    if not isinstance(body, Mapping):
        return ""
    parts: list[str] = []
    if api in (OPENAI_CHAT, OPENAI_RESPONSES):
        if api == OPENAI_RESPONSES:
            parts += _texts(body.get("instructions"))
        items = body.get("messages") if api == OPENAI_CHAT else body.get("input")
        if isinstance(items, list):
            for item in items:
                if isinstance(item, Mapping) and item.get("role") in ("system", "developer"):
                    parts += _texts(item.get("content"))
    elif api == ANTHROPIC:
        parts += _texts(body.get("system"))
    elif api == GEMINI:
        instruction = body.get("systemInstruction", body.get("system_instruction"))
        if isinstance(instruction, Mapping):
            parts += _texts(instruction.get("parts"))
        else:
            parts += _texts(instruction)
    return "\n".join(parts)


# --------------------------------------------------------------------------- rendering


@dataclass(frozen=True, slots=True)
class _Rendered:
    """A response ready to write: a whole body, or a list of stream events (one HTTP chunk each)."""

    status: int
    content_type: str
    body: bytes = b""
    events: tuple[bytes, ...] | None = None
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class _Context:
    """What a renderer needs besides the reply: numbering, model, usage and request flags."""

    n: int  # 1-based number of this model call on this server
    call_ids: tuple[int, ...]  # one server-wide counter value per tool call
    model: str
    body: Mapping[str, Any]
    input_tokens: int
    output_tokens: int


def _compact(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def _pretty(data: Any) -> bytes:
    # OpenAI and Gemini pretty-print non-streamed bodies; mirror it.
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()


def _sse(data: Any, event: str | None = None, eol: str = "\n") -> bytes:
    payload = data if isinstance(data, str) else _compact(data)
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


def _arguments_object(call: ScriptedCall) -> dict[str, Any] | None:
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
        return _compact({"type": "error", "error": {"type": kind, "message": message}}).encode()
    if api == GEMINI:
        return _pretty({"error": {"code": status, "message": message, "status": _status_word(status)}})
    kind = {400: "invalid_request_error", 401: "invalid_request_error", 403: "invalid_request_error",
            404: "invalid_request_error", 429: "requests"}.get(status, "server_error")
    code = "rate_limit_exceeded" if status == 429 else None
    return _pretty({"error": {"message": message, "type": kind, "param": None, "code": code}})


def _error(api: str | None, status: int, message: str, retry_after: float | None = None) -> _Rendered:
    headers: tuple[tuple[str, str], ...] = ()
    if retry_after is not None:
        value = str(int(retry_after)) if float(retry_after).is_integer() else repr(float(retry_after))
        headers = (("retry-after", value),)
    return _Rendered(status, "application/json", body=error_body(api, status, message), headers=headers)


def _call_id(call: ScriptedCall, prefix: str, number: int) -> str:
    return call.call_id if call.call_id is not None else f"{prefix}{number}"


# OpenAI Chat Completions ------------------------------------------------------


def _render_chat(reply: Reply, ctx: _Context, stream: bool) -> _Rendered:
    finish = "tool_calls" if reply.calls else ("length" if reply.max_tokens else "stop")
    usage = {"prompt_tokens": ctx.input_tokens, "completion_tokens": ctx.output_tokens,
             "total_tokens": ctx.input_tokens + ctx.output_tokens}
    ids = [_call_id(c, "call_fake_", k) for c, k in zip(reply.calls, ctx.call_ids, strict=True)]
    base = {"id": f"chatcmpl-fake-{ctx.n}", "object": "chat.completion", "created": FIXED_CREATED,
            "model": ctx.model}
    if not stream:
        message: dict[str, Any] = {"role": "assistant",
                                   "content": reply.content if (reply.content or not reply.calls) else None,
                                   "refusal": None, "annotations": []}
        if reply.calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c, cid in zip(reply.calls, ids, strict=True)
            ]
        data = {**base, "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
                "usage": usage, "service_tier": "default", "system_fingerprint": "fp_fake"}
        return _Rendered(200, "application/json", body=_pretty(data))

    options = ctx.body.get("stream_options")
    include_usage = isinstance(options, Mapping) and options.get("include_usage") is True
    head = {**base, "object": "chat.completion.chunk", "service_tier": "default",
            "system_fingerprint": "fp_fake"}

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        data = {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                     "finish_reason": finish_reason}]}
        if include_usage:
            data["usage"] = None
        return _sse(data)

    events = [chunk({"role": "assistant", "content": "" if reply.content or not reply.calls else None,
                     "refusal": None})]
    events += [chunk({"content": piece}) for piece in split_text(reply.content)]
    # Parallel calls are interleaved (every head, then piece k of every call) so clients
    # that assemble by ``index`` are exercised, not just ones that assume sequential calls.
    events += [
        chunk({"tool_calls": [{"index": i, "id": cid, "type": "function",
                               "function": {"name": c.name, "arguments": ""}}]})
        for i, (c, cid) in enumerate(zip(reply.calls, ids, strict=True))
    ]
    pieces = [split_arguments(c.arguments) for c in reply.calls]
    for k in range(max((len(p) for p in pieces), default=0)):
        for i, call_pieces in enumerate(pieces):
            if k < len(call_pieces):
                events.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": call_pieces[k]}}]}))
    events.append(chunk({}, finish))
    if include_usage:
        events.append(_sse({**head, "choices": [], "usage": usage}))
    events.append(_sse("[DONE]"))
    return _Rendered(200, "text/event-stream; charset=utf-8", events=tuple(events))


# OpenAI Responses -------------------------------------------------------------


def _render_responses(reply: Reply, ctx: _Context, stream: bool) -> _Rendered:
    msg_id = f"msg_fake_{ctx.n}"
    items: list[dict[str, Any]] = []
    if reply.content or not reply.calls:
        items.append({"id": msg_id, "type": "message", "status": "completed", "role": "assistant",
                      "content": [{"type": "output_text", "text": reply.content, "annotations": [],
                                   "logprobs": []}]})
    for call, k in zip(reply.calls, ctx.call_ids, strict=True):
        items.append({"id": f"fc_fake_{k}", "type": "function_call", "status": "completed",
                      "arguments": call.arguments, "call_id": _call_id(call, "call_fake_", k),
                      "name": call.name})
    status = "incomplete" if reply.max_tokens else "completed"
    tools = ctx.body.get("tools")
    instructions = ctx.body.get("instructions")

    def response(state: str, output: list[dict[str, Any]], done: bool) -> dict[str, Any]:
        return {
            "id": f"resp_fake_{ctx.n}", "object": "response", "created_at": FIXED_CREATED,
            "status": state, "background": False, "completed_at": FIXED_CREATED if state == "completed" else None,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if state == "incomplete" else None,
            "instructions": instructions if isinstance(instructions, (str, list)) else None,
            "max_output_tokens": ctx.body.get("max_output_tokens"), "model": ctx.model,
            "output": output, "parallel_tool_calls": True, "previous_response_id": None,
            "reasoning": {"effort": None, "summary": None}, "store": True, "temperature": 1.0,
            "text": {"format": {"type": "text"}}, "tool_choice": "auto",
            "tools": tools if isinstance(tools, list) else [], "top_p": 1.0, "truncation": "disabled",
            "usage": {"input_tokens": ctx.input_tokens, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": ctx.output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": ctx.input_tokens + ctx.output_tokens} if done else None,
            "user": None, "metadata": {},
        }

    if not stream:
        return _Rendered(200, "application/json", body=_pretty(response(status, items, True)))

    events: list[bytes] = []

    def emit(kind: str, **data: Any) -> None:
        events.append(_sse({"type": kind, "sequence_number": len(events), **data}, event=kind))

    emit("response.created", response=response("in_progress", [], False))
    emit("response.in_progress", response=response("in_progress", [], False))
    for index, item in enumerate(items):
        if item["type"] == "message":
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            emit("response.output_item.added", output_index=index,
                 item={**item, "status": "in_progress", "content": []})
            emit("response.content_part.added", item_id=item["id"], output_index=index, content_index=0,
                 part=part)
            for piece in split_text(reply.content):
                emit("response.output_text.delta", item_id=item["id"], output_index=index, content_index=0,
                     delta=piece, logprobs=[])
            emit("response.output_text.done", item_id=item["id"], output_index=index, content_index=0,
                 text=reply.content, logprobs=[])
            emit("response.content_part.done", item_id=item["id"], output_index=index, content_index=0,
                 part={**part, "text": reply.content})
        else:
            emit("response.output_item.added", output_index=index,
                 item={**item, "status": "in_progress", "arguments": ""})
            for piece in split_arguments(item["arguments"]):
                emit("response.function_call_arguments.delta", item_id=item["id"], output_index=index,
                     delta=piece)
            emit("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                 name=item["name"], arguments=item["arguments"])
        emit("response.output_item.done", output_index=index, item=item)
    emit(f"response.{status}", response=response(status, items, True))
    return _Rendered(200, "text/event-stream; charset=utf-8", events=tuple(events))


# Anthropic Messages -----------------------------------------------------------


def _render_anthropic(reply: Reply, ctx: _Context, stream: bool) -> _Rendered:
    stop = "tool_use" if reply.calls else ("max_tokens" if reply.max_tokens else "end_turn")
    ids = [_call_id(c, "toolu_fake_", k) for c, k in zip(reply.calls, ctx.call_ids, strict=True)]
    message = {"id": f"msg_fake_{ctx.n}", "type": "message", "role": "assistant", "model": ctx.model}
    usage = {"input_tokens": ctx.input_tokens, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0, "output_tokens": ctx.output_tokens}
    if not stream:
        blocks: list[dict[str, Any]] = []
        if reply.content or not reply.calls:
            blocks.append({"type": "text", "text": reply.content})
        for call, cid in zip(reply.calls, ids, strict=True):
            args = _arguments_object(call)
            if args is None:
                return _error(ANTHROPIC, 500, f"fake model: tool call {call.name!r} has arguments that are "
                              "not a JSON object, and an Anthropic tool_use input must be one")
            blocks.append({"type": "tool_use", "id": cid, "name": call.name, "input": args})
        data = {**message, "content": blocks, "stop_reason": stop, "stop_sequence": None, "usage": usage}
        return _Rendered(200, "application/json", body=_compact(data).encode())

    events: list[bytes] = []

    def emit(kind: str, **data: Any) -> None:
        events.append(_sse({"type": kind, **data}, event=kind))

    emit("message_start", message={**message, "content": [], "stop_reason": None, "stop_sequence": None,
                                   "usage": {**usage, "output_tokens": 1}})
    index = 0
    if reply.content or not reply.calls:
        emit("content_block_start", index=0, content_block={"type": "text", "text": ""})
        emit("ping")
        for piece in split_text(reply.content):
            emit("content_block_delta", index=0, delta={"type": "text_delta", "text": piece})
        emit("content_block_stop", index=0)
        index = 1
    for call, cid in zip(reply.calls, ids, strict=True):
        emit("content_block_start", index=index,
             content_block={"type": "tool_use", "id": cid, "name": call.name, "input": {}})
        if index == 0:
            emit("ping")
        # Anthropic opens every tool input with an empty partial_json; the SDK must cope, so do we.
        for piece in ["", *split_arguments(call.arguments)]:
            emit("content_block_delta", index=index, delta={"type": "input_json_delta", "partial_json": piece})
        emit("content_block_stop", index=index)
        index += 1
    emit("message_delta", delta={"stop_reason": stop, "stop_sequence": None},
         usage={"output_tokens": ctx.output_tokens})
    emit("message_stop")
    return _Rendered(200, "text/event-stream; charset=utf-8", events=tuple(events))


# Gemini -----------------------------------------------------------------------


def _render_gemini(reply: Reply, ctx: _Context, stream: bool, sse: bool) -> _Rendered:
    finish = "MAX_TOKENS" if reply.max_tokens else "STOP"
    call_parts: list[dict[str, Any]] = []
    for call in reply.calls:
        args = _arguments_object(call)
        if args is None:
            return _error(GEMINI, 500, f"fake model: tool call {call.name!r} has arguments that are not a "
                          "JSON object, and a Gemini functionCall needs an args object")
        function_call: dict[str, Any] = {"name": call.name, "args": args}
        if call.call_id is not None:
            function_call = {"id": call.call_id, **function_call}
        call_parts.append({"functionCall": function_call})
    usage = {"promptTokenCount": ctx.input_tokens, "candidatesTokenCount": ctx.output_tokens,
             "totalTokenCount": ctx.input_tokens + ctx.output_tokens}

    def chunk(parts: list[dict[str, Any]], last: bool) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}}
        if last:
            candidate["finishReason"] = finish
        candidate["index"] = 0
        return {"candidates": [candidate],
                "usageMetadata": usage if last else {"promptTokenCount": ctx.input_tokens,
                                                     "totalTokenCount": ctx.input_tokens},
                "modelVersion": ctx.model, "responseId": f"fake-response-{ctx.n}"}

    text_parts = [{"text": reply.content}] if (reply.content or not reply.calls) else []
    if not stream:
        return _Rendered(200, "application/json", body=_pretty(chunk(text_parts + call_parts, True)))

    pieces: list[list[dict[str, Any]]] = [[{"text": p}] for p in split_text(reply.content)]
    # Gemini never streams function-call arguments: each call arrives whole, in the last chunk.
    if call_parts or not pieces:
        pieces.append(call_parts or [{"text": ""}])
    chunks = [chunk(parts, i == len(pieces) - 1) for i, parts in enumerate(pieces)]
    if sse:
        # Google terminates each SSE event with CRLF CRLF; clients must accept it.
        return _Rendered(200, "text/event-stream", events=tuple(_sse(c, eol="\r\n") for c in chunks))
    # Without alt=sse, streamGenerateContent answers one JSON array, element by element.
    array = [("[" if i == 0 else "\n,\r\n").encode() + json.dumps(c, indent=2, ensure_ascii=False).encode()
             for i, c in enumerate(chunks)]
    array.append(b"\n]")
    return _Rendered(200, "application/json; charset=UTF-8", events=tuple(array))


# --------------------------------------------------------------------------- server


class _Handler(BaseHTTPRequestHandler):
    """Routes one HTTP request to the fake model; stays stateless (state lives on the server)."""

    protocol_version = "HTTP/1.1"
    # An idle keep-alive connection is dropped after this long, so a left-open client cannot pin a thread.
    timeout = 30
    server: _HTTPServer
    # The headers of the response being written, and the exchange it is recorded in.
    _sent_headers: list[tuple[str, str]]
    _exchange: _ExchangeRecord | None = None
    server_version = "flowproof-fake-model"
    sys_version = ""

    def send_response(self, code: int, message: str | None = None) -> None:
        """Status line and Server header only: no Date header, so answers are byte-reproducible."""
        self._sent_headers = []
        self.log_request(code)
        self.send_response_only(code, message)
        self.send_header("server", self.server_version)

    def send_header(self, keyword: str, value: str) -> None:
        """Send a header and remember it for the request's `Exchange`."""
        if hasattr(self, "_sent_headers"):
            self._sent_headers.append((keyword, value))
        super().send_header(keyword, value)

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default per-request stderr line; the CLI logs its own."""

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def _read_body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            body = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
            data = bytes(body)
        else:
            data = self.rfile.read(int(self.headers.get("content-length") or 0))
        encoding = self.headers.get("content-encoding", "").lower()
        if encoding == "gzip":
            data = gzip.decompress(data)
        elif encoding == "deflate":
            data = zlib.decompress(data)
        return data

    def _handle(self) -> None:
        fake = self.server.fake
        split = urlsplit(self.path)
        path = split.path
        try:
            body = self._read_body()
        except (ValueError, OSError, EOFError, zlib.error):
            self._write(_error(None, 400, "fake model: could not read the request body"), None)
            return
        try:
            parsed: Any = json.loads(body) if body else None
        except ValueError:
            parsed = None
        api = detect_api(self.command, path)
        request = ReceivedRequest(
            method=self.command, path=path, query=dict(parse_qsl(split.query, keep_blank_values=True)),
            headers={k.lower(): v for k, v in self.headers.items()}, body=body, json=parsed, api=api,
        )
        fake._record(request)
        self._exchange = fake._open_exchange(request)
        if self.command == "GET" and path == "/health":
            self._write(_Rendered(200, "application/json", body=b'{"status":"ok"}'), None)
            return
        if api is None:
            self._write(_error(None, 404, f"fake model: nothing answers {self.command} {path}"), None)
            return
        if not isinstance(parsed, Mapping):
            self._write(_error(api, 400, "fake model: the request body is not a JSON object"), None)
            return
        rendered, reply = fake._answer(api, path, dict(parse_qsl(split.query)), body, parsed)
        fake._log(f"{self.command} {self.path} -> {rendered.status}")
        self._write(rendered, reply)

    def _sleep(self, seconds: float) -> bool:
        """Wait, unless the server is stopping; False means stop writing."""
        return seconds <= 0 or not self.server.fake._stopping.wait(seconds)

    def _abort(self) -> None:
        # Close without the terminating chunk / the rest of the body: the client sees a cut stream.
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _write(self, rendered: _Rendered, reply: Reply | None) -> None:
        cut = reply.cut_after if reply else None
        first_delay = reply.first_chunk_delay if reply else 0.0
        # Set by _handle once the request is recorded (an unreadable body has no record).
        record, self._exchange = self._exchange, None
        try:
            if rendered.events is None:
                if not self._sleep(first_delay):
                    return self._abort()
                self.send_response(rendered.status)
                self.send_header("content-type", rendered.content_type)
                self.send_header("content-length", str(len(rendered.body)))
                for name, value in rendered.headers:
                    self.send_header(name, value)
                if record is not None:
                    record.start(rendered.status, self._sent_headers)
                self.end_headers()
                if cut is not None:
                    if record is not None:
                        record.add(rendered.body[:cut], last=cut >= len(rendered.body))
                    self.wfile.write(rendered.body[:cut])
                    return self._abort()
                if record is not None:
                    record.add(rendered.body, last=True)
                self.wfile.write(rendered.body)
                return None
            self.send_response(rendered.status)
            self.send_header("content-type", rendered.content_type)
            self.send_header("cache-control", "no-cache")
            self.send_header("transfer-encoding", "chunked")
            if record is not None:
                record.start(rendered.status, self._sent_headers)
                if not rendered.events:
                    record.finish()
            self.end_headers()
            for i, event in enumerate(rendered.events):
                if cut is not None and i >= cut:
                    return self._abort()
                if not self._sleep(first_delay if i == 0 else (reply.chunk_delay if reply else 0.0)):
                    return self._abort()
                if record is not None:
                    record.add(event, last=i == len(rendered.events) - 1)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            # The client went away mid-answer (it timed out or gave up): nothing left to do.
            self.close_connection = True
        return None


class _HTTPServer(ThreadingHTTPServer):
    """A threading server that remembers its open connections so stop() can close them."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], fake: FakeModelServer) -> None:
        self.fake = fake
        self.open_connections: set[socket.socket] = set()
        self.handler_threads: set[threading.Thread] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.open_connections.add(request)
            self.handler_threads.add(threading.current_thread())
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self.connections_lock:
                self.open_connections.discard(request)
                self.handler_threads.discard(threading.current_thread())

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client hanging up (reset, closed pipe) is normal traffic, not a server fault:
        # socketserver would print a traceback for it.
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


class FakeModelServer:
    """A scripted model API on 127.0.0.1, answering OpenAI, Anthropic and Gemini requests.

    Use it as a context manager (it serves from a daemon thread between
    ``__enter__`` and ``__exit__``) or call `start` / `stop`. Replies are served
    in order, one per model call, from ``script`` (or from a lane, see `Script`).
    When the script runs out, the server answers ``exhausted_status`` (500) with
    "fake model: script exhausted after N calls" so the test fails loudly.
    """

    def __init__(
        self,
        script: Sequence[Reply] | Script = (),
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        lanes: Mapping[str, Sequence[Reply]] | None = None,
        exhausted_status: int = 500,
        log: TextIO | None = None,
    ) -> None:
        if isinstance(script, Script):
            lanes = {**script.lanes, **(lanes or {})}
            script = script.replies
        self._host = host
        self._requested_port = port
        self._exhausted_status = exhausted_status
        self._log_stream = log
        self._lock = threading.Lock()
        self._queue: deque[Reply] = deque(self._check(script))
        self._lanes: dict[str, deque[Reply]] = {k: deque(self._check(v)) for k, v in (lanes or {}).items()}
        self._requests: list[ReceivedRequest] = []
        self._exchanges: list[_ExchangeRecord] = []
        self._served = 0
        self._tool_counter = 0
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def from_json(cls, path: str | Path, *, host: str = "127.0.0.1", port: int = 0) -> FakeModelServer:
        """A server scripted by a JSON script file (see `load_script`)."""
        return cls(load_script(path), host=host, port=port)

    @staticmethod
    def _check(replies: Iterable[Reply]) -> list[Reply]:
        replies = list(replies)
        for i, reply in enumerate(replies):
            if not isinstance(reply, Reply):
                raise ScriptError(f"script[{i}]", f"expected a Reply, got {type(reply).__name__}")
        return replies

    # lifecycle ------------------------------------------------------------

    def start(self) -> FakeModelServer:
        """Bind and serve in a daemon thread; returns self. Idempotent while running."""
        if self._httpd is not None:
            return self
        self._stopping.clear()
        self._httpd = _HTTPServer((self._host, self._requested_port), self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
            name=f"fake-model-{self.port}", daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, close the port and every open connection, and join the threads."""
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        self._stopping.set()  # wakes handlers sleeping on a scripted delay
        httpd.shutdown()
        httpd.server_close()
        with httpd.connections_lock:
            connections = list(httpd.open_connections)
            threads = list(httpd.handler_threads)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if thread is not None:
            thread.join(timeout=5)
        for handler in threads:
            handler.join(timeout=5)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> FakeModelServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # properties -----------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound port (only while running)."""
        if self._httpd is None:
            raise RuntimeError("the fake model server is not running; use it as a context manager")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, with no trailing slash (append ``/v1`` for OpenAI clients)."""
        return f"http://{self._host}:{self.port}"

    @property
    def requests(self) -> list[ReceivedRequest]:
        """Every request received so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def model_requests(self) -> list[ReceivedRequest]:
        """The received requests that were model calls (``api`` is set)."""
        return [r for r in self.requests if r.api is not None]

    @property
    def exchanges(self) -> list[Exchange]:
        """Every request with the exact response bytes written for it, in arrival order (snapshots).

        A response's bytes are recorded just before they are written, so once a
        client has read an answer its `Exchange` already holds it.
        """
        with self._lock:
            records = list(self._exchanges)
        return [record.snapshot() for record in records]

    @property
    def model_exchanges(self) -> list[Exchange]:
        """The exchanges whose request was a model call (``request.api`` is set)."""
        return [e for e in self.exchanges if e.request.api is not None]

    @property
    def calls_served(self) -> int:
        """How many model calls were answered from the script (errors included)."""
        with self._lock:
            return self._served

    @property
    def remaining(self) -> int:
        """Replies not yet served, lanes included."""
        with self._lock:
            return len(self._queue) + sum(len(q) for q in self._lanes.values())

    # script ----------------------------------------------------------------

    def set_script(self, script: Sequence[Reply], *, lane: str | None = None) -> None:
        """Replace the replies still to come (of the main script, or of ``lane``)."""
        replies = self._check(script)
        with self._lock:
            if lane is None:
                self._queue = deque(replies)
            else:
                self._lanes[lane] = deque(replies)

    def extend_script(self, script: Sequence[Reply], *, lane: str | None = None) -> None:
        """Append replies to the main script or to ``lane``."""
        replies = self._check(script)
        with self._lock:
            if lane is None:
                self._queue.extend(replies)
            else:
                self._lanes.setdefault(lane, deque()).extend(replies)

    # internals used by the handler ----------------------------------------------

    def _record(self, request: ReceivedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _open_exchange(self, request: ReceivedRequest) -> _ExchangeRecord:
        record = _ExchangeRecord(request)
        with self._lock:
            self._exchanges.append(record)
        return record

    def _log(self, line: str) -> None:
        if self._log_stream is not None:
            print(line, file=self._log_stream, flush=True)

    def _answer(self, api: str, path: str, query: Mapping[str, str], raw: bytes,
                body: Mapping[str, Any]) -> tuple[_Rendered, Reply | None]:
        system = system_prompt(api, body) if self._lanes else ""
        with self._lock:
            lane = next((key for key in self._lanes if key in system), None)
            queue = self._queue if lane is None else self._lanes[lane]
            if not queue:
                where = f" in lane {lane!r}" if lane is not None else ""
                message = f"fake model: script exhausted after {self._served} calls{where}"
                return _error(api, self._exhausted_status, message), None
            reply = queue.popleft()
            self._served += 1
            n = self._served
            call_ids = tuple(range(self._tool_counter + 1, self._tool_counter + 1 + len(reply.calls)))
            self._tool_counter += len(reply.calls)
        if reply.is_error:
            return _error(api, reply.status, reply.message, reply.retry_after), reply
        gemini = _GEMINI_PATH.search(path)
        model = reply.model or (gemini.group("model") if gemini else None) or body.get("model")
        out_size = len(reply.content) + sum(len(c.name) + len(c.arguments) for c in reply.calls)
        ctx = _Context(n=n, call_ids=call_ids, model=model if isinstance(model, str) else DEFAULT_MODEL,
                       body=body, input_tokens=max(1, len(raw) // 4), output_tokens=max(1, out_size // 4))
        if api == GEMINI:
            assert gemini is not None
            streaming = gemini.group("method") == "streamGenerateContent"
            return _render_gemini(reply, ctx, streaming, query.get("alt") == "sse"), reply
        stream = body.get("stream") is True
        if api == OPENAI_CHAT:
            return _render_chat(reply, ctx, stream), reply
        if api == OPENAI_RESPONSES:
            return _render_responses(reply, ctx, stream), reply
        return _render_anthropic(reply, ctx, stream), reply


# --------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m flowproof.testing``: serve a script file until SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(
        prog="python -m flowproof.testing",
        description="Serve a scripted fake model API (OpenAI, Anthropic, Gemini) on 127.0.0.1.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind (default: any free port)")
    parser.add_argument("--script", type=Path, help="script JSON file (see docs/testing.md)")
    parser.add_argument("--quiet", action="store_true", help="do not log requests to stderr")
    args = parser.parse_args(argv)
    try:
        script = load_script(args.script) if args.script else Script()
        server = FakeModelServer(script, host=args.host, port=args.port,
                                 log=None if args.quiet else sys.stderr)
        server.start()
    except ScriptError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(f"listening on {server.url}", flush=True)
    try:
        while not stop.wait(0.2):
            pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
