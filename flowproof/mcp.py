"""The MCP boundary, pure: read JSON-RPC bodies, decide what flowproof does with each, match recordings.

An `mcp:` entry in a flow spec lists tools that flowproof answers itself, so the
real MCP server never runs them. This module holds every decision about that
traffic; the addon (``flowproof.addon.mcp``) only moves bytes. See docs/mcp.md.

Per HTTP request the decision is one of:

- `Answer`: the body is a ``tools/call`` (or a batch of them) for a tool declared
  with a ``result:``. flowproof answers with a well-formed ``CallToolResult``
  (structured content plus a text block) carrying the request's JSON-RPC id, as
  JSON or as an SSE stream according to the request's ``Accept``. It never leaves
  the proxy, in any mode.
- `Forward`: anything else of the session (``initialize``, ``server/discover``,
  ``tools/list``, notifications, undeclared tools, the GET stream, DELETE). It is
  passed through at record and compare and served from the cassette at replay.
- `Reject`: a body that is not JSON-RPC 2.0. It is answered with a JSON-RPC error
  (``-32700`` parse error, ``-32600`` invalid request) and never forwarded.

What a recording compares (`exchange_key`): the HTTP method, the URL path and the
JSON-RPC body as canonical JSON, minus what varies legitimately between two runs
of the same agent — the JSON-RPC ``id`` of each message and a request's
``params._meta.progressToken`` (the client numbers its requests; the number says
nothing about what it asked) — and minus every header, including
``Mcp-Session-Id`` (minted by the server per session) and the host and port (the
real server listens on whatever port it got). Everything else, tool names,
arguments, protocol version, client info, must be equal, and each recorded
exchange answers one request only (consume once), like a model turn.

>>> decision = decide("POST", {"accept": "application/json"},
...     b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","arguments":{}}}',
...     {"x": {"ok": False}})
>>> json.loads(decision.body)["result"]["structuredContent"]
{'ok': False}
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "INVALID_REQUEST",
    "PARSE_ERROR",
    "REPLAY_MISS",
    "Answer",
    "Body",
    "Decision",
    "Forward",
    "McpCall",
    "McpExchange",
    "McpReplayer",
    "McpRoute",
    "Message",
    "Problem",
    "Reject",
    "SESSION_PLACEHOLDER",
    "call_tool_result",
    "decide",
    "error_response",
    "exchange_from_json",
    "exchange_key",
    "exchange_to_json",
    "miss_response",
    "parse_body",
    "parse_route",
    "render_messages",
    "request_ids",
    "restore_ids",
    "wants_sse",
]

#: JSON-RPC 2.0 error codes.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
#: flowproof's own code (the implementation-defined server range): a replayed request
#: that no recorded exchange answers.
REPLAY_MISS = -32001

#: What a server-minted ``Mcp-Session-Id`` becomes in a cassette: the client only echoes it.
SESSION_PLACEHOLDER = "flowproof-mcp-session"

_JSONRPC = "2.0"
_TOOLS_CALL = "tools/call"
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
        if self.method != _TOOLS_CALL:
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
    if item.get("jsonrpc") != _JSONRPC:
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
        if item["method"] == _TOOLS_CALL:
            params = item.get("params")
            if not isinstance(params, dict) or not isinstance(params.get("name"), str):
                return 'a "tools/call" needs "params.name", a string'
            if params.get("arguments") is not None and not isinstance(params["arguments"], dict):
                return 'the "params.arguments" of a "tools/call" must be an object'
        return None
    if "id" not in item or ("result" in item) == ("error" in item):
        return 'a message needs a "method", or an "id" and exactly one of "result" / "error"'
    return None


# --------------------------------------------------------------------------- decisions


@dataclass(frozen=True, slots=True)
class Answer:
    """flowproof answers the request itself. ``calls`` lists (tool, arguments) it answered."""

    status: int
    content_type: str
    body: bytes
    calls: tuple[tuple[str, Any], ...]


@dataclass(frozen=True, slots=True)
class Forward:
    """The request goes on (record, compare) or is matched against the cassette (replay).

    ``body`` is None for a request without a JSON-RPC body (the GET stream, DELETE).
    ``calls`` lists the undeclared ``tools/call`` requests it carries.
    """

    body: Body | None
    calls: tuple[tuple[str, Any], ...] = ()

    @property
    def summary(self) -> str:
        """The JSON-RPC methods in the body, for reports: ``tools/call export`` or ``GET``."""
        if self.body is None:
            return ""
        parts = []
        for message in self.body.messages:
            call = message.tool_call()
            parts.append(f"{_TOOLS_CALL} {call[0]}" if call else message.method or "response")
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class Reject:
    """The body is not JSON-RPC 2.0 (or cannot be answered): a JSON-RPC error, never forwarded."""

    status: int
    content_type: str
    body: bytes
    reason: str


Decision = Answer | Forward | Reject


def decide(
    http_method: str,
    headers: Mapping[str, str],
    body: bytes,
    answers: Mapping[str, Any],
) -> Decision:
    """Decide what happens to one HTTP request to an MCP endpoint.

    ``headers`` are looked up by lowercase name; ``answers`` maps each tool
    declared with a ``result:`` to that result.
    """
    if http_method.upper() != "POST":
        return Forward(None)
    parsed = parse_body(body)
    if isinstance(parsed, Problem):
        error = error_response(None, parsed.code, f"flowproof: {parsed.message}")
        return Reject(400, "application/json", _dumps(error), parsed.message)
    calls = [(m, m.tool_call()) for m in parsed.messages]
    declared = [(m, c) for m, c in calls if c is not None and c[0] in answers]
    if not declared:
        return Forward(parsed, tuple(c for _m, c in calls if c is not None))
    if len(declared) != len(parsed.messages):
        # Half of a batch cannot go to the server while flowproof answers the other half
        # in one HTTP response without inventing a merge; refusing is the honest answer.
        names = ", ".join(c[0] for _m, c in declared)
        reason = f"a batch mixes the declared tool(s) {names} with other messages"
        error = error_response(None, INVALID_REQUEST, f"flowproof: {reason}; send them separately")
        return Reject(400, "application/json", _dumps(error), reason)
    header_version = headers.get("mcp-protocol-version")
    replies = [
        {
            "jsonrpc": _JSONRPC,
            "id": m.id,
            "result": call_tool_result(
                answers[c[0]], modern=(m.protocol_version() or header_version or "") >= MODERN_PROTOCOL
            ),
        }
        for m, c in declared
    ]
    content_type, out = render_messages(replies, parsed.batch, wants_sse(headers.get("accept", "")))
    return Answer(200, content_type, out, tuple(c for _m, c in declared))


def call_tool_result(result: Any, *, modern: bool = False) -> dict[str, Any]:
    """A ``CallToolResult`` for a spec's ``result:`` value.

    ``structuredContent`` must be a JSON object: a mapping goes in as it is, any
    other value is wrapped as ``{"result": value}`` (the MCP SDKs' own convention
    for non-object outputs). The text block carries the same value as JSON, for
    clients that read only ``content``. ``modern``: the request is of the stateless
    generation, whose clients reject a result without ``"resultType": "complete"``.

    >>> call_tool_result([1])["structuredContent"]
    {'result': [1]}
    """
    structured = result if isinstance(result, dict) else {"result": result}
    text = json.dumps(result, ensure_ascii=False, sort_keys=True)
    out: dict[str, Any] = {
        "content": [{"type": "text", "text": text}],
        "structuredContent": structured,
        "isError": False,
    }
    if modern:
        out["resultType"] = "complete"
    return out


def error_response(ident: Any, code: int, message: str) -> dict[str, Any]:
    """A JSON-RPC error response object."""
    return {"jsonrpc": _JSONRPC, "id": ident, "error": {"code": code, "message": message}}


def wants_sse(accept: str) -> bool:
    """True when the client accepts only an SSE stream (JSON is preferred when both are accepted).

    >>> wants_sse("application/json, text/event-stream"), wants_sse("text/event-stream")
    (False, True)
    """
    kinds = {part.split(";", 1)[0].strip().lower() for part in accept.split(",")}
    json_ok = bool(kinds & {"application/json", "application/*", "*/*"}) or not accept.strip()
    return "text/event-stream" in kinds and not json_ok


def render_messages(messages: Sequence[dict[str, Any]], batch: bool, sse: bool) -> tuple[str, bytes]:
    """(content type, body) of JSON-RPC messages, as one JSON document or as SSE ``message`` events."""
    if sse:
        events = "".join(f"event: message\ndata: {json.dumps(m, ensure_ascii=False)}\n\n" for m in messages)
        return "text/event-stream", events.encode()
    doc: Any = list(messages) if batch else messages[0]
    return "application/json", _dumps(doc)


def _dumps(doc: Any) -> bytes:
    return json.dumps(doc, ensure_ascii=False).encode()


# --------------------------------------------------------------------------- recording


@dataclass(frozen=True, slots=True)
class McpExchange:
    """One recorded HTTP exchange with an MCP server (a cassette's ``mcp`` entry).

    ``request`` is the JSON-RPC body parsed (None without a body); ``key`` is
    `exchange_key` of the request. The response is ``body`` (JSON), ``events``
    (the ``data`` of each SSE event, in order) or neither (``202 Accepted``).
    """

    index: int
    server: str
    method: str
    path: str
    request: Any
    key: str
    status: int
    content_type: str
    session: bool = False
    body: Any = None
    events: tuple[str, ...] | None = None


def _without_ids(message: Any) -> Any:
    if not isinstance(message, dict):
        return message
    out = {k: v for k, v in message.items() if k != "id"}
    params = out.get("params")
    if isinstance(params, dict) and isinstance(params.get("_meta"), dict):
        meta = {k: v for k, v in params["_meta"].items() if k != "progressToken"}
        out["params"] = {**params, "_meta": meta}
    return out


def exchange_key(http_method: str, path: str, request: Any) -> str:
    """The sha256 a replayed request must share with a recorded exchange (see the module doc).

    >>> a = exchange_key("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    >>> a == exchange_key("POST", "/mcp?x=1", {"jsonrpc": "2.0", "id": 9, "method": "tools/list"})
    True
    """
    body = [_without_ids(m) for m in request] if isinstance(request, list) else _without_ids(request)
    doc = {"method": http_method.upper(), "path": path.split("?", 1)[0], "body": body}
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def request_ids(request: Any) -> list[Any]:
    """The JSON-RPC ids of a body's requests, in order."""
    items = request if isinstance(request, list) else [request]
    return [m["id"] for m in items if isinstance(m, dict) and "id" in m and "method" in m]


def restore_ids(message: Any, recorded: Sequence[Any], live: Sequence[Any]) -> Any:
    """A recorded response message with its id swapped for the live request's.

    Only responses (no ``method``) whose id is one the recorded request used are
    changed; a server's own requests in the stream keep their ids.
    """
    if isinstance(message, list):
        return [restore_ids(m, recorded, live) for m in message]
    if not isinstance(message, dict) or "method" in message or "id" not in message:
        return message
    for old, new in zip(recorded, live, strict=False):
        if message["id"] == old and type(message["id"]) is type(old):
            return {**message, "id": new}
    return message


def exchange_to_json(exchange: McpExchange) -> dict[str, Any]:
    """The cassette's JSON object for one exchange (stable key order)."""
    response: dict[str, Any] = {"status": exchange.status, "content_type": exchange.content_type}
    if exchange.session:
        response["session"] = SESSION_PLACEHOLDER
    if exchange.events is not None:
        response["events"] = list(exchange.events)
    elif exchange.body is not None:
        response["body"] = exchange.body
    return {
        "index": exchange.index,
        "server": exchange.server,
        "request": {
            "method": exchange.method,
            "path": exchange.path,
            "body_key": exchange.key,
            "body": exchange.request,
        },
        "response": response,
    }


def exchange_from_json(doc: Any, position: int) -> McpExchange:
    """Read one cassette ``mcp`` entry; raises ValueError naming the entry and field."""
    where = f"mcp exchange {position}"
    if not isinstance(doc, dict):
        raise ValueError(f"{where} should be an object")
    request, response = doc.get("request"), doc.get("response")
    if not isinstance(request, dict) or not isinstance(response, dict):
        raise ValueError(f"{where} needs a `request` and a `response` object")
    for obj, name, kind in (
        (doc, "index", int), (doc, "server", str), (request, "method", str), (request, "path", str),
        (request, "body_key", str), (response, "status", int), (response, "content_type", str),
    ):
        if not isinstance(obj.get(name), kind):
            raise ValueError(f"{where}: `{name}` is missing or has the wrong type")
    events = response.get("events")
    if events is not None and not (isinstance(events, list) and all(isinstance(e, str) for e in events)):
        raise ValueError(f"{where}: `response.events` should be a list of strings")
    return McpExchange(
        index=doc["index"],
        server=doc["server"],
        method=request["method"],
        path=request["path"],
        request=request.get("body"),
        key=request["body_key"],
        status=response["status"],
        content_type=response["content_type"],
        session="session" in response,
        body=response.get("body"),
        events=tuple(events) if events is not None else None,
    )


@dataclass(slots=True)
class McpReplayer:
    """Serve recorded exchanges strictly: each answers one equal request, once, in recorded order."""

    exchanges: tuple[McpExchange, ...]
    _used: set[int] = field(default_factory=set)

    def take(self, key: str) -> McpExchange | None:
        """The first unused exchange with this key (now used), or None: a miss, which fails the run."""
        for exchange in self.exchanges:
            if exchange.index not in self._used and exchange.key == key:
                self._used.add(exchange.index)
                return exchange
        return None

    def unconsumed(self) -> list[McpExchange]:
        """Recorded exchanges no request used (the agent skipped them)."""
        return [e for e in self.exchanges if e.index not in self._used]

    def replay_body(self, exchange: McpExchange, live_request: Any) -> bytes:
        """The recorded response body with JSON-RPC ids restored to the live request's."""
        recorded, live = request_ids(exchange.request), request_ids(live_request)
        if exchange.events is not None:
            out = []
            for data in exchange.events:
                try:
                    message = json.loads(data)
                except ValueError:
                    out.append(f"event: message\ndata: {data}\n\n")
                    continue
                restored = restore_ids(message, recorded, live)
                out.append(f"event: message\ndata: {json.dumps(restored, ensure_ascii=False)}\n\n")
            return "".join(out).encode()
        if exchange.body is None:
            return b""
        return _dumps(restore_ids(exchange.body, recorded, live))


def miss_response(summary: str) -> bytes:
    """The JSON-RPC error a replayed request with no recorded exchange gets (fail fast)."""
    message = (
        f"flowproof replay: this MCP request ({summary or 'no body'}) matches no recorded "
        "exchange; re-record the flow if the agent's MCP traffic changed on purpose"
    )
    return _dumps(error_response(None, REPLAY_MISS, message))


# --------------------------------------------------------------------------- trajectory


@dataclass(frozen=True, slots=True)
class McpCall:
    """A ``tools/call`` that crossed the MCP boundary (answered by flowproof or forwarded).

    ``after_turns`` is how many model turns had completed when it crossed: it
    places the call in the trajectory between the model's turns.
    """

    server: str
    name: str
    arguments_raw: str
    answered: bool
    after_turns: int

    def to_json(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "name": self.name,
            "arguments": self.arguments_raw,
            "answered": self.answered,
            "after_turns": self.after_turns,
        }


# --------------------------------------------------------------------------- routing


_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


@dataclass(frozen=True, slots=True)
class McpRoute:
    """A real MCP server flowproof stands in front of: an ``mcp:`` entry's name and resolved url."""

    name: str
    scheme: str
    host: str
    port: int
    path: str

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}{self.path}"

    def matches(self, scheme: str, host: str, port: int, path: str) -> bool:
        """True when a request to scheme://host:port/path is addressed to this server."""
        same_host = host.lower() == self.host or (host.lower() in _LOOPBACK and self.host in _LOOPBACK)
        return (
            scheme == self.scheme
            and same_host
            and port == self.port
            and self.relative_path(path) is not None
        )

    def relative_path(self, path: str) -> str | None:
        """The request path below the server's url path (query dropped), or None when outside it.

        The key compares this, not the whole path: the url itself comes from the
        spec's variable, which may name another path at replay than at record.
        """
        bare = path.split("?", 1)[0]
        base = self.path.rstrip("/")
        if base and bare != base and not bare.startswith(base + "/"):
            return None
        return bare[len(base):]


def parse_route(value: str) -> McpRoute:
    """Parse ``NAME=URL`` (the addon's ``flowproof_mcp`` option); ValueError says what is wrong.

    >>> parse_route("exports=http://127.0.0.1:9000/mcp").port
    9000
    """
    name, sep, url = value.partition("=")
    name, url = name.strip(), url.strip()
    if not sep or not name or not url:
        raise ValueError(f"expected NAME=URL, e.g. exports=http://127.0.0.1:9000/mcp, not {value!r}")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"the MCP url {url!r} must be an http(s) URL with a host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as e:
        raise ValueError(f"the MCP url {url!r} has an invalid port ({e})") from None
    return McpRoute(name, parts.scheme, parts.hostname.lower(), port, parts.path or "/")
