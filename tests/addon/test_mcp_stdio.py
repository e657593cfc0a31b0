"""The stdio relay in the proxy (flowproof.addon.mcp_stdio), driven with mitmproxy's test flows
the way the stand-in sends them: absolute-form POSTs to the reserved host."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mitmproxy import http
from mitmproxy.test import tflow

from flowproof.addon.mcp import McpBoundary
from flowproof.addon.options import AddonConfig
from flowproof.addon.shared import Shared
from flowproof.cassette import Cassette
from flowproof.mcp.stdio import CLIENT, SERVER, STANDIN_HOST, StdioMessage, StdioSession
from flowproof.options import Mode, ProxyOptions, with_spec
from flowproof.replay import Replayer
from flowproof.spec import load_spec

SPEC = """\
name: n
agent:
  command: a
mcp:
  - name: notes
    command: python notes_server.py
    tools:
      - name: delete_note
        result: { ok: false }
      - name: list_notes
  - name: remote
    url: http://127.0.0.1:8123/mcp
    tools:
      - name: other
steps:
  - prompt: x
"""


def relay_flow(path: str, body: Any) -> http.HTTPFlow:
    flow = tflow.tflow()
    req = flow.request
    req.method, req.scheme, req.host, req.port, req.path = "POST", "http", STANDIN_HOST, 80, path
    req.content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return flow


def call(ident: int, name: str, **arguments: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


class Relay:
    """The MCP concern of one run, and what it answered."""

    def __init__(self, tmp_path: Path, mode: str, recorded: tuple[StdioSession, ...] = ()) -> None:
        self.log = tmp_path / "events.jsonl"
        spec = tmp_path / "s.flow.yaml"
        spec.write_text(SPEC, encoding="utf-8")
        options = with_spec(ProxyOptions(mode=Mode(mode), report=self.log), load_spec(spec),
                            cwd=str(tmp_path), home=None)
        config = AddonConfig.build(options)
        replayer = Replayer(Cassette((), mcp_stdio=recorded)) if mode != "record" else None
        self.shared = Shared(config, replayer)
        self.mcp = McpBoundary(self.shared, [])

    def post(self, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        flow = relay_flow(path, body)
        assert self.mcp.handle_request(flow) is True
        assert flow.response is not None
        return flow.response.status_code, json.loads(flow.response.content or b"")

    def open(self, server: str = "notes") -> tuple[int, list[str]]:
        status, doc = self.post("/open", {"server": server})
        assert status == 200, doc
        return doc["session"], doc["client"]

    def client(self, session: int, message: Any) -> dict[str, Any]:
        status, doc = self.post(f"/client/{session}", message)
        assert status == 200, doc
        return doc

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        found = [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []
        return [e for e in found if kind is None or e["event"] == kind]


class TestEveryMode:
    def test_a_declared_tool_is_answered_and_never_forwarded(self, tmp_path: Path) -> None:
        for mode in ("record", "replay", "compare"):
            (tmp_path / mode).mkdir()
            relay = Relay(tmp_path / mode, mode, (StdioSession(0, "notes", ()),))
            session, _ = relay.open()
            answer = relay.client(session, call(4, "delete_note", id=7))
            assert answer["forward"] is False
            [line] = answer["client"]
            assert json.loads(line)["id"] == 4 and json.loads(line)["result"]["structuredContent"] == {"ok": False}
            assert relay.events("mcp_call") == [{"event": "mcp_call", "server": "notes", "name": "delete_note",
                                                 "arguments": '{"id": 7}', "answered": True}]
            if mode == "record":
                assert relay.shared.mcp_stdio[0].messages == []  # answered here: not part of the session

    def test_a_line_that_is_not_json_rpc_is_refused(self, tmp_path: Path) -> None:
        relay = Relay(tmp_path, "record")
        session, _ = relay.open()
        answer = relay.client(session, b"{oops")
        assert answer["forward"] is False
        assert json.loads(answer["client"][0])["error"]["code"] == -32700
        assert relay.events("mcp_rejected")[0]["server"] == "notes"

    def test_only_stdio_entries_of_the_spec_can_be_opened(self, tmp_path: Path) -> None:
        relay = Relay(tmp_path, "record")
        assert relay.post("/open", {"server": "remote"})[0] == 404  # an http entry
        assert relay.post("/open", {"server": "nope"})[0] == 404
        assert relay.post("/open", b"[]")[0] == 400
        assert relay.post("/client/7", call(1, "x"))[0] == 404  # no such session

    def test_other_hosts_are_left_alone(self, tmp_path: Path) -> None:
        relay = Relay(tmp_path, "record")
        flow = relay_flow("/open", {"server": "notes"})
        flow.request.host = "stdio.mcp.example.com"
        assert relay.mcp.handle_request(flow) is False and flow.response is None


class TestRecord:
    def test_both_directions_are_kept_in_crossing_order(self, tmp_path: Path) -> None:
        relay = Relay(tmp_path, "record")
        session, initial = relay.open()
        assert initial == []
        assert relay.client(session, call(1, "list_notes")) == {"forward": True, "client": []}
        assert relay.events("mcp_call")[0]["answered"] is False
        progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}
        for line in (json.dumps(progress).encode(), b"server log line", b'{"jsonrpc":"2.0","id":1,"result":{}}'):
            assert relay.post(f"/server/{session}", line) == (200, {"forward": True})
        assert relay.post(f"/close/{session}", {}) == (200, {})
        [recorded] = relay.shared.mcp_stdio
        assert recorded.session().messages == (
            StdioMessage(CLIENT, message=call(1, "list_notes")),
            StdioMessage(SERVER, message=progress),
            StdioMessage(SERVER, line="server log line"),
            StdioMessage(SERVER, message={"jsonrpc": "2.0", "id": 1, "result": {}}),
        )

    def test_a_stand_in_error_fails_the_run(self, tmp_path: Path) -> None:
        relay = Relay(tmp_path, "record")
        session, _ = relay.open()
        relay.post(f"/close/{session}", {"error": "could not start `pyton`: No such file or directory"})
        [error] = relay.events("error")
        assert error["text"] == "the stdio MCP server `notes`: could not start `pyton`: No such file or directory"


class TestCompare:
    def test_forwarded_live_and_not_kept(self, tmp_path: Path) -> None:
        relay = Relay(tmp_path, "compare", ())
        session, _ = relay.open()
        assert relay.client(session, call(1, "list_notes"))["forward"] is True
        assert relay.shared.mcp_stdio == []


class TestReplay:
    RECORDED = StdioSession(0, "notes", (
        StdioMessage(CLIENT, message=call(1, "list_notes")),
        StdioMessage(SERVER, message={"jsonrpc": "2.0", "id": 1, "result": {"notes": []}}),
        StdioMessage(CLIENT, message={"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}}),
    ))

    def test_served_from_the_recording_with_the_live_id(self, tmp_path: Path) -> None:
        relay = Relay(tmp_path, "replay", (self.RECORDED,))
        session, _ = relay.open()
        answer = relay.client(session, call(30, "list_notes"))
        assert answer["forward"] is False
        assert [json.loads(line) for line in answer["client"]] == [
            {"jsonrpc": "2.0", "id": 30, "result": {"notes": []}}]

    def test_a_miss_diverges_and_the_agent_gets_an_error(self, tmp_path: Path) -> None:
        relay = Relay(tmp_path, "replay", (self.RECORDED,))
        session, _ = relay.open()
        answer = relay.client(session, call(5, "list_notes", folder="other"))
        [line] = answer["client"]
        assert json.loads(line)["id"] == 5 and json.loads(line)["error"]["code"] == -32001
        [divergence] = relay.events("divergence")
        assert "stdio server `notes` (tools/call list_notes) matches no recorded one" in divergence["text"]

    def test_what_the_agent_never_sent_is_missing_at_the_end(self, tmp_path: Path) -> None:
        relay = Relay(tmp_path, "replay", (self.RECORDED,))
        session, _ = relay.open()
        relay.client(session, call(2, "list_notes"))
        relay.mcp.done()
        [divergence] = relay.events("divergence")
        assert divergence["text"].splitlines() == [
            "1 recorded stdio MCP message(s) were never sent (missing calls):",
            "- stdio session 0 with `notes`: notifications/cancelled",
        ]

    def test_a_second_start_of_the_server_than_recorded_diverges(self, tmp_path: Path) -> None:
        relay = Relay(tmp_path, "replay", (self.RECORDED,))
        relay.open()
        second, _ = relay.open()
        assert "more often than the recording did" in relay.events("divergence")[0]["text"]
        answer = relay.client(second, call(3, "list_notes"))
        assert json.loads(answer["client"][0])["error"]["code"] == -32001
