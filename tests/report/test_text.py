"""Tests for flowproof.report.text: the readable report and the line that says what to do."""

from __future__ import annotations

from pathlib import Path

from flowproof.errors import EXIT_AGENT, EXIT_ASSERTION, EXIT_DIVERGENCE, EXIT_OK
from flowproof.log_events import ErrorKind
from flowproof.report.text import flow_report, interrupted_step, next_step, render_text, worst_exit
from flowproof.run_record import MissingCalls, RunError, RunRecord
from flowproof.verdict import StepResult

from .helpers import compare_run, miss, result, witnessed


class TestText:
    def test_a_first_record_asks_for_no_heal_diff(self) -> None:
        """After a first-ever record there is no old cassette and so no heal diff: the advice
        says to read the new cassette, not to review a diff that does not exist."""
        text = render_text([result(mode="record", heal_diff=None)])
        assert "heal diff" not in text and "cassette diff" not in text
        assert text.splitlines()[-1] == (
            "A new cassette: read it (flowproof show booking.cassette.json) and commit it with the spec."
        )

    def test_a_new_cassette_is_named_as_a_command_from_here_would(self, tmp_path: Path, monkeypatch) -> None:
        """A cassette inside the working directory is named relative to it, and a path with a
        space is quoted, so the `flowproof show` line pastes into a shell as it is."""
        monkeypatch.chdir(tmp_path)
        inside = result(mode="record", heal_diff=None, cassette=tmp_path / "my flows" / "a.cassette.json")
        assert "(flowproof show 'my flows/a.cassette.json')" in render_text([inside])
        elsewhere = result(mode="record", heal_diff="x", cassette=Path("/elsewhere/b.cassette.json"))
        last = render_text([elsewhere]).splitlines()[-1]
        assert last == "Review the heal diff above and commit /elsewhere/b.cassette.json."

    def test_a_re_record_asks_to_review_its_heal_diff(self) -> None:
        text = render_text([result(mode="record", heal_diff="turn 1: create_booking flight.id: KQ311 -> KQ999")])
        assert "heal diff (old cassette -> new recording):" in text
        assert text.splitlines()[-1] == "Review the heal diff above and commit booking.cassette.json."

    def test_several_flows_advise_by_what_was_recorded(self) -> None:
        """Several flows: first records only (--record-missing) ask to read the new cassettes;
        any re-record asks to review the diffs; replays alone need nothing."""
        first = result(mode="record", heal_diff=None)
        again = result(mode="record", heal_diff="turn 0: text: 'a' -> 'b'")
        replayed = result()
        assert render_text([replayed, first]).splitlines()[-1].startswith("New cassettes: read them")
        assert render_text([first, again]).splitlines()[-1] == "Review the heal diffs above and commit the cassettes."
        assert render_text([replayed, replayed]).splitlines()[-1] == "Nothing to do."

    def test_passing_flow(self) -> None:
        """A passing flow shows ✓ per step and ends with 'Nothing to do.'."""
        text = render_text([result(steps=(StepResult(True, "ok", None, "assert: reply contains booked"),))])
        assert "✓ Booking [replay]" in text and "✓ assert: reply contains booked" in text
        assert text.endswith("Nothing to do.")

    def test_failing_step_shows_message_and_location(self) -> None:
        """A failed step shows ✗, its location and its message."""
        step = StepResult(False, "the agent has not replied", "booking.flow.yaml:9:5", "assert: reply contains booked")
        text = render_text([result(EXIT_ASSERTION, steps=(step,))])
        assert "✗ assert: reply contains booked (booking.flow.yaml:9:5)" in text
        assert "the agent has not replied" in text
        assert text.splitlines()[-1].startswith("Fix the agent")

    def test_divergence_says_how_to_rerecord(self) -> None:
        """A divergence report includes its text and ends with the record command, given once."""
        text = render_text([result(EXIT_DIVERGENCE, divergences=(miss("book.flight.id", "KQ311", "KQ999"),))])
        assert "- book.flight.id: recorded KQ311, replayed KQ999" in text
        assert "If this change is intended, re-record the cassette.\n" in text
        assert "flowproof-run booking.flow.yaml --record" in text.splitlines()[-1]
        assert text.count("flowproof-run booking.flow.yaml --record") == 1

    def test_the_record_command_is_the_one_the_result_carries(self) -> None:
        """A flow run from elsewhere (pytest) is told that place's command, everywhere."""
        flow = result(EXIT_DIVERGENCE, divergences=(miss("model", "a", "b"),), missing=MissingCalls((2,)),
                      record_command="pytest t.py::x --flowproof-mode record")
        text = render_text([flow])
        assert text.count("pytest t.py::x --flowproof-mode record") == 1  # the next step, once
        assert "pytest t.py::x --flowproof-mode record" in text.splitlines()[-1]
        assert "flowproof-run" not in text
        # --json keeps each divergence's text whole: a finding is read on its own.
        assert flow.divergence_texts()[0].endswith("re-record the cassette: pytest t.py::x --flowproof-mode record")

    def test_every_failing_flow_is_named_in_one_command(self) -> None:
        """Several diverged flows: one record command naming each (in run order), given once."""
        flows = [result(EXIT_DIVERGENCE, spec_path=Path(f"{n}.flow.yaml"), name=n,
                        divergences=(miss("model", "a", "b"),)) for n in ("a", "b", "c")]
        text = render_text([*flows, result(spec_path=Path("ok.flow.yaml"))])
        command = "flowproof-run a.flow.yaml b.flow.yaml c.flow.yaml --record"
        assert text.splitlines()[-1] == (f"If the change is intended, re-record with: {command} — then review the "
                                         "heal diff; otherwise fix the agent.")
        assert "re-record" not in "\n".join(text.splitlines()[:-1]).replace("re-record the cassette.", "")

    def test_each_kind_of_failure_gets_its_line_worst_first(self) -> None:
        """A divergence, two failed checks and a crashed agent: one line each, none left out."""
        flows = [
            result(EXIT_ASSERTION, spec_path=Path("a.flow.yaml")),
            result(EXIT_DIVERGENCE, spec_path=Path("d.flow.yaml"), divergences=(miss("model", "a", "b"),)),
            result(EXIT_AGENT, spec_path=Path("x.flow.yaml"), failure="crash"),
            result(EXIT_ASSERTION, spec_path=Path("b.flow.yaml")),
        ]
        last = render_text(flows).splitlines()[-3:]
        assert last == [
            "The agent crashed: fix it using its output above, then run again.",
            "If the change is intended, re-record with: flowproof-run d.flow.yaml --record — then review the heal "
            "diff; otherwise fix the agent.",
            "Fix the agent (or the spec at the ✗ lines), then run: flowproof-run a.flow.yaml b.flow.yaml",
        ]

    def test_a_failed_check_under_pytest_is_run_again_through_pytest(self) -> None:
        flow = result(EXIT_ASSERTION, record_command="pytest 'specs/b.flow.yaml::Book it' --flowproof-mode record")
        assert next_step(flow).endswith("then run: pytest 'specs/b.flow.yaml::Book it'")

    def test_several_flows_end_with_one_table(self) -> None:
        """Several flows end with a table: a header and one aligned row per flow, in run order."""
        text = render_text([
            result(duration=1.25),
            result(EXIT_ASSERTION, spec_path=Path("deep/refund.flow.yaml"), name="Refund guard"),
        ])
        table = text.split("\n\n")[-2].splitlines()
        assert table[1].split() == ["✓", "passed", "replay", "1.2s", "booking.flow.yaml", "Booking"]
        assert table[2].split()[:4] == ["✗", "assertion", "failed", "replay"] and table[2].endswith("Refund guard")
        assert table[1].index("booking.flow.yaml") == table[2].index("deep/refund.flow.yaml")
        assert "1 of 2 flow(s) passed" in text

    def test_one_flow_has_no_table(self) -> None:
        """A single flow's report is not followed by a one-row table."""
        assert "verdict" not in render_text([result()])

    def test_worst_exit(self) -> None:
        """Several flows exit with the worst code."""
        assert worst_exit([result(EXIT_OK), result(EXIT_DIVERGENCE), result(EXIT_ASSERTION)]) == EXIT_DIVERGENCE
        assert worst_exit([]) == EXIT_OK

    def test_compare_lists_every_result_and_details_the_first_drift_only(self) -> None:
        """Every result has a row with text.status; the first drift is detailed, later ones counted."""
        text = render_text([compare_run()])
        assert "compare: 4 result(s), 1 equal, 3 drifted (2 changed, 0 extra, 1 missing)" in text
        assert "turn 0 | thread 1 | depth 2 | equal true | finish reason stop | text exact" in text
        assert "turn 3 | thread 0 | depth 6 | equal false (missing)" in text
        assert "- tool_calls.0.arguments.flight: recorded KQ311, live KQ999" in text
        assert "Done!" not in text  # the second drift is counted, not explained
        assert "2 later drift(s)" in text
        assert "replayed" not in text and "fewer model calls" not in text


