"""MCP over stdio, pure: one JSON-RPC session between the agent and a local server, recorded and replayed.

An ``mcp:`` entry with a ``command:`` names a server the agent launches itself and
talks to over stdin/stdout. The agent's MCP config launches flowproof's stand-in
instead (``flowproof.runner.mcp_standin``), which relays each line to the proxy;
the proxy decides with `flowproof.mcp.decide`, as for Streamable HTTP, and keeps
the session here. The stdio transport frames one JSON-RPC message per line, UTF-8,
no line break inside a message (JSON escapes every one inside strings).

A session (`StdioSession`, the cassette's ``mcp_stdio`` entries) is every line that
crossed, in order, client's and server's alike — requests, responses and
notifications — except the declared tools flowproof answered, which never reach
the server. A line the server wrote that is not JSON is kept as text.

Replay (`StdioReplayer`) plays the server: each live session takes the next
recorded session of its server, in the order they were opened. A client message
matches the first unused recorded client message with the same `message_key` (the
canonical JSON minus ids and progress tokens, as `exchange_key`), once; the answer
is the server lines recorded after it and before the next client line, with each
response's id set to the live request's id. A response whose request the agent has
not sent yet is held until it does (two requests sent together may be answered in
either order). A client message that matches nothing is a miss: the run diverges.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from flowproof.mcp.exchanges import request_ids, without_ids

__all__ = [
    "CLIENT",
    "SERVER",
    "STANDIN_HOST",
    "StdioMessage",
    "StdioRecording",
    "StdioReplay",
    "StdioReplayer",
    "StdioSession",
    "message_key",
    "read_line",
    "render_line",
    "session_from_json",
    "session_to_json",
    "standin_variable",
]

CLIENT = "client"
SERVER = "server"
#: The host the stand-in addresses its relay requests to, through the flow's own proxy
#: listener: reserved (RFC 2606), so nothing outside flowproof ever answers it.
STANDIN_HOST = "stdio.mcp.flowproof.invalid"


def standin_variable(server: str) -> str:
    """The variable naming the stand-in command of ``server`` in the agent's environment.

    >>> standin_variable("notes-db")
    'FLOWPROOF_MCP_NOTES_DB'
    """
    return "FLOWPROOF_MCP_" + re.sub(r"[^A-Z0-9]", "_", server.upper())


@dataclass(frozen=True, slots=True)
class StdioMessage:
    """One line of a session: from the ``client`` (the agent) or the ``server``.

    ``message`` is the parsed JSON (a message or a batch); ``line`` is set instead
    for a line that is not JSON, as the text it was.
    """

    sender: str
    message: Any = None
    line: str | None = None


@dataclass(frozen=True, slots=True)
class StdioSession:
    """One recorded stdio session: the server's ``mcp:`` name and every line, in crossing order."""

    index: int
    server: str
    messages: tuple[StdioMessage, ...]


@dataclass(slots=True)
class StdioRecording:
    """A session being recorded: lines are appended as they cross; `session` freezes it."""

    index: int
    server: str
    messages: list[StdioMessage] = field(default_factory=list)

    def session(self) -> StdioSession:
        return StdioSession(self.index, self.server, tuple(self.messages))


def read_line(sender: str, data: bytes) -> StdioMessage:
    """One line as it crossed (without its line break), parsed when it is JSON."""
    try:
        return StdioMessage(sender, message=json.loads(data))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return StdioMessage(sender, line=data.decode("utf-8", "replace"))


def render_line(message: StdioMessage | Any) -> str:
    """The text of one line to write (no line break): compact JSON, or a non-JSON line as it was.

    A string with a lone surrogate (a ``"\\ud83d"`` escape cut from its pair) cannot be
    written as UTF-8, so that message is written with ASCII escapes instead.
    """
    if isinstance(message, StdioMessage):
        if message.line is not None:
            return message.line
        message = message.message
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(message, separators=(",", ":"))
    return text


