"""Tests for flowproof.mcp.jsonrpc: JSON-RPC 2.0 messages as MCP carries them."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from flowproof.mcp.jsonrpc import (
    INVALID_REQUEST,
    PARSE_ERROR,
    Body,
    Message,
    Problem,
    dumps,
    error_response,
    parse_body,
)


class TestParseBody:
    def test_single_message_and_batch(self) -> None:
        single = parse_body(b'{"jsonrpc": "2.0", "id": 3, "method": "tools/list"}')
        assert isinstance(single, Body) and not single.batch
        assert single.messages[0].is_request and single.messages[0].id == 3
        batch = parse_body(b'[{"jsonrpc": "2.0", "method": "notifications/initialized"},'
                           b' {"jsonrpc": "2.0", "id": "a", "result": {}}]')
        assert isinstance(batch, Body) and batch.batch
        assert [m.method for m in batch.messages] == ["notifications/initialized", None]
        assert not batch.messages[0].has_id and batch.messages[1].has_id

    def test_problems_carry_the_json_rpc_code(self) -> None:
        assert parse_body(b"\xff") == Problem(PARSE_ERROR, "the body is not valid JSON")
        invalid = parse_body(b'{"jsonrpc": "1.0", "id": 1, "method": "x"}')
        assert isinstance(invalid, Problem) and invalid.code == INVALID_REQUEST
        # A null id is legal only in an error response to an unreadable request.
        assert isinstance(parse_body(b'{"jsonrpc": "2.0", "id": null, "error": {"code": 1}}'), Body)

    @given(st.binary(max_size=100))
    def test_any_bytes_give_a_body_or_a_problem(self, data: bytes) -> None:
        assert isinstance(parse_body(data), Body | Problem)


class TestMessage:
    def test_tool_call_and_protocol_version(self) -> None:
        call = Message({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "t", "arguments": None, "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}})
        assert call.tool_call() == ("t", {})
        assert call.protocol_version() == "2026-07-28"
        assert Message({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).tool_call() is None


class TestErrorResponse:
    def test_dumps_is_one_line_even_with_line_breaks_in_text(self) -> None:
        """A stdio message must not contain a line break: JSON escapes every one inside strings."""
        out = dumps(error_response(7, INVALID_REQUEST, "two\nlines\r"))
        assert b"\n" not in out and b"\r" not in out
        assert json.loads(out) == {"jsonrpc": "2.0", "id": 7, "error": {"code": INVALID_REQUEST,
                                                                        "message": "two\nlines\r"}}
