"""Compare: forward every model call live and judge it against the recording; never write.

Which recorded turn a live call is judged against is `flowproof.pairing.Pairer`'s
decision (its place in the conversation, never its bytes); the judgement is
`flowproof.compare`. This concern delivers each result as its call completes and,
at shutdown, the recorded turns no live call reached: to the user's compare
handler when there is one (it decides), else as ``compared`` or ``drift``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mitmproxy import exceptions

from flowproof.addon.live import LiveCalls
from flowproof.addon.shared import Shared, log
from flowproof.cassette import Cassette, RecordedTurn
from flowproof.errors import FlowproofError
from flowproof.log_events import ComparedEvent, DoneEvent, DriftEvent, ErrorEvent, ErrorKind
from flowproof.options import Mode
from flowproof.turns import Turn
from flowproof.views import request_view, turn_views

if TYPE_CHECKING:
    # Imported where used: the compare engine and the pairer load only in compare mode, so a
    # replaying proxy starts without them (docs/hotpath.md).
    from flowproof.compare import CompareResult
    from flowproof.pairing import Pairer

__all__ = ["Compare"]


class Compare(LiveCalls):
    """The compare concern: each live turn against the turn at its place; ``done`` reports the rest."""

    mode = Mode.COMPARE

    def __init__(self, shared: Shared) -> None:
        super().__init__(shared)
        assert shared.replayer is not None  # the root addon loads the cassette for compare
        self.pairer = pairer_for(shared.replayer.cassette, str(shared.config.cassette))

    def on_turn(self, flow_id: str, turn: RecordedTurn) -> None:
        from flowproof.pairing import Call

        try:
            view = turn_views(turn)
            result = self.pairer.pair(Call(view, turn.request.body))
        except FlowproofError as e:  # a live response, or the recorded turn at its place, unreadable
            self.shared.events.write(
                ErrorEvent(f"cannot compare live call {turn.index}: {e}", ErrorKind.COMPARE, id=flow_id)
            )
            return
        self.deliver(flow_id, result)

    def done(self) -> None:
        self.sockets.finish()  # WebSocket turns still open were left by the agent: settled first
        # Recorded turns no live call reached are results too, delivered like any other.
        unreached = self.pairer.finish()
        for result in unreached:
            self.deliver("", result)
        self.shared.events.write(DoneEvent(tuple(r.turn for r in unreached if r.turn is not None)))
        if unreached:
            log.warning("turns_unreached", count=len(unreached))

    def deliver(self, flow_id: str, result: CompareResult) -> None:
        """The span attribute, then the handler if there is one (it decides), else the verdict.

        A handler's exception rejects the result: a ``drift`` event naming it,
        marked handled. The cassette is never touched.
        """
        from flowproof.compare import record_on_span

        shared = self.shared
        record_on_span(result)
        handler = shared.config.compare_handler
        if handler is not None:
            try:
                handler(result)
            except Exception as e:  # noqa: BLE001 — user code: its verdict, never a proxy crash
                text = (
                    f"the compare handler {shared.config.compare_handler_name} rejected"
                    f" {result.place()}: {type(e).__name__}: {e}"
                )
                shared.events.write(DriftEvent(flow_id, text, result.to_json(), handled=True))
            else:
                shared.events.write(ComparedEvent(flow_id, result.to_json(), handled=True))
        elif result.equal:
            shared.events.write(ComparedEvent(flow_id, result.to_json()))
        else:
            shared.events.write(DriftEvent(flow_id, result.render(), result.to_json()))
        log.info("compared", flow_id=flow_id, kind=result.kind, turn=result.turn, equal=result.equal)


def pairer_for(cassette: Cassette, path: str) -> Pairer:
    """The pairer over every recorded turn (parsed once, when the mode is configured).

    A turn whose response no codec reads keeps its place (a live call there gets an
    error, not a verdict); a turn whose request cannot be read has no place at all.
    """
    from flowproof.pairing import Call, Pairer

    calls = []
    for turn in cassette.turns:
        if turn.abandoned:
            continue  # the agent gave up on it at record: no answer to judge by, never missing
        try:
            calls.append(Call(turn_views(turn), turn.request.body))
            continue
        except FlowproofError as e:
            problem = str(e)
        request = request_view(turn.provider, turn.request.body)
        if request is None:
            raise exceptions.OptionsError(
                f"Cannot compare against flowproof_cassette {path}: the request of turn"
                f" {turn.index} cannot be read ({problem}) — re-record the cassette"
            )
        calls.append(Call(Turn(turn.index, request, None), turn.request.body, problem=problem))
    return Pairer(calls)
