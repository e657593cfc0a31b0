"""The run verdict on plain data: events and an agent outcome in, an exit code out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from flowproof.cassette import loads_cassette
from flowproof.compare import compare_responses, missing_result
from flowproof.errors import EXIT_AGENT, EXIT_ASSERTION, EXIT_DIVERGENCE, EXIT_DRIFT, EXIT_OK
from flowproof.events import (
    ComparedEvent,
    DivergenceEvent,
    DoneEvent,
    DriftEvent,
    ErrorEvent,
    Event,
    TlsFailedEvent,
    parse_events,
)
from flowproof.model import FinishReason, ResponseView
from flowproof.verdict import StepResult, Verdict, agent_error, decide_exit, missing_text

from .runner.helpers import BOOKING_TURNS, cassette_text, turn_events

PASSED = StepResult(True, "ok", None, "assert: reply contains booked")
FAILED = StepResult(
    False, "the agent has not replied", "f.yaml:9:5", "assert: reply contains booked"
)


@dataclass(frozen=True)
class Outcome:
    returncode: int | None = 0
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False


OK_RUN = Outcome()
TURNS: list[Event] = parse_events(turn_events(BOOKING_TURNS))
DONE = DoneEvent()


def result(*, equal: bool = True) -> dict[str, Any]:
    """A paired compare result as the addon logs it."""
    said = ResponseView("Booked.", (), FinishReason.STOP)
    live = said if equal else ResponseView("Sorry.", (), FinishReason.STOP)
    return compare_responses(said, live, turn=2, live_call=2, thread=0, depth=6).to_json()


def decide(
    events: Sequence[Event],
    mode: str = "replay",
    *,
    run: Outcome = OK_RUN,
    steps: Sequence[StepResult] = (PASSED,),
    handler: str | None = None,
) -> tuple[Verdict, list[str]]:
    """The verdict, and whether the steps were evaluated (["evaluated"] or [])."""
    evaluated: list[str] = []

    def check() -> Sequence[StepResult]:
        evaluated.append("evaluated")
        return steps

    existing = loads_cassette(cassette_text(BOOKING_TURNS), "c.json")
    verdict = decide_exit(events, run, check, mode, timeout=30, handler=handler, existing=existing)
    return verdict, evaluated


class TestLadder:
    def test_a_clean_replay_passes(self):
        """Every step passed, done seen, nothing missing: exit 0 and the steps are reported."""
        verdict, evaluated = decide([*TURNS, DONE])
        assert (verdict.exit_code, verdict.steps, evaluated) == (EXIT_OK, (PASSED,), ["evaluated"])

    def test_divergence_wins_and_skips_the_steps(self):
        """A divergence explains what the agent did next: exit 3, no steps, missing calls dropped."""
        events = [*TURNS[:2], DivergenceEvent("2", "unmatched"), DoneEvent((1, 2), "missing")]
        verdict, evaluated = decide(events, run=Outcome(returncode=1, stderr="400"))
        assert verdict.exit_code == EXIT_DIVERGENCE and verdict.divergences == ("unmatched",)
        assert verdict.missing is None and verdict.steps is None and evaluated == []

    def test_agent_timeout_names_a_tls_failure(self):
        """A timed-out agent is exit 5, and a TLS failure is named as the likely cause."""
        events = [TlsFailedEvent("api.openai.com", "does not trust"), DONE]
        verdict, _ = decide(events, run=Outcome(returncode=None, timed_out=True))
        assert verdict.exit_code == EXIT_AGENT and verdict.error is not None
        assert "30s" in verdict.error and "does not trust" in verdict.error

    def test_proxy_error_fails_the_run(self):
        """An error event is exit 5 with its text as the error."""
        verdict, evaluated = decide([*TURNS, ErrorEvent("cassette write failed"), DONE])
        assert (verdict.exit_code, verdict.error, evaluated) == (
            EXIT_AGENT,
            "cassette write failed",
            [],
        )

    def test_replay_without_done_cannot_check_missing_calls(self):
        """No done event in replay: exit 5, and the recording (none) is not touched."""
        verdict, _ = decide(TURNS)
        assert verdict.exit_code == EXIT_AGENT and "missing calls could not be checked" in (
            verdict.error or ""
        )
        assert verdict.recording == "none" and verdict.notes

    def test_record_without_done_rejects_the_recording(self):
        """No done event in record: exit 5 and the staged recording is rejected."""
        verdict, _ = decide(TURNS, "record")
        assert (verdict.exit_code, verdict.recording) == (EXIT_AGENT, "reject")

    def test_missing_calls_are_a_divergence_after_the_steps(self):
        """Recorded calls never made: exit 3, with the done event's text and the steps."""
        verdict, evaluated = decide(
            [*TURNS[:2], DoneEvent((1, 2), "2 recorded turns were never requested")]
        )
        assert (
            verdict.exit_code == EXIT_DIVERGENCE
            and verdict.missing == "2 recorded turns were never requested"
        )
        assert evaluated == ["evaluated"]

    def test_drift_fails_compare_unless_a_handler_takes_it(self):
        """An unequal result is exit 4 in compare; a handler that accepted it passes."""
        events = [*TURNS, DriftEvent("2", "text differs", result(equal=False)), DONE]
        verdict, _ = decide(events, "compare")
        assert verdict.exit_code == EXIT_DRIFT
        assert [r.equal for r in verdict.compare] == [False] and verdict.drifts == ()
        handled = [*TURNS, ComparedEvent("2", result(equal=False), handled=True), DONE]
        assert decide(handled, "compare", handler="mod:fn")[0].exit_code == EXIT_OK

    def test_a_handler_rejection_fails_compare(self):
        """A result the handler rejected is exit 4 with the handler's message."""
        events = [*TURNS, DriftEvent("2", "the compare handler rejected it", result(), handled=True), DONE]
        verdict, _ = decide(events, "compare", handler="mod:fn")
        assert verdict.exit_code == EXIT_DRIFT and verdict.drifts == ("the compare handler rejected it",)

    def test_missing_results_are_drift_and_nothing_is_claimed_about_call_counts(self):
        """In compare, turns never reached come as missing results: exit 4, no prose about counts."""
        missing = missing_result(ResponseView("Done.", (), FinishReason.STOP), turn=2, thread=0, depth=6,
                                 reason="no live call reached this place in the conversation").to_json()
        events = [*TURNS[:2], DriftEvent("", "missing", missing), DoneEvent((2,))]
        verdict, _ = decide(events, "compare")
        assert verdict.exit_code == EXIT_DRIFT
        assert [(r.kind, r.turn) for r in verdict.compare] == [("missing", 2)]
        assert verdict.notes == () and verdict.missing is None

    def test_compare_without_done_cannot_pass(self):
        """Without the done event the missing turns were never checked: exit 5, not a pass."""
        verdict, evaluated = decide(TURNS, "compare")
        assert verdict.exit_code == EXIT_AGENT and "missing calls could not be checked" in (verdict.error or "")
        assert evaluated == []

    def test_an_unreadable_result_is_an_error(self):
        """A compare result the runner cannot read back fails the run instead of being skipped."""
        events = [*TURNS, DriftEvent("2", "text differs", {"equal": False}), DONE]
        verdict, _ = decide(events, "compare")
        assert verdict.exit_code == EXIT_AGENT
        assert "compare result flowproof cannot read" in (verdict.error or "")

    def test_failed_step_rejects_a_recording(self):
        """A failed step is exit 1; in record the recording is rejected, else untouched."""
        assert decide([*TURNS, DONE], steps=(FAILED,))[0].recording == "none"
        verdict, _ = decide([*TURNS, DONE], "record", steps=(PASSED, FAILED))
        assert (verdict.exit_code, verdict.recording) == (EXIT_ASSERTION, "reject")

    def test_a_passing_record_keeps_the_recording(self):
        """All steps passed in record: the recording is kept."""
        assert decide([*TURNS, DONE], "record")[0].recording == "keep"


