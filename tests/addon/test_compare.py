"""The compare concern, driven through the root addon with mitmproxy's test flows."""

from __future__ import annotations

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

    def test_unmatched_live_request_is_drift(self, harness: Harness):
        """A live request matching no recorded turn yields a drift event saying so."""
        self.setup_cassette(harness)
        self.run_live(harness, chat_body("something else"), "x")
        (event,) = harness.events("drift")
        assert "matches no recorded turn" in event["text"]

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


COLLECTED: list[Any] = []


def collect(result: Any) -> None:
    """A compare handler for the tests."""
    COLLECTED.append(result)
