"""The compare concern, driven through the root addon with mitmproxy's test flows."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from mitmproxy import http

from flowproof.wire.sse import encode_events

from .conftest import (
    Harness,
    chat_body,
    chat_events,
    chat_turn,
    model_flow,
    stream_through,
    write_cassette,
)


class TestCompare:
    def setup_cassette(self, h: Harness, **extra: Any) -> Path:
        path = write_cassette(h.tmp / "c.json", chat_turn(0, chat_body(), "Booked KQ311."))
        h.configure(flowproof_mode="compare", flowproof_cassette=str(path), **extra)
        return path

    def run_live(self, h: Harness, body: bytes, text: str) -> http.HTTPFlow:
        f = model_flow(body)
        h.addon.request(f)
        assert f.response is None  # forwarded, not answered
        stream_through(h, f, [encode_events(chat_events(text))])
        return f

    def test_equal_live_response_is_compared(self, harness: Harness):
        """A live response equal up to case and spacing yields a compared event."""
        self.setup_cassette(harness)
        self.run_live(harness, chat_body(), "booked  kq311.")
        (event,) = harness.events("compared")
        assert event["result"]["equal"] is True
        assert [e["mode"] for e in harness.events("turn")] == ["compare"]
        assert event["result"]["text"]["status"] == "normalized"

    def test_different_text_is_drift(self, harness: Harness):
        """Different live text yields a drift event."""
        self.setup_cassette(harness)
        self.run_live(harness, chat_body(), "Sorry, no flights.")
        (event,) = harness.events("drift")
        assert event["result"]["equal"] is False

    def test_live_request_pairs_by_place_not_bytes(self, harness: Harness):
        """A live request with other bytes (another user text, a new field) still pairs by place."""
        self.setup_cassette(harness)
        self.run_live(harness, chat_body("Book a flight to Mombasa", temperature=0), "Booked KQ311.")
        (event,) = harness.events("compared")
        assert (event["result"]["kind"], event["result"]["turn"]) == ("paired", 0)
        assert event["result"]["context"]["fields"][0]["path"] == "messages.1.content"

    def test_new_system_prompt_is_extra_and_the_turn_missing(self, harness: Harness):
        """A live call in a thread the recording lacks is extra; its recorded turn is missing at done."""
        self.setup_cassette(harness)
        self.run_live(harness, chat_body(system="You are a travel agent."), "Booked KQ311.")
        harness.addon.done()
        extra, missing = harness.events("drift")
        assert extra["result"]["kind"] == "extra"
        assert "no recorded thread has this system prompt" in extra["text"]
        assert missing["result"]["kind"] == "missing" and missing["result"]["turn"] == 0
        assert harness.events("done")[0]["unconsumed"] == [0]

    def test_unreadable_recorded_response_is_an_error_at_its_place(self, harness: Harness):
        """A recorded response no codec reads: the live call there gets an error, not a verdict."""
        turn = chat_turn(0, chat_body(), "Booked KQ311.")
        broken = replace(turn, response=replace(turn.response, events=None, body={"not": "a completion"}))
        path = write_cassette(harness.tmp / "c.json", broken)
        harness.configure(flowproof_mode="compare", flowproof_cassette=str(path))
        self.run_live(harness, chat_body(), "Booked KQ311.")
        (error,) = harness.events("error")
        assert "cannot be compared with recorded turn 0" in error["text"]
        assert harness.events("compared") == harness.events("drift") == []

    def test_compare_never_writes_the_cassette(self, harness: Harness):
        """Compare leaves the cassette byte-identical, even at done."""
        path = self.setup_cassette(harness)
        before, mtime = path.read_bytes(), path.stat().st_mtime_ns
        self.run_live(harness, chat_body(), "Totally different.")
        harness.addon.done()
        assert path.read_bytes() == before
        assert path.stat().st_mtime_ns == mtime

    def test_handler_receives_results_instead_of_drift(self, harness: Harness):
        """With a compare handler every result goes to it and no drift event is written."""
        self.setup_cassette(harness, flowproof_compare_handler=f"{__name__}:collect")
        COLLECTED.clear()
        self.run_live(harness, chat_body(), "Sorry, no flights.")
        assert [r.equal for r in COLLECTED] == [False]
        assert harness.events("drift") == []
        assert harness.events("compared")[0]["handled"] is True

    def test_handler_receives_extra_and_missing_too(self, harness: Harness):
        """Unpaired results reach the handler like any other, the missing one at done."""
        self.setup_cassette(harness, flowproof_compare_handler=f"{__name__}:collect")
        COLLECTED.clear()
        self.run_live(harness, chat_body(system="You are a travel agent."), "Booked KQ311.")
        harness.addon.done()
        assert [(r.kind, r.equal) for r in COLLECTED] == [("extra", False), ("missing", False)]
        assert harness.events("drift") == []

    def test_a_handler_that_raises_rejects_the_result(self, harness: Harness):
        """A handler's exception is its verdict: a drift event naming it, even for an equal result."""
        self.setup_cassette(harness, flowproof_compare_handler=f"{__name__}:strict_text")
        self.run_live(harness, chat_body(), "booked kq311.")
        (event,) = harness.events("drift")
        assert event["handled"] is True and event["result"]["equal"] is True
        assert "rejected turn 0 (thread 0, depth 2): AssertionError: text is normalized" in event["text"]


COLLECTED: list[Any] = []


def collect(result: Any) -> None:
    """A compare handler for the tests."""
    COLLECTED.append(result)


def strict_text(result: Any) -> None:
    """A compare handler that makes prose a contract."""
    if result.text.status != "exact":
        raise AssertionError(f"text is {result.text.status}")
