"""Compare: forward every model call live and judge it against the recorded turn; never write.

The judgement is `flowproof.compare.compare_responses`; this concern finds the
recorded turn (`Replayer.decide`, as replay would) and reports ``compared`` or
``drift`` — or hands every result to the user's compare handler.
"""

from __future__ import annotations

from flowproof.addon.live import LiveCalls
from flowproof.addon.shared import log
from flowproof.cassette import RecordedTurn, turn_views
from flowproof.compare import compare_responses, record_on_span
from flowproof.errors import FlowproofError
from flowproof.events import ComparedEvent, DriftEvent, ErrorEvent
from flowproof.replay import Miss

__all__ = ["Compare"]


class Compare(LiveCalls):
    """The compare concern: each live turn against its recording; ``done`` reports missing calls."""

    mode = "compare"

    def on_turn(self, flow_id: str, turn: RecordedTurn) -> None:
        shared = self.shared
        events = shared.events
        assert shared.replayer is not None  # configure builds it for compare
        decision = shared.replayer.decide(turn.provider, turn.request.body_sha256, turn.request.body)
        if isinstance(decision, Miss):
            divergence = decision.divergence
            text = "the live request matches no recorded turn\n" + divergence.render(shared.record_command())
            events.write(DriftEvent(flow_id, text, None, divergence.to_json()))
            log.warning("compare_unmatched", flow_id=flow_id, kind=divergence.kind)
            return
        try:
            recorded_view = turn_views(decision.turn).response
            live_view = turn_views(turn).response
        except FlowproofError as e:
            events.write(ErrorEvent(f"cannot compare turn {decision.turn.index}: {e}", id=flow_id))
            return
        assert recorded_view is not None and live_view is not None  # turn_views always builds both
        result = compare_responses(recorded_view, live_view, decision.turn.index)
        record_on_span(result)
        handler = shared.config.compare_handler
        if handler is not None:
            try:
                handler(result)
            except Exception as e:  # noqa: BLE001 — user code: report it, never crash the proxy
                text = f"the compare handler {shared.config.compare_handler_name} raised {type(e).__name__}: {e}"
                events.write(ErrorEvent(text, id=flow_id))
                return
            events.write(ComparedEvent(flow_id, result.to_json(), handled=True))
        elif result.equal:
            events.write(ComparedEvent(flow_id, result.to_json()))
        else:
            events.write(DriftEvent(flow_id, result.render(), result.to_json()))
        log.info("turn_compared", flow_id=flow_id, turn=result.turn_index, equal=result.equal)

    def done(self) -> None:
        self.shared.report_unconsumed()
