"""Tests for flowproof.mcp.decisions: the per-request decision (answer, forward, refuse)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from flowproof.mcp import (
    INVALID_REQUEST,
    PARSE_ERROR,
    Answer,
    Body,
    Forward,
    Reject,
    call_tool_result,
    decide,
    parse_body,
)

DECLARED = {"export_to_endpoint": {"ok": False}}
BOTH = {"accept": "application/json, text/event-stream"}


def call(ident: object, name: str, arguments: object = None) -> dict[str, object]:
    params: dict[str, object] = {"name": name}
    if arguments is not None:
        params["arguments"] = arguments
    return {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params}


def body(doc: object) -> bytes:
    return json.dumps(doc).encode()


class TestDecide:
    def test_declared_tool_is_answered_with_the_request_id(self) -> None:
        """A declared tools/call gets a CallToolResult carrying its own JSON-RPC id, as JSON."""
        decision = decide("POST", BOTH, body(call("req-7", "export_to_endpoint", {"rows": 100})), DECLARED)
        assert isinstance(decision, Answer)
        assert decision.content_type == "application/json"
        reply = json.loads(decision.body)
        assert reply["id"] == "req-7"
        assert reply["result"]["structuredContent"] == {"ok": False}
        assert json.loads(reply["result"]["content"][0]["text"]) == {"ok": False}
        assert reply["result"]["isError"] is False
        assert decision.calls == (("export_to_endpoint", {"rows": 100}),)

    def test_answer_is_an_sse_stream_when_only_sse_is_accepted(self) -> None:
        """A client that accepts only text/event-stream gets one `message` event."""
        decision = decide("POST", {"accept": "text/event-stream"}, body(call(3, "export_to_endpoint")), DECLARED)
        assert isinstance(decision, Answer)
        assert decision.content_type == "text/event-stream"
        text = decision.body.decode()
        assert text.startswith("event: message\ndata: ") and text.endswith("\n\n")
        assert json.loads(text.split("data: ", 1)[1])["id"] == 3

    def test_batch_of_declared_calls_is_answered_as_a_batch(self) -> None:
        """Each message of a batch gets its own id back, in order."""
        decision = decide(
            "POST", BOTH, body([call(1, "export_to_endpoint"), call(2, "export_to_endpoint")]), DECLARED
        )
        assert isinstance(decision, Answer)
        assert [m["id"] for m in json.loads(decision.body)] == [1, 2]

    def test_mixed_batch_is_rejected_not_forwarded(self) -> None:
        """A batch mixing a declared tool with other messages cannot go to the server half-answered."""
        mixed = [call(1, "export_to_endpoint"), {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
        decision = decide("POST", BOTH, body(mixed), DECLARED)
        assert isinstance(decision, Reject)
        assert json.loads(decision.body)["error"]["code"] == INVALID_REQUEST

    def test_undeclared_tool_and_session_traffic_are_forwarded(self) -> None:
        """initialize, server/discover, tools/list, notifications and other tools pass through."""
        for doc in (
            {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}},
            {"jsonrpc": "2.0", "id": 0, "method": "server/discover"},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        ):
            decision = decide("POST", BOTH, body(doc), DECLARED)
            assert isinstance(decision, Forward) and decision.calls == ()
        forwarded = decide("POST", BOTH, body(call(4, "list_rows", {"limit": 3})), DECLARED)
        assert isinstance(forwarded, Forward)
        assert forwarded.calls == (("list_rows", {"limit": 3}),)
        assert forwarded.summary == "tools/call list_rows"

    def test_get_and_delete_are_forwarded_without_a_body(self) -> None:
        for method in ("GET", "DELETE"):
            decision = decide(method, BOTH, b"", DECLARED)
            assert isinstance(decision, Forward) and decision.body is None

    def test_not_json_is_a_parse_error(self) -> None:
        decision = decide("POST", BOTH, b"{not json", DECLARED)
        assert isinstance(decision, Reject) and decision.status == 400
        assert json.loads(decision.body)["error"]["code"] == PARSE_ERROR

    def test_invalid_messages_are_invalid_requests(self) -> None:
        """Each rule of JSON-RPC 2.0 that the parser enforces, with its reason."""
        cases = {
            "[]": "empty batch",
            '{"id": 1, "method": "x"}': '"jsonrpc"',
            '{"jsonrpc": "2.0", "id": true, "method": "x"}': '"id"',
            '{"jsonrpc": "2.0", "id": null, "method": "x"}': "null",
            '{"jsonrpc": "2.0", "id": 1, "method": 5}': '"method"',
            '{"jsonrpc": "2.0", "id": 1, "method": "x", "params": 3}': '"params"',
            '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}}': "params.name",
            '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t", "arguments": []}}': "arguments",  # noqa: E501
            '{"jsonrpc": "2.0", "id": 1}': "exactly one",
            "[1]": "batch item 0",
        }
        for text, reason in cases.items():
            decision = decide("POST", BOTH, text.encode(), DECLARED)
            assert isinstance(decision, Reject), text
            assert reason in decision.reason, (text, decision.reason)
            assert json.loads(decision.body)["error"]["code"] == INVALID_REQUEST

    @settings(max_examples=300, deadline=None)
    @given(st.binary(max_size=200))
    def test_arbitrary_bytes_never_raise_and_never_reach_the_answer_path_unparsed(self, data: bytes) -> None:
        """Any body yields a decision; a reject is always a JSON-RPC error object."""
        decision = decide("POST", BOTH, data, DECLARED)
        if isinstance(decision, Reject):
            assert "error" in json.loads(decision.body)
        else:
            # Only a body that parsed as JSON-RPC may be answered or forwarded.
            assert isinstance(parse_body(data), Body)

    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
        max_leaves=8,
    )

    @settings(max_examples=300, deadline=None)
    @given(json_values)
    def test_any_json_is_answered_forwarded_or_rejected_consistently(self, doc: object) -> None:
        """Whatever JSON arrives: only a valid tools/call of a declared tool is answered."""
        decision = decide("POST", BOTH, body(doc), DECLARED)
        if isinstance(decision, Answer):
            items = doc if isinstance(doc, list) else [doc]
            assert all(isinstance(i, dict) and i.get("method") == "tools/call" for i in items)
        elif isinstance(decision, Reject):
            assert json.loads(decision.body)["error"]["code"] in (INVALID_REQUEST, PARSE_ERROR)


class TestCallToolResult:
    def test_stateless_generation_gets_a_result_type(self) -> None:
        """A 2026-07-28 client (version in params._meta or the header) needs resultType; older ones get none."""
        modern = call("a", "export_to_endpoint")
        modern["params"]["_meta"] = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}  # type: ignore[index]
        for doc, headers, expected in (
            (modern, BOTH, "complete"),
            (call("b", "export_to_endpoint"), {**BOTH, "mcp-protocol-version": "2026-07-28"}, "complete"),
            (call("c", "export_to_endpoint"), {**BOTH, "mcp-protocol-version": "2025-11-25"}, None),
        ):
            decision = decide("POST", headers, body(doc), DECLARED)
            assert isinstance(decision, Answer)
            assert json.loads(decision.body)["result"].get("resultType") == expected

    def test_non_object_results_are_wrapped(self) -> None:
        """structuredContent must be an object: a list or scalar goes under `result`."""
        assert call_tool_result("done")["structuredContent"] == {"result": "done"}
        assert call_tool_result({"a": 1})["structuredContent"] == {"a": 1}