def message_key(message: Any) -> str:
    """The sha256 a replayed client message must share with a recorded one.

    >>> message_key({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}) == message_key(
    ...     {"jsonrpc": "2.0", "id": 7, "method": "tools/list"})
    True
    """
    canonical = json.dumps(without_ids(message), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def session_to_json(session: StdioSession) -> dict[str, Any]:
    """The cassette's JSON object for one session (stable key order)."""
    lines: list[dict[str, Any]] = []
    for item in session.messages:
        if item.line is not None:
            lines.append({"from": item.sender, "line": item.line})
        else:
            lines.append({"from": item.sender, "message": item.message})
    return {"index": session.index, "server": session.server, "messages": lines}


def session_from_json(doc: Any, position: int) -> StdioSession:
    """Read one cassette ``mcp_stdio`` entry; raises ValueError naming the entry and field."""
    where = f"mcp_stdio session {position}"
    if not isinstance(doc, dict):
        raise ValueError(f"{where} should be an object")
    if not isinstance(doc.get("index"), int) or isinstance(doc.get("index"), bool):
        raise ValueError(f"{where}: `index` is missing or has the wrong type")
    if not isinstance(doc.get("server"), str):
        raise ValueError(f"{where}: `server` is missing or has the wrong type")
    if not isinstance(doc.get("messages"), list):
        raise ValueError(f"{where}: `messages` should be a list")
    messages = []
    for number, item in enumerate(doc["messages"]):
        spot = f"{where}, message {number}"
        if not isinstance(item, dict) or item.get("from") not in (CLIENT, SERVER):
            raise ValueError(f"{spot}: needs `from`, one of {CLIENT!r} or {SERVER!r}")
        if ("message" in item) == ("line" in item):
            raise ValueError(f"{spot}: needs exactly one of `message` or `line`")
        if "line" in item and not isinstance(item["line"], str):
            raise ValueError(f"{spot}: `line` should be a string")
        if item["from"] == CLIENT and "line" in item:
            raise ValueError(f"{spot}: a client line is always JSON-RPC")
        messages.append(StdioMessage(item["from"], message=item.get("message"), line=item.get("line")))
    return StdioSession(doc["index"], doc["server"], tuple(messages))


@dataclass(frozen=True, slots=True)
class _Step:
    """A recorded client message and the server lines recorded after it."""

    position: int
    message: Any
    key: str
    answers: tuple[StdioMessage, ...]


def _steps(session: StdioSession) -> tuple[tuple[StdioMessage, ...], tuple[_Step, ...]]:
    """(server lines before any client line, one `_Step` per client line)."""
    lead: list[StdioMessage] = []
    steps: list[tuple[int, Any, list[StdioMessage]]] = []
    for position, item in enumerate(session.messages):
        if item.sender == CLIENT:
            steps.append((position, item.message, []))
        elif steps:
            steps[-1][2].append(item)
        else:
            lead.append(item)
    return tuple(lead), tuple(_Step(p, m, message_key(m), tuple(a)) for p, m, a in steps)


def _response_ids(message: Any) -> list[Any] | None:
    """The ids a server line answers (a response or a batch of them), or None for any other line."""
    items = message if isinstance(message, list) else [message]
    ids = [m["id"] for m in items if isinstance(m, dict) and "method" not in m and m.get("id") is not None]
    return ids or None


def _id_key(ident: Any) -> tuple[str, Any]:
    # 1 and "1" are different JSON-RPC ids.
    return (type(ident).__name__, ident)


@dataclass(slots=True)
class StdioReplay:
    """One live session served from a recorded one (see the module doc)."""

    session: StdioSession
    _lead: tuple[StdioMessage, ...] = ()
    _steps: tuple[_Step, ...] = ()
    _used: set[int] = field(default_factory=set)
    _ids: dict[tuple[str, Any], Any] = field(default_factory=dict)
    _held: list[StdioMessage] = field(default_factory=list)

    @classmethod
    def of(cls, session: StdioSession) -> StdioReplay:
        lead, steps = _steps(session)
        return cls(session, lead, steps)

    def initial(self) -> list[str]:
        """The lines the server wrote before the client's first (usually none)."""
        return self._emit(self._lead)

    def client(self, message: Any) -> list[str] | None:
        """The lines that answer one live client message, or None when no recorded one matches."""
        key = message_key(message)
        for step in self._steps:
            if step.position not in self._used and step.key == key:
                self._used.add(step.position)
                for old, new in zip(request_ids(step.message), request_ids(message), strict=False):
                    self._ids[_id_key(old)] = new
                held, self._held = self._held, []
                return self._emit((*held, *step.answers))
        return None

    def unconsumed(self) -> list[Any]:
        """The recorded client messages no live message matched, in recorded order."""
        return [s.message for s in self._steps if s.position not in self._used]

    def _emit(self, lines: Sequence[StdioMessage]) -> list[str]:
        out = []
        for item in lines:
            ids = _response_ids(item.message) if item.line is None else None
            if ids is None:
                out.append(render_line(item))
            elif all(_id_key(i) in self._ids for i in ids):
                out.append(render_line(self._restored(item.message)))
            else:
                self._held.append(item)
        return out

    def _restored(self, message: Any) -> Any:
        if isinstance(message, list):
            return [self._restored(m) for m in message]
        if isinstance(message, dict) and "method" not in message and message.get("id") is not None:
            return {**message, "id": self._ids.get(_id_key(message["id"]), message["id"])}
        return message


@dataclass(slots=True)
class StdioReplayer:
    """Hands each live session the next unused recorded session of its server."""

    sessions: tuple[StdioSession, ...]
    _opened: list[StdioReplay] = field(default_factory=list)

    def open(self, server: str) -> StdioReplay | None:
        """The replay of the next recorded session of ``server``, or None when none is left."""
        taken = {r.session.index for r in self._opened}
        for session in self.sessions:
            if session.server == server and session.index not in taken:
                replay = StdioReplay.of(session)
                self._opened.append(replay)
                return replay
        return None

    def unconsumed(self) -> list[tuple[StdioSession, list[Any]]]:
        """Per recorded session with client messages no live message matched (never opened
        sessions too): the session and those messages."""
        opened = {r.session.index: r for r in self._opened}
        out = []
        for session in self.sessions:
            replay = opened.get(session.index) or StdioReplay.of(session)
            left = replay.unconsumed()
            if left:
                out.append((session, left))
        return out
