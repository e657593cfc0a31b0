"""Tests for flowproof.mcp.refused: a recording whose MCP server refused everything."""

from __future__ import annotations

import json
from typing import Any

from flowproof.mcp import McpExchange, exchange_key
from flowproof.mcp.refused import Outcome, exchange_outcomes, outcome_of, refused_servers, session_outcomes
from flowproof.mcp.stdio import StdioMessage, StdioSession


def exchange(index: int, request: Any, status: int, body: Any = None, events: tuple[str, ...] | None = None,
             server: str = "exports") -> McpExchange:
    return McpExchange(index=index, server=server, method="POST", path="", request=request,
                       key=exchange_key("POST", "", request), status=status, content_type="application/json",
                       body=body, events=events)


def request(ident: int, method: str = "tools/call") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": method, "params": {"name": "list_rows"}}


UNAUTHORIZED = {"error": "invalid_token"}


class TestOutcomes:
    def test_a_result_an_error_an_http_status_and_no_answer(self) -> None:
        ok = {"jsonrpc": "2.0", "id": 1, "result": {}}
        failed = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32001, "message": "Unauthorized"}}
        assert outcome_of("s", request(1), [ok], 200) == Outcome("s", "tools/call", None)
        assert outcome_of("s", request(1), [failed], 200) == Outcome("s", "tools/call",
                                                                     "JSON-RPC error -32001: Unauthorized")
        assert outcome_of("s", request(1), [UNAUTHORIZED], 401) == Outcome("s", "tools/call", "HTTP 401")
        # An answer the recording does not show (a 202, a GET stream) is no evidence of a refusal.
        assert outcome_of("s", request(1), [], 202) == Outcome("s", "tools/call", None)
        assert outcome_of("s", {"jsonrpc": "2.0", "method": "notifications/initialized"}, [], 401) is None

    def test_sse_events_and_batches_are_read(self) -> None:
        events = (json.dumps({"jsonrpc": "2.0", "method": "notifications/message"}),
                  json.dumps({"jsonrpc": "2.0", "id": 2, "error": {"code": -1, "message": "no"}}))
        batch = [request(3, "tools/list"), request(4, "ping")]
        found = list(exchange_outcomes([
            exchange(0, request(2), 200, events=events),
            exchange(1, batch, 200, body=[{"jsonrpc": "2.0", "id": 3, "result": {}},
                                          {"jsonrpc": "2.0", "id": 4, "result": {}}]),
        ]))
        assert [(o.method, o.failure) for o in found] == [
            ("tools/call", "JSON-RPC error -1: no"), ("tools/list", None), ("ping", None)]


class TestRefusedServers:
    def test_every_request_refused_is_named(self) -> None:
        """Four 401s, the issue's case: the line names the server, the count and the status."""
        exchanges = [exchange(i, request(i, m), 401, UNAUTHORIZED)
                     for i, m in enumerate(("server/discover", "tools/list", "tools/call", "tools/call"))]
        [line] = refused_servers(exchange_outcomes(exchanges))
        assert line.startswith("mcp server `exports` refused every request of the recording (4 of 4: HTTP 401)")

    def test_every_tools_call_refused_although_the_handshake_passed(self) -> None:
        """A server that authorises per tool: the handshake works, every call is refused."""
        exchanges = [
            exchange(0, request(0, "tools/list"), 200, {"jsonrpc": "2.0", "id": 0, "result": {"tools": []}}),
            exchange(1, request(1), 200, {"jsonrpc": "2.0", "id": 1, "error": {"code": -32001, "message": "no"}}),
            exchange(2, request(2), 403, None),
        ]
        [line] = refused_servers(exchange_outcomes(exchanges))
        assert "refused every tools/call of the recording (2 of 2: HTTP 403; JSON-RPC error -32001: no)" in line

    def test_one_success_or_a_server_without_calls_is_fine(self) -> None:
        ok = {"jsonrpc": "2.0", "id": 1, "result": {}}
        assert refused_servers(exchange_outcomes([
            exchange(0, request(0), 401, UNAUTHORIZED), exchange(1, request(1), 200, ok)])) == ()
        # The handshake passed and no tool was called: nothing was refused.
        assert refused_servers(exchange_outcomes([
            exchange(0, request(1, "tools/list"), 200, ok), exchange(1, request(2, "ping"), 500, None)])) == ()
        # Servers are judged apart.
        lines = refused_servers(exchange_outcomes([
            exchange(0, request(1), 200, ok, server="a"), exchange(1, request(1), 401, None, server="b")]))
        assert len(lines) == 1 and "`b`" in lines[0]


class TestStdioSessions:
    def test_each_request_is_judged_by_the_server_lines_after_it(self) -> None:
        session = StdioSession(0, "notes", (
            StdioMessage("client", message=request(1, "tools/list")),
            StdioMessage("server", line="a log line"),
            StdioMessage("server", message={"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}),
            StdioMessage("client", message=[request(2), request(3)]),
            StdioMessage("server", message=[{"jsonrpc": "2.0", "id": 2, "error": {"code": -1, "message": "no"}},
                                            {"jsonrpc": "2.0", "id": 3, "error": {"code": -1, "message": "no"}}]),
            StdioMessage("client", message=request(4)),  # the agent left before its answer
        ))
        assert [(o.method, o.failure) for o in session_outcomes([session])] == [
            ("tools/list", None), ("tools/call", "JSON-RPC error -1: no"), ("tools/call", "JSON-RPC error -1: no"),
            ("tools/call", None)]
