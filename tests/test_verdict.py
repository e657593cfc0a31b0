"""The one judge on plain data: a run record and an agent outcome in, a verdict out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from flowproof.cassette import loads_cassette
from flowproof.compare import compare_responses, missing_result
from flowproof.divergence import Divergence
from flowproof.errors import EXIT_AGENT, EXIT_ASSERTION, EXIT_DIVERGENCE, EXIT_DRIFT, EXIT_OK
from flowproof.log_events import (
    ComparedEvent,
    DivergenceEvent,
    DoneEvent,
    DriftEvent,
    ErrorEvent,
    ErrorKind,
    Event,
    TlsFailedEvent,
    parse_events,
)
from flowproof.run_record import read_run
from flowproof.spec import FlowSpec, load_spec
from flowproof.turns import FinishReason, ResponseView
from flowproof.verdict import Advice, StepResult, Verdict, agent_error, decide_exit, judge

from .runner.helpers import BOOKING_TURNS, SPEC, cassette_text, chat_turn, turn_events

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
RECORDED: list[Event] = parse_events(turn_events(BOOKING_TURNS, "record"))
DONE = DoneEvent()
EXISTING = loads_cassette(cassette_text(BOOKING_TURNS), "c.json")
ADVICE = Advice(allow_error_turns="pass --allow-them", no_model_call="check the proxy variables")


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

    verdict = decide_exit(read_run(events, EXISTING), run, check, mode, timeout=30, handler=handler)
    return verdict, evaluated


class TestLadder:
    def test_a_clean_replay_passes(self):
        """Every step passed, done seen, nothing missing: exit 0 and the steps are reported."""
        verdict, evaluated = decide([*TURNS, DONE])
        assert (verdict.exit_code, verdict.steps, evaluated) == (EXIT_OK, (PASSED,), ["evaluated"])

    def test_divergence_wins_and_skips_the_steps(self):
        """A divergence explains what the agent did next: exit 3, no steps, missing calls dropped."""
        divergence = Divergence("unmatched", 3, 2)
        events = [*TURNS[:2], DivergenceEvent("2", divergence.to_json()), DoneEvent((1, 2))]
        verdict, evaluated = decide(events, run=Outcome(returncode=1, stderr="400"))
        assert verdict.exit_code == EXIT_DIVERGENCE
        assert [m.divergence for m in verdict.divergences] == [divergence]
        assert verdict.missing is None and verdict.steps is None and evaluated == []

    def test_agent_timeout_names_a_tls_failure(self):
        """A timed-out agent is exit 5, and a TLS failure is named as the likely cause."""
        events = [TlsFailedEvent("api.openai.com", "does not trust"), DONE]
        verdict, _ = decide(events, run=Outcome(returncode=None, timed_out=True))
        assert verdict.exit_code == EXIT_AGENT and verdict.error is not None
        assert "30s" in verdict.error and "does not trust" in verdict.error

    def test_proxy_error_fails_the_run(self):
        """An error event is exit 5 with its text as the error."""
        verdict, evaluated = decide([*TURNS, ErrorEvent("cassette write failed", ErrorKind.CASSETTE_WRITE), DONE])
        assert (verdict.exit_code, verdict.error, verdict.failure, evaluated) == (
            EXIT_AGENT,
            "cassette write failed",
            None,
            [],
        )

    @pytest.mark.parametrize("returncode", [0, 1])
    def test_an_upstream_fault_is_named_by_its_kind_not_its_words(self, returncode: int):
        """An error of kind upstream makes the failure "upstream" (the advice: check the upstream),
        whether or not the agent then crashed; the same words under another kind do not."""
        text = "the model call to https://api.openai.com/v1/chat/completions failed before it completed: reset"
        upstream = [*TURNS, ErrorEvent(text, ErrorKind.UPSTREAM, id="3"), DONE]
        verdict, _ = decide(upstream, run=Outcome(returncode=returncode, stderr="APIConnectionError"))
        assert (verdict.exit_code, verdict.failure) == (EXIT_AGENT, "upstream")
        other = [*TURNS, ErrorEvent(text, ErrorKind.HOOK, id="3"), DONE]
        verdict, _ = decide(other, run=Outcome(returncode=returncode, stderr="APIConnectionError"))
        assert verdict.failure == ("crash" if returncode else None)

    def test_replay_without_done_cannot_check_missing_calls(self):
        """No done event in replay: exit 5, and the recording (none) is not touched."""
        verdict, _ = decide(TURNS)
        assert verdict.exit_code == EXIT_AGENT and "missing calls could not be checked" in (
            verdict.error or ""
        )
        assert verdict.recording == "none" and verdict.notes

    def test_record_without_done_rejects_the_recording(self):
        """No done event in record: exit 5 and the staged recording is rejected."""
        verdict, _ = decide(RECORDED, "record")
        assert (verdict.exit_code, verdict.recording) == (EXIT_AGENT, "reject")

    def test_missing_calls_are_a_divergence_after_the_steps(self):
        """Recorded calls never made: exit 3, with the done event's text and the steps."""
        verdict, evaluated = decide([*TURNS[:2], DoneEvent((1, 2))])
        assert verdict.exit_code == EXIT_DIVERGENCE and verdict.missing is not None
        assert verdict.missing.turns == (1, 2)
        assert verdict.missing.render("flowproof-run b.flow.yaml --record").splitlines() == [
            "2 recorded turns were never requested: turns 1, 2 (the agent made fewer calls than recorded)",
            "If the agent now makes fewer calls on purpose, re-record the cassette: flowproof-run b.flow.yaml --record",
        ]
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
        verdict, _ = decide([*RECORDED, DONE], "record", steps=(PASSED, FAILED))
        assert (verdict.exit_code, verdict.recording) == (EXIT_ASSERTION, "reject")

    def test_a_passing_record_keeps_the_recording(self):
        """All steps passed in record: the recording is kept."""
        assert decide([*RECORDED, DONE], "record")[0].recording == "keep"

    @pytest.mark.parametrize("events", [[DONE], [*TURNS, DONE]])
    def test_nothing_missing_is_none(self, events: list[Event]):
        """Nothing unconsumed at shutdown: no missing calls."""
        assert decide(events)[0].missing is None


