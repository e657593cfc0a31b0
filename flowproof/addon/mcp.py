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
Servers the agent runs over stdio reach the proxy through flowproof's stand-in,
whose relay requests `StdioRelay` (``flowproof.addon.mcp_stdio``) answers.

It is a child of the root addon placed before the mode's concern, so it sees
each flow first; a flow it answered is skipped by the concern (``Shared.detect``),
and a flow it forwards is not a model call, so the concern leaves it alone.
Recorded exchanges go into ``Shared.mcp_exchanges``, which `Record` saves with
the turns.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mitmproxy import http

from flowproof.addon.live import client_left
from flowproof.addon.mcp_stdio import StdioRelay
from flowproof.addon.shared import Shared, content_of, log
from flowproof.log_events import ErrorEvent, ErrorKind, McpCallEvent, McpDivergenceEvent, McpRejectedEvent
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
from flowproof.mcp.jsonrpc import methods_of
from flowproof.options import Mode
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
    """The MCP concern: every hook acts only on flows addressed to one of ``routes``.

    Built by the root addon's ``configure`` with the run's `Shared` and the
    ``flowproof_mcp`` routes; the declared answers come from the spec's ``mcp:``.
    """

    def __init__(self, shared: Shared, routes: Sequence[McpRoute] = ()) -> None:
        self.shared = shared
        self.mode = shared.config.mode
        self.routes = tuple(routes)
        #: The declared answers (the spec's ``mcp:`` tools with a ``result:``), by server.
        self.answers: Mapping[str, Mapping[str, Any]] = shared.config.options.mcp_answers
        self.stdio = StdioRelay(shared, self.answers)
        recorded = shared.replayer.cassette.mcp if shared.replayer is not None else ()
        self.replayer = McpReplayer(tuple(recorded)) if self.mode is Mode.REPLAY else None
        self._pending: dict[str, _Pending] = {}
        self._ours: set[str] = set()
        self._legacy_reported = False

    def recorded(self) -> tuple[McpExchange, ...]:
        """The exchanges recorded so far, in the order they completed."""
        return tuple(self.shared.mcp_exchanges)

    def _write(self, event: Any) -> None:
        self.shared.events.write(event)

    def _route(self, req: http.Request) -> McpRoute | None:
        for route in self.routes:
            if route.matches(req.scheme, req.host, req.port, req.path):
                return route
        return None

    # ------------------------------------------------------------------ hooks

    def idle(self, hook: str, flow: http.HTTPFlow) -> bool:
        """True when ``hook`` would do nothing for ``flow`` (a warm proxy then skips it,
        `flowproof.addon.warm.Session.idle`): the response hooks of a flow that is not MCP
        traffic (its ``request`` decided that, and has returned)."""
        return hook in ("responseheaders", "response", "error") and flow.id not in self._ours

    def request(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None or flow.error is not None:
            return  # another addon already answered it
        try:
            self.handle_request(flow)
        except Exception as e:  # noqa: BLE001 — a bug of ours must not let the call leave
            self._ours.discard(flow.id)
            self._pending.pop(flow.id, None)
            self.shared.hook_failed(flow, "mcp request", e)
            flow.response = http.Response.make(
                500, miss_response("flowproof failed on this request; see its report"),
                {"content-type": "application/json"},
            )

    def handle_request(self, flow: http.HTTPFlow) -> bool:
        """Act on one request; True when it was MCP traffic."""
        if self.stdio.handle(flow):
            return True
        req = flow.request
        route = self._route(req)
        if route is None:
            return False
        self._ours.add(flow.id)
        body = content_of(req)  # capped: a compressed bomb is refused, never expanded whole
        decision = decide(req.method, {k.lower(): v for k, v in req.headers.items()}, body,
                          self.answers.get(route.name, {}))
        if isinstance(decision, Reject):
            flow.response = http.Response.make(decision.status, decision.body,
                                               {"content-type": decision.content_type})
            self._write(McpRejectedEvent(
                flow.id, route.name, f"a request to MCP server `{route.name}` was refused: {decision.reason}"
            ))
            log.info("mcp_rejected", flow_id=flow.id, server=route.name)
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
        mask = self.shared.config.normalizer.mask_data
        for name, arguments in calls:
            self._write(McpCallEvent(route.name, name, json.dumps(mask(arguments), ensure_ascii=False), answered))

    def _forward(self, flow: http.HTTPFlow, route: McpRoute, decision: Forward) -> None:
        req = flow.request
        path = route.relative_path(req.path) or ""
        method = req.method.upper()
        self._write_calls(route, decision.calls, answered=False)
        request_doc: Any = None
        if decision.body is not None:
            raw = [m.raw for m in decision.body.messages]
            # A declared secret never reaches the cassette; masked alike at record and replay,
            # so the exchange key still matches.
            request_doc = self.shared.config.normalizer.mask_data(raw if decision.body.batch else raw[0])
        if self.mode is Mode.REPLAY:
            self._replay(flow, route, method, path, request_doc, decision)
            return
        if self.mode is Mode.RECORD and method == "POST":
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
            self._write(McpDivergenceEvent(flow.id, text))
            log.warning("mcp_unmatched", flow_id=flow.id, server=route.name)
            return
        headers = {"content-type": exchange.content_type} if exchange.content_type else {}
        if exchange.session:
            headers[_SESSION_HEADER] = SESSION_PLACEHOLDER
        flow.response = http.Response.make(exchange.status, self.replayer.replay_body(exchange, request_doc), headers)

    # ------------------------------------------------------------------ response

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if flow.id not in self._ours:
            return
        response = flow.response
        if response is None or "text/event-stream" not in response.headers.get("content-type", "").lower():
            return
        pending = self._pending.get(flow.id)
        decoder = SSEDecoder()
        collected = pending.events if pending is not None else []
        if pending is not None:
            pending.decoder = decoder
        # Always streamed: the GET stream never ends, and a POST stream must reach the agent
        # as it comes. A copy of each chunk feeds the decoder.
        response.stream = self._tap(decoder, collected, flow.request.method == "GET")

    def _tap(self, decoder: SSEDecoder, events: list[SSEEvent], is_get: bool) -> Callable[[bytes], bytes]:
        def tap(chunk: bytes) -> bytes:
            new = decoder.feed(chunk) if chunk else decoder.close()
            events.extend(new)
            if is_get and not self._legacy_reported and any(e.event == "endpoint" for e in new):
                # The older HTTP+SSE transport answers POSTs on this stream: flowproof
                # cannot answer or replay inside it yet, so say so instead of hanging.
                self._legacy_reported = True
                self._write(ErrorEvent(
                    "this MCP server speaks the older HTTP+SSE transport, which flowproof's "
                    "mcp: boundary does not support yet — use Streamable HTTP (docs/mcp.md)",
                    ErrorKind.MCP,
                ))
            return chunk

        return tap

    def response(self, flow: http.HTTPFlow) -> None:
        if flow.id not in self._ours:
            return
        self._ours.discard(flow.id)
        pending = self._pending.pop(flow.id, None)
        if pending is None or flow.response is None:
            return
        self._record(pending, flow.response)

    def _record(self, pending: _Pending, response: http.Response) -> None:
        ctype = response.headers.get("content-type", "")
        exchange_events: tuple[str, ...] | None = None
        body: Any = None
        mask = self.shared.config.normalizer
        if pending.decoder is not None:
            exchange_events = tuple(mask.mask_raw(e.data) for e in pending.events if e.data)
        elif "text/event-stream" in ctype.lower():
            decoder = SSEDecoder()
            exchange_events = tuple(
                mask.mask_raw(e.data) for e in [*decoder.feed(response.content or b""), *decoder.close()] if e.data
            )
        elif response.content:
            try:
                body = mask.mask_data(json.loads(response.content))
            except ValueError:
                body = mask.mask_raw(response.content.decode("utf-8", "replace"))
        exchanges = self.shared.mcp_exchanges
        exchanges.append(
            McpExchange(
                index=len(exchanges),
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

    def error(self, flow: http.HTTPFlow) -> None:
        if flow.id not in self._ours:
            return
        self._ours.discard(flow.id)
        pending = self._pending.pop(flow.id, None)
        if pending is not None and client_left(flow):
            # The agent went away, not the server: an agent reads the answer off a POST's event
            # stream and may exit before the stream ends. What it read is the exchange, and
            # replay serves the same; a call left before any answer came is nobody's failure.
            log.info("mcp_call_left_by_client", flow_id=flow.id, server=pending.route.name)
            if flow.response is not None and any(e.data for e in pending.events):
                self._record(pending, flow.response)
            return
        if pending is not None and flow.request.method.upper() == "POST":
            reason = flow.error.msg if flow.error is not None else "unknown error"
            self._write(ErrorEvent(
                f"the MCP server `{pending.route.name}` ({pending.route.url}) could not be "
                f"reached or failed: {reason} — is it running?",
                ErrorKind.MCP,
                id=flow.id,
            ))

    def done(self) -> None:
        # Runs before the concern's `done` event: a recorded exchange never asked for is a
        # divergence of the trajectory, like a missing model call.
        for text in (self.unconsumed_text(), self.stdio.unconsumed_text()):
            if text is not None:
                self._write(McpDivergenceEvent("", text))

    def unconsumed_text(self) -> str | None:
        """At replay: the recorded exchanges the agent never asked for, in words, or None."""
        if self.replayer is None:
            return None
        left = self.replayer.unconsumed()
        if not left:
            return None
        lines = [f"{len(left)} recorded MCP exchange(s) were never requested (missing calls):"]
        for exchange in left:
            methods = methods_of(exchange.request)
            lines.append(f"- mcp exchange {exchange.index} with `{exchange.server}`: {methods or exchange.method}")
        return "\n".join(lines)
