"""Replay: answer every model call from the cassette; never dial a model host.

A request that matches nothing gets a 400 in the provider's own error shape
(never 5xx: SDKs and Claude Code retry 5xx for minutes) and a ``divergence``
event; the matching itself is `flowproof.replay.Replayer`. A request that
matches an abandoned turn gets what the client got at record and then nothing
more until it leaves (`flowproof.addon.hold`).
"""

from __future__ import annotations

import json

from mitmproxy import http

from flowproof.addon.hold import HOLD_HEADER, Held, HoldServer
from flowproof.addon.shared import JSON_HEADERS, Shared, elapsed_ms, log, make_response, refuse_unhandled
from flowproof.addon.websocket import ReplaySockets
from flowproof.cassette import RecordedResponse, RecordedTurn
from flowproof.log_events import DivergenceEvent, ReplayedTurnEvent
from flowproof.replay import Miss
from flowproof.request_key import PreparedRequest
from flowproof.views import request_view
from flowproof.wire import Codec, with_path_fields

__all__ = ["Replay", "replay_headers"]


def replay_headers(recorded: RecordedResponse) -> dict[str, str]:
    """The recorded headers, with a content type for the kind of body when none was kept."""
    headers = dict(recorded.headers)
    if "content-type" not in headers:
        headers["content-type"] = (
            "text/event-stream"
            if recorded.events is not None
            else "application/json"
            if recorded.body is not None
            else "text/plain"
        )
    return headers


def _model(codec: Codec, prepared: PreparedRequest) -> str | None:
    """The model an unmatched call asked for (the miss path only: it parses the body again)."""
    view = request_view(codec.name, prepared.body)
    if view is None:
        return prepared.path_fields.get("model")
    return with_path_fields(view, prepared.path_fields).model


class Replay:
    """The replay concern: requests in, recorded responses out; ``done`` reports missing calls."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self.hold_server = HoldServer()
        self.held: set[str] = set()  # flows answered by the hold server
        #: Model APIs spoken over a WebSocket, answered here (`flowproof.addon.websocket`).
        self.sockets = ReplaySockets(shared, self.hold_server)

    def request(self, flow: http.HTTPFlow) -> None:
        try:
            self._request(flow)
        except Exception as e:  # noqa: BLE001 — see Shared.hook_failed
            self.shared.hook_failed(flow, "request", e)
            refuse_unhandled(flow)

    def _request(self, flow: http.HTTPFlow) -> None:
        shared = self.shared
        detected = shared.detect(flow)
        if detected is None:
            return
        if detected.websocket is not None:
            self.sockets.accept(flow, detected.websocket)
            return
        codec = detected.codec
        if codec is None:
            if detected.model_host:
                # Telemetry and settings on model hosts: answered locally so replay needs no network.
                flow.response = http.Response.make(
                    404,
                    json.dumps(
                        {
                            "error": {
                                "message": "flowproof replay: not a model call, answered locally"
                            }
                        }
                    ),
                    JSON_HEADERS,
                )
            else:
                # The user mapped this host (a gateway, a local model): its other traffic
                # goes there too, never to the real host with their key.
                shared.map_upstream(flow.request)
            return
        # Every way out of this hook writes a flushed line (turn, divergence, or the
        # error of Replay.request), so request_started shares its write.
        prepared = shared.prepare(flow, codec, flush=False)
        if prepared is None:
            return
        assert shared.replayer is not None  # configure builds it for replay
        # The body is parsed only if it matches nothing (to explain the miss).
        decision = shared.replayer.decide(
            codec.name, prepared.sha256, lambda: prepared.body, prepared.path_fields
        )
        if isinstance(decision, Miss):
            divergence = decision.divergence
            report = shared.config.report
            where = f"the flowproof report ({report})" if report else "the mitmproxy log"
            message = (
                f"flowproof replay diverged: {divergence.summary()}. The full report is in {where}."
            )
            flow.response = http.Response.make(400, codec.error_body(400, message), JSON_HEADERS)
            ms = elapsed_ms(flow)
            model = _model(codec, prepared)
            shared.events.write(DivergenceEvent(flow.id, divergence.to_json(), codec.name, model, ms))
            log.warning(
                "request_unmatched",
                flow_id=flow.id,
                provider=codec.name,
                model=model,
                kind=divergence.kind,
                closest=divergence.closest_index,
                ms=ms,
            )
            return
        turn = decision.turn
        shared.learn_calls(turn)
        # The runner loaded this cassette too: the turn line names the turn, never copies it.
        if turn.abandoned:
            self._hold(flow, turn)
            shared.events.write(
                ReplayedTurnEvent(flow.id, decision.position, turn.request.body_sha256, elapsed_ms(flow))
            )
            log.info("turn_replayed_abandoned", flow_id=flow.id, provider=codec.name, turn=turn.index)
            return
        recorded = turn.response
        assert recorded is not None  # only an abandoned turn may lack a response
        content = shared.config.normalizer.restore(recorded.content())
        flow.response = make_response(recorded.status, content, replay_headers(recorded))
        ms = elapsed_ms(flow)
        shared.events.write(ReplayedTurnEvent(flow.id, decision.position, turn.request.body_sha256, ms))
        log.info("turn_replayed", flow_id=flow.id, provider=codec.name, turn=turn.index, ms=ms)

    def _hold(self, flow: http.HTTPFlow, turn: RecordedTurn) -> None:
        """Route ``flow`` to the hold server, which sends what the client got at record and holds."""
        recorded = turn.response
        if recorded is None:
            held = Held(None, {}, b"")
        else:
            content = self.shared.config.normalizer.restore(recorded.content())
            held = Held(recorded.status, replay_headers(recorded), content)
        req = flow.request
        req.headers[HOLD_HEADER] = self.hold_server.hold(held)
        req.scheme = "http"
        req.host = "127.0.0.1"
        req.port = self.hold_server.port
        self.held.add(flow.id)

    def idle(self, hook: str, flow: http.HTTPFlow) -> bool:
        """True when ``hook`` would do nothing for ``flow`` (a warm proxy then skips it,
        `flowproof.addon.warm.Session.idle`): the response hooks of a call not held, which
        ``request`` answered and left (``response`` writes nothing: the call was logged there)."""
        return hook in ("responseheaders", "response", "error") and flow.id not in self.held

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if flow.id in self.held and flow.response is not None:
            flow.response.stream = True  # the partial answer goes out as it is, never buffered

    def response(self, flow: http.HTTPFlow) -> None:
        self.held.discard(flow.id)

    def error(self, flow: http.HTTPFlow) -> None:
        # The client left a held call, as it did at record: nothing to report.
        self.held.discard(flow.id)

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        self.sockets.websocket_message(flow)

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        self.sockets.websocket_end(flow)

    def done(self) -> None:
        self.hold_server.close()
        self.shared.report_unconsumed()
