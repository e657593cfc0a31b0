"""A newcomer's path with their own agent, as README.md tells it: `flowproof init`, record
once (against the fake model, standing in for the provider), then a green offline replay."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from flowproof.testing import FakeModelServer

from .conftest import BIN, EXAMPLES, Flowproof, upstream_args


def test_init_record_replay(tmp_path: Path, flowproof: Flowproof, fake_model: Callable[..., FakeModelServer]) -> None:
    project = tmp_path / "my-project"
    project.mkdir()
    shutil.copy(EXAMPLES / "booking_agent.py", project / "booking_agent.py")
    made = subprocess.run(
        [str(BIN / "flowproof"), "init", "booking_agent.py", "--prompt", "Book me a flight to Nairobi tomorrow"],
        cwd=project, env=flowproof.env(), capture_output=True, text=True, timeout=60,
    )
    assert made.returncode == 0, made.stderr
    spec = project / "booking_agent.flow.yaml"
    assert "imports openai (api.openai.com)" in made.stdout
    # What the user does next: turn the commented example into a check that must hold.
    text = spec.read_text()
    spec.write_text(text.replace("  # - assert_tool_call: search_flights where destination contains NBO",
                                 "  - assert_tool_call: search_flights where destination contains NBO"))

    server = fake_model(EXAMPLES / "fake_model" / "booking.json")
    recorded = flowproof.run(spec.name, "--record", *upstream_args(server), cwd=project, keys=True)
    assert recorded.code == 0, recorded.output
    assert (project / "booking_agent.cassette.json").is_file()
    assert "A new cassette: read it" in recorded.stdout
    server.stop()

    replayed = flowproof.run(spec.name, "--json", cwd=project)
    assert replayed.code == 0, replayed.output
    flow = replayed.report()["flows"][0]
    assert flow["tool_calls"] == ["search_flights", "create_booking"] and "booked" in flow["reply"]