class TestWhatEveryReportSays:
    def test_text_lists_hosts_leaks_unused_mocks_and_the_tree(self) -> None:
        text = render_text([witnessed()])
        assert "  hosts contacted: api.openai.com:443 (model), exfil.example.test:80" in text
        assert ("  secret leak: ${T} went to exfil.example.test: request POST "
                "http://exfil.example.test/c?t=«secret:T», in the URL at query") in text
        assert "  unused mock: search_hotels (tools:, b.flow.yaml:8:5): no request carried its result" in text
        assert "    the agent\n      └─ Explore #1 (claude-code)" in text

    def test_hosts_are_listed_on_a_pass_too(self) -> None:
        passed = result(egress=({"host": "api.openai.com", "port": 443, "role": "model", "via": "connect"},))
        assert "hosts contacted: api.openai.com:443 (model)" in render_text([passed])


class TestUnreachableAdvice:
    """Exit 5 because the proxy could not reach a model host: the advice names it and what to check."""

    def _result(self, address: str, host: str) -> str:
        error = RunError(ErrorKind.UPSTREAM_UNREACHABLE, f"the proxy could not reach the model host {address}",
                         address=address, host=host)
        return next_step(result(EXIT_AGENT, mode="record", failure="unreachable", run=RunRecord(errors=(error,))))

    def test_a_mapped_host_points_at_the_mapping(self) -> None:
        assert self._result("127.0.0.1:9", "api.openai.com") == (
            "The proxy could not reach 127.0.0.1:9, where the upstream mapping sends api.openai.com: start the "
            "server there, or fix the mapping (--upstream api.openai.com=URL or FLOWPROOF_UPSTREAM), then run again."
        )

    def test_the_real_host_points_at_the_network(self) -> None:
        advice = self._result("api.openai.com:443", "api.openai.com")
        assert advice.startswith("The proxy could not reach api.openai.com:443: check this machine's network")
        assert "--upstream HOST=URL" in advice

    def test_an_error_an_sdk_retried_is_shown_once(self) -> None:
        text = "the proxy could not reach the model host 127.0.0.1:9: connection refused"
        flow = result(EXIT_AGENT, error="the agent exited with code 1", errors=(text,) * 3)
        assert render_text([flow]).count(text) == 1


