"""Tests for flowproof.mcp.stdio: a recorded stdio MCP session, its JSON form, and strict replay."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowproof.mcp.stdio import (
    CLIENT,
    SERVER,
    StdioMessage,
    StdioRecording,
    StdioReplayer,
    StdioSession,
    message_key,
    read_line,
    render_line,
    session_from_json,
    session_to_json,
    standin_variable,
)


def request(ident: Any, method: str, **params: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
    if params:
        doc["params"] = params
    return doc


def result(ident: Any, value: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "result": value}


def session(*lines: tuple[str, Any], index: int = 0, server: str = "notes") -> StdioSession:
    return StdioSession(index, server, tuple(
        StdioMessage(sender, line=body) if isinstance(body, str) else StdioMessage(sender, message=body)
        for sender, body in lines))


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
HANDSHAKE = (
    (CLIENT, request(0, "initialize", protocolVersion="2025-06-18")),
    (SERVER, result(0, {"protocolVersion": "2025-06-18"})),
    (CLIENT, INITIALIZED),
)


class TestLines:
    def test_json_and_other_text(self) -> None:
        assert read_line(SERVER, b'{"jsonrpc":"2.0","method":"x"}') == StdioMessage(
            SERVER, message={"jsonrpc": "2.0", "method": "x"})
        assert read_line(SERVER, b"debug: starting \xff") == StdioMessage(SERVER, line="debug: starting \ufffd")

    @given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                        max_leaves=10))
    def test_a_rendered_message_is_one_utf8_line_that_reads_back(self, value: Any) -> None:
        """The stdio framing: no line break inside a message, valid UTF-8, the same JSON back."""
        text = render_line(value)
        data = text.encode("utf-8")
        assert b"\n" not in data and b"\r" not in data
        assert json.loads(data) == value

    def test_a_lone_surrogate_is_written_escaped(self) -> None:
        text = render_line({"text": "\ud83d"})
        assert text == '{"text":"\\ud83d"}'
        assert render_line({"text": "é"}) == '{"text":"é"}'


class TestJson:
    def test_round_trip(self) -> None:
        recorded = session(*HANDSHAKE, (SERVER, "a log line that is not JSON"), index=3)
        doc = json.loads(json.dumps(session_to_json(recorded)))
        assert doc["messages"][3] == {"from": "server", "line": "a log line that is not JSON"}
        assert session_from_json(doc, 0) == recorded

    @pytest.mark.parametrize("doc, reason", [
        (3, "should be an object"),
        ({"index": "0", "server": "s", "messages": []}, "`index`"),
        ({"index": 0, "messages": []}, "`server`"),
        ({"index": 0, "server": "s", "messages": {}}, "`messages` should be a list"),
        ({"index": 0, "server": "s", "messages": [{"from": "agent", "message": {}}]}, "needs `from`"),
        ({"index": 0, "server": "s", "messages": [{"from": "server"}]}, "exactly one of"),
        ({"index": 0, "server": "s", "messages": [{"from": "server", "line": 1}]}, "`line` should be a string"),
        ({"index": 0, "server": "s", "messages": [{"from": "client", "line": "x"}]}, "always JSON-RPC"),
    ])
    def test_bad_entries_name_the_session_and_the_field(self, doc: Any, reason: str) -> None:
        with pytest.raises(ValueError, match="mcp_stdio session 2") as caught:
            session_from_json(doc, 2)
        assert reason in str(caught.value)

    def test_a_recording_freezes_into_a_session(self) -> None:
        recording = StdioRecording(1, "notes")
        recording.messages.append(StdioMessage(CLIENT, message=INITIALIZED))
        assert recording.session() == StdioSession(1, "notes", (StdioMessage(CLIENT, message=INITIALIZED),))


class TestKey:
    def test_ids_and_progress_tokens_are_not_compared(self) -> None:
        first = request(1, "tools/call", name="t", arguments={"a": 1}, _meta={"progressToken": 1})
        again = request(9, "tools/call", name="t", arguments={"a": 1}, _meta={"progressToken": 9})
        assert message_key(first) == message_key(again)
        assert message_key(first) != message_key(request(1, "tools/call", name="t", arguments={"a": 2}))
        assert message_key([first]) != message_key(first)  # a batch is not its single message


class TestReplay:
    def test_answers_carry_the_live_ids(self) -> None:
        replay = StdioReplayer((session(*HANDSHAKE, (CLIENT, request(1, "tools/list")),
                                        (SERVER, result(1, {"tools": []}))),)).open("notes")
        assert replay is not None and replay.initial() == []
        [answer] = replay.client(request(40, "initialize", protocolVersion="2025-06-18")) or []
        assert json.loads(answer) == result(40, {"protocolVersion": "2025-06-18"})
        assert replay.client(INITIALIZED) == []  # a notification: matched, nothing to answer
        [listed] = replay.client(request("x-2", "tools/list")) or []
        assert json.loads(listed)["id"] == "x-2"
        assert replay.unconsumed() == []

    def test_consume_once_and_a_miss(self) -> None:
        replay = StdioReplayer((session((CLIENT, request(1, "ping")), (SERVER, result(1, {}))),)).open("notes")
        assert replay is not None
        assert replay.client(request(5, "ping")) is not None
        assert replay.client(request(6, "ping")) is None  # used once already
        assert replay.client(request(7, "tools/list")) is None  # never recorded

    def test_two_requests_answered_in_the_other_order_are_held_until_asked(self) -> None:
        """Recorded: tools/list and prompts/list sent together, answered prompts first. Replayed
        in the other order, each answer waits for its own request and carries its id."""
        recorded = session(
            (CLIENT, request(2, "tools/list")), (CLIENT, request(3, "prompts/list")),
            (SERVER, result(3, {"prompts": []})), (SERVER, result(2, {"tools": []})),
        )
        replay = StdioReplayer((recorded,)).open("notes")
        assert replay is not None
        [prompts] = replay.client(request(11, "prompts/list")) or []
        assert json.loads(prompts) == result(11, {"prompts": []})
        # The tools answer came with prompts/list's group, but waited for tools/list's id.
        [tools] = replay.client(request(12, "tools/list")) or []
        assert json.loads(tools) == result(12, {"tools": []})

    def test_server_requests_keep_their_ids_and_the_client_reply_matches(self) -> None:
        """A server's own request (roots/list) is sent as recorded; the agent's answer matches by content."""
        recorded = session(
            (CLIENT, request(1, "tools/call", name="t")),
            (SERVER, request(0, "roots/list")),
            (CLIENT, result(0, {"roots": []})),
            (SERVER, {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}),
            (SERVER, result(1, {"content": []})),
        )
        replay = StdioReplayer((recorded,)).open("notes")
        assert replay is not None
        [roots] = replay.client(request(8, "tools/call", name="t")) or []
        assert json.loads(roots) == request(0, "roots/list")
        progress, answer = replay.client(result(0, {"roots": []})) or []
        assert json.loads(progress)["method"] == "notifications/progress"
        assert json.loads(answer) == result(8, {"content": []})

    def test_sessions_are_taken_in_order_per_server_and_unopened_ones_are_missing(self) -> None:
        replayer = StdioReplayer((
            session((CLIENT, request(1, "a")), index=0, server="notes"),
            session((CLIENT, request(1, "b")), index=1, server="files"),
            session((CLIENT, request(1, "c")), index=2, server="notes"),
        ))
        first, second = replayer.open("notes"), replayer.open("notes")
        assert first is not None and second is not None and replayer.open("notes") is None
        assert (first.session.index, second.session.index) == (0, 2)
        assert first.client(request(4, "a")) == []
        left = replayer.unconsumed()
        assert [(s.index, [m["method"] for m in messages]) for s, messages in left] == [(1, ["b"]), (2, ["c"])]

    def test_non_json_server_lines_are_replayed_as_they_were(self) -> None:
        replay = StdioReplayer((session((SERVER, "booting"), (CLIENT, request(1, "ping")),
                                        (SERVER, "pong-log"), (SERVER, result(1, {}))),)).open("notes")
        assert replay is not None
        assert replay.initial() == ["booting"]
        assert replay.client(request(2, "ping")) == ["pong-log", '{"jsonrpc":"2.0","id":2,"result":{}}']


def test_standin_variable() -> None:
    assert standin_variable("exports") == "FLOWPROOF_MCP_EXPORTS"
    assert standin_variable("my-notes.v2") == "FLOWPROOF_MCP_MY_NOTES_V2"
