"""The stdio MCP boundary in the proxy: the endpoint flowproof's stand-ins relay each line to.

An ``mcp:`` entry with a ``command:`` is a server the agent launches; its MCP
config launches flowproof's stand-in instead (``flowproof.runner.mcp_standin``,
docs/mcp.md "MCP over stdio"). The stand-in owns the pipes and the real server
process; every decision is made here, on the proxy's event loop, so the event
log and the cassette keep one writer and an MCP call lands between the model
turns it came between. The stand-in sends plain HTTP through the flow's own
proxy listener to a reserved host (`flowproof.mcp.stdio.STANDIN_HOST`):

- ``POST /open`` ``{"server": NAME}`` → ``{"session": N, "client": [lines]}``;
- ``POST /client/N`` (one line the agent wrote) → ``{"forward": bool, "client": [lines]}``:
  forward the line to the real server, and/or write these lines back to the agent;
- ``POST /server/N`` (one line the real server wrote) → ``{"forward": true}``;
- ``POST /close/N`` ``{"error": TEXT | null}`` → ``{}``.

Per client line, as for Streamable HTTP (`flowproof.mcp.decide`): a declared
``tools/call`` is answered here in every mode; a line that is not JSON-RPC 2.0 is
refused with a JSON-RPC error; anything else goes to the real server at record
(and is kept, with every line the server writes, in ``Shared.mcp_stdio``) and at
compare, and is served from the recorded sessions at replay.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mitmproxy import http

from flowproof.addon.shared import Shared, log
from flowproof.log_events import ErrorEvent, ErrorKind, McpCallEvent, McpDivergenceEvent, McpRejectedEvent
from flowproof.mcp import REPLAY_MISS, Answer, Reject, decide, error_response, request_ids
from flowproof.mcp.jsonrpc import methods_of
from flowproof.mcp.stdio import (
    CLIENT,
    SERVER,
    STANDIN_HOST,
    StdioMessage,
    StdioRecording,
    StdioReplay,
    StdioReplayer,
    read_line,
    render_line,
)
from flowproof.options import Mode

__all__ = ["StdioRelay"]


@dataclass(slots=True)
class _Live:
    """One stand-in's session: its server, and what records or replays it."""

    server: str
    recording: StdioRecording | None = None
    replay: StdioReplay | None = None