class TestASessionWhoseTestFailed:
    """The fixture: flowproof passed the session, the test around it failed on its own."""

    def test_it_is_not_shown_as_a_pass(self) -> None:
        passed = result(turns=2, tool_calls=("create_booking",))
        text = flow_report(passed, test_failed=True, after="\n  the test failed with: AssertionError: no")
        assert text.splitlines()[0] == ("✗ Booking [replay] — the test failed; "
                                        "flowproof found nothing wrong with the model calls")
        assert "Nothing to do" not in text and "— passed" not in text
        assert "trajectory: 2 model call(s); tool calls: create_booking" in text
        assert text.endswith("fix the agent or the test, then run the test again.")

    def test_a_record_says_nothing_was_kept(self) -> None:
        text = flow_report(result(mode="record", rejected=Path("b.rejected.json")), test_failed=True)
        assert text.endswith("Nothing was recorded (the recording is in b.rejected.json): the test failed; fix the "
                             "agent or the test, then record again.")

    def test_a_failed_session_keeps_its_own_verdict(self) -> None:
        failed = result(EXIT_DIVERGENCE, divergences=(miss("messages.1.content", "a", "b"),))
        assert flow_report(failed, test_failed=True) == flow_report(failed)


class TestInterrupted:
    def test_the_last_lines_list_the_cassettes_kept_before_the_signal_and_the_flows_not_recorded(self) -> None:
        """A flow that passed before the signal replaced its cassette: the run's last lines say
        so, instead of "nothing was recorded"."""
        kept = result(spec_path=Path("a.flow.yaml"), cassette=Path("a.cassette.json"), mode="record", heal_diff="")
        stopped = result(130, spec_path=Path("b.flow.yaml"), cassette=None, mode="record",
                         error="interrupted by SIGINT: the agent and the proxy were stopped and nothing was recorded")
        rejected = result(EXIT_ASSERTION, spec_path=Path("c.flow.yaml"), cassette=Path("c.cassette.json"),
                          mode="record")
        replayed = result(spec_path=Path("d.flow.yaml"))
        text = render_text([kept, stopped, rejected, replayed])
        assert text.endswith(
            "flowproof-run was interrupted; flows that finished before the signal kept their recordings:\n"
            "  kept: a.cassette.json (cassette written, recorded by a.flow.yaml)\n"
            "  not recorded: b.flow.yaml (interrupted; its cassette is unchanged)\n"
            "  not recorded: c.flow.yaml (assertion failed; its cassette is unchanged)\n"
            "Review the kept cassettes (flowproof show CASSETTE), then record the other flows again."
        )
        assert "nothing was recorded or checked" not in text
        # The runner's exit without waiting names the flows that had no result yet.
        assert interrupted_step([kept], [Path("e.flow.yaml")]) == (
            "flowproof-run was interrupted; flows that finished before the signal kept their recordings:\n"
            "  kept: a.cassette.json (cassette written, recorded by a.flow.yaml)\n"
            "  not recorded: e.flow.yaml (interrupted; its cassette is unchanged)\n"
            "Review the kept cassettes (flowproof show CASSETTE), then record the other flows again."
        )

    def test_with_nothing_kept_the_last_line_says_nothing_was_recorded(self) -> None:
        stopped = result(130, spec_path=Path("b.flow.yaml"), mode="record")
        assert interrupted_step([stopped]) is None
        assert render_text([stopped, result(spec_path=Path("d.flow.yaml"))]).endswith(
            "flowproof-run was interrupted: nothing was recorded or checked; run it again.")
