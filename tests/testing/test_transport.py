"""Tests for flowproof.testing.transport: when each byte of an answer goes out, on any HTTP version."""

from __future__ import annotations

import time
from collections.abc import Sequence

from flowproof.testing import Reply
from flowproof.testing.base import Rendered
from flowproof.testing.capture import ExchangeRecord, ReceivedRequest
from flowproof.testing.transport import Gone, write_answer


class FakeTransport:
    """Records each call with the time it happened; can make the client leave during a wait."""

    def __init__(self, leave_on_wait: int | None = None) -> None:
        self.calls: list[tuple[str, object, float]] = []
        self.waits = 0
        self.leave_on_wait = leave_on_wait
        self.started = time.monotonic()

    def _log(self, name: str, value: object = None) -> None:
        self.calls.append((name, value, time.monotonic() - self.started))

    def headers_sent(self, headers: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        return [("server", "fake"), *headers]

    def begin(self, status: int, headers: Sequence[tuple[str, str]]) -> None:
        self._log("begin", status)

    def send(self, payload: bytes) -> None:
        self._log("send", payload)

    def end(self) -> None:
        self._log("end")

    def abort(self) -> None:
        self._log("abort")

    def wait(self, seconds: float) -> None:
        if seconds <= 0:
            return
        self.waits += 1
        if self.leave_on_wait == self.waits:
            raise Gone("client-closed")
        time.sleep(seconds)
        self._log("wait", seconds)


def record() -> ExchangeRecord:
    return ExchangeRecord(ReceivedRequest("POST", "/v1/chat/completions", {}, {}, b"{}", {}, "openai-chat"))


STREAM = Rendered(200, "text/event-stream", events=(b"data: 1\n\n", b"data: [DONE]\n\n"))


class TestWriteAnswer:
    def test_stream_without_end_delay_ends_right_after_the_last_event(self) -> None:
        """By default the body ends with the last event: nothing waits in between."""
        transport, rec = FakeTransport(), record()
        write_answer(transport, STREAM, Reply.text("x"), rec)
        assert [c[0] for c in transport.calls] == ["begin", "send", "send", "end"]
        assert rec.snapshot().outcome == "ended" and rec.snapshot().response is not None

    def test_end_delay_pauses_between_the_last_event_and_the_end(self) -> None:
        """The server's end_delay puts a pause after the last event and before the end of the body."""
        transport = FakeTransport()
        write_answer(transport, STREAM, Reply.text("x"), record(), end_delay=0.05)
        assert [c[:2] for c in transport.calls[-3:]] == [("send", b"data: [DONE]\n\n"), ("wait", 0.05), ("end", None)]

    def test_a_replys_end_delay_overrides_the_servers(self) -> None:
        """A reply's own end_delay wins over the server's, zero included."""
        transport = FakeTransport()
        write_answer(transport, STREAM, Reply.text("x", end_delay=0.0), record(), end_delay=5.0)
        assert "wait" not in [c[0] for c in transport.calls]

    def test_client_leaving_during_the_late_end_is_recorded_not_raised(self) -> None:
        """A client that leaves between the last event and the end settles the exchange as client-closed."""
        transport, rec = FakeTransport(leave_on_wait=1), record()
        write_answer(transport, STREAM, Reply.text("x"), rec, end_delay=1.0)
        snapshot = rec.snapshot()
        assert snapshot.outcome == "client-closed"
        assert snapshot.response is not None and snapshot.response.complete  # every event went out
        assert [c[0] for c in transport.calls] == ["begin", "send", "send", "abort"]

    def test_first_byte_delay_comes_before_the_status_line(self) -> None:
        """first_byte_delay waits before anything is sent; first_chunk_delay after the headers."""
        transport = FakeTransport()
        write_answer(transport, STREAM, Reply.text("x", first_byte_delay=0.01, first_chunk_delay=0.02), record())
        assert [c[:2] for c in transport.calls[:3]] == [("wait", 0.01), ("begin", 200), ("wait", 0.02)]

    def test_client_leaving_before_any_byte_leaves_no_response(self) -> None:
        """A client gone during first_byte_delay is recorded with no response at all."""
        transport, rec = FakeTransport(leave_on_wait=1), record()
        write_answer(transport, STREAM, Reply.text("x", first_byte_delay=5), rec)
        assert rec.snapshot().response is None and rec.snapshot().outcome == "client-closed"

    def test_cut_aborts_and_settles_as_cut(self) -> None:
        """cut_after stops after N events without ending the body."""
        transport, rec = FakeTransport(), record()
        write_answer(transport, STREAM, Reply.text("x", cut_after=1), rec)
        assert [c[0] for c in transport.calls] == ["begin", "send", "abort"]
        assert rec.snapshot().outcome == "cut"

    def test_plain_body_carries_its_length(self) -> None:
        """A non-streamed answer sends content-length and its body in one piece, then ends."""
        transport, rec = FakeTransport(), record()
        write_answer(transport, Rendered(200, "application/json", body=b"{}"), None, rec)
        response = rec.snapshot().response
        assert response is not None and ("content-length", "2") in response.headers
        assert [c[:2] for c in transport.calls] == [("begin", 200), ("send", b"{}"), ("end", None)]

    def test_write_error_is_a_client_that_left(self) -> None:
        """An OSError from the connection settles the exchange as client-closed."""
        class Broken(FakeTransport):
            def send(self, payload: bytes) -> None:
                raise BrokenPipeError

        rec = record()
        write_answer(Broken(), STREAM, None, rec)
        assert rec.snapshot().outcome == "client-closed"
