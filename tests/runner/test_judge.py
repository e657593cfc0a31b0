"""Tests for flowproof.runner.judge: the one judge's edge — the record read once, the result the
reports read, and the staged recording kept or set aside as the verdict says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flowproof.cassette import loads_cassette
from flowproof.cassette_check import check_cassette
from flowproof.errors import EXIT_AGENT, EXIT_OK, Interrupted
from flowproof.log_events import parse_events
from flowproof.report.html import flow_conversation
from flowproof.report.text import flow_report
from flowproof.runner.agents import AgentRun
from flowproof.runner.flow import ADVICE
from flowproof.runner.judge import judge_flow
from flowproof.runner.recording import Staging, rejected_path
from flowproof.spec import load_spec

from .helpers import BOOKING_TURNS, cassette_text, chat_turn, divergence_event, turn_events, write_spec

OK = AgentRun(0, "out", "err", False, 0.1)


def judge(tmp_path: Path, events: list[dict[str, Any]], mode: str = "replay", **kw: Any):
    spec = write_spec(tmp_path)
    cassette = tmp_path / "booking.cassette.json"
    existing = loads_cassette(cassette.read_text(), cassette) if cassette.exists() else None
    options: dict[str, Any] = dict(
        spec_path=spec, name="booking", mode=mode, cassette=cassette, record_command="record me",
        advice=ADVICE, existing=existing, spec=load_spec(spec),
        staging=Staging(cassette) if mode == "record" else None,
    )
    options.update(kw)
    return judge_flow(parse_events(events), OK, **options)


class TestResult:
    def test_a_replay_is_judged_on_the_cassettes_turns_and_views(self, tmp_path: Path) -> None:
        text = cassette_text(BOOKING_TURNS)
        (tmp_path / "booking.cassette.json").write_text(text)
        views = check_cassette(loads_cassette(text, "c.json"), "c.json")
        result = judge(tmp_path, [*turn_events(BOOKING_TURNS), {"event": "done", "unconsumed": []}], views=views)
        assert result.exit_code == EXIT_OK, result.error
        assert [s.passed for s in result.steps] == [True, True, True]
        assert (result.reply, result.tool_calls, result.turns) == (
            "Your flight is booked: B-1042.", ("search_flights", "create_booking"), 3)
        assert result.trajectory is not None and result.trajectory.turns[0] is views[0]
        assert (result.agent_stdout, result.agent_stderr, result.agent_returncode) == ("out", "err", 0)
        assert len(result.run.turns) == 3 and result.record_command == "record me"

    def test_the_spec_s_mocked_tools_reach_the_html_conversation(self, tmp_path: Path) -> None:
        """``tools:`` with a ``result:`` is a mock; a tool without one is not."""
        searched = chat_turn(0, call=("search_flights", {"destination": "NBO"}))
        booked = chat_turn(1, call=("create_booking", {"flight": {"id": "KQ311"}}))
        told = chat_turn(2, text="Booked.")
        calls = [t["response"]["body"]["choices"][0]["message"] for t in (searched, booked)]
        told["request"]["body"]["messages"] += [
            calls[0], {"role": "tool", "tool_call_id": "call_0", "content": '{"flights": [{"id": "KQ311"}]}'},
            calls[1], {"role": "tool", "tool_call_id": "call_1", "content": '{"booking": "B-1"}'},
        ]
        turns = [searched, booked, told]
        (tmp_path / "booking.cassette.json").write_text(cassette_text(turns))
        result = judge(tmp_path, [*turn_events(turns), {"event": "done", "unconsumed": []}])
        assert result.mocked_tools == ("search_flights",)
        conversation = flow_conversation(result)
        assert conversation is not None
        marks = {r["name"]: r["mocked"] for th in conversation["threads"] for t in th["turns"]
                 for r in t["tool_results"]}
        assert marks == {"search_flights": True, "create_booking": False}

    def test_a_diverged_run_reports_no_trajectory_facts(self, tmp_path: Path) -> None:
        (tmp_path / "booking.cassette.json").write_text(cassette_text(BOOKING_TURNS))
        events = [*turn_events(BOOKING_TURNS[:2]), divergence_event("2", "model", "a", "b"),
                  {"event": "done", "unconsumed": [2]}]
        result = judge(tmp_path, events)
        assert (result.exit_code, result.steps, result.turns, result.reply, result.missing) == (3, (), 0, None, None)
        assert result.trajectory is not None and len(result.trajectory.turns) == 2
        assert result.divergence_texts()[0].endswith("re-record the cassette: record me")


class TestRecording:
    def test_a_passing_recording_becomes_the_cassette(self, tmp_path: Path) -> None:
        staged = Staging(tmp_path / "booking.cassette.json")
        staged.path.write_text(cassette_text(BOOKING_TURNS))
        result = judge(tmp_path, [*turn_events(BOOKING_TURNS, "record"), {"event": "done"}], "record")
        assert result.exit_code == EXIT_OK and result.heal_diff is None
        assert (tmp_path / "booking.cassette.json").read_text() == cassette_text(BOOKING_TURNS)

    def test_a_failing_recording_is_set_aside(self, tmp_path: Path) -> None:
        turns = [BOOKING_TURNS[0], chat_turn(1, text="Sorry.")]
        Staging(tmp_path / "booking.cassette.json").path.write_text(cassette_text(turns))
        result = judge(tmp_path, [*turn_events(turns, "record"), {"event": "done"}], "record")
        assert result.exit_code == 1 and result.rejected == rejected_path(tmp_path / "booking.cassette.json")
        assert not (tmp_path / "booking.cassette.json").exists()

    def test_allowed_error_turns_head_the_heal_diff(self, tmp_path: Path) -> None:
        # A side call (a title) that failed upstream: the flow itself passes.
        error = {**chat_turn(3, text="x", system="Title it."),
                 "response": {"status": 500, "headers": {}, "body": {"error": {}}}}
        turns = [*BOOKING_TURNS, error]
        (tmp_path / "booking.cassette.json").write_text(cassette_text(BOOKING_TURNS))
        Staging(tmp_path / "booking.cassette.json").path.write_text(cassette_text(turns))
        refused = judge(tmp_path, [*turn_events(turns, "record"), {"event": "done"}], "record")
        assert (refused.exit_code, refused.failure) == (EXIT_AGENT, "upstream")
        assert "--allow-error-turns" in (refused.error or "") and refused.rejected is not None
        Staging(tmp_path / "booking.cassette.json").path.write_text(cassette_text(turns))
        kept = judge(tmp_path, [*turn_events(turns, "record"), {"event": "done"}], "record", allow_error_turns=True)
        assert kept.exit_code == EXIT_OK
        assert (kept.heal_diff or "").startswith("turn 3 recorded an HTTP 500 from the upstream\n")

    def test_a_recording_the_proxy_never_wrote_fails_with_what_happened(self, tmp_path: Path) -> None:
        result = judge(tmp_path, [*turn_events(BOOKING_TURNS, "record"), {"event": "done"}], "record")
        assert result.exit_code == EXIT_AGENT and "did not write the recording" in (result.error or "")
        assert [s.passed for s in result.steps] == [True, True, True]  # the steps are still reported

    def test_a_request_no_codec_reads_fails_the_flow_with_the_agent_s_output_and_is_set_aside(
        self, tmp_path: Path
    ) -> None:
        """Not "usage or spec error": the flow's name, its agent's output and the problem stay,
        and the recording is kept aside as `*.rejected.json` like any failed record."""
        sent = chat_turn(0, text="Booked.")
        sent["request"]["body"]["messages"] = "Book me a flight"
        Staging(tmp_path / "booking.cassette.json").path.write_text(cassette_text([sent]))
        result = judge(tmp_path, [*turn_events([sent], "record"), {"event": "done"}], "record")
        assert (result.exit_code, result.failure, result.name) == (EXIT_AGENT, "request", "booking")
        assert result.rejected == rejected_path(tmp_path / "booking.cassette.json") and result.rejected.is_file()
        assert not (tmp_path / "booking.cassette.json").exists()
        report = flow_report(result)
        assert "✗ booking [record] — agent failed" in report
        assert "model call 0 (POST https://api.openai.com/v1/chat/completions): its request field `messages`" in report
        assert "agent stdout (last lines):\n    out" in report and "agent stderr (last lines):\n    err" in report
        assert f"rejected recording kept for inspection: {result.rejected}" in report
        assert report.endswith("fix how it builds the request named above, then run again.")

    def test_a_signal_before_the_keep_records_nothing(self, tmp_path: Path) -> None:
        Staging(tmp_path / "booking.cassette.json").path.write_text(cassette_text(BOOKING_TURNS))

        def interrupted() -> None:
            raise Interrupted(2)

        with pytest.raises(Interrupted):
            judge(tmp_path, [*turn_events(BOOKING_TURNS, "record"), {"event": "done"}], "record",
                  before_keep=interrupted)
        assert not (tmp_path / "booking.cassette.json").exists()
