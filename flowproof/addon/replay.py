"""Replay: answer every model call from the cassette; never dial a model host.

A request that matches nothing gets a 400 in the provider's own error shape
(never 5xx: SDKs and Claude Code retry 5xx for minutes) and a ``divergence``
event; the matching itself is `flowproof.replay.Replayer`.
"""

from __future__ import annotations

import json

from mitmproxy import http

from flowproof.addon.shared import JSON_HEADERS, Shared, log, refuse_unhandled
from flowproof.cassette import RecordedResponse
from flowproof.events import DivergenceEvent, TurnEvent
from flowproof.replay import Miss

__all__ = ["Replay", "replay_headers"]


def replay_headers(recorded: RecordedResponse) -> dict[str, str]:
    """The recorded headers, with a content type for the kind of body when none was kept."""
    headers = dict(recorded.headers)
    if "content-type" not in headers:
        headers["content-type"] = (
            "text/event-stream" if recorded.events is not None
            else "application/json" if recorded.body is not None
            else "text/plain"
        )
    return headers


class Replay:
    """The replay concern: requests in, recorded responses out; ``done`` reports missing calls."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared

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
        codec = detected.codec
        if codec is None:
            if detected.model_host:
                # Telemetry and settings on model hosts: answered locally so replay needs no network.
                flow.response = http.Response.make(
                    404,
                    json.dumps({"error": {"message": "flowproof replay: not a model call, answered locally"}}),
                    JSON_HEADERS,
                )
            else:
                # The user mapped this host (a gateway, a local model): its other traffic
                # goes there too, never to the real host with their key.
                shared.map_upstream(flow.request)
            return
        prepared = shared.prepare(flow, codec)
        assert shared.replayer is not None  # configure builds it for replay
        decision = shared.replayer.decide(codec.name, prepared.sha256, prepared.body)
        if isinstance(decision, Miss):
            divergence = decision.divergence
            text = divergence.render(shared.record_command())
            report = shared.config.report
            where = f"the flowproof report ({report})" if report else "the mitmproxy log"
            message = f"flowproof replay diverged: {divergence.summary()}. The full report is in {where}."
            flow.response = http.Response.make(400, codec.error_body(400, message), JSON_HEADERS)
            shared.events.write(DivergenceEvent(flow.id, text, divergence.to_json()))
            log.warning("request_unmatched", flow_id=flow.id, provider=codec.name,
                        kind=divergence.kind, closest=divergence.closest_index)
            return
        turn = decision.turn
        recorded = turn.response
        content = shared.config.normalizer.restore(recorded.content())
        flow.response = http.Response.make(recorded.status, content, replay_headers(recorded))
        shared.events.write(TurnEvent(flow.id, "replay", turn))
        log.info("turn_replayed", flow_id=flow.id, provider=codec.name, turn=turn.index)

    def done(self) -> None:
        self.shared.report_unconsumed()