def booking_spec(tmp_path: Path) -> FlowSpec:
    path = tmp_path / "booking.flow.yaml"
    path.write_text(SPEC.format(command='"true"', timeout=5), encoding="utf-8")
    return load_spec(path)


class TestJudge:
    """`judge`: the trajectory (built once), the spec's steps, and the fate of a recording."""

    def test_the_steps_and_guards_are_checked_on_the_trajectory_built_once(self, tmp_path: Path):
        record = read_run([*TURNS, DONE], EXISTING)
        verdict = judge(record, OK_RUN, "replay", advice=ADVICE, spec=booking_spec(tmp_path))
        assert verdict.exit_code == EXIT_OK and verdict.steps is not None
        assert [s.passed for s in verdict.steps] == [True, True, True]
        assert verdict.trajectory is not None and verdict.trajectory.reply == "Your flight is booked: B-1042."
        assert [c.name for c in verdict.trajectory.tool_calls] == ["search_flights", "create_booking"]

    def test_without_a_spec_there_are_no_steps_but_a_trajectory(self):
        verdict = judge(read_run([*TURNS, DONE], EXISTING), OK_RUN, "replay", advice=ADVICE)
        assert verdict.steps == () and verdict.exit_code == EXIT_OK
        assert verdict.trajectory is not None and len(verdict.trajectory.turns) == 3

    def test_a_diverged_run_has_a_trajectory_and_no_steps(self, tmp_path: Path):
        events = [*TURNS[:2], DivergenceEvent("1", Divergence("unmatched", 2, 1).to_json()), DONE]
        verdict = judge(read_run(events, EXISTING), OK_RUN, "replay", advice=ADVICE, spec=booking_spec(tmp_path))
        assert verdict.exit_code == EXIT_DIVERGENCE and verdict.steps is None
        assert verdict.trajectory is not None and len(verdict.trajectory.turns) == 1

    def test_a_passing_recording_is_kept_unless_the_callers_test_failed(self):
        record = read_run([*RECORDED, DONE], None)
        assert judge(record, OK_RUN, "record", advice=ADVICE).recording == "keep"
        failed = judge(record, OK_RUN, "record", advice=ADVICE, test_failed=True)
        assert (failed.exit_code, failed.recording) == (EXIT_OK, "reject")

    def test_error_turns_are_not_kept_unless_allowed(self):
        """A recording holding an HTTP error turn is an upstream failure, with the edge's advice."""
        error_turn = {**chat_turn(1, text="x"), "response": {"status": 429, "headers": {},
                                                              "body": {"error": {"message": "slow down"}}}}
        events = [*parse_events(turn_events([BOOKING_TURNS[0], error_turn], "record")), DONE]
        refused = judge(read_run(events, None), OK_RUN, "record", advice=ADVICE)
        assert (refused.exit_code, refused.recording, refused.failure) == (EXIT_AGENT, "reject", "upstream")
        assert refused.error is not None and "turn 1 recorded an HTTP 429" in refused.error
        assert "pass --allow-them if it tests error handling" in refused.error
        allowed = judge(read_run(events, None), OK_RUN, "record", advice=ADVICE, allow_error_turns=True)
        assert (allowed.exit_code, allowed.recording) == (EXIT_OK, "keep")
        assert allowed.error_turns == ("turn 1 recorded an HTTP 429 from the upstream",)

    def test_no_model_call_is_nothing_to_record(self):
        verdict = judge(read_run([DONE], None), OK_RUN, "record", advice=ADVICE)
        assert (verdict.exit_code, verdict.recording) == (EXIT_AGENT, "reject")
        assert verdict.error == ("no model call went through the proxy, so there is nothing to record — "
                                 "check the proxy variables")

    def test_an_agent_request_no_codec_reads_is_the_flow_s_failure_naming_call_field_and_codec(
        self, tmp_path: Path
    ):
        """An OpenAI chat request whose `messages` is a string: not a spec error (exit 2, the
        flow lost), but the agent's (exit 5) — the recording set aside, the steps not checked."""
        sent = chat_turn(0, text="Booked.")
        sent["request"]["body"]["messages"] = "Book me a flight"
        record = read_run([*parse_events(turn_events([sent], "record")), DONE], None)
        verdict = judge(record, OK_RUN, "record", advice=ADVICE, spec=booking_spec(tmp_path))
        assert (verdict.exit_code, verdict.recording, verdict.failure) == (EXIT_AGENT, "reject", "request")
        assert verdict.steps is None and verdict.trajectory is None
        assert verdict.error is not None and verdict.error.startswith(
            "flowproof cannot read model call 0 (POST https://api.openai.com/v1/chat/completions): its request "
            "field `messages` is a JSON string, expected an array (the openai-chat codec); the steps were not checked"
        )
        # Compare reads live turns the same way.
        compared = judge(read_run([*parse_events(turn_events([sent], "compare")), DONE], None), OK_RUN, "compare",
                         advice=ADVICE)
        assert (compared.exit_code, compared.recording, compared.failure) == (EXIT_AGENT, "none", "request")

    def test_an_answer_no_codec_reads_is_named_as_the_answer(self):
        broken = {**chat_turn(0, text="x"), "response": {"status": 200, "headers": {}, "body": {"no": "choices"}}}
        verdict = judge(read_run([*parse_events(turn_events([broken], "record")), DONE], None), OK_RUN, "record",
                        advice=ADVICE)
        assert (verdict.exit_code, verdict.recording) == (EXIT_AGENT, "reject")
        assert verdict.error is not None and verdict.error.startswith(
            "flowproof cannot read the answer to model call 0 (POST https://api.openai.com/v1/chat/completions): "
            "its response field `choices`"
        )

    def test_an_agent_that_crashed_leads_and_the_unreadable_request_is_a_note(self):
        sent = chat_turn(0, text="x")
        sent["request"]["body"]["messages"] = "hi"
        record = read_run([*parse_events(turn_events([sent], "record")), DONE], None)
        verdict = judge(record, Outcome(returncode=1, stderr="boom"), "record", advice=ADVICE)
        assert (verdict.exit_code, verdict.failure) == (EXIT_AGENT, "crash")
        assert verdict.error is not None and verdict.error.startswith("the agent exited with code 1: boom")
        assert any(n.startswith("flowproof cannot read model call 0") for n in verdict.notes)
        hook = read_run([*parse_events(turn_events([sent], "record")), ErrorEvent("x", ErrorKind.HOOK), DONE], None)
        assert judge(hook, OK_RUN, "record", advice=ADVICE).trajectory is None