class TestMissingText:
    def test_lists_turns_with_their_models_when_the_addon_gave_no_text(self):
        """Without the addon's text, each missing turn is named with provider and model."""
        existing = loads_cassette(cassette_text(BOOKING_TURNS), "c.json")
        text = missing_text([DoneEvent((2, 7))], existing)
        assert text is not None
        assert "- turn 2 (openai-chat, gpt-4o)" in text and "- turn 7" in text

    @pytest.mark.parametrize("events", [[], [DoneEvent()]])
    def test_nothing_missing_is_none(self, events: list[Event]):
        """No done event, or nothing unconsumed: None."""
        assert missing_text(events, None) is None


class TestAgentError:
    def test_clean_exit_is_none_and_a_crash_quotes_the_last_line(self):
        """Exit 0 is fine; a non-zero exit quotes the last line of the agent's output."""
        assert agent_error(Outcome(), 10, ()) is None
        message = agent_error(Outcome(returncode=2, stderr="warming up\nKeyError: x\n"), 10, ())
        assert message is not None and "exited with code 2: KeyError: x" in message


class TestAbandonedCalls:
    def test_an_abandoned_call_at_record_is_a_note_never_a_failure(self):
        """The agent left a call in flight: the record passes and says so."""
        abandoned = {**BOOKING_TURNS[0], "index": 9, "abandoned": True, "response": None}
        events = [*TURNS, *parse_events(turn_events([abandoned])), DONE]
        verdict, evaluated = decide(events, "record")
        assert (verdict.exit_code, verdict.recording, evaluated) == (EXIT_OK, "keep", ["evaluated"])
        assert any("turn 9" in n and "abandoned" in n for n in verdict.notes)

    def test_a_complete_record_has_no_such_note(self):
        verdict, _ = decide([*TURNS, DONE], "record")
        assert not any("abandoned" in n for n in verdict.notes)


def test_a_spec_error_in_a_step_is_exit_2_and_rejects_the_recording() -> None:
    """A model the run called with no price is the spec's mistake, not the agent's."""
    from flowproof.errors import EXIT_USAGE
    from flowproof.events import DoneEvent
    from flowproof.verdict import StepResult, decide_exit

    class Run:
        returncode, stdout, stderr, timed_out = 0, "", "", False

    priced = StepResult(False, "turn 0 called model x, which has no price", None, "cost at most 1", spec_error=True)
    other = StepResult(False, "expected a reply", None, "reply contains x")
    verdict = decide_exit([DoneEvent()], Run(), lambda: (other, priced), "record", timeout=5)
    assert (verdict.exit_code, verdict.recording) == (EXIT_USAGE, "reject")
    assert decide_exit([DoneEvent()], Run(), lambda: (other,), "replay", timeout=5).exit_code == 1
