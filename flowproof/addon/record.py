"""Record: forward every model call, keep its turn, write the cassette atomically at shutdown."""

from __future__ import annotations

import sys

from flowproof.addon.live import LiveCalls
from flowproof.addon.shared import Shared, log
from flowproof.cassette import Cassette, RecordedTurn, save_cassette
from flowproof.errors import FlowproofError
from flowproof.log_events import DoneEvent, ErrorEvent, ErrorKind
from flowproof.options import Mode

__all__ = ["Record"]


class Record(LiveCalls):
    """The record concern: the live turns in completion order, saved by ``done``."""

    mode = Mode.RECORD

    def __init__(self, shared: Shared) -> None:
        super().__init__(shared)
        self.turns: list[RecordedTurn] = []

    def on_turn(self, flow_id: str, turn: RecordedTurn) -> None:
        self.turns.append(turn)
        log.info("turn_recorded", flow_id=flow_id, provider=turn.provider, turn=turn.index)

    def on_abandoned(self, flow_id: str, turn: RecordedTurn) -> None:
        # Kept as what it was: replay serves the same partial answer and holds it there.
        self.turns.append(turn)
        log.info("turn_recorded_abandoned", flow_id=flow_id, provider=turn.provider, turn=turn.index)

    def done(self) -> None:
        self.finish_in_flight()
        config = self.shared.config
        path = config.cassette
        assert path is not None  # configure refuses record without a cassette
        events = self.shared.events
        cassette = Cassette(
            tuple(self.turns), route=config.route, mcp=tuple(self.shared.mcp_exchanges),
            mcp_stdio=tuple(r.session() for r in self.shared.mcp_stdio),
            connections=self.sockets.recorded(),
        )
        try:
            save_cassette(cassette, path)
        except FlowproofError as e:
            # A recording that silently fails to land is worse than a crash: say it everywhere.
            text = f"flowproof could not write the cassette: {e}"
            events.write(ErrorEvent(text, ErrorKind.CASSETTE_WRITE))
            events.write(DoneEvent())
            print(text, file=sys.stderr, flush=True)
            log.error("cassette_write_failed", path=str(path))
            return
        events.write(DoneEvent())
        log.info("cassette_written", path=str(path), turns=len(self.turns))
