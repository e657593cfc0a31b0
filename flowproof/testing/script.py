"""The script DSL: the replies a fake model server serves, in Python or as a JSON file.

`ScriptError` lives here, not in ``flowproof.errors``: it is raised only by this
DSL and the fake server's command line, both part of the public testing kit a
user imports on its own; the product never raises or catches it. It still
derives from `FlowproofError`, so a command line prints it as one paragraph.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NotRequired, TypedDict, Unpack

from flowproof.errors import FlowproofError

#: The unified finish reasons a reply can end with; each renderer says them in its API's words.
FINISH_REASONS = ("stop", "tool_calls", "length", "content_filter")


class ScriptError(FlowproofError, ValueError):
    """A fake-server script (a `Reply` or a script JSON file) is malformed.

    Defined here, not in flowproof/errors.py: it is part of the fake server's public API
    (``from flowproof.testing import ScriptError``), and the fake server stays importable
    and readable on its own as the independent oracle of the codecs (docs/testing.md).
    """

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
    first_byte_delay: NotRequired[float]
    first_chunk_delay: NotRequired[float]
    chunk_delay: NotRequired[float]
    end_delay: NotRequired[float | None]
    max_tokens: NotRequired[bool]
    finish: NotRequired[str | None]
    model: NotRequired[str | None]
    reasoning: NotRequired[str | None]


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
    - ``first_byte_delay``: seconds before anything of the answer is sent, the
      status line included (a slow model: a client may leave before any byte).
    - ``first_chunk_delay``: seconds before the first event of a stream (headers
      go out at once), or before a non-streamed response.
    - ``chunk_delay``: seconds between stream events.
    - ``end_delay``: seconds between a stream's last event and the end of its
      body (the server's own ``end_delay`` when ``None``), so a client that
      stops reading at the terminal event leaves before the body ends.

    ``max_tokens`` ends the turn as if the token limit was hit (``length``,
    ``max_tokens``, ``MAX_TOKENS``, or an incomplete response). ``finish``
    names the finish reason in a unified word (see `FINISH_REASONS`), rendered
    in each API's own vocabulary. ``model`` overrides the model echoed from the
    request. ``reasoning`` (the Responses API only) puts a reasoning item with
    that summary before the output; it carries ``encrypted_content`` when the
    request asks for ``reasoning.encrypted_content``, as a ``store: false``
    client does, which must send the item back as it got it.
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
    first_byte_delay: float = 0.0
    end_delay: float | None = None
    finish: str | None = None
    reasoning: str | None = None

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
        if min(self.first_chunk_delay, self.chunk_delay, self.first_byte_delay,
               0.0 if self.end_delay is None else self.end_delay) < 0:
            raise ScriptError("reply", "delays must be >= 0 seconds")
        if self.finish is not None and self.finish not in FINISH_REASONS:
            raise ScriptError("reply", f"finish must be one of {list(FINISH_REASONS)}, got {self.finish!r}")
        if self.max_tokens and self.finish not in (None, "length"):
            raise ScriptError("reply", f"max_tokens ends the turn with finish 'length', not {self.finish!r}")
        if self.is_error and (self.finish is not None or self.max_tokens):
            raise ScriptError("reply", "an error reply has no finish reason")
        if self.retry_after is not None and self.retry_after < 0:
            raise ScriptError("reply", "retry_after must be >= 0 seconds")

    @property
    def is_error(self) -> bool:
        """True for an error answer (HTTP status >= 400)."""
        return self.status >= 400

    @property
    def finish_reason(self) -> str:
        """The unified finish reason this reply ends with: the scripted one, else from its content."""
        if self.finish is not None:
            return self.finish
        return "tool_calls" if self.calls else ("length" if self.max_tokens else "stop")

    # Knobs for compare tests: the same reply with one thing a live model could change.

    def with_argument(self, key: str, value: Any, *, call: int = 0) -> Reply:
        """This reply with argument ``key`` of tool call number ``call`` set to ``value``.

        ``key`` is a dot path into the arguments object (``"trip.city"``); the
        call's other arguments, their order, its name and id are kept.
        """
        if not 0 <= call < len(self.calls):
            raise ScriptError("with_argument", f"the reply has {len(self.calls)} tool call(s), no call {call}")
        target = self.calls[call]
        try:
            arguments = json.loads(target.arguments)
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            raise ScriptError("with_argument", f"tool call {target.name!r} has no JSON object arguments")
        *parents, last = key.split(".")
        node = arguments
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                raise ScriptError("with_argument", f"{key!r}: {part!r} is not an object in {target.name!r}")
            node = child
        node[last] = value
        changed = ScriptedCall.make(target.name, arguments, target.call_id)
        return replace(self, calls=(*self.calls[:call], changed, *self.calls[call + 1 :]))

    def with_finish(self, finish: str) -> Reply:
        """This reply ending with another unified finish reason (see `FINISH_REASONS`)."""
        return replace(self, finish=finish, max_tokens=self.max_tokens and finish == "length")

    def reworded(self, text: str | None = None) -> Reply:
        """This reply with other words: ``text``, or the scripted text said differently.

        Unlike live-like prose changes (case, whitespace), the words differ, so a
        compare classifies the text as different.
        """
        if text is None:
            text = f"In other words: {self.content}" if self.content else "In other words."
        if text.split() == self.content.split():
            raise ScriptError("reworded", "the new text has the same words as the old one")
        return replace(self, content=text)

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
        for key, kind in (("cut_after", int), ("first_byte_delay", (int, float)),
                          ("first_chunk_delay", (int, float)), ("chunk_delay", (int, float)),
                          ("end_delay", (int, float)), ("max_tokens", bool), ("finish", str),
                          ("model", str), ("reasoning", str)):
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
    {"text", "tool_calls", "error", "cut_after", "first_byte_delay", "first_chunk_delay", "chunk_delay",
     "end_delay", "max_tokens", "finish", "model", "reasoning"}
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

