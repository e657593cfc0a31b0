"""flowproof.runner.progress: the per-call lines, the status line's counts, and when it is drawn.

The status line on a real terminal (a pty) and its absence when piped are in
tests/e2e/test_logging.py.
"""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

import pytest
import structlog

from flowproof.cassette import loads_cassette, turn_from_json
from flowproof.cassette_check import check_cassette
from flowproof.log import TERMINAL
from flowproof.log_events import (
    DivergenceEvent,
    DoneEvent,
    ErrorEvent,
    ErrorKind,
    McpCallEvent,
    ReadyEvent,
    ReplayedTurnEvent,
    TurnEvent,
)
from flowproof.runner.progress import FlowWatch, Progress, call_fields, fit, status_line_enabled

from .helpers import BOOKING_TURNS, cassette_text, chat_turn, turn_events

TURN = turn_from_json(BOOKING_TURNS[1], "test")
#: The views of the cassette the replayed events name (the runner's cassette check builds them).
VIEWS = check_cassette(loads_cassette(cassette_text(BOOKING_TURNS), "c.json"), "c.json")


class Tty(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


class Recorder:
    """Stands in for a structlog logger: keeps (level, event, fields)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def info(self, event: str, **fields: Any) -> None:
        self.calls.append(("info", event, fields))

    def debug(self, event: str, **fields: Any) -> None:
        self.calls.append(("debug", event, fields))


class TestWhenTheStatusLineIsDrawn:
    @pytest.mark.parametrize(
        ("stdout", "json_report", "quiet", "environ", "expected"),
        [
            (Tty(), False, False, {}, True),
            (io.StringIO(), False, False, {}, False),  # a pipe or a file: nothing
            (Tty(), True, False, {}, False),  # stdout carries the --json report
            (Tty(), False, True, {}, False),  # -q
            (Tty(), False, False, {"CI": "true"}, False),
            (Tty(), False, False, {"CI": "1"}, False),
            (Tty(), False, False, {"CI": "false"}, True),
            (Tty(), False, False, {"CI": ""}, True),
            (Tty(), False, False, {"TERM": "dumb"}, False),
        ],
        ids=["tty", "pipe", "json", "quiet", "ci-true", "ci-1", "ci-false", "ci-empty", "dumb-term"],
    )
    def test_only_on_a_terminal_outside_ci(
        self, stdout: io.StringIO, json_report: bool, quiet: bool, environ: dict[str, str], expected: bool
    ) -> None:
        assert status_line_enabled(stdout, json_report=json_report, quiet=quiet, environ=environ) is expected

    def test_a_closed_stream_is_no_terminal(self) -> None:
        """A closed terminal stream raises on isatty: no status line, no crash."""

        class ClosedTty(Tty):
            def isatty(self) -> bool:
                raise ValueError("I/O operation on closed file")

        assert not status_line_enabled(ClosedTty(), json_report=False, quiet=False, environ={})


class TestCallFields:
    @pytest.mark.parametrize(("mode", "outcome"), [("record", "recorded"), ("compare", "live")])
    def test_a_turn_names_provider_model_outcome_turn_and_ms(self, mode: str, outcome: str) -> None:
        assert call_fields(TurnEvent("f1", mode, TURN, 2.5)) == ("model_call", {
            "provider": "openai-chat", "model": "gpt-4o", "outcome": outcome, "turn": 1, "ms": 2.5,
        })

    def test_a_replayed_turn_is_read_from_the_cassettes_views(self) -> None:
        event = ReplayedTurnEvent("f1", 1, TURN.request.body_sha256, 0.4)
        assert call_fields(event, VIEWS) == ("model_call", {
            "provider": "openai-chat", "model": "gpt-4o", "outcome": "matched", "turn": 1, "ms": 0.4,
        })
        # Without the views the line still names the turn.
        assert call_fields(event)[1]["turn"] == 1  # type: ignore[index]

    def test_an_abandoned_turn_says_so(self) -> None:
        abandoned = turn_from_json({**BOOKING_TURNS[0], "abandoned": True}, "test")
        name, fields = call_fields(TurnEvent("f1", "record", abandoned)) or ("", {})
        assert (name, fields["outcome"], fields["turn"]) == ("model_call", "abandoned", 0)

    def test_a_miss_names_the_closest_turn_and_the_kind(self) -> None:
        event = DivergenceEvent("f2", {"kind": "unmatched", "closest_index": 1},
                                "anthropic", "claude-haiku-4-5", 0.8)
        assert call_fields(event) == ("model_call", {
            "provider": "anthropic", "model": "claude-haiku-4-5", "outcome": "miss",
            "closest": 1, "kind": "unmatched", "ms": 0.8,
        })

    def test_an_unreadable_turn_still_gets_a_line_without_a_model(self) -> None:
        broken = turn_from_json({**BOOKING_TURNS[0], "provider": "no-such-codec"}, "test")
        assert call_fields(TurnEvent("f1", "record", broken))[1]["model"] is None  # type: ignore[index]

    def test_errors_of_a_call_and_mcp_calls(self) -> None:
        error = ErrorEvent("boom", ErrorKind.UPSTREAM, id="f3")
        assert call_fields(error) == ("model_call", {"outcome": "error", "text": "boom"})
        assert call_fields(McpCallEvent("exports", "list_rows", "{}", True)) == (
            "mcp_call", {"server": "exports", "tool": "list_rows", "outcome": "answered"},
        )

    @pytest.mark.parametrize(
        "event", [ErrorEvent("no call", ErrorKind.CASSETTE_WRITE), DoneEvent(), ReadyEvent((), "replay")]
    )
    def test_other_events_are_no_call(self, event: Any) -> None:
        assert call_fields(event) is None


def watch(prompts: tuple[str, ...] = ("Book me a flight",), *, verbose: bool = True,
          debug: bool = False) -> tuple[FlowWatch, Recorder]:
    log = Recorder()
    return FlowWatch("booking", prompts, log=log, verbose=verbose, debug=debug, replayed=VIEWS), log


class TestFlowWatch:
    def test_each_call_is_logged_once_however_often_the_log_is_read(self) -> None:
        """The driver re-reads the whole log every poll: each call gets exactly one line."""
        flow, log = watch()
        events = turn_events(BOOKING_TURNS)
        flow.feed(events[:2])
        flow.feed(events[:2])
        flow.feed(events)
        assert [(c[1], c[2]["turn"]) for c in log.calls] == [("model_call", 0), ("model_call", 1), ("model_call", 2)]
        assert flow.calls == 3

    def test_the_source_feeds_every_read(self) -> None:
        flow, log = watch()
        events = turn_events(BOOKING_TURNS)
        read = flow.source(lambda: events)
        assert read() is events
        assert flow.calls == 3 and len(log.calls) == 3

    def test_without_v_nothing_is_parsed_or_logged_but_calls_are_counted(self) -> None:
        flow, log = watch(verbose=False)
        flow.feed([*turn_events(BOOKING_TURNS), {"event": "turn", "id": "x", "turn": {"broken": 1}}])
        assert (flow.calls, log.calls) == (3, [])

    def test_vv_logs_every_other_event_at_debug(self) -> None:
        flow, log = watch(debug=True)
        flow.feed([{"event": "ready", "listen": [], "mode": "replay"}, *turn_events(BOOKING_TURNS[:1])])
        assert [(c[0], c[1]) for c in log.calls] == [
            ("debug", "proxy_event"), ("debug", "proxy_event"), ("info", "model_call"),
        ]
        assert log.calls[0][2] == {"name": "ready", "id": None}

    def test_a_broken_turn_event_is_skipped_not_raised(self) -> None:
        flow, log = watch()
        flow.feed([{"event": "turn", "id": "x", "mode": "replay", "turn": {"index": 0}},
                   {"event": "turn", "id": "y", "mode": "record", "turn": {"index": 0}}])
        assert log.calls == []

    def test_the_prompt_advances_when_its_answer_is_complete(self) -> None:
        """Like the driver: the next prompt once no call is in flight and the last turn is no tool call."""
        flow, _ = watch(("Book me a flight", "Now cancel it"))
        events = turn_events(BOOKING_TURNS)
        flow.feed(events[:4])  # two tool-call turns: still the first prompt
        assert flow.prompt == 0
        flow.feed(events)  # the text answer: the second prompt goes out
        assert flow.prompt == 1
        flow.feed([*events, *turn_events([chat_turn(3, text="Cancelled.")], "record")])
        assert flow.prompt == 1  # there is no third

    def test_status_shows_prompt_calls_and_elapsed(self) -> None:
        flow, _ = watch(("Book me\na flight", "Now cancel it"))
        flow.feed(turn_events(BOOKING_TURNS[:1]))
        assert flow.status(flow.started + 3.21) == "booking · prompt 1/2 “Book me a flight” · 1 model call · 3.2s"
        single, _ = watch(("Book",))
        assert single.status(single.started) == "booking · prompt “Book” · 0 model calls · 0.0s"
        none, _ = watch(())
        assert none.status(none.started + 1) == "booking · 0 model calls · 1.0s"
        assert flow.short(flow.started + 12.4) == "booking 1 call 12s"


class TestFit:
    def test_short_text_is_kept_on_one_line(self) -> None:
        assert fit("a\n b\tc", 20) == "a b c"

    def test_long_text_is_cut_to_the_columns(self) -> None:
        assert fit("x" * 30, 10) == "x" * 9 + "…"

    def test_wide_characters_count_twice(self) -> None:
        cut = fit("予約" * 10, 9)
        assert cut == "予約予約…"  # 8 cells and the ellipsis


class TestProgress:
    @pytest.fixture(autouse=True)
    def capture(self):
        with structlog.testing.capture_logs() as logs:
            yield logs
        TERMINAL.detach()

    def test_one_flow_status_line_and_log_lines_without_a_name(self, capture: list[dict[str, Any]]) -> None:
        progress = Progress(total=1, verbosity=1, columns=lambda: 200)
        flow = progress.watch(Path("b.flow.yaml"), "booking", ["Book"])
        flow.feed(turn_events(BOOKING_TURNS[:1]))
        assert progress.line(flow.started + 1).startswith("booking · prompt “Book” · 1 model call")
        assert [c.get("flow") for c in capture] == [None]
        flow.finish()
        assert progress.line() == ""

    def test_several_flows_share_a_compact_line_and_name_their_log_lines(
        self, capture: list[dict[str, Any]]
    ) -> None:
        progress = Progress(total=3, verbosity=1, columns=lambda: 200)
        first = progress.watch(Path("a.flow.yaml"), "booking", ["Book"])
        second = progress.watch(Path("b.flow.yaml"), "refund", ["Refund"])
        second.feed(turn_events(BOOKING_TURNS[:2]))
        first.finish()
        assert progress.line(second.started + 2) == "[1/3 done] refund 2 calls 2s"
        assert [c["flow"] for c in capture] == ["refund", "refund"]

    def test_no_line_while_no_flow_is_running(self) -> None:
        """Between flows (or after the last) there is nothing to draw, not a bare count."""
        progress = Progress(total=3, columns=lambda: 200)
        progress.watch(Path("a.flow.yaml"), "booking", ["Book"]).finish()
        progress.watch(Path("b.flow.yaml"), "refund", ["Refund"]).finish()
        assert progress.line() == ""

    def test_the_line_fits_the_terminal(self) -> None:
        progress = Progress(total=1, columns=lambda: 30)
        progress.watch(Path("b.flow.yaml"), "booking", ["Book me a flight to Nairobi tomorrow"])
        line = progress.line()
        assert len(line) == 29 and line.endswith("…")

    def test_drawn_in_place_and_wiped_on_close(self) -> None:
        """The line is rewritten with \\r and cleared to the end; close wipes it and stops drawing."""
        out = Tty()
        progress = Progress(total=1, status=True, stream=out, columns=lambda: 200, interval=0.01)
        progress.watch(Path("b.flow.yaml"), "booking", ["Book"])
        deadline = time.monotonic() + 5
        while out.getvalue().count("\r") < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        progress.close()
        text = out.getvalue()
        assert text.startswith("\rbooking · prompt “Book” · 0 model calls · ")
        assert text.endswith("\r\x1b[K")  # the report starts on a clean line
        drawn = text.count("\r")
        time.sleep(0.05)
        assert out.getvalue().count("\r") == drawn  # nothing is drawn after close

    def test_a_cancelled_run_wipes_the_line(self) -> None:
        out, cancelled = Tty(), []
        progress = Progress(total=1, status=True, stream=out, columns=lambda: 200, interval=0.01,
                            cancelled=lambda: bool(cancelled))
        progress.watch(Path("b.flow.yaml"), "booking", ["Book"])
        deadline = time.monotonic() + 5
        while "booking" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
        cancelled.append(True)
        time.sleep(0.1)
        assert out.getvalue().endswith("\r\x1b[K")
        progress.close()

    def test_no_status_line_without_status(self) -> None:
        out = Tty()
        progress = Progress(total=1, verbosity=1, status=False, stream=out)
        progress.watch(Path("b.flow.yaml"), "booking", ["Book"])
        progress.close()
        assert out.getvalue() == ""


class TestModelOfATurn:
    def test_a_gemini_turn_takes_its_model_from_the_url_path(self) -> None:
        """Gemini names the model in the path, not the body: the line still shows it."""
        gemini = turn_from_json({
            **BOOKING_TURNS[2],
            "provider": "gemini",
            "request": {
                **BOOKING_TURNS[2]["request"],
                "url": "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent",
                "body": {"contents": [{"role": "user", "parts": [{"text": "Book me a flight"}]}]},
            },
        }, "test")
        fields = call_fields(TurnEvent("f1", "replay", gemini))
        assert fields is not None and fields[1]["model"] == "gemini-2.5-flash"