class TestAgentError:
    def test_clean_exit_is_none_and_a_crash_quotes_the_last_line(self):
        """Exit 0 is fine; a non-zero exit quotes the last line of the agent's output."""
        assert agent_error(Outcome(), 10, ()) is None
        message = agent_error(Outcome(returncode=2, stderr="warming up\nKeyError: x\n"), 10, ())
        assert message is not None and "exited with code 2: KeyError: x" in message


class TestHeadline:
    """When the agent fails, the headline names what the model side did, not the agent's last line."""

    GATEWAY_PAGE = "<html>\n<head><title>502 Bad Gateway</title></head>\n<body>nginx</body>\n</html>"
    CRASHED = Outcome(returncode=1, stderr=f"Traceback …\nopenai.InternalServerError: [{GATEWAY_PAGE}]\n")

    def _error_turn(self, response: dict[str, Any]) -> list[Event]:
        return parse_events(turn_events([{**chat_turn(0, text="x"), "response": response}], "record"))

    def test_an_http_error_from_the_upstream_leads_and_a_telemetry_tls_failure_is_no_ca_advice(self):
        """The gateway's HTML page is not quoted and an unrelated host's TLS failure is only a note."""
        telemetry = TlsFailedEvent("telemetry.example.com", "does not trust the proxy's certificate", False)
        events = [*self._error_turn({"status": 502, "headers": {}, "text": self.GATEWAY_PAGE}), telemetry, DONE]
        verdict, _ = decide(events, "record", run=self.CRASHED)
        assert verdict.error == (
            "the upstream answered HTTP 502 to model call 0 (POST https://api.openai.com/v1/chat/completions); "
            "the agent then exited with code 1 — see the agent output below"
        )
        assert (verdict.exit_code, verdict.failure, verdict.recording) == (EXIT_AGENT, "upstream", "reject")
        assert any("telemetry.example.com, which is not a model host" in n for n in verdict.notes)

    def test_the_apis_error_message_is_quoted(self):
        body = {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}
        events = [*self._error_turn({"status": 401, "headers": {}, "body": body}), DONE]
        verdict, _ = decide(events, "record", run=self.CRASHED)
        assert verdict.error is not None
        assert verdict.error.startswith("the upstream answered HTTP 401 to model call 0 (POST https://api.openai.com"
                                        "/v1/chat/completions): Incorrect API key provided; the agent then exited")

    def test_a_call_the_upstream_cut_leads(self):
        text = "the model call to https://api.openai.com/v1/chat/completions failed before it completed: reset"
        verdict, _ = decide([*TURNS, ErrorEvent(text, ErrorKind.UPSTREAM, id="3"), DONE], run=self.CRASHED)
        assert verdict.error == f"{text}; the agent then exited with code 1 — see the agent output below"

    def test_an_unreachable_model_host_leads_whatever_else_failed(self):
        """The host the proxy could not reach is the cause, before a cut call or the agent's line."""
        unreachable = ErrorEvent("the proxy could not reach the model host 127.0.0.1:9: connection refused",
                                 ErrorKind.UPSTREAM_UNREACHABLE, id="1", address="127.0.0.1:9", host="api.openai.com")
        cut = ErrorEvent("the model call to … failed before it completed: reset", ErrorKind.UPSTREAM, id="2")
        verdict, _ = decide([cut, unreachable, DONE], "record", run=self.CRASHED)
        assert verdict.error == ("the proxy could not reach the model host 127.0.0.1:9: connection refused; "
                                 "the agent then exited with code 1 — see the agent output below")
        assert (verdict.exit_code, verdict.failure, verdict.recording) == (EXIT_AGENT, "unreachable", "reject")
        clean, _ = decide([unreachable, DONE], "record")
        assert (clean.exit_code, clean.failure) == (EXIT_AGENT, "unreachable")
        assert clean.error == "the proxy could not reach the model host 127.0.0.1:9: connection refused"

    def test_a_tls_failure_on_a_model_host_keeps_the_ca_advice(self):
        events = [TlsFailedEvent("api.openai.com", "does not trust", True), DONE]
        verdict, _ = decide(events, "record", run=Outcome(returncode=1, stderr="APIConnectionError"))
        assert verdict.error is not None and "the proxy saw a TLS failure: does not trust" in verdict.error
        assert verdict.failure == "crash"

    def test_a_replayed_error_turn_is_the_cassette_not_the_upstream(self):
        """An allowed error turn served from the cassette: the agent's own handling failed."""
        turn = {**chat_turn(0, text="x"), "response": {"status": 429, "headers": {}, "body": {}}}
        cassette = loads_cassette(cassette_text([turn]), "c.json")
        record = read_run([*parse_events(turn_events([turn])), DONE], cassette)
        verdict = decide_exit(record, self.CRASHED, lambda: (), "replay", timeout=30)
        assert verdict.failure == "crash" and verdict.error is not None
        assert verdict.error.startswith("the agent exited with code 1")


