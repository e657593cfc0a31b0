"""Tests for flowproof.run_record: one run's event log and cassette, read once into a typed record."""

from __future__ import annotations

import pytest

from flowproof.cassette import loads_cassette
from flowproof.cassette_check import check_cassette
from flowproof.compare import compare_responses
from flowproof.divergence import Divergence, FieldChange
from flowproof.errors import WireError
from flowproof.log_events import (
    ComparedEvent,
    DivergenceEvent,
    DoneEvent,
    DriftEvent,
    ErrorEvent,
    ErrorKind,
    McpCallEvent,
    McpDivergenceEvent,
    McpRejectedEvent,
    ReplayedTurnEvent,
    RequestStartedEvent,
    TlsFailedEvent,
    TurnEvent,
    parse_events,
)
from flowproof.run_record import EMPTY_RUN, McpMiss, ReplayMiss, RunError, TlsFailure, read_run
from flowproof.turns import FinishReason, ResponseView

from .runner.helpers import BOOKING_TURNS, cassette_text, chat_turn, turn_events

CASSETTE = loads_cassette(cassette_text(BOOKING_TURNS), "c.json")


def replayed(position: int, call: str | None = None) -> ReplayedTurnEvent:
    return ReplayedTurnEvent(call or f"f{position}", position, CASSETTE.turns[position].request.body_sha256)


class TestTurns:
    def test_a_replayed_turn_is_the_cassette_turn_it_names(self):
        """The log names the turn; the record holds the cassette's turn and its view."""
        record = read_run(parse_events(turn_events(BOOKING_TURNS)), CASSETTE)
        assert [t.recorded for t in record.turns] == list(CASSETTE.turns)
        assert all(t.replayed for t in record.turns)
        assert [t.view.response.tool_calls[0].name for t in record.turns[:2] if t.view and t.view.response] == [
            "search_flights", "create_booking",
        ]

    def test_the_views_the_cassette_check_built_are_the_ones_used(self):
        """Views are built once: the record holds the very views the cassette check returned."""
        views = check_cassette(CASSETTE, "c.json")
        record = read_run([replayed(1), replayed(0)], CASSETTE, views=views)
        assert [t.view for t in record.turns] == [views[1], views[0]]
        assert record.turns[0].view is views[1]

    def test_a_turn_served_twice_is_viewed_once(self):
        """An abandoned turn may be requested again; its view is built once."""
        record = read_run([replayed(2, "a"), replayed(2, "b")], CASSETTE)
        first, second = record.turns
        assert (first.call, second.call) == ("a", "b") and first.view is second.view

    def test_a_live_turn_is_the_turn_the_proxy_logged(self):
        record = read_run(parse_events(turn_events(BOOKING_TURNS, "record")), None)
        assert [t.recorded for t in record.turns] == list(CASSETTE.turns)
        assert not any(t.replayed for t in record.turns) and record.readable()

    @pytest.mark.parametrize(
        ("event", "cassette", "says"),
        [
            (ReplayedTurnEvent("f", 1, "00" * 32), CASSETTE, "was the cassette changed during the run?"),
            (ReplayedTurnEvent("f", 7, "00" * 32), CASSETTE, "served turn 7 of a cassette that holds 3 turn(s)"),
            (ReplayedTurnEvent("f", 0, "00" * 32), None, "served turn 0 of a cassette that was not loaded"),
        ],
        ids=["another hash", "no such turn", "no cassette"],
    )
    def test_a_replayed_turn_the_cassette_does_not_hold_is_an_event_log_error(self, event, cassette, says):
        """The hash guard: a turn that is not the one the proxy matched is never misread as it."""
        record = read_run([event], cassette)
        assert record.turns == ()
        [error] = record.errors
        assert error.kind is ErrorKind.EVENT_LOG and error.call == "f" and says in error.text

    def test_abandoned_turns_are_kept_aside(self):
        abandoned = {**chat_turn(3, text="x"), "abandoned": True, "response": None}
        record = read_run(parse_events(turn_events([*BOOKING_TURNS, abandoned], "record")), None)
        assert [t.recorded.index for t in record.abandoned] == [3]
        assert len(record.completed) == 3 and len(record.turns) == 4
        assert record.trajectory().abandoned[0].index == 3

    def test_a_turn_no_codec_reads_raises_only_when_its_view_is_needed(self):
        broken = {**chat_turn(0, text="x"), "response": {"status": 200, "headers": {}, "body": {"no": "choices"}}}
        record = read_run(parse_events(turn_events([broken], "record")), None)
        assert not record.readable() and record.turns[0].view is None
        with pytest.raises(WireError, match="choices"):
            record.trajectory()


