"""JSON-RPC 2.0 as MCP uses it: parse and validate a body, build error responses.

Both MCP transports carry the same messages — Streamable HTTP one body per POST,
stdio one message a line — so both read them here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = [
    "INVALID_REQUEST",
    "JSONRPC",
    "MODERN_PROTOCOL",
    "PARSE_ERROR",
    "REPLAY_MISS",
    "TOOLS_CALL",
    "Body",
    "Message",
    "Problem",
    "dumps",
    "error_response",
    "methods_of",
    "parse_body",
]

#: JSON-RPC 2.0 error codes.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
#: flowproof's own code (the implementation-defined server range): a replayed request
#: that no recorded exchange answers.
REPLAY_MISS = -32001

JSONRPC = "2.0"
TOOLS_CALL = "tools/call"
#: The first protocol version of the stateless generation (``server/discover``, no
#: ``initialize``): its results must say ``"resultType": "complete"``.
MODERN_PROTOCOL = "2026-07-28"
_VERSION_META = "io.modelcontextprotocol/protocolVersion"


@dataclass(frozen=True, slots=True)
class Message:
    """One JSON-RPC message of a body: a request (``id`` set), a notification, or a response."""

    raw: dict[str, Any]

    @property
    def method(self) -> str | None:
        method = self.raw.get("method")
        return method if isinstance(method, str) else None

    @property
    def has_id(self) -> bool:
        return "id" in self.raw

    @property
    def id(self) -> Any:
        return self.raw.get("id")

    @property
    def is_request(self) -> bool:
        return self.method is not None and self.has_id

    def protocol_version(self) -> str | None:
        """The protocol version a stateless-generation request names in ``params._meta``."""
        params = self.raw.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        version = meta.get(_VERSION_META) if isinstance(meta, dict) else None
        return version if isinstance(version, str) else None

    def tool_call(self) -> tuple[str, Any] | None:
        """(tool name, arguments) when this is a ``tools/call`` request, else None."""
        if self.method != TOOLS_CALL:
            return None
        params = self.raw.get("params")
        if not isinstance(params, dict) or not isinstance(params.get("name"), str):
            return None
        arguments = params.get("arguments", {})
        return params["name"], {} if arguments is None else arguments


@dataclass(frozen=True, slots=True)
class Problem:
    """Why a body is not JSON-RPC 2.0: the error code and a message for the client."""

    code: int
    message: str


@dataclass(frozen=True, slots=True)
class Body:
    """A parsed JSON-RPC body: its messages, and whether they came as a batch (an array)."""

    messages: tuple[Message, ...]
    batch: bool


def parse_body(data: bytes) -> Body | Problem:
    """Parse and validate a JSON-RPC 2.0 body, single or batch.

    >>> parse_body(b'{"jsonrpc":"2.0","method":"notifications/initialized"}').messages[0].method
    'notifications/initialized'
    >>> parse_body(b"[]").message
    'an empty batch is not a JSON-RPC request'
    """
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return Problem(PARSE_ERROR, "the body is not valid JSON")
    if isinstance(doc, list):
        if not doc:
            return Problem(INVALID_REQUEST, "an empty batch is not a JSON-RPC request")
        messages = []
        for position, item in enumerate(doc):
            problem = _invalid(item)
            if problem is not None:
                return Problem(INVALID_REQUEST, f"batch item {position}: {problem}")
            messages.append(Message(item))
        return Body(tuple(messages), batch=True)
    problem = _invalid(doc)
    if problem is not None:
        return Problem(INVALID_REQUEST, problem)
    return Body((Message(doc),), batch=False)


def _invalid(item: Any) -> str | None:
    """What makes ``item`` an invalid JSON-RPC 2.0 message, or None when it is valid."""
    if not isinstance(item, dict):
        return "a JSON-RPC message must be an object"
    if item.get("jsonrpc") != JSONRPC:
        return 'the "jsonrpc" member must be "2.0"'
    if "id" in item:
        ident = item["id"]
        # null is only legal in an error response to an unreadable request.
        if isinstance(ident, bool) or not isinstance(ident, (str, int, type(None))):
            return 'the "id" must be a string or an integer'
        if ident is None and "error" not in item:
            return 'the "id" must not be null'
    if "method" in item:
        if not isinstance(item["method"], str):
            return 'the "method" must be a string'
        if "params" in item and not isinstance(item["params"], (dict, list)):
            return 'the "params" must be an object or an array'
        if item["method"] == TOOLS_CALL:
            params = item.get("params")
            if not isinstance(params, dict) or not isinstance(params.get("name"), str):
                return 'a "tools/call" needs "params.name", a string'
            if params.get("arguments") is not None and not isinstance(params["arguments"], dict):
                return 'the "params.arguments" of a "tools/call" must be an object'
        return None
    if "id" not in item or ("result" in item) == ("error" in item):
        return 'a message needs a "method", or an "id" and exactly one of "result" / "error"'
    return None


def error_response(ident: Any, code: int, message: str) -> dict[str, Any]:
    """A JSON-RPC error response object."""
    return {"jsonrpc": JSONRPC, "id": ident, "error": {"code": code, "message": message}}


def dumps(doc: Any) -> bytes:
    """A JSON-RPC document as compact UTF-8 JSON: one line, since JSON escapes every line break."""
    return json.dumps(doc, ensure_ascii=False).encode()


def methods_of(body: Any) -> str:
    """The methods of a parsed body (a message or a batch), for reports: ``tools/list, ping``;
    a response reads as ``response``.

    >>> methods_of([{"method": "tools/list"}, {"id": 1, "result": {}}])
    'tools/list, response'
    """
    items = body if isinstance(body, list) else [body]
    return ", ".join(str(m.get("method", "response")) for m in items if isinstance(m, dict))
