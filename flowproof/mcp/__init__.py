"""The MCP boundary, pure: read JSON-RPC bodies, decide what flowproof does with each, match recordings.

An `mcp:` entry in a flow spec lists tools that flowproof answers itself, so the
real MCP server never runs them. This package holds every decision about that
traffic; the addon (``flowproof.addon.mcp``) only moves bytes. See docs/mcp.md.
One module per concern, every public name importable from here:

- `flowproof.mcp.jsonrpc`: parse and validate JSON-RPC 2.0 bodies, error responses;
- `flowproof.mcp.decisions`: answer, forward or refuse one request (`decide`);
- `flowproof.mcp.exchanges`: recorded HTTP exchanges, their key, strict replay;
- `flowproof.mcp.calls`: the ``tools/call`` requests that crossed, for the trajectory;
- `flowproof.mcp.refused`: a recording whose server refused every request;
- `flowproof.mcp.routes`: which ``mcp:`` server a request is addressed to.

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

>>> import json
>>> from flowproof.mcp import decide
>>> decision = decide("POST", {"accept": "application/json"},
...     b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","arguments":{}}}',
...     {"x": {"ok": False}})
>>> json.loads(decision.body)["result"]["structuredContent"]
{'ok': False}
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "INVALID_REQUEST",
    "MODERN_PROTOCOL",
    "PARSE_ERROR",
    "REPLAY_MISS",
    "SESSION_PLACEHOLDER",
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
    "call_tool_result",
    "decide",
    "error_response",
    "exchange_from_json",
    "exchange_key",
    "exchange_to_json",
    "mcp_tool_of",
    "miss_response",
    "parse_body",
    "parse_route",
    "render_messages",
    "request_ids",
    "restore_ids",
    "wants_sse",
]


#: Every name loads its module on first use (PEP 562), as `flowproof.spec`'s do: the
#: cassette and the options need the recorded exchanges and the routes, the runner of a
#: replay never needs the decisions of the MCP boundary.
_LAZY = {
    **dict.fromkeys(("McpCall", "mcp_tool_of"), "flowproof.mcp.calls"),
    **dict.fromkeys(("Answer", "Decision", "Forward", "Reject", "call_tool_result", "decide", "render_messages",
                     "wants_sse"), "flowproof.mcp.decisions"),
    **dict.fromkeys(("SESSION_PLACEHOLDER", "McpExchange", "McpReplayer", "exchange_from_json", "exchange_key",
                     "exchange_to_json", "miss_response", "request_ids", "restore_ids"), "flowproof.mcp.exchanges"),
    **dict.fromkeys(("INVALID_REQUEST", "MODERN_PROTOCOL", "PARSE_ERROR", "REPLAY_MISS", "Body", "Message",
                     "Problem", "error_response", "parse_body"), "flowproof.mcp.jsonrpc"),
    **dict.fromkeys(("McpRoute", "parse_route"), "flowproof.mcp.routes"),
}

if TYPE_CHECKING:
    from flowproof.mcp.calls import McpCall, mcp_tool_of
    from flowproof.mcp.decisions import (
        Answer,
        Decision,
        Forward,
        Reject,
        call_tool_result,
        decide,
        render_messages,
        wants_sse,
    )
    from flowproof.mcp.exchanges import (
        SESSION_PLACEHOLDER,
        McpExchange,
        McpReplayer,
        exchange_from_json,
        exchange_key,
        exchange_to_json,
        miss_response,
        request_ids,
        restore_ids,
    )
    from flowproof.mcp.jsonrpc import (
        INVALID_REQUEST,
        MODERN_PROTOCOL,
        PARSE_ERROR,
        REPLAY_MISS,
        Body,
        Message,
        Problem,
        error_response,
        parse_body,
    )
    from flowproof.mcp.routes import McpRoute, parse_route


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
