"""Tests for flowproof.runner.flow: one flow run against the stand-in addon."""

from __future__ import annotations

import errno
import json
import shlex
import sys
from pathlib import Path

import pytest

from flowproof.errors import (
    EXIT_AGENT,
    EXIT_ASSERTION,
    EXIT_DIVERGENCE,
    EXIT_DRIFT,
    EXIT_OK,
    EXIT_USAGE,
)
from flowproof.options import ProxyOptions
from flowproof.runner import flow as flow_module
from flowproof.runner.flow import RunOptions, run_flow
from flowproof.runner.recording import rejected_path, staging_path

from .conftest import FAKE_ADDON
from .helpers import BOOKING_TURNS, cassette_text, chat_turn, divergence_event, turn_events, write_script, write_spec


@pytest.fixture
def opts(ca_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """RunOptions factory using the stand-in addon and the session CA."""
    monkeypatch.setenv("FLOWPROOF_ADDON_SCRIPT", str(FAKE_ADDON))

    def make(script: dict | None = None, **kw) -> RunOptions:
        if script is not None:
            monkeypatch.setenv("FAKE_FLOWPROOF_SCRIPT", str(write_script(tmp_path / "script.json", **script)))
        return RunOptions(ca_dir=ca_dir, **kw)

    return make


def with_cassette(spec: Path, turns=BOOKING_TURNS, route: str = "proxy") -> Path:
    cassette = spec.parent / "booking.cassette.json"
    cassette.write_text(cassette_text(turns, route))
    return cassette


class TestReplay:
    def test_passing_flow(self, tmp_path: Path, opts) -> None:
        """A replay whose turns satisfy every step passes with exit 0."""
        spec = write_spec(tmp_path)
        with_cassette(spec)
        result = run_flow(spec, opts({"events": turn_events(BOOKING_TURNS)}))
        assert result.exit_code == EXIT_OK, result
        assert [s.passed for s in result.steps] == [True, True, True]
        assert result.reply == "Your flight is booked: B-1042."
        assert result.tool_calls == ("search_flights", "create_booking")
        assert result.startup_seconds and result.startup_seconds > 0

    def test_missing_cassette_names_record_command(self, tmp_path: Path, opts) -> None:
        """Replay without a cassette fails with exit 2 and the exact record command."""
        spec = write_spec(tmp_path)
        result = run_flow(spec, opts())
        assert result.exit_code == EXIT_USAGE
        assert f"flowproof-run {shlex.quote(str(spec))} --record" in (result.error or "")

    def test_divergence_wins_over_agent_exit(self, tmp_path: Path, opts) -> None:
        """A divergence is exit 3 even when the agent then exits non-zero."""
        spec = write_spec(tmp_path, command="exit 1")
        with_cassette(spec)
        events = [{"event": "request_started", "id": "1"},
                  divergence_event("1", "book.flight.id", "KQ311", "KQ999")]
        result = run_flow(spec, opts({"events": events}))
        assert result.exit_code == EXIT_DIVERGENCE
        [text] = result.divergence_texts()
        assert "book.flight.id: recorded KQ311, replayed KQ999" in text
        assert text.endswith(f"re-record the cassette: flowproof-run {shlex.quote(str(spec))} --record")
        assert result.steps == ()

    def test_unconsumed_turns_are_missing_calls(self, tmp_path: Path, opts) -> None:
        """Recorded turns never requested make the flow fail with exit 3."""
        spec = write_spec(tmp_path)
        with_cassette(spec)
        result = run_flow(spec, opts({"events": turn_events(BOOKING_TURNS[:2]), "done": {"unconsumed": [2]}}))
        assert result.exit_code == EXIT_DIVERGENCE
        assert result.missing is not None and result.missing.turns == (2,)
        assert "1 recorded turn was never requested: turn 2" in (result.missing_text() or "")

    def test_failed_assertion_is_exit_1(self, tmp_path: Path, opts) -> None:
        """A trajectory without the booking call fails its assertion with exit 1."""
        spec = write_spec(tmp_path)
        turns = [BOOKING_TURNS[0], chat_turn(1, text="Sorry, I could not book.")]
        with_cassette(spec, turns)
        result = run_flow(spec, opts({"events": turn_events(turns)}))
        assert result.exit_code == EXIT_ASSERTION
        assert [s.passed for s in result.steps] == [True, False, False]

    def test_route_mismatch_is_refused(self, tmp_path: Path, opts) -> None:
        """A cassette recorded on another route is refused before anything starts."""
        spec = write_spec(tmp_path)
        with_cassette(spec, route="base_url")
        result = run_flow(spec, opts())
        assert result.exit_code == EXIT_USAGE
        assert "route `base_url`" in (result.error or "")

    def test_agent_env_and_prompt(self, tmp_path: Path, opts) -> None:
        """The agent sees the proxy, the CA bundle, FLOWPROOF_PROMPT and placeholder keys in replay."""
        dump = tmp_path / "env.json"
        code = f"import json,os; json.dump(dict(os.environ), open({str(dump)!r}, 'w'))"
        spec = write_spec(tmp_path, command=f"{sys.executable} -c {shlex.quote(code)}")
        with_cassette(spec)
        run_flow(spec, opts({"events": turn_events(BOOKING_TURNS)}, environ={"PATH": "/usr/bin:/bin"}))
        env = json.loads(dump.read_text())
        assert env["HTTPS_PROXY"].startswith("http://127.0.0.1:")
        assert env["FLOWPROOF_PROMPT"] == "Book me a flight to Nairobi tomorrow"
        assert env["OPENAI_API_KEY"] == "flowproof-replay-placeholder"
        assert Path(env["SSL_CERT_FILE"]).is_file()

    def test_handles_reach_the_agent_with_this_runs_values(self, tmp_path: Path, opts) -> None:
        """`${flowproof.…}` handles in agent.env and agent.command become the values the
        standard variables get: the proxy, the CA bundle and certificate, a base-URL listener."""
        dump = tmp_path / "env.json"
        code = ("import json,os,sys; json.dump({'env': dict(os.environ), 'argv': sys.argv[1:]}, "
                f"open({str(dump)!r}, 'w'))")
        spec = write_spec(tmp_path, command=f"{sys.executable} -c {shlex.quote(code)} ${{flowproof.proxy_url}}")
        text = spec.read_text().replace("  timeout: 20\n", (
            "  timeout: 20\n  route: base_url\n  env:\n"
            "    MY_LLM_URL: ${flowproof.base_url.openai}\n"
            "    MY_CLAUDE: ${flowproof.base_url.anthropic}\n"
            "    MY_PROXY: ${flowproof.proxy_url}\n"
            "    MY_BUNDLE: ${flowproof.ca_bundle}\n"
            "    MY_CERT: ${flowproof.ca_cert}\n"
            "    LITERAL: $${flowproof.proxy_url}\n"))
        spec.write_text(text)
        with_cassette(spec, route="base_url")
        result = run_flow(spec, opts({"events": turn_events(BOOKING_TURNS)}, environ={"PATH": "/usr/bin:/bin"}))
        assert result.exit_code == EXIT_OK, result
        seen = json.loads(dump.read_text())
        env = seen["env"]
        assert env["MY_LLM_URL"] == env["OPENAI_BASE_URL"] and env["MY_LLM_URL"].endswith("/v1")
        assert env["MY_CLAUDE"] == env["ANTHROPIC_BASE_URL"] != env["MY_LLM_URL"].removesuffix("/v1")
        assert env["MY_PROXY"] == env["HTTPS_PROXY"] and env["MY_PROXY"].startswith("http://127.0.0.1:")
        assert env["MY_BUNDLE"] == env["SSL_CERT_FILE"] and env["MY_CERT"] == env["NODE_EXTRA_CA_CERTS"]
        assert env["LITERAL"] == "${flowproof.proxy_url}"
        assert seen["argv"] == [env["HTTPS_PROXY"]]

    def test_unset_variable_is_spec_error(self, tmp_path: Path, opts) -> None:
        """An unset ${VAR} in the spec fails with exit 2 naming the variable."""
        spec = write_spec(tmp_path, command="run ${AGENT_BIN_FOR_TEST}")
        result = run_flow(spec, opts(environ={}))
        assert result.exit_code == EXIT_USAGE
        assert "AGENT_BIN_FOR_TEST" in (result.error or "")


class TestAgentFailures:
    def test_timeout_names_tls_failure(self, tmp_path: Path, opts) -> None:
        """A hanging agent is stopped at the timeout and the TLS failure is named as the cause."""
        spec = write_spec(tmp_path, command="sleep 30", timeout=1)
        with_cassette(spec)
        events = [{"event": "tls_failed", "host": "api.openai.com",
                   "text": "client does not trust the proxy's certificate for api.openai.com"}]
        result = run_flow(spec, opts({"events": events}))
        assert result.exit_code == EXIT_AGENT
        assert "within 1s" in (result.error or "")
        assert "does not trust" in (result.error or "")
        assert result.duration < 15

    def test_crash_is_exit_5_with_output(self, tmp_path: Path, opts) -> None:
        """An agent that exits non-zero is an agent failure showing its last output line."""
        spec = write_spec(tmp_path, command="echo boom-from-agent >&2; exit 3")
        with_cassette(spec)
        result = run_flow(spec, opts({"events": []}))
        assert result.exit_code == EXIT_AGENT
        assert "code 3" in (result.error or "") and "boom-from-agent" in (result.error or "")

    def test_command_not_found(self, tmp_path: Path, opts) -> None:
        """A missing program is an AgentError saying the command was not found."""
        spec = write_spec(tmp_path, command="no-such-agent-binary-xyz")
        with_cassette(spec)
        result = run_flow(spec, opts({"events": []}))
        assert result.exit_code == EXIT_AGENT
        assert "not found" in (result.error or "")


class TestRecord:
    def test_passing_recording_replaces_cassette_with_heal_diff(self, tmp_path: Path, opts) -> None:
        """A passing recording replaces the old cassette and the heal diff names the moved argument."""
        spec = write_spec(tmp_path)
        old_turns = [BOOKING_TURNS[0], chat_turn(1, call=("create_booking", {"flight": {"id": "KQ999"}})),
                     BOOKING_TURNS[2]]
        cassette = with_cassette(spec, old_turns)
        new_text = cassette_text(BOOKING_TURNS)
        script = {"events": turn_events(BOOKING_TURNS, "record"), "cassette": new_text}
        result = run_flow(spec, opts(script, mode="record"))
        assert result.exit_code == EXIT_OK, result
        assert cassette.read_text() == new_text
        assert not staging_path(cassette).exists()
        assert "create_booking flight.id: KQ999 -> KQ311" in (result.heal_diff or "")

    def test_failing_recording_keeps_old_cassette(self, tmp_path: Path, opts) -> None:
        """A recording that fails its assertions leaves the old cassette byte-identical and is set aside."""
        spec = write_spec(tmp_path)
        cassette = with_cassette(spec)
        before = cassette.read_bytes()
        bad = [BOOKING_TURNS[0], chat_turn(1, text="I cannot do that.")]
        script = {"events": turn_events(bad, "record"), "cassette": cassette_text(bad)}
        result = run_flow(spec, opts(script, mode="record"))
        assert result.exit_code == EXIT_ASSERTION
        assert cassette.read_bytes() == before
        assert result.rejected == rejected_path(cassette)
        assert json.loads(rejected_path(cassette).read_text())["turns"][1]["index"] == 1

    def test_a_request_no_codec_reads_is_that_flow_s_failure_not_a_spec_error(self, tmp_path: Path, opts) -> None:
        """An agent request whose `messages` is a string: the flow keeps its name and its agent's
        output, fails as the agent's (exit 5, not 2), and its recording is set aside."""
        spec = write_spec(tmp_path, command="echo the agent ran")
        cassette = with_cassette(spec)
        before = cassette.read_bytes()
        sent = chat_turn(0, text="Booked.")
        sent["request"]["body"]["messages"] = "Book me a flight"
        script = {"events": turn_events([sent], "record"), "cassette": cassette_text([sent])}
        result = run_flow(spec, opts(script, mode="record"))
        assert (result.exit_code, result.failure) == (EXIT_AGENT, "request"), result.error
        assert result.name == "Booking assistant books a flight"
        assert "model call 0" in (result.error or "") and "field `messages` is a JSON string" in (result.error or "")
        assert result.agent_stdout.strip() == "the agent ran"
        assert cassette.read_bytes() == before
        assert result.rejected == rejected_path(cassette) and result.rejected.is_file()
        assert not staging_path(cassette).exists()

    def test_record_needs_no_cassette(self, tmp_path: Path, opts) -> None:
        """Recording a new spec writes the cassette and no heal diff."""
        spec = write_spec(tmp_path)
        text = cassette_text(BOOKING_TURNS)
        result = run_flow(spec, opts({"events": turn_events(BOOKING_TURNS, "record"), "cassette": text}, mode="record"))
        assert result.exit_code == EXIT_OK
        assert result.heal_diff is None
        assert (tmp_path / "booking.cassette.json").read_text() == text

    def test_a_file_error_nobody_foresaw_is_that_flows_exit_2(
        self, tmp_path: Path, opts, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An OSError naming a file (a disk that filled up mid-run) fails the flow, not the run."""

        class Full(flow_module.Staging):
            def discard(self) -> None:
                raise OSError(errno.ENOSPC, "No space left on device", str(self.path))

        monkeypatch.setattr(flow_module, "Staging", Full)
        spec = write_spec(tmp_path)
        result = run_flow(spec, opts({"events": turn_events(BOOKING_TURNS)}, mode="record"))
        assert result.exit_code == EXIT_USAGE, result
        assert result.error is not None and str(staging_path(tmp_path / "booking.cassette.json")) in result.error
        assert "No space left on device" in result.error


def result_json(kind: str = "paired", equal: bool = True, turn: int | None = 0) -> dict:
    """A compare result as the addon logs it."""
    from flowproof.compare import compare_responses, extra_result, missing_result
    from flowproof.turns import FinishReason, ResponseView

    said = ResponseView("Booked.", (), FinishReason.STOP)
    if kind == "extra":
        return extra_result(said, live_call=9, thread=0, depth=8, reason="r").to_json()
    if kind == "missing":
        return missing_result(said, turn=turn or 0, thread=0, depth=6, reason="never reached").to_json()
    live = said if equal else ResponseView("Sorry.", (), FinishReason.STOP)
    return compare_responses(said, live, turn=turn or 0, live_call=turn, thread=0, depth=2).to_json()


class TestCompare:
    def test_drift_is_exit_4_and_cassette_untouched(self, tmp_path: Path, opts) -> None:
        """An unequal result fails compare with exit 4 and never writes the cassette."""
        spec = write_spec(tmp_path)
        cassette = with_cassette(spec)
        before = cassette.read_bytes()
        events = turn_events(BOOKING_TURNS, "compare") + [
            {"event": "drift", "id": "2", "text": "turn 2: differs", "result": result_json(equal=False)}
        ]
        result = run_flow(spec, opts({"events": events}, mode="compare"))
        assert result.exit_code == EXIT_DRIFT
        assert [r.equal for r in result.compare] == [False]
        assert result.drifts == ()  # the structured result says it; no second copy in prose
        assert cassette.read_bytes() == before

    def test_equal_results_pass(self, tmp_path: Path, opts) -> None:
        """Equal results (text normalized or exact) pass with exit 0."""
        spec = write_spec(tmp_path)
        with_cassette(spec)
        events = turn_events(BOOKING_TURNS, "compare") + [
            {"event": "compared", "id": str(i), "result": result_json(turn=i)} for i in range(3)
        ]
        result = run_flow(spec, opts({"events": events}, mode="compare"))
        assert result.exit_code == EXIT_OK, result
        assert [r.turn for r in result.compare] == [0, 1, 2]

    def test_handler_decides(self, tmp_path: Path, opts, sent_options: list[ProxyOptions]) -> None:
        """With a handler, results it accepted pass, even unequal, extra and missing ones."""
        spec = write_spec(tmp_path)
        with_cassette(spec)
        events = turn_events(BOOKING_TURNS, "compare") + [
            {"event": "compared", "id": "1", "result": result_json(equal=False), "handled": True},
            {"event": "compared", "id": "2", "result": result_json("extra"), "handled": True},
            {"event": "compared", "result": result_json("missing", turn=3), "handled": True},
        ]
        result = run_flow(spec, opts({"events": events}, mode="compare", compare_handler="mod:fn"))
        assert result.exit_code == EXIT_OK, result
        assert [r.kind for r in result.compare] == ["paired", "extra", "missing"]
        assert [s.compare_handler for s in sent_options] == ["mod:fn"]

    def test_handler_rejection_is_exit_4(self, tmp_path: Path, opts) -> None:
        """A result the handler rejected fails the run with its message, even an equal one."""
        spec = write_spec(tmp_path)
        with_cassette(spec)
        text = "the compare handler mod:fn rejected turn 0 (thread 0, depth 2): AssertionError: no"
        events = turn_events(BOOKING_TURNS, "compare") + [
            {"event": "drift", "id": "1", "text": text, "result": result_json(), "handled": True}
        ]
        result = run_flow(spec, opts({"events": events}, mode="compare", compare_handler="mod:fn"))
        assert result.exit_code == EXIT_DRIFT, result
        assert result.drifts == (text,)

    def test_missing_turn_is_drift(self, tmp_path: Path, opts) -> None:
        """A recorded turn no live call reached is a missing result: exit 4, no false claim."""
        spec = write_spec(tmp_path)
        recorded = [*BOOKING_TURNS, chat_turn(len(BOOKING_TURNS), text="Anything else?")]
        with_cassette(spec, recorded)
        missing = {"event": "drift", "text": "missing", "result": result_json("missing", turn=3)}
        script = {"events": [*turn_events(BOOKING_TURNS, "compare"), missing], "done": {"unconsumed": [3]}}
        result = run_flow(spec, opts(script, mode="compare"))
        assert result.exit_code == EXIT_DRIFT, result
        assert [(r.kind, r.turn) for r in result.compare] == [("missing", 3)]
        assert result.missing is None and result.notes == ()

    def test_no_done_event_fails(self, tmp_path: Path, opts) -> None:
        """Without the proxy's done event the missing turns were never checked: not a pass."""
        spec = write_spec(tmp_path)
        with_cassette(spec)
        script = {"events": turn_events(BOOKING_TURNS, "compare"), "skip_done": True}
        result = run_flow(spec, opts(script, mode="compare"))
        assert result.exit_code == EXIT_AGENT
        assert "missing calls could not be checked" in (result.error or "")


class TestStepLines:
    def test_each_step_reads_as_what_it_checks(self, tmp_path: Path) -> None:
        """A passing guard reads "no call to …" (never a bare tool name, which reads as called);
        where clauses and reply checks read as written; the strict check names itself."""
        from flowproof.spec import load_spec
        from flowproof.verdict import step_line

        spec = tmp_path / "guard.flow.yaml"
        spec.write_text(
            "name: guard\napp: agent\nagent:\n  command: a\nsteps:\n  - prompt: hi\n"
            "  - assert_tool_call: lookup_order where order_id equals A-1001\n"
            "  - assert_no_tool_call: issue_refund\n"
            "  - assert_no_tool_call: create_booking where passenger.name equals Mallory\n"
            "  - assert: reply contains not eligible\n",
            encoding="utf-8",
        )
        lines = [step_line(s) for s in load_spec(spec).steps[1:]]
        assert lines == [
            "lookup_order where order_id equals A-1001",
            "no call to issue_refund",
            "no call to create_booking where passenger.name equals Mallory",
            "reply contains not eligible",
        ]
        assert step_line(None) == "strict: true"
