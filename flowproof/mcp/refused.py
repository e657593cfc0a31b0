"""A recording whose MCP server refused everything: what it pins is a fault, not the agent.

A server that rejects the agent's credentials answers every request with HTTP 401
or 403, or with a JSON-RPC error; a recording of that session replays the refusal
forever, and the flow seems to pass. `refused_servers` names each server that
answered no request of the recording with a result (or no ``tools/call``, when the
agent sent any), so the runner refuses to keep it as it refuses model turns with an
HTTP error status (docs/mcp.md, "A server that refuses everything").

The input is one `Outcome` per JSON-RPC request the agent sent, whatever the
transport: `exchange_outcomes` reads them from recorded HTTP exchanges,
`session_outcomes` from recorded stdio sessions.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from flowproof.mcp.exchanges import McpExchange
from flowproof.mcp.jsonrpc import TOOLS_CALL
from flowproof.mcp.stdio import CLIENT, StdioSession

__all__ = ["Outcome", "exchange_outcomes", "outcome_of", "refused_servers", "session_outcomes"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one request: ``failure`` says how it failed, None when it got a result
    (or when the recording does not show its answer, which is no evidence of a refusal)."""

    server: str
    method: str
    failure: str | None


def outcome_of(server: str, request: Any, responses: Sequence[Any], status: int | None = None) -> Outcome | None:
    """The `Outcome` of one JSON-RPC ``request`` message given the messages that answered it
    (matched by id) and, over HTTP, the response status; None when it is not a request."""
    if not isinstance(request, dict) or not isinstance(request.get("method"), str) or "id" not in request:
        return None
    ident = request["id"]
    for message in responses:
        if isinstance(message, dict) and "method" not in message and message.get("id") == ident:
            if "result" in message:
                return Outcome(server, request["method"], None)
            error = message.get("error")
            code = error.get("code") if isinstance(error, dict) else None
            text = error.get("message") if isinstance(error, dict) else None
            return Outcome(server, request["method"], f"JSON-RPC error {code}: {text}")
    if status is not None and status >= 400:
        return Outcome(server, request["method"], f"HTTP {status}")
    return Outcome(server, request["method"], None)


def exchange_outcomes(exchanges: Iterable[McpExchange]) -> Iterator[Outcome]:
    """One `Outcome` per JSON-RPC request of each recorded HTTP exchange."""
    for exchange in exchanges:
        requests = exchange.request if isinstance(exchange.request, list) else [exchange.request]
        responses = _messages(exchange)
        for request in requests:
            outcome = outcome_of(exchange.server, request, responses, exchange.status)
            if outcome is not None:
                yield outcome


def session_outcomes(sessions: Iterable[StdioSession]) -> Iterator[Outcome]:
    """One `Outcome` per JSON-RPC request the client sent in each recorded stdio session,
    answered by the server lines after it."""
    for session in sessions:
        lines = session.messages
        for position, item in enumerate(lines):
            if item.sender != CLIENT:
                continue
            later = [m.message for m in lines[position + 1:] if m.sender != CLIENT and m.line is None]
            answers = [m for doc in later for m in (doc if isinstance(doc, list) else [doc])]
            for request in item.message if isinstance(item.message, list) else [item.message]:
                outcome = outcome_of(session.server, request, answers)
                if outcome is not None:
                    yield outcome


def _messages(exchange: McpExchange) -> list[Any]:
    if exchange.events is not None:
        out: list[Any] = []
        for data in exchange.events:
            try:
                out.append(json.loads(data))
            except ValueError:
                continue
        return [m for item in out for m in (item if isinstance(item, list) else [item])]
    body = exchange.body
    return body if isinstance(body, list) else [body]


def refused_servers(outcomes: Iterable[Outcome]) -> tuple[str, ...]:
    """One line per server that answered none of its requests (none of its ``tools/call``
    requests, when there were any) with a result, naming how it refused.

    >>> [line] = refused_servers([Outcome("s", "tools/list", "HTTP 401"), Outcome("s", "tools/call", "HTTP 401")])
    >>> line.split(" — ")[0]
    'mcp server `s` refused every request of the recording (2 of 2: HTTP 401)'
    """
    by_server: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        by_server.setdefault(outcome.server, []).append(outcome)
    lines = []
    for server, seen in by_server.items():
        calls = [o for o in seen if o.method == TOOLS_CALL]
        judged, what = (seen, "request") if all(o.failure for o in seen) else (calls, "tools/call")
        if not judged or not all(o.failure for o in judged):
            continue
        failures = sorted({str(o.failure) for o in judged})
        lines.append(
            f"mcp server `{server}` refused every {what} of the recording "
            f"({len(judged)} of {len(judged)}: {'; '.join(failures)}) — check the credentials it expects"
        )
    return tuple(lines)