class TestTiming:
    """A call's place on the wall clock: its arrival (``request_started.at``) and its ``ms``."""

    def test_a_replayed_turn_carries_its_arrival_and_duration(self):
        events = [RequestStartedEvent("a", 1700000000.25),
                  ReplayedTurnEvent("a", 1, CASSETTE.turns[1].request.body_sha256, 12.5),
                  RequestStartedEvent("b"), replayed(0, "b")]
        first, second = read_run(events, CASSETTE).turns
        assert (first.started_at, first.ms) == (1700000000.25, 12.5)
        assert (second.started_at, second.ms) == (None, None)  # an addon that wrote no `at`

    def test_a_turn_served_twice_has_each_arrival_of_its_own(self):
        sha = CASSETTE.turns[2].request.body_sha256
        events = [RequestStartedEvent("a", 5.0), ReplayedTurnEvent("a", 2, sha),
                  RequestStartedEvent("b", 9.0), ReplayedTurnEvent("b", 2, sha)]
        assert [t.started_at for t in read_run(events, CASSETTE).turns] == [5.0, 9.0]

    def test_a_live_turn_and_a_divergence_carry_their_arrival(self):
        events = [RequestStartedEvent("f0", 100.0), TurnEvent("f0", "record", CASSETTE.turns[0], 40.0),
                  RequestStartedEvent("f1", 101.0), TurnEvent("f1", "record", CASSETTE.turns[1]),
                  RequestStartedEvent("f2", 102.0),
                  DivergenceEvent("f2", {"kind": "unmatched"}, "openai-chat", "gpt-4o", 3.0)]
        record = read_run(events, None)
        assert [(t.started_at, t.ms) for t in record.turns] == [(100.0, 40.0), (101.0, None)]
        [miss] = record.misses
        assert isinstance(miss, ReplayMiss) and (miss.started_at, miss.ms) == (102.0, 3.0)


class TestMcp:
    def test_calls_are_placed_after_the_completed_turns_before_them(self):
        abandoned = {**chat_turn(5, text="x"), "abandoned": True, "response": None}
        events = [
            *parse_events(turn_events(BOOKING_TURNS[:1], "record")),
            McpCallEvent("s", "t", "{}", True),
            *parse_events(turn_events([abandoned], "record")),
            *parse_events(turn_events(BOOKING_TURNS[1:2], "record")),
            McpCallEvent("s", "u", '{"a":1}', False),
        ]
        calls = read_run(events, None).mcp_calls
        assert [(c.name, c.after_turns, c.answered, c.arguments_raw) for c in calls] == [
            ("t", 1, True, "{}"), ("u", 2, False, '{"a":1}'),
        ]

    def test_a_refused_request_is_a_note_and_a_miss_is_a_divergence(self):
        record = read_run([McpRejectedEvent("1", "crm", "not JSON-RPC"), McpDivergenceEvent("2", "no exchange")], None)
        assert record.mcp_rejected == ("not JSON-RPC",)
        assert record.misses == (McpMiss("2", "no exchange"),)
        assert record.misses[0].render("cmd") == "no exchange"


