"""The typed event log: every event round-trips through its JSON line."""

from __future__ import annotations

import json

import pytest

from flowproof.cassette import loads_cassette
from flowproof.errors import CassetteError
from flowproof.events import (
    ComparedEvent,
    DivergenceEvent,
    DoneEvent,
    DriftEvent,
    ErrorEvent,
    Listener,
    ReadyEvent,
    RequestStartedEvent,
    TlsFailedEvent,
    TurnEvent,
    UnknownEvent,
    parse_event,
    parse_events,
)

from .runner.helpers import BOOKING_TURNS, cassette_text

TURN = loads_cassette(cassette_text(BOOKING_TURNS), "c.json").turns[1]

EVENTS = [
    ReadyEvent(
        (
            Listener("regular", "127.0.0.1", 8080),
            Listener("reverse:https://api.openai.com@0", "::1", 9),
        ),
        "replay",
    ),
    RequestStartedEvent("f1"),
    RequestStartedEvent("f1", 1767225600.125),
    TurnEvent("f1", "replay", TURN),
    TurnEvent("f1", "replay", TURN, 2.5),
    DivergenceEvent("f2", "unmatched", {"kind": "unmatched", "closest_index": 1}),
    DivergenceEvent("f2", "unmatched", {"kind": "unmatched"}, "anthropic", "claude-haiku-4-5", 0.7),
    DriftEvent("f3", "text: a -> b", {"equal": False}),
    DriftEvent("f4", "no match", None, {"kind": "unmatched"}),
    DriftEvent("f8", "the compare handler rejected turn 0", {"equal": True}, handled=True),
    ComparedEvent("f5", {"equal": True}),
    ComparedEvent("f6", {"equal": False}, handled=True),
    TlsFailedEvent("api.openai.com", "does not trust"),
    ErrorEvent("boom"),
    ErrorEvent("hook failed", id="f7"),
    DoneEvent((2, 3), "2 missing"),
]


class TestRoundTrip:
    @pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
    def test_every_event_survives_a_json_line(self, event):
        """to_json, a JSON line, and parse_event give the same event back."""
        line = json.dumps(event.to_json())
        assert parse_event(json.loads(line)) == event

    def test_wire_keys_are_the_documented_ones(self):
        """The keys match the event-log table in docs/internals.md."""
        assert ErrorEvent("t", id="x").to_json() == {"event": "error", "id": "x", "text": "t"}
        assert ErrorEvent("t").to_json() == {"event": "error", "text": "t"}
        assert DriftEvent("x", "t", None).to_json() == {"event": "drift", "id": "x", "text": "t", "result": None}
        assert DriftEvent("x", "t", {}, handled=True).to_json() == {
            "event": "drift", "id": "x", "text": "t", "result": {}, "handled": True,
        }
        assert ComparedEvent("x", {}).to_json() == {"event": "compared", "id": "x", "result": {}}
        assert DoneEvent().to_json() == {"event": "done", "unconsumed": [], "text": ""}
        assert TurnEvent("x", "record", TURN).to_json()["turn"]["provider"] == "openai-chat"
        # The duration and the miss's provider and model are written only when known.
        assert "ms" not in TurnEvent("x", "record", TURN).to_json()
        assert TurnEvent("x", "record", TURN, 3.0).to_json()["ms"] == 3.0
        assert DivergenceEvent("x", "t").to_json() == {"event": "divergence", "id": "x", "text": "t", "divergence": {}}
        assert DivergenceEvent("x", "t", {}, "gemini", "gemini-2.5-flash", 1.5).to_json() == {
            "event": "divergence", "id": "x", "text": "t", "divergence": {},
            "provider": "gemini", "model": "gemini-2.5-flash", "ms": 1.5,
        }


class TestLenientReading:
    def test_unknown_event_is_kept(self):
        """An event a newer addon writes is kept as UnknownEvent, not an error."""
        (event,) = parse_events([{"event": "newer_addon_event", "tool": "x"}])
        assert event == UnknownEvent("newer_addon_event", {"event": "newer_addon_event", "tool": "x"})

    def test_missing_fields_get_defaults(self):
        """A done event without text or with junk in unconsumed reads as the old dict readers did."""
        assert parse_event({"event": "done", "unconsumed": [1, "x", True, 4]}) == DoneEvent(
            (1, 4), ""
        )
        assert parse_event({"event": "divergence", "id": "a"}) == DivergenceEvent("a", "", {})

    def test_a_duration_that_is_not_a_number_is_dropped(self):
        """An ``ms`` that is not a number (or a bool) reads as not measured, never as an error."""
        line = TurnEvent("x", "replay", TURN).to_json()
        for junk in ("12", True, None, [1]):
            assert parse_event({**line, "ms": junk}) == TurnEvent("x", "replay", TURN)
        assert parse_event({**line, "ms": 4}).ms == 4.0

    def test_an_arrival_time_that_is_not_a_number_is_dropped(self):
        """``request_started.at`` (docs/otel.md) is written only when known and read leniently."""
        assert RequestStartedEvent("x").to_json() == {"event": "request_started", "id": "x"}
        assert RequestStartedEvent("x", 5.5).to_json() == {"event": "request_started", "id": "x", "at": 5.5}
        for junk in ("12", True, None):
            assert parse_event({"event": "request_started", "id": "x", "at": junk}) == RequestStartedEvent("x")
        assert parse_event({"event": "request_started", "id": "x", "at": 7}).at == 7.0

    def test_a_broken_turn_is_a_cassette_error(self):
        """A turn event whose turn is not a cassette turn names the event log and the field."""
        with pytest.raises(CassetteError, match="event log.*'provider'"):
            parse_event({"event": "turn", "id": "1", "mode": "replay", "turn": {"index": 0}})


class TestWitnessEvents:
    def test_round_trip_and_the_witness_of_a_log(self) -> None:
        from flowproof.events import EgressEvent, SecretLeakEvent, parse_events, witness_of
        from flowproof.witness import EgressHost, SecretLeak

        host = EgressHost("exfil.test", 443, "other", "connect")
        leak = SecretLeak("${T}", "exfil.test", "POST", "https://exfil.test/", "body", "a.b")
        lines = [EgressEvent(host).to_json(), EgressEvent(host).to_json(), SecretLeakEvent(leak).to_json()]
        assert lines[0] == {"event": "egress", "host": "exfil.test", "port": 443, "role": "other", "via": "connect"}
        events = parse_events(lines)
        assert events[0] == EgressEvent(host) and events[2] == SecretLeakEvent(leak)
        witness = witness_of(events)
        assert witness.egress == (host,) and witness.leaks == (leak,)
