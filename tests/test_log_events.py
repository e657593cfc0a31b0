"""The typed event log: every event round-trips through its JSON line."""

from __future__ import annotations

import json

import pytest

from flowproof.cassette import loads_cassette
from flowproof.errors import CassetteError
from flowproof.log_events import (
    ComparedEvent,
    DivergenceEvent,
    DoneEvent,
    DriftEvent,
    ErrorEvent,
    ErrorKind,
    Listener,
    McpDivergenceEvent,
    ReadyEvent,
    ReplayedTurnEvent,
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
    TurnEvent("f1", "record", TURN),
    TurnEvent("f1", "compare", TURN, 2.5),
    ReplayedTurnEvent("f1", 1, TURN.request.body_sha256),
    ReplayedTurnEvent("f1", 0, "ab" * 32, 0.4),
    DivergenceEvent("f2", {"kind": "unmatched", "closest_index": 1}),
    DivergenceEvent("f2", {"kind": "unmatched"}, "anthropic", "claude-haiku-4-5", 0.7),
    McpDivergenceEvent("f9", "a request to server `crm` matches no recorded exchange"),
    DriftEvent("f3", "text: a -> b", {"equal": False}),
    DriftEvent("f8", "the compare handler rejected turn 0", {"equal": True}, handled=True),
    ComparedEvent("f5", {"equal": True}),
    ComparedEvent("f6", {"equal": False}, handled=True),
    TlsFailedEvent("api.openai.com", "does not trust"),
    TlsFailedEvent("telemetry.example.com", "does not trust", model=False),
    ErrorEvent("boom", ErrorKind.CASSETTE_WRITE),
    ErrorEvent("hook failed", ErrorKind.HOOK, id="f7"),
    DoneEvent((2, 3)),
]


class TestRoundTrip:
    @pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
    def test_every_event_survives_a_json_line(self, event):
        """to_json, a JSON line, and parse_event give the same event back."""
        line = json.dumps(event.to_json())
        assert parse_event(json.loads(line)) == event

    def test_wire_keys_are_the_documented_ones(self):
        """The keys match the event-log table in docs/internals.md."""
        assert ErrorEvent("t", ErrorKind.UPSTREAM, id="x").to_json() == {
            "event": "error", "kind": "upstream", "id": "x", "text": "t",
        }
        assert ErrorEvent("t", ErrorKind.HOOK).to_json() == {"event": "error", "kind": "hook", "text": "t"}
        assert DriftEvent("x", "t", {}).to_json() == {"event": "drift", "id": "x", "text": "t", "result": {}}
        assert DriftEvent("x", "t", {}, handled=True).to_json() == {
            "event": "drift", "id": "x", "text": "t", "result": {}, "handled": True,
        }
        assert ComparedEvent("x", {}).to_json() == {"event": "compared", "id": "x", "result": {}}
        assert DoneEvent().to_json() == {"event": "done", "unconsumed": []}
        assert TurnEvent("x", "record", TURN).to_json()["turn"]["provider"] == "openai-chat"
        # A replayed turn is named by its place in the cassette, never copied into the log.
        assert ReplayedTurnEvent("x", 1, "ab", 0.5).to_json() == {
            "event": "turn", "id": "x", "mode": "replay", "index": 1, "body_sha256": "ab", "ms": 0.5,
        }
        assert McpDivergenceEvent("x", "t").to_json() == {"event": "mcp_divergence", "id": "x", "text": "t"}
        # The duration and the miss's provider and model are written only when known.
        assert "ms" not in TurnEvent("x", "record", TURN).to_json()
        assert TurnEvent("x", "record", TURN, 3.0).to_json()["ms"] == 3.0
        assert DivergenceEvent("x").to_json() == {"event": "divergence", "id": "x", "divergence": {}}
        assert DivergenceEvent("x", {}, "gemini", "gemini-2.5-flash", 1.5).to_json() == {
            "event": "divergence", "id": "x", "divergence": {},
            "provider": "gemini", "model": "gemini-2.5-flash", "ms": 1.5,
        }


class TestLenientReading:
    def test_unknown_event_is_kept(self):
        """An event a newer addon writes is kept as UnknownEvent, not an error."""
        (event,) = parse_events([{"event": "newer_addon_event", "tool": "x"}])
        assert event == UnknownEvent("newer_addon_event", {"event": "newer_addon_event", "tool": "x"})

    def test_missing_fields_get_defaults(self):
        """Junk in a done event's unconsumed list is skipped; a divergence without its data is
        still a divergence (the run has failed either way)."""
        assert parse_event({"event": "done", "unconsumed": [1, "x", True, 4]}) == DoneEvent((1, 4))
        assert parse_event({"event": "divergence", "id": "a"}) == DivergenceEvent("a", {})

    def test_an_error_of_no_known_kind_reads_as_other(self):
        """An error line without a kind this flowproof knows is still an error (it fails the run)."""
        assert parse_event({"event": "error", "text": "t"}) == ErrorEvent("t", ErrorKind.OTHER)
        assert parse_event({"event": "error", "kind": "new", "text": "t"}).kind is ErrorKind.OTHER

    def test_a_duration_that_is_not_a_number_is_dropped(self):
        """An ``ms`` that is not a number (or a bool) reads as not measured, never as an error."""
        line = TurnEvent("x", "record", TURN).to_json()
        for junk in ("12", True, None, [1]):
            assert parse_event({**line, "ms": junk}) == TurnEvent("x", "record", TURN)
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
            parse_event({"event": "turn", "id": "1", "mode": "record", "turn": {"index": 0}})

    @pytest.mark.parametrize("line", [
        {"event": "turn", "id": "1", "mode": "replay", "body_sha256": "ab"},
        {"event": "turn", "id": "1", "mode": "replay", "index": "0", "body_sha256": "ab"},
        {"event": "turn", "id": "1", "mode": "replay", "index": True, "body_sha256": "ab"},
        {"event": "turn", "id": "1", "mode": "replay", "index": -1, "body_sha256": "ab"},
        {"event": "turn", "id": "1", "mode": "replay", "index": 0},
    ])
    def test_a_replayed_turn_must_name_its_cassette_turn(self, line):
        """A replayed turn without an integer index and its hash names the event log and what is missing."""
        with pytest.raises(CassetteError, match="event log: replayed turn '1' does not name its cassette turn"):
            parse_event(line)


class TestWitnessEvents:
    def test_round_trip(self) -> None:
        from flowproof.log_events import EgressEvent, SecretLeakEvent, parse_events
        from flowproof.witness import EgressHost, SecretLeak

        host = EgressHost("exfil.test", 443, "other", "connect")
        leak = SecretLeak("${T}", "exfil.test", "POST", "https://exfil.test/", "body", "a.b")
        lines = [EgressEvent(host).to_json(), EgressEvent(host).to_json(), SecretLeakEvent(leak).to_json()]
        assert lines[0] == {"event": "egress", "host": "exfil.test", "port": 443, "role": "other", "via": "connect"}
        events = parse_events(lines)
        assert events[0] == EgressEvent(host) and events[2] == SecretLeakEvent(leak)
