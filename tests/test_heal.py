"""The heal diff: what changed in behaviour between two cassettes."""

from __future__ import annotations

import copy

from flowproof.cassette import Cassette, loads_cassette
from flowproof.heal import diff_cassettes, readable_turns, short_text

from .runner.helpers import BOOKING_TURNS, cassette_text, chat_turn


def cassette(turns: list[dict], route: str = "proxy") -> Cassette:
    return loads_cassette(cassette_text(turns, route=route), "test")


parse = cassette


def with_args(turn: dict, arguments: str) -> dict:
    """A copy of a tool-call turn whose call carries ``arguments`` verbatim."""
    changed = copy.deepcopy(turn)
    changed["response"]["body"]["choices"][0]["message"]["tool_calls"][0]["function"][
        "arguments"
    ] = arguments
    return changed


class TestReadableTurns:
    def test_an_unreadable_turn_is_kept_with_the_reason(self) -> None:
        """A turn whose provider no codec knows is listed with why it has no view."""
        bad = {**BOOKING_TURNS[0], "provider": "nobody"}
        (entry,) = readable_turns(cassette([bad]))
        assert entry[1] is None and "nobody" in (entry[2] or "")

    def test_short_text_is_one_quoted_line(self) -> None:
        """Whitespace collapses and long text is cut with an ellipsis."""
        assert short_text("a\n  b") == "'a b'"
        assert short_text("x" * 300, 5) == "'xxxxx…'"


class TestDiff:
    def test_identical_is_empty(self) -> None:
        """Two equal cassettes have an empty heal diff."""
        assert diff_cassettes(cassette(BOOKING_TURNS), cassette(BOOKING_TURNS)) == ""

    def test_moved_argument_and_text(self) -> None:
        """A moved argument path and changed text are named per turn."""
        new = [
            BOOKING_TURNS[0],
            chat_turn(1, call=("create_booking", {"flight": {"id": "KQ999"}})),
            chat_turn(2, text="Booked!"),
        ]
        diff = diff_cassettes(cassette(BOOKING_TURNS), cassette(new))
        assert "turn 1: create_booking flight.id: KQ311 -> KQ999" in diff
        assert "turn 2: text:" in diff and "'Booked!'" in diff

    def test_turns_and_calls_added_removed(self) -> None:
        """Added turns and replaced tool calls are reported."""
        new = [
            BOOKING_TURNS[0],
            chat_turn(1, call=("cancel_booking", {})),
            BOOKING_TURNS[2],
            chat_turn(3, text="bye"),
        ]
        diff = diff_cassettes(cassette(BOOKING_TURNS), cassette(new))
        assert "turn 1: tool call 0: create_booking -> cancel_booking" in diff
        assert "turn 3: added" in diff
        assert "turn 3: removed" in diff_cassettes(cassette(new), cassette(BOOKING_TURNS))


class TestDiffAlignment:
    def test_an_inserted_call_is_one_added_turn(self) -> None:
        """One extra call in the middle reads as one added turn, not as every later turn changed."""
        extra = chat_turn(1, call=("search_flights", {"destination": "MBA"}))
        new = [
            BOOKING_TURNS[0],
            extra,
            {**BOOKING_TURNS[1], "index": 2},
            {**BOOKING_TURNS[2], "index": 3},
        ]
        diff = diff_cassettes(cassette(BOOKING_TURNS), cassette(new))
        assert diff == 'turn 1: added — openai-chat, calls search_flights {"destination":"MBA"}'

    def test_a_dropped_call_is_one_removed_turn(self) -> None:
        """A call the new recording no longer makes reads as one removed turn."""
        new = [BOOKING_TURNS[0], {**BOOKING_TURNS[2], "index": 1}]
        diff = diff_cassettes(cassette(BOOKING_TURNS), cassette(new))
        assert diff.startswith("turn 1: removed — openai-chat, calls create_booking")
        assert len(diff.splitlines()) == 1, diff


class TestHealDiffDisplay:
    def test_string_to_number_is_visible(self) -> None:
        """An argument that changes from the string "311" to the number 311 shows the quotes."""
        old = parse([with_args(BOOKING_TURNS[1], '{"flight": {"id": "311"}}')])
        new = parse([with_args(BOOKING_TURNS[1], '{"flight": {"id": 311}}')])
        assert diff_cassettes(old, new) == 'turn 0: create_booking flight.id: "311" -> 311'

    def test_number_to_boolean_is_reported(self) -> None:
        """An argument that changes from 1 to true is reported, though Python calls them equal."""
        old = parse([with_args(BOOKING_TURNS[1], '{"seats": 1}')])
        new = parse([with_args(BOOKING_TURNS[1], '{"seats": true}')])
        assert diff_cassettes(old, new) == "turn 0: create_booking seats: 1 -> true"

    def test_whitespace_only_text_change_is_visible(self) -> None:
        """A reply that changes only in whitespace shows the two texts differently."""
        old = parse([chat_turn(0, text="Booked.\nRef B-1")])
        new = parse([chat_turn(0, text="Booked. Ref B-1")])
        line = diff_cassettes(old, new)
        assert (
            line.startswith("turn 0: text") and "'Booked.\\nRef B-1' -> 'Booked. Ref B-1'" in line
        )

    def test_change_past_the_shown_prefix_is_located(self) -> None:
        """A change far into a long reply is shown around where it happens."""
        base = "word " * 100
        old = parse([chat_turn(0, text=base + "KQ311")])
        new = parse([chat_turn(0, text=base + "KQ999")])
        line = diff_cassettes(old, new)
        assert "from character" in line and "KQ311" in line and "KQ999" in line

    def test_non_json_arguments_and_turn_count_changes(self) -> None:
        """Non-JSON arguments show both payloads, and an extra turn is listed as added."""
        old = parse(BOOKING_TURNS[:2])
        new = parse([BOOKING_TURNS[0], with_args(BOOKING_TURNS[1], "{not json"), BOOKING_TURNS[2]])
        assert diff_cassettes(old, new).splitlines() == [
            'turn 1: create_booking arguments: {"flight": {"id": "KQ311"}} -> {not json',
            "turn 2: added — openai-chat, text 'Your flight is booked: B-1042.'",
        ]
