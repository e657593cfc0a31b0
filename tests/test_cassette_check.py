"""Whole-cassette checks at load, and the error-turn lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowproof.cassette import load_cassette, loads_cassette
from flowproof.cassette_check import check_cassette, error_turns
from flowproof.errors import CassetteError

BOOKING = Path(__file__).resolve().parents[1] / "example_specs" / "booking.cassette.json"


def doc() -> dict:
    data: dict = json.loads(BOOKING.read_text(encoding="utf-8"))
    return data


def first_data_event(d: dict) -> dict:
    return next(e for e in d["turns"][0]["response"]["events"] if e.get("data", "").startswith("{"))


class TestCheck:
    def test_the_example_cassette_passes(self) -> None:
        check_cassette(load_cassette(BOOKING), BOOKING)

    def test_an_event_that_is_not_json_names_turn_and_event(self) -> None:
        d = doc()
        event = first_data_event(d)
        event["data"] = "{not json"
        event.pop("raw", None)
        with pytest.raises(CassetteError, match=r"turn 0 response event \d+ data is not JSON"):
            check_cassette(loads_cassette(json.dumps(d), "c.json"), "c.json")

    def test_bytes_that_are_not_utf8_name_turn_and_field(self, tmp_path: Path) -> None:
        raw = BOOKING.read_bytes().replace(b"KQ311", b"KQ\xff11", 1)
        path = tmp_path / "c.json"
        path.write_bytes(raw)
        with pytest.raises(CassetteError, match=r"turn \d+ .* is not UTF-8 \(byte 0xff\)") as caught:
            check_cassette(load_cassette(path), path)
        assert "\udcff" not in str(caught.value)

    def test_a_response_invalid_for_its_provider_names_the_turn(self) -> None:
        d = doc()
        turn = d["turns"][0]
        turn["response"].pop("events")
        turn["response"]["body"] = {"unexpected": True}
        with pytest.raises(CassetteError, match=r"turn 0 \(openai-chat\) is not a valid exchange"):
            check_cassette(loads_cassette(json.dumps(d), "c.json"), "c.json")


class TestErrorTurns:
    def test_error_statuses_are_listed(self) -> None:
        d = doc()
        d["turns"][0]["response"] = {"status": 500, "headers": {}, "body": {"error": {"message": "boom"}}}
        cassette = loads_cassette(json.dumps(d), "c.json")
        assert error_turns(cassette) == ("turn 0 recorded an HTTP 500 from the upstream",)

    def test_a_clean_cassette_has_none(self) -> None:
        assert error_turns(load_cassette(BOOKING)) == ()
        assert error_turns(load_cassette(BOOKING.with_name("plan_mode_guard.cassette.json"))) == ()

    def test_an_mcp_server_that_refused_every_request_is_listed(self) -> None:
        """Four 401s pinned in a cassette: the record that made them is refused like an error turn."""
        d = doc()
        d["mcp"] = [
            {"index": i, "server": "exports",
             "request": {"method": "POST", "path": "", "body_key": "k",
                         "body": {"jsonrpc": "2.0", "id": i, "method": method}},
             "response": {"status": 401, "content_type": "application/json", "body": {"error": "invalid_token"}}}
            for i, method in enumerate(("server/discover", "tools/list", "tools/call", "tools/call"))
        ]
        [line] = error_turns(loads_cassette(json.dumps(d), "c.json"))
        assert line.startswith("mcp server `exports` refused every request of the recording (4 of 4: HTTP 401)")

    def test_a_stdio_server_that_refused_every_call_is_listed(self) -> None:
        """Over stdio a refusal is a JSON-RPC error: every tools/call answered with one."""
        d = doc()
        refused = {"jsonrpc": "2.0", "error": {"code": -32001, "message": "not authorised"}}
        d["mcp_stdio"] = [{"index": 0, "server": "notes", "messages": [
            {"from": "client", "message": {"jsonrpc": "2.0", "id": 0, "method": "tools/list"}},
            {"from": "server", "message": {"jsonrpc": "2.0", "id": 0, "result": {"tools": []}}},
            {"from": "client", "message": {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                           "params": {"name": "t"}}},
            {"from": "server", "message": {**refused, "id": 1}},
        ]}]
        [line] = error_turns(loads_cassette(json.dumps(d), "c.json"))
        assert line.startswith("mcp server `notes` refused every tools/call of the recording "
                               "(1 of 1: JSON-RPC error -32001: not authorised)")


def test_a_websocket_turn_ending_in_an_error_event_is_an_error_turn():
    """Over a WebSocket the status travels in the error frame: the record gate sees it too."""
    from flowproof.cassette import Cassette, RecordedRequest, RecordedResponse, RecordedTurn
    from flowproof.cassette_check import error_turns
    from flowproof.wire.base import Frame
    from flowproof.wire.openai_responses import FRAMES

    def turn(index: int, last: Frame) -> RecordedTurn:
        return RecordedTurn(index, "openai-responses",
                            RecordedRequest("WEBSOCKET", "wss://api.openai.com/v1/responses", {}, "00", {}),
                            RecordedResponse(101, {}, frames=(Frame(text='{"type":"response.created"}'), last)),
                            connection=0)
    cassette = Cassette((turn(0, Frame(text='{"type":"response.completed","response":{}}')),
                         turn(1, FRAMES.error_frame(429, "slow down"))))
    assert error_turns(cassette) == ("turn 1 recorded an error event with status 429 from the upstream",)
