"""Recorded HTTP exchanges with an MCP server: the cassette's ``mcp`` entries, their key, strict replay."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from flowproof.mcp.jsonrpc import REPLAY_MISS, dumps, error_response

__all__ = [
    "SESSION_PLACEHOLDER",
    "McpExchange",
    "McpReplayer",
    "exchange_from_json",
    "exchange_key",
    "exchange_to_json",
    "miss_response",
    "request_ids",
    "restore_ids",
    "without_ids",
]

#: What a server-minted ``Mcp-Session-Id`` becomes in a cassette: the client only echoes it.
SESSION_PLACEHOLDER = "flowproof-mcp-session"


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


def without_ids(body: Any) -> Any:
    """A JSON-RPC body (a message or a batch) minus what numbers a request rather than says what
    it asks: each message's ``id`` and a request's ``params._meta.progressToken``."""
    if isinstance(body, list):
        return [without_ids(m) for m in body]
    message = body
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
    doc = {"method": http_method.upper(), "path": path.split("?", 1)[0], "body": without_ids(request)}
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
        return dumps(restore_ids(exchange.body, recorded, live))


def miss_response(summary: str) -> bytes:
    """The JSON-RPC error a replayed request with no recorded exchange gets (fail fast)."""
    message = (
        f"flowproof replay: this MCP request ({summary or 'no body'}) matches no recorded "
        "exchange; re-record the flow if the agent's MCP traffic changed on purpose"
    )
    return dumps(error_response(None, REPLAY_MISS, message))
