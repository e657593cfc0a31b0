"""The agent's API key stays out of everything flowproof-run writes or prints, end to end:
flowproof-run -> real mitmdump -> the booking agent on the openai SDK -> the fake model."""

from __future__ import annotations

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