class StdioRelay:
    """Answers the stand-ins' relay requests; built by `McpBoundary` for the spec's stdio entries."""

    def __init__(self, shared: Shared, answers: Mapping[str, Mapping[str, Any]]) -> None:
        self.shared = shared
        self.mode = shared.config.mode
        self.servers = frozenset(shared.config.options.mcp_stdio)
        self.answers = answers
        recorded = shared.replayer.cassette.mcp_stdio if shared.replayer is not None else ()
        self.replayer = StdioReplayer(tuple(recorded)) if self.mode is Mode.REPLAY else None
        self._live: dict[int, _Live] = {}
        self._opened = 0

    def handle(self, flow: http.HTTPFlow) -> bool:
        """Answer ``flow`` when it is a stand-in's relay request; True when it was one."""
        req = flow.request
        if req.host != STANDIN_HOST:
            return False
        try:
            status, doc = self._dispatch(req.method.upper(), req.path, req.content or b"", flow.id)
        except Exception as e:  # noqa: BLE001 — a bug of ours must fail the run, not hang the stand-in
            self.shared.hook_failed(flow, "mcp stdio relay", e)
            status, doc = 500, {"error": f"flowproof failed on this MCP line: {type(e).__name__}"}
        flow.response = http.Response.make(status, json.dumps(doc).encode(), {"content-type": "application/json"})
        return True

    def _write(self, event: Any) -> None:
        self.shared.events.write(event)

    def _dispatch(self, method: str, path: str, body: bytes, flow_id: str) -> tuple[int, dict[str, Any]]:
        op, _, number = path.split("?", 1)[0].strip("/").partition("/")
        if method != "POST":
            return 405, {"error": "the relay takes POST only"}
        if op == "open":
            return self._open(body)
        try:
            live = self._live[int(number)]
        except (ValueError, KeyError):
            return 404, {"error": f"no open stdio session {number!r}"}
        if op == "client":
            return 200, self._client(live, body, flow_id)
        if op == "server":
            if live.recording is not None:
                live.recording.messages.append(read_line(SERVER, body))
            return 200, {"forward": True}
        if op == "close":
            self._close(live, body)
            self._live.pop(int(number), None)
            return 200, {}
        return 404, {"error": f"unknown relay operation {op!r}"}

    def _open(self, body: bytes) -> tuple[int, dict[str, Any]]:
        try:
            server = json.loads(body)["server"]
        except (ValueError, KeyError, TypeError):
            return 400, {"error": 'expected {"server": NAME}'}
        if server not in self.servers:
            return 404, {"error": f"this flow's spec has no mcp: entry `{server}` with a command"}
        number, self._opened = self._opened, self._opened + 1
        live = _Live(str(server))
        lines: list[str] = []
        if self.mode is Mode.RECORD:
            live.recording = StdioRecording(len(self.shared.mcp_stdio), live.server)
            self.shared.mcp_stdio.append(live.recording)
        elif self.replayer is not None:
            live.replay = self.replayer.open(live.server)
            if live.replay is None:
                self._write(McpDivergenceEvent("", (
                    f"flowproof replay diverged at the MCP boundary: the agent started the stdio MCP "
                    f"server `{server}` more often than the recording did"
                )))
            else:
                lines = live.replay.initial()
        self._live[number] = live
        log.info("mcp_stdio_open", server=live.server, session=number)
        return 200, {"session": number, "client": lines}

    def _client(self, live: _Live, line: bytes, flow_id: str) -> dict[str, Any]:
        decision = decide("POST", {}, line, self.answers.get(live.server, {}))
        if isinstance(decision, Reject):
            self._write(McpRejectedEvent(
                flow_id, live.server, f"a message to MCP server `{live.server}` was refused: {decision.reason}"
            ))
            return {"forward": False, "client": [decision.body.decode()]}
        if isinstance(decision, Answer):
            self._calls(live.server, decision.calls, answered=True)
            return {"forward": False, "client": [decision.body.decode()]}
        self._calls(live.server, decision.calls, answered=False)
        assert decision.body is not None  # decide parses every POST body
        raw = [m.raw for m in decision.body.messages]
        message: Any = raw if decision.body.batch else raw[0]
        if live.recording is not None:
            live.recording.messages.append(StdioMessage(CLIENT, message=message))
        if self.mode is not Mode.REPLAY:
            return {"forward": True, "client": []}
        lines = live.replay.client(message) if live.replay is not None else None
        if lines is None:
            return {"forward": False, "client": self._miss(live, decision.summary, message, flow_id)}
        return {"forward": False, "client": lines}

    def _miss(self, live: _Live, summary: str, message: Any, flow_id: str) -> list[str]:
        text = (
            f"flowproof replay diverged at the MCP boundary: a message to stdio server `{live.server}` "
            f"({summary}) matches no recorded one"
        )
        self._write(McpDivergenceEvent(flow_id, text))
        log.warning("mcp_stdio_unmatched", server=live.server)
        reason = (
            f"flowproof replay: this MCP message ({summary}) matches no recorded one; re-record "
            "the flow if the agent's MCP traffic changed on purpose"
        )
        errors = [error_response(i, REPLAY_MISS, reason) for i in request_ids(message)]
        if not errors:
            return []  # a notification or a response: nothing to answer
        return [render_line(errors if isinstance(message, list) else errors[0])]

    def _calls(self, server: str, calls: Any, answered: bool) -> None:
        for name, arguments in calls:
            self._write(McpCallEvent(server, name, json.dumps(arguments, ensure_ascii=False), answered))

    def _close(self, live: _Live, body: bytes) -> None:
        try:
            error = json.loads(body).get("error") if body else None
        except (ValueError, AttributeError):
            error = None
        if isinstance(error, str) and error:
            self._write(ErrorEvent(f"the stdio MCP server `{live.server}`: {error}", ErrorKind.MCP))

    def unconsumed_text(self) -> str | None:
        """At replay: the recorded client messages the agent never sent, in words, or None."""
        if self.replayer is None:
            return None
        left = self.replayer.unconsumed()
        if not left:
            return None
        count = sum(len(messages) for _session, messages in left)
        lines = [f"{count} recorded stdio MCP message(s) were never sent (missing calls):"]
        for session, messages in left:
            for message in messages:
                lines.append(f"- stdio session {session.index} with `{session.server}`: "
                             f"{methods_of(message) or 'message'}")
        return "\n".join(lines)
