"""Live model calls (record and compare): forward upstream, tap the response, assemble the turn.

The mitmproxy side of `flowproof.recorder`: `LiveCalls` keeps a `PendingCall`
per forwarded flow, tees an SSE response through a `StreamTap`, and hands each
completed `RecordedTurn` to its subclass (`on_turn`).
"""

from __future__ import annotations

from mitmproxy import http

from flowproof.addon.shared import Shared, content_of, log, refuse_unhandled
from flowproof.cassette import RecordedResponse, RecordedTurn
from flowproof.errors import FlowproofError
from flowproof.events import ErrorEvent, TurnEvent
from flowproof.recorder import (
    PendingCall,
    is_event_stream,
    response_from_body,
    response_from_stream,
)

__all__ = ["LiveCalls"]


class LiveCalls:
    """Forwards model calls and assembles their turns; subclasses decide what a turn is for."""

    #: The flowproof mode named in ``turn`` events.
    mode = ""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self.calls: dict[str, PendingCall] = {}
        self.completed = 0  # model calls completed, the next turn index

    def on_turn(self, flow_id: str, turn: RecordedTurn) -> None:
        """A live call completed (its ``turn`` event is already written)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ hooks

    def request(self, flow: http.HTTPFlow) -> None:
        try:
            self._request(flow)
        except Exception as e:  # noqa: BLE001 — see Shared.hook_failed
            self.calls.pop(flow.id, None)
            self.shared.hook_failed(flow, "request", e)
            refuse_unhandled(flow)

    def _request(self, flow: http.HTTPFlow) -> None:
        shared = self.shared
        detected = shared.detect(flow)
        if detected is None:
            return
        req = flow.request
        codec = detected.codec
        if codec is None:
            # The user mapped this host (a gateway, a local model): its other traffic
            # (traces, settings) goes there too, never to the real host with their key.
            shared.map_upstream(req)
            return
        prepared = shared.prepare(flow, codec)
        self.calls[flow.id] = PendingCall.start(
            codec, req.method, req.pretty_url, req.headers.items(multi=True), prepared
        )
        # The recorder taps the stream as SSE text; a compressed stream could not be read.
        req.headers["accept-encoding"] = "identity"
        mapped = shared.map_upstream(req)
        log.debug("model_call_forwarded", flow_id=flow.id, provider=codec.name, mapped=mapped)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        call = self.calls.get(flow.id)
        if call is None or flow.response is None:
            return
        headers = flow.response.headers
        if not is_event_stream(headers.get("content-type", "")):
            return
        encoding = headers.get("content-encoding", "").strip().lower()
        if encoding and encoding != "identity":
            return  # left buffered: mitmproxy decodes it and `response` parses the whole body
        flow.response.stream = call.tap_stream().feed

    def response(self, flow: http.HTTPFlow) -> None:
        try:
            self._response(flow)
        except Exception as e:  # noqa: BLE001 — see Shared.hook_failed
            self.calls.pop(flow.id, None)
            self.shared.hook_failed(flow, "response", e)

    def _response(self, flow: http.HTTPFlow) -> None:
        call = self.calls.pop(flow.id, None)
        if call is None or flow.response is None:
            return
        try:
            recorded = self._recorded_response(flow.response, call)
        except FlowproofError as e:
            text = f"cannot record the response to {call.request.url}: {e}"
            self.shared.events.write(ErrorEvent(text, id=flow.id))
            return
        turn = call.turn(self.completed, recorded)
        self.completed += 1
        # Compare logs the live turn too: the runner checks the spec against the live trajectory.
        self.shared.events.write(TurnEvent(flow.id, self.mode, turn))
        self.on_turn(flow.id, turn)

    def _recorded_response(self, response: http.Response, call: PendingCall) -> RecordedResponse:
        normalizer = self.shared.config.normalizer
        headers = response.headers.items(multi=True)
        if call.tap is not None:
            return response_from_stream(response.status_code, headers, call.tap, normalizer)
        content_type = response.headers.get("content-type", "")
        return response_from_body(response.status_code, headers, content_type, content_of(response), normalizer)

    def error(self, flow: http.HTTPFlow) -> None:
        call = self.calls.pop(flow.id, None)
        if call is None:
            return
        reason = flow.error.msg if flow.error is not None else "unknown error"
        text = f"the model call to {call.request.url} failed before it completed: {reason}"
        self.shared.events.write(ErrorEvent(text, id=flow.id))
        log.warning("model_call_failed", flow_id=flow.id, provider=call.codec.name)