class TestAbandonedCalls:
    def test_an_abandoned_call_at_record_is_a_note_never_a_failure(self):
        """The agent left a call in flight: the record passes and says so."""
        abandoned = {**BOOKING_TURNS[0], "index": 9, "abandoned": True, "response": None}
        events = [*RECORDED, *parse_events(turn_events([abandoned], "record")), DONE]
        verdict, evaluated = decide(events, "record")
        assert (verdict.exit_code, verdict.recording, evaluated) == (EXIT_OK, "keep", ["evaluated"])
        assert any("turn 9" in n and "abandoned" in n for n in verdict.notes)

    def test_a_complete_record_has_no_such_note(self):
        verdict, _ = decide([*RECORDED, DONE], "record")
        assert not any("abandoned" in n for n in verdict.notes)


def test_a_spec_error_in_a_step_is_exit_2_and_rejects_the_recording() -> None:
    """A model the run called with no price is the spec's mistake, not the agent's."""
    from flowproof.errors import EXIT_USAGE
    from flowproof.log_events import DoneEvent
    from flowproof.verdict import StepResult, decide_exit

    class Run:
        returncode, stdout, stderr, timed_out = 0, "", "", False

    priced = StepResult(False, "turn 0 called model x, which has no price", None, "cost at most 1", spec_error=True)
    other = StepResult(False, "expected a reply", None, "reply contains x")
    done = read_run([DoneEvent()], None)
    verdict = decide_exit(done, Run(), lambda: (other, priced), "record", timeout=5)
    assert (verdict.exit_code, verdict.recording) == (EXIT_USAGE, "reject")
    assert decide_exit(done, Run(), lambda: (other,), "replay", timeout=5).exit_code == 1
