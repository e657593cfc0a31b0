"""Tests for flowproof.mcp.exchanges: the recorded exchanges' key, JSON form and strict replay."""

from __future__ import annotations

import json

from flowproof.mcp import McpExchange, McpReplayer, exchange_from_json, exchange_key, exchange_to_json


class TestReplay:
    def exchange(self, index: int, request: object, response: object) -> McpExchange:
        return McpExchange(
            index=index, server="exports", method="POST", path="/mcp", request=request,
            key=exchange_key("POST", "/mcp", request), status=200,
            content_type="application/json", session=True, body=response,
        )

    def test_key_ignores_ids_progress_tokens_and_query(self) -> None:
        """What varies legitimately between runs is not compared; the rest is."""
        first = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                 "params": {"name": "t", "arguments": {"a": 1}, "_meta": {"progressToken": 1}}}
        again = {**first, "id": 5, "params": {**first["params"], "_meta": {"progressToken": 5}}}  # type: ignore[dict-item]
        assert exchange_key("POST", "/mcp", first) == exchange_key("POST", "/mcp?s=2", again)
        other = {**first, "params": {"name": "t", "arguments": {"a": 2}}}
        assert exchange_key("POST", "/mcp", first) != exchange_key("POST", "/mcp", other)
        assert exchange_key("POST", "/mcp", first) != exchange_key("POST", "/other", first)

    def test_consume_once_in_order_and_ids_restored(self) -> None:
        """Each exchange answers one request; the reply carries the live request's id."""
        request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        replayer = McpReplayer((
            self.exchange(0, request, {"jsonrpc": "2.0", "id": 1, "result": {"tools": ["a"]}}),
            self.exchange(1, request, {"jsonrpc": "2.0", "id": 1, "result": {"tools": ["b"]}}),
        ))
        live = {**request, "id": 42}
        key = exchange_key("POST", "/mcp", live)
        first = replayer.take(key)
        assert first is not None and first.index == 0
        assert json.loads(replayer.replay_body(first, live)) == {"jsonrpc": "2.0", "id": 42, "result": {"tools": ["a"]}}
        second = replayer.take(key)
        assert second is not None and second.index == 1
        assert replayer.take(key) is None
        assert replayer.unconsumed() == []

    def test_sse_events_keep_server_requests_ids(self) -> None:
        """Only the response to the request gets the live id; a server's own request keeps its id."""
        request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t"}}
        exchange = McpExchange(
            index=0, server="s", method="POST", path="/mcp", request=request,
            key=exchange_key("POST", "/mcp", request), status=200, content_type="text/event-stream",
            events=(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage"}),
                    json.dumps({"jsonrpc": "2.0", "id": 1, "result": {}})),
        )
        out = McpReplayer((exchange,)).replay_body(exchange, {**request, "id": 9}).decode()
        datas = [json.loads(line[6:]) for line in out.splitlines() if line.startswith("data: ")]
        assert [d["id"] for d in datas] == [1, 9]

    def test_json_round_trip_and_bad_entries(self) -> None:
        exchange = self.exchange(
            3, {"jsonrpc": "2.0", "id": 1, "method": "x"}, {"jsonrpc": "2.0", "id": 1, "result": {}}
        )
        doc = exchange_to_json(exchange)
        assert doc["response"]["session"] == "flowproof-mcp-session"
        assert exchange_from_json(json.loads(json.dumps(doc)), 0) == exchange
        for bad in (3, {"request": {}}, {**doc, "index": "x"}):
            try:
                exchange_from_json(bad, 2)
            except ValueError as e:
                assert "mcp exchange 2" in str(e)
            else:
                raise AssertionError(f"accepted {bad!r}")
