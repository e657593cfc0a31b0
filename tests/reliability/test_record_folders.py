"""Issue 19 items 1 and 2: `--record` into a folder it cannot write, and a symlink at the
lock path. The flow that cannot record fails alone (exit 2, naming the folder); the other
flows record and every report is written whole; a link is never followed."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from flowproof.testing import FakeModelServer
from tests.e2e.conftest import Flowproof, upstream_args

from .test_cassettes import booking_replies, booking_spec

Fake = Callable[..., FakeModelServer]


def run_two(examples: Path, flowproof: Flowproof, fake_model: Fake, bad_cassette: str) -> tuple:
    """`--record -j 2` of a flow recording into ``bad_cassette`` and an ordinary one, with
    every report asked for."""
    bad = booking_spec(examples, "bad", bad_cassette)
    good = booking_spec(examples, "good", "good.cassette.json")
    server = fake_model(booking_replies(examples))
    junit, html = examples / "report.xml", examples / "report.html"
    ran = flowproof.run(bad, good, "--record", "-j", "2", "--json", "--junit", junit, "--html", html,
                        *upstream_args(server), keys=True, timeout=120)
    return ran, junit, html


class TestUnwritableCassetteFolder:
    def test_a_missing_folder_fails_that_flow_only_and_every_report_is_written(
        self, examples: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        ran, junit, html = run_two(examples, flowproof, fake_model, "nowhere/bad.cassette.json")
        assert ran.code == 2, ran.output
        assert "Traceback" not in ran.output
        flows = {Path(f["spec"]).stem.split(".")[0]: f for f in ran.report()["flows"]}
        assert flows["good"]["exit_code"] == 0, flows["good"]
        assert flows["bad"]["exit_code"] == 2
        error = flows["bad"]["error"]
        assert str(examples / "nowhere") in error and "does not exist" in error, error
        assert (examples / "good.cassette.json").exists()
        assert not (examples / "nowhere").exists()
        assert junit.read_text().count('<testcase') == 2 and 'nowhere' in junit.read_text()
        assert "does not exist" in html.read_text()

    @pytest.mark.skipif(os.geteuid() == 0, reason="file permissions do not bind root")
    def test_a_read_only_folder_fails_that_flow_only(
        self, examples: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        locked = examples / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        try:
            ran, junit, _html = run_two(examples, flowproof, fake_model, "locked/bad.cassette.json")
        finally:
            locked.chmod(0o755)
        assert ran.code == 2, ran.output
        flows = {Path(f["spec"]).stem.split(".")[0]: f for f in ran.report()["flows"]}
        assert flows["good"]["exit_code"] == 0 and (examples / "good.cassette.json").exists()
        assert str(locked) in flows["bad"]["error"] and "not writable" in flows["bad"]["error"]
        assert list(locked.iterdir()) == [] and junit.exists()


class TestSymlinkAtTheLock:
    def test_a_link_at_the_lock_path_is_refused_and_its_target_untouched(
        self, examples: Path, flowproof: Flowproof, fake_model: Fake, tmp_path: Path
    ) -> None:
        target = tmp_path / "precious.txt"
        target.write_bytes(b"do not truncate me\n")
        spec = booking_spec(examples, "linked", "linked.cassette.json")
        link = examples / "linked.cassette.json.lock"
        link.symlink_to(target)
        server = fake_model(booking_replies(examples))
        ran = flowproof.run(spec, "--record", "--json", *upstream_args(server), keys=True)
        assert ran.code == 2, ran.output
        assert target.read_bytes() == b"do not truncate me\n"
        assert link.is_symlink() and os.readlink(link) == str(target)
        error = json.loads(ran.stdout)["flows"][0]["error"]
        assert str(link) in error and "symbolic link" in error, error
        assert server.model_requests == [] and not (examples / "linked.cassette.json").exists()
