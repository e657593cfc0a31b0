"""The bundled examples: they replay offline with no key, and their cassettes are flowproof's
own recordings (re-recording against the fake model gives the same bytes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import EXAMPLES, REPO, Flowproof, fingerprint

EXAMPLE_NAMES = sorted(p.stem for p in (EXAMPLES / "fake_model").glob("*.json"))


class TestBundledExamplesReplay:
    def test_booking_replays_from_the_repo_root_with_no_key(self, flowproof: Flowproof) -> None:
        """`flowproof-run example_specs/booking.flow.yaml` (what ./dev example runs) passes from the repo root."""
        before = fingerprint(EXAMPLES / "booking.cassette.json")
        ran = flowproof.run("example_specs/booking.flow.yaml", cwd=REPO)
        assert ran.code == 0, ran.failure
        assert "1 of 1 flow(s) passed" in ran.stdout
        assert fingerprint(EXAMPLES / "booking.cassette.json") == before

    def test_booking_replays_from_the_example_folder(self, flowproof: Flowproof) -> None:
        """The same spec passes when run from its own folder, so `python booking_agent.py` resolves there too."""
        ran = flowproof.run("booking.flow.yaml", "--json", cwd=EXAMPLES)
        assert ran.code == 0, ran.failure
        flow = ran.report()["flows"][0]
        assert flow["tool_calls"] == ["search_flights", "create_booking"]
        assert "booked" in flow["reply"]

    def test_refund_guard_replays_and_proves_no_refund(self, flowproof: Flowproof) -> None:
        """The Anthropic guard flow replays offline: the order was looked up and no refund was asked for."""
        ran = flowproof.run(EXAMPLES / "refund_guard.flow.yaml", "--json", cwd=REPO)
        assert ran.code == 0, ran.failure
        flow = ran.report()["flows"][0]
        assert flow["tool_calls"] == ["lookup_order"]
        assert "not eligible" in flow["reply"]

    def test_plan_mode_guard_replays_with_no_mcp_server(self, flowproof: Flowproof) -> None:
        """The MCP guard flow replays offline with no server and no url set; its guard shows an attempt."""
        ran = flowproof.run(EXAMPLES / "plan_mode_guard.flow.yaml", "--json", cwd=REPO)
        assert ran.code == 0, ran.failure
        flow = ran.report()["flows"][0]
        assert flow["tool_calls"] == ["list_rows (mcp)"]
        [guard] = flow["guards"]
        assert (guard["asked"], guard["called"], guard["warning"]) == (1, 0, None)

    @pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="flowproof is not running in a virtualenv")
    def test_python_in_the_command_is_flowproofs_interpreter(self, tmp_path: Path, flowproof: Flowproof) -> None:
        """`python booking_agent.py` runs under flowproof's virtualenv even when another python is first on PATH."""
        fake_bin = tmp_path / "bin"
        fake_bin.mkdir()
        (fake_bin / "python").write_text("#!/bin/sh\necho 'the wrong python' >&2\nexit 42\n")
        (fake_bin / "python").chmod(0o755)
        ran = flowproof.run("booking.flow.yaml", cwd=EXAMPLES, PATH=f"{fake_bin}{os.pathsep}{os.environ['PATH']}")
        assert ran.code == 0, ran.failure

    @pytest.mark.parametrize("name", EXAMPLE_NAMES)
    def test_committed_cassettes_hold_no_key(self, name: str) -> None:
        """A committed example cassette contains neither an API key nor a machine path."""
        text = (EXAMPLES / f"{name}.cassette.json").read_text(encoding="utf-8")
        for secret in ("sk-", "Bearer", "authorization", "x-api-key", str(REPO)):
            assert secret not in text


class TestExamplesAreFlowproofRecordings:
    @pytest.mark.parametrize("name", EXAMPLE_NAMES)
    def test_rerecording_gives_the_committed_bytes(self, name: str, examples: Path, flowproof: Flowproof) -> None:
        """record_examples.py re-records an example into a copy byte-identical to the committed cassette."""
        cassette = examples / f"{name}.cassette.json"
        cassette.unlink()
        done = subprocess.run(
            [sys.executable, str(examples / "record_examples.py"), "--dir", str(examples), "--quiet", name],
            env=flowproof.env(), capture_output=True, timeout=60, check=False,
            start_new_session=True,
        )
        assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
        assert cassette.read_bytes() == (EXAMPLES / f"{name}.cassette.json").read_bytes()


def test_ci_runs_in_a_virtualenv() -> None:
    """The interpreter test above skips outside a virtualenv, where the behaviour it checks does
    not apply; CI runs through ./dev, which always makes .venv, so a skip there is a broken setup."""
    if not os.environ.get("CI"):
        return
    assert sys.prefix != sys.base_prefix, "CI must run the tests in a virtualenv (./dev test)"
