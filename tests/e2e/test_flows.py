"""Record, replay, divergence, rejected recordings, agent failures and compare, end to end:
flowproof-run -> real mitmdump -> the booking agent on the openai SDK -> the fake model."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from flowproof.testing import FakeModelServer, Reply, load_script

from .conftest import AGENTS, Flowproof, alive, fingerprint, upstream_args, write_spec

Fake = Callable[..., FakeModelServer]


def booking(examples: Path) -> tuple[Path, Path, Path]:
    """(spec, cassette, fake-model script) of the booking example copy."""
    return (examples / "booking.flow.yaml", examples / "booking.cassette.json",
            examples / "fake_model" / "booking.json")


def agent_spec(examples: Path, agent: str, *, timeout: float = 30, env: dict[str, str] | None = None) -> Path:
    """A spec running one of tests/e2e/agents against the booking cassette copy."""
    lines = [
        f"name: {agent} fails",
        "agent:",
        f"  command: {shlex.quote(sys.executable)} {shlex.quote(str(AGENTS / agent))}",
        f"  timeout: {timeout}",
    ]
    if env:
        lines.append("  env:")
        lines += [f"    {k}: {json.dumps(v)}" for k, v in env.items()]
    lines += [
        "cassette: booking.cassette.json",
        "steps:",
        "  - prompt: Book me a flight to Nairobi tomorrow",
        "  - assert: reply contains booked",
    ]
    return write_spec(examples / f"{agent}.flow.yaml", "\n".join(lines) + "\n")


class TestRecordThenReplay:
    def test_record_then_replay_with_the_model_server_stopped(
        self, examples: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        """A flow recorded against the fake model replays and passes after the server is gone."""
        spec, cassette, script = booking(examples)
        cassette.unlink()
        server = fake_model(script)
        recorded = flowproof.run(spec, *upstream_args(server), "--record", keys=True)
        assert recorded.code == 0, recorded.output
        assert len(server.model_requests) == 3 and server.remaining == 0
        # The agent talked to https://api.openai.com; only the proxy knew about the fake server.
        assert all(r.headers["host"] != "api.openai.com" for r in server.model_requests)
        assert not cassette.with_name("booking.cassette.recording.json").exists()
        url = server.url
        server.stop()

        replayed = flowproof.run(spec, "--json", FLOWPROOF_UPSTREAM=f"api.openai.com={url}")
        assert replayed.code == 0, replayed.output
        flow = replayed.report()["flows"][0]
        assert (flow["turns"], flow["tool_calls"]) == (3, ["search_flights", "create_booking"])
        assert [s["passed"] for s in flow["steps"]] == [True, True, True]


    def test_replay_without_a_cassette_says_how_to_record(self, examples: Path, flowproof: Flowproof) -> None:
        """Replay with no cassette exits 2 with the exact record command and records nothing."""
        spec, cassette, _ = booking(examples)
        cassette.unlink()
        replayed = flowproof.run("booking.flow.yaml", cwd=examples)
        assert replayed.code == 2, replayed.output
        assert "flowproof-run booking.flow.yaml --record" in replayed.output
        assert "Traceback" not in replayed.output
        assert not cassette.exists()


class TestReplayDivergence:
    def test_an_edited_system_prompt_diverges_and_is_named(self, examples: Path, flowproof: Flowproof) -> None:
        """Editing the agent's system prompt fails replay with exit 3 and names the changed field."""
        agent = examples / "booking_agent.py"
        source = agent.read_text(encoding="utf-8")
        assert "Use search_flights to find flights" in source
        agent.write_text(source.replace("Use search_flights to find flights", "Use search_flights to list flights"))

        ran = flowproof.run(examples / "booking.flow.yaml")
        assert ran.code == 3, ran.output
        assert "replay divergence" in ran.stdout
        assert "messages.0.content" in ran.stdout
        assert "to find flights" in ran.stdout and "to list flights" in ran.stdout

    def test_a_changed_tool_mock_diverges(self, examples: Path, flowproof: Flowproof) -> None:
        """Changing what the spec tells the model create_booking returned fails replay with exit 3."""
        spec = examples / "booking.flow.yaml"
        text = spec.read_text(encoding="utf-8")
        assert "{ booking: B-1042 }" in text
        spec.write_text(text.replace("{ booking: B-1042 }", "{ booking: B-2077 }"), encoding="utf-8")

        ran = flowproof.run(spec, "--json")
        assert ran.code == 3, ran.output
        flow = ran.report()["flows"][0]
        assert len(flow["divergences"]) == 1
        divergence = flow["divergences"][0]
        assert "B-1042" in divergence and "B-2077" in divergence
        assert "messages.5.content" in divergence  # the create_booking tool message


