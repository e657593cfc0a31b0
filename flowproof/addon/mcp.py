"""The MCP boundary in the proxy: answer declared tools, record and replay the rest of the session.

A thin adapter over `flowproof.mcp`, which makes every decision. A flow is MCP
traffic when it is addressed to one of the spec's ``mcp:`` servers — whether it
came in through the reverse listener the runner opened for that server or
through the explicit proxy (a remote https server). Per mode:

- every mode: a declared ``tools/call`` is answered here and never leaves; a
  malformed JSON-RPC body gets a JSON-RPC error and never leaves;
- record: everything else goes to the real server and each POST exchange is
  kept for the cassette (the GET stream and DELETE pass through unrecorded);
- replay: each POST is served from the recorded exchanges, once each, in order
  (a miss is a divergence); GET is answered ``405`` (no server stream), DELETE ``200``;
- compare: everything else goes live and is not recorded (compare judges model turns).

Every ``tools/call`` that crosses is written to the event log as ``mcp_call``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mitmproxy import http

from flowproof.addon.eventlog import EventLog
from flowproof.mcp import (
    SESSION_PLACEHOLDER,
    Answer,
    Forward,
    McpExchange,
    McpReplayer,
    McpRoute,
    Reject,
    decide,
    exchange_key,
    miss_response,
)
from flowproof.wire.sse import SSEDecoder, SSEEvent

__all__ = ["McpBoundary"]

_SESSION_HEADER = "mcp-session-id"


@dataclass(slots=True)
class _Pending:
    """A forwarded MCP request being recorded until its response completes."""

    route: McpRoute
    method: str
    path: str
    request: Any
    key: str
    events: list[SSEEvent] = field(default_factory=list)
    decoder: SSEDecoder | None = None


class McpBoundary:
    """The MCP part of the flowproof addon; `Flowproof` calls it from its hooks.

    ``events`` returns the run's event log (the owner may replace it on reconfigure).
    Each hook returns True when the flow was MCP traffic (the owner then leaves it alone).
    """

    def __init__(self, events: Callable[[], EventLog]) -> None:
        self._events = events
        self.mode = "replay"
        self.routes: tuple[McpRoute, ...] = ()
        self.answers: dict[str, Mapping[str, Any]] = {}
        self.replayer: McpReplayer | None = None
        self.exchanges: list[McpExchange] = []
        self._pending: dict[str, _Pending] = {}
        self._ours: set[str] = set()
        self._legacy_reported = False

    def configure(
        self,
        mode: str,
        routes: Sequence[McpRoute],
        answers: Mapping[str, Mapping[str, Any]],
        recorded: Sequence[McpExchange],
    ) -> None:
        """Set up for one run: ``answers`` maps a route name to its declared tools' results."""
        self.mode = mode
        self.routes = tuple(routes)
        self.answers = {name: dict(results) for name, results in answers.items()}
        self.replayer = McpReplayer(tuple(recorded)) if mode == "replay" else None
        self.exchanges = []
        self._pending = {}
        self._ours = set()

    def recorded(self) -> tuple[McpExchange, ...]:
        """The exchanges recorded so far, in the order they completed."""
        return tuple(self.exchanges)

    def _route(self, req: http.Request) -> McpRoute | None:
        for route in self.routes:
            if route.matches(req.scheme, req.host, req.port, req.path):
                return route
        return None

    # ------------------------------------------------------------------ request

    def request(self, flow: http.HTTPFlow) -> bool:
        req = flow.request
        route = self._route(req)
        if route is None:
            return False
        self._ours.add(flow.id)
        events = self._events()
        body = req.content or b""
        decision = decide(req.method, {k.lower(): v for k, v in req.headers.items()}, body,
                          self.answers.get(route.name, {}))
        if isinstance(decision, Reject):
            flow.response = http.Response.make(decision.status, decision.body,
                                               {"content-type": decision.content_type})
            events.write("mcp_rejected", id=flow.id, server=route.name,
                         text=f"a request to MCP server `{route.name}` was refused: {decision.reason}")
            return True
        if isinstance(decision, Answer):
            headers = {"content-type": decision.content_type}
            session = req.headers.get(_SESSION_HEADER)
            if session:
                headers[_SESSION_HEADER] = session
            flow.response = http.Response.make(decision.status, decision.body, headers)
            self._write_calls(route, decision.calls, answered=True)
            return True
        self._forward(flow, route, decision)
        return True

    def _write_calls(self, route: McpRoute, calls: Sequence[tuple[str, Any]], answered: bool) -> None:
        for name, arguments in calls:
            self._events().write(
                "mcp_call", server=route.name, name=name,
                arguments=json.dumps(arguments, ensure_ascii=False), answered=answered,
            )

    def _forward(self, flow: http.HTTPFlow, route: McpRoute, decision: Forward) -> None:
        req = flow.request
        path = route.relative_path(req.path) or ""
        method = req.method.upper()
        self._write_calls(route, decision.calls, answered=False)
        request_doc: Any = None
        if decision.body is not None:
            raw = [m.raw for m in decision.body.messages]
            request_doc = raw if decision.body.batch else raw[0]
        if self.mode == "replay":
            self._replay(flow, route, method, path, request_doc, decision)
            return
        if self.mode == "record" and method == "POST":
            self._pending[flow.id] = _Pending(route, method, path, request_doc,
                                              exchange_key(method, path, request_doc))
        # The recorder reads SSE text; a compressed stream could not be tapped.
        req.headers["accept-encoding"] = "identity"

    def _replay(self, flow: http.HTTPFlow, route: McpRoute, method: str, path: str,
                request_doc: Any, decision: Forward) -> None:
        assert self.replayer is not None  # configure builds it for replay
        if method == "GET":
            # No server stream at replay: 405 is how a server says it offers none.
            flow.response = http.Response.make(405, b"", {"allow": "POST, DELETE"})
            return
        if method != "POST":
            flow.response = http.Response.make(200, b"", {})
            return
        exchange = self.replayer.take(exchange_key(method, path, request_doc))
        if exchange is None:
            summary = decision.summary
            flow.response = http.Response.make(400, miss_response(summary), {"content-type": "application/json"})
            text = (
                f"flowproof replay diverged at the MCP boundary: a request to server `{route.name}` "
                f"({summary or method}) matches no recorded exchange"
            )
            self._events().write("divergence", id=flow.id, text=text, divergence=None)
            return
        headers = {"content-type": exchange.content_type} if exchange.content_type else {}
        if exchange.session:
            headers[_SESSION_HEADER] = SESSION_PLACEHOLDER
        flow.response = http.Response.make(exchange.status, self.replayer.replay_body(exchange, request_doc), headers)

    # ------------------------------------------------------------------ response

    def responseheaders(self, flow: http.HTTPFlow) -> bool:
        if flow.id not in self._ours:
            return False
        response = flow.response
        if response is None or "text/event-stream" not in response.headers.get("content-type", "").lower():
            return True
        pending = self._pending.get(flow.id)
        decoder = SSEDecoder()
        collected = pending.events if pending is not None else []
        if pending is not None:
            pending.decoder = decoder
        # Always streamed: the GET stream never ends, and a POST stream must reach the agent
        # as it comes. A copy of each chunk feeds the decoder.
        response.stream = self._tap(decoder, collected, flow.request.method == "GET")
        return True

    def _tap(self, decoder: SSEDecoder, events: list[SSEEvent], is_get: bool) -> Callable[[bytes], bytes]:
        def tap(chunk: bytes) -> bytes:
            new = decoder.feed(chunk) if chunk else decoder.close()
            events.extend(new)
            if is_get and not self._legacy_reported and any(e.event == "endpoint" for e in new):
                # The older HTTP+SSE transport answers POSTs on this stream: flowproof
                # cannot answer or replay inside it yet, so say so instead of hanging.
                self._legacy_reported = True
                self._events().write(
                    "error",
                    text="this MCP server speaks the older HTTP+SSE transport, which flowproof's "
                    "mcp: boundary does not support yet — use Streamable HTTP (docs/mcp.md)",
                )
            return chunk

        return tap

    def response(self, flow: http.HTTPFlow) -> bool:
        if flow.id not in self._ours:
            return False
        self._ours.discard(flow.id)
        pending = self._pending.pop(flow.id, None)
        if pending is None or flow.response is None:
            return True
        response = flow.response
        ctype = response.headers.get("content-type", "")
        exchange_events: tuple[str, ...] | None = None
        body: Any = None
        if pending.decoder is not None:
            exchange_events = tuple(e.data for e in pending.events if e.data)
        elif "text/event-stream" in ctype.lower():
            decoder = SSEDecoder()
            exchange_events = tuple(e.data for e in [*decoder.feed(response.content or b""), *decoder.close()] if e.data)
        elif response.content:
            try:
                body = json.loads(response.content)
            except ValueError:
                body = response.content.decode("utf-8", "replace")
        self.exchanges.append(
            McpExchange(
                index=len(self.exchanges),
                server=pending.route.name,
                method=pending.method,
                path=pending.path,
                request=pending.request,
                key=pending.key,
                status=response.status_code,
                content_type=ctype.split(";", 1)[0].strip(),
                session=_SESSION_HEADER in response.headers,
                body=body,
                events=exchange_events,
            )
        )
        return True

    def error(self, flow: http.HTTPFlow) -> bool:
        if flow.id not in self._ours:
            return False
        self._ours.discard(flow.id)
        pending = self._pending.pop(flow.id, None)
        if pending is not None and flow.request.method.upper() == "POST":
            reason = flow.error.msg if flow.error is not None else "unknown error"
            self._events().write(
                "error", id=flow.id,
                text=f"the MCP server `{pending.route.name}` ({pending.route.url}) could not be "
                f"reached or failed: {reason} — is it running?",
            )
        return True

    def unconsumed_text(self) -> str | None:
        """At replay: the recorded exchanges the agent never asked for, in words, or None."""
        if self.replayer is None:
            return None
        left = self.replayer.unconsumed()
        if not left:
            return None
        lines = [f"{len(left)} recorded MCP exchange(s) were never requested (missing calls):"]
        for exchange in left:
            body = exchange.request
            methods = ", ".join(
                str(m.get("method", "response")) for m in (body if isinstance(body, list) else [body])
                if isinstance(m, dict)
            )
            lines.append(f"- mcp exchange {exchange.index} with `{exchange.server}`: {methods or exchange.method}")
        return "\n".join(lines)