class TestMissesAndResults:
    def test_a_divergence_is_typed_and_rendered_with_the_callers_command(self):
        divergence = Divergence("unmatched", 2, 1, fields=(FieldChange("model", "a", "b"),))
        record = read_run([DivergenceEvent("f", divergence.to_json(), "openai-chat", "b", 1.5)], CASSETTE)
        [miss] = record.misses
        assert miss == ReplayMiss("f", divergence, "openai-chat", "b", 1.5)
        assert miss.render("pytest t.py::x --flowproof-mode record").endswith(
            "re-record the cassette: pytest t.py::x --flowproof-mode record"
        )

    def test_a_divergence_flowproof_cannot_read_is_still_a_divergence(self):
        [miss] = read_run([DivergenceEvent("f", {"kind": "nonsense"})], CASSETTE).misses
        assert isinstance(miss, ReplayMiss) and "cannot be read" in miss.render("cmd")

    def test_compare_results_are_typed_and_a_handlers_rejection_is_kept(self):
        said = ResponseView("Booked.", (), FinishReason.STOP)
        result = compare_responses(said, said, turn=0, live_call=0, thread=0, depth=1)
        record = read_run(
            [ComparedEvent("1", result.to_json()), DriftEvent("2", "the handler said no", result.to_json(), True)],
            None,
        )
        assert record.compare == (result, result)
        assert record.rejected_by_handler == ("the handler said no",)

    def test_an_unreadable_compare_result_is_an_event_log_error(self):
        record = read_run([DriftEvent("2", "differs", {"equal": False})], None)
        assert record.compare == ()
        [error] = record.errors
        assert error.kind is ErrorKind.EVENT_LOG and "compare result flowproof cannot read" in error.text


class TestTheRest:
    def test_errors_tls_and_shutdown(self):
        record = read_run(
            [
                TlsFailedEvent("api.openai.com", "does not trust"),
                ErrorEvent("reset", ErrorKind.UPSTREAM, id="f3"),
                DoneEvent((1, 2)),
            ],
            CASSETTE,
        )
        assert record.tls_failures == (TlsFailure("api.openai.com", "does not trust"),)
        assert record.errors == (RunError(ErrorKind.UPSTREAM, "reset", "f3"),)
        assert record.done and record.unconsumed == (1, 2)
        assert record.missing is not None and record.missing.turns == (1, 2)

    def test_calls_in_flight(self):
        """A call that began and has not ended yet (a stream still coming) is in flight."""
        events = [*parse_events(turn_events(BOOKING_TURNS[:1])), RequestStartedEvent("later")]
        assert read_run(events, CASSETTE).in_flight == ("later",)
        assert read_run(parse_events(turn_events(BOOKING_TURNS)), CASSETTE).in_flight == ()

    def test_an_empty_log_is_an_empty_run(self):
        assert read_run([], None) == EMPTY_RUN
        assert not EMPTY_RUN.done and EMPTY_RUN.missing is None and EMPTY_RUN.trajectory().reply is None


class TestSubagentMisses:
    def test_a_miss_beside_a_sub_agents_turn_names_the_sub_agent(self):
        """The cassette's own agents place a miss: an edit inside a sub-agent's prompt says so."""
        from .agent_runs import claude_code_cassette

        cassette = claude_code_cassette()
        inside = DivergenceEvent("f", Divergence("unmatched", 3, 2).to_json())
        outside = DivergenceEvent("g", Divergence("unmatched", 2, 1).to_json())
        first, second = read_run([inside, outside], cassette).misses
        assert isinstance(first, ReplayMiss) and (first.subagent, first.spawn_turn) == ("Explore #1", 0)
        assert first.render("cmd").endswith(
            "the recorded turn 2 it was compared with is sub-agent Explore #1's (spawned in turn 0): "
            "the change is inside that sub-agent"
        )
        assert isinstance(second, ReplayMiss) and second.subagent is None and "sub-agent" not in second.render("cmd")