class TestRecordingRejected:
    def test_a_failing_assertion_mints_no_cassette(
        self, examples: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        """An assertion failing at record time exits 1, leaves the old cassette as it was and keeps the rejected recording."""  # noqa: E501
        spec, cassette, script = booking(examples)
        spec.write_text(spec.read_text(encoding="utf-8").replace(
            "reply contains booked", "reply contains cancelled"), encoding="utf-8")
        before = fingerprint(cassette)
        server = fake_model(script)

        ran = flowproof.run(spec, *upstream_args(server), "--record", keys=True)
        assert ran.code == 1, ran.output
        assert "cancelled" in ran.stdout
        assert fingerprint(cassette) == before
        rejected = cassette.with_name("booking.cassette.rejected.json")
        assert rejected.is_file()
        assert len(json.loads(rejected.read_text(encoding="utf-8"))["turns"]) == 3
        assert not cassette.with_name("booking.cassette.recording.json").exists()


class TestAgentFailures:
    def test_a_hanging_agent_times_out_and_nothing_survives(self, examples: Path, flowproof: Flowproof) -> None:
        """An agent that never answers (and ignores SIGTERM) is stopped at the timeout with exit 5, its child too."""
        pids_file = examples / "hang.pids"
        spec = agent_spec(examples, "hang_agent.py", timeout=3, env={"HANG_PIDS": str(pids_file)})

        ran = flowproof.run(spec, timeout=30)
        assert ran.code == 5, ran.output
        assert "did not finish within 3s" in ran.stdout
        agent_pid, child_pid = map(int, pids_file.read_text().split())
        assert not alive(agent_pid)
        assert not alive(child_pid)

    def test_an_agent_exiting_non_zero_is_reported(self, examples: Path, flowproof: Flowproof) -> None:
        """An agent that exits with code 3 fails the flow with exit 5 and its error line in the report."""
        ran = flowproof.run(agent_spec(examples, "crash_agent.py"))
        assert ran.code == 5, ran.output
        assert "exited with code 3" in ran.stdout
        assert "cannot reach the payments database" in ran.stdout


class TestCompare:
    def test_a_different_live_answer_is_drift_and_the_cassette_is_untouched(
        self, examples: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        """A live model that words the final answer differently gives exit 4 and never writes the cassette."""
        spec, cassette, script = booking(examples)
        replies = list(load_script(script).replies)
        replies[-1] = Reply.text("All booked: KQ311 to Nairobi, reference B-1042.")
        before = fingerprint(cassette)
        server = fake_model(replies)

        ran = flowproof.run(spec, *upstream_args(server), "--compare", "--json", keys=True)
        assert ran.code == 4, ran.output
        flow = ran.report()["flows"][0]
        results = flow["compare"]["results"]
        assert [(r["kind"], r["turn"], r["equal"]) for r in results] == [
            ("paired", 0, True), ("paired", 1, True), ("paired", 2, False),
        ]
        assert results[2]["text"]["status"] == "different"
        assert results[2]["differences"][0]["live"] == "All booked: KQ311 to Nairobi, reference B-1042."
        assert flow["drifts"] == []
        # The live trajectory itself still satisfies the spec: drift is the only failure.
        assert [s["passed"] for s in flow["steps"]] == [True, True, True]
        assert server.remaining == 0
        assert fingerprint(cassette) == before
        assert not list(examples.glob("booking.cassette.*.json"))  # no staging or rejected file either

    def test_the_same_live_answers_compare_equal(
        self, examples: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        """A live model answering as recorded gives exit 0, and the cassette is still not written."""
        spec, cassette, script = booking(examples)
        before = fingerprint(cassette)
        server = fake_model(script)

        ran = flowproof.run(spec, *upstream_args(server), "--compare", keys=True)
        assert ran.code == 0, ran.failure
        assert len(server.model_requests) == 3
        assert fingerprint(cassette) == before
