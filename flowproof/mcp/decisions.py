"""What flowproof does with one HTTP request to an MCP endpoint: answer, forward or refuse it."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flowproof.mcp.jsonrpc import (
    INVALID_REQUEST,
    JSONRPC,
    MODERN_PROTOCOL,
    TOOLS_CALL,
    Body,
    Problem,
    dumps,
    error_response,
    parse_body,
)

__all__ = ["Answer", "Decision", "Forward", "Reject", "call_tool_result", "decide", "render_messages", "wants_sse"]


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
            parts.append(f"{TOOLS_CALL} {call[0]}" if call else message.method or "response")
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
        return Reject(400, "application/json", dumps(error), parsed.message)
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
        return Reject(400, "application/json", dumps(error), reason)
    header_version = headers.get("mcp-protocol-version")
    replies = [
        {
            "jsonrpc": JSONRPC,
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
    return "application/json", dumps(doc)
