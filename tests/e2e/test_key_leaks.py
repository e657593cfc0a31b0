"""The agent's API key stays out of everything flowproof-run writes or prints, end to end:
flowproof-run -> real mitmdump -> the booking agent on the openai SDK -> the fake model."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from flowproof.testing import FakeModelServer

from .conftest import Flowproof, upstream_args

Fake = Callable[..., FakeModelServer]

#: Clearly fake, and distinct from every other key in the suite.
KEY = "sk-test-leak-4711"


class TestApiKeyNeverWritten:
    def test_a_recorded_and_a_rejected_run_never_show_the_key(
        self, examples: Path, flowproof: Flowproof, fake_model: Fake, tmp_path: Path
    ) -> None:
        """The agent's OPENAI_API_KEY reaches the model but no cassette, recording, report, JUnit file or output."""
        spec, script = examples / "booking.flow.yaml", examples / "fake_model" / "booking.json"
        (examples / "booking.cassette.json").unlink()
        server = fake_model(script)
        recorded = flowproof.run(spec, *upstream_args(server), "--record", "--json", "-v",
                                 keys=True, OPENAI_API_KEY=KEY)
        assert recorded.code == 0, recorded.output
        # The key really was in play: the agent sent it through the proxy to the model.
        assert {r.headers["authorization"] for r in server.model_requests} == {f"Bearer {KEY}"}
        report = recorded.report()
        assert report["flows"][0]["turns"] == 3

        # A second record whose assertion fails: the recording is kept as the rejected file.
        failing = spec.with_name("failing.flow.yaml")
        failing.write_text(spec.read_text(encoding="utf-8").replace(
            "reply contains booked", "reply contains cancelled"), encoding="utf-8")
        fresh = fake_model(script)
        junit = tmp_path / "junit.xml"
        rejected = flowproof.run(failing, *upstream_args(fresh), "--record", "-v", "--junit", junit,
                                 "--cassette", examples / "failing.cassette.json", keys=True, OPENAI_API_KEY=KEY)
        assert rejected.code == 1, rejected.output
        assert (examples / "failing.cassette.rejected.json").is_file()

        # Every JSON file the runs left (cassette, rejected or staging recordings, fake-model scripts).
        written = sorted(examples.rglob("*.json"))
        assert {p.name for p in written} >= {"booking.cassette.json", "failing.cassette.rejected.json"}
        for path in [*written, junit]:
            assert KEY not in path.read_text(encoding="utf-8"), path.name
        for ran in (recorded, rejected):
            assert KEY not in ran.stdout and KEY not in ran.stderr


class TestAgentPrintsItsKey:
    def test_no_output_shows_the_key_the_agent_printed(
        self, examples: Path, flowproof: Flowproof, tmp_path: Path
    ) -> None:
        """An agent that prints its OPENAI_API_KEY and fails: the text report, --json, --junit,
        --html and --markdown show it masked, as the log lines do."""
        agent = examples / "leaky_agent.py"
        agent.write_text(
            "import os, sys\n"
            "print('using key', os.environ['OPENAI_API_KEY'])\n"
            "print('401 for', os.environ['OPENAI_API_KEY'], file=sys.stderr)\n"
            "sys.exit(3)\n",
            encoding="utf-8",
        )
        spec = examples / "leaky.flow.yaml"
        spec.write_text(
            f"name: leaky\nagent:\n  command: {shlex.quote(sys.executable)} leaky_agent.py\n"
            "cassette: booking.cassette.json\nsteps:\n  - prompt: Book me a flight\n",
            encoding="utf-8",
        )
        junit, html, markdown = tmp_path / "junit.xml", tmp_path / "report.html", tmp_path / "summary.md"
        text = flowproof.run(spec, "-v", OPENAI_API_KEY=KEY)
        as_json = flowproof.run(spec, "--json", "--junit", junit, "--html", html, "--markdown", markdown,
                                OPENAI_API_KEY=KEY)
        assert text.code == as_json.code == 5, text.output
        assert "using key [redacted]" in text.stdout
        assert as_json.report()["flows"][0]["agent"]["stdout"].strip() == "using key [redacted]"
        for shown in (text.stdout, text.stderr, as_json.stdout, as_json.stderr,
                      junit.read_text(encoding="utf-8"), html.read_text(encoding="utf-8"),
                      markdown.read_text(encoding="utf-8")):
            assert KEY not in shown
