"""Issue 19 item 9: a spec or a cassette that is a FIFO or ``/dev/zero``. Each is refused at
once, exit 2 naming the file: a FIFO never hangs `check`, a run or `show`, and a device that
never ends is never read into memory.

Every command runs with its address space capped (RLIMIT_AS), so a reader that does slurp
``/dev/zero`` fails fast with a MemoryError instead of starving the machine."""

from __future__ import annotations

import os
import resource
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import FLOWPROOF_RUN, Flowproof

from .helpers import FLOWPROOF

#: Ample for the runner, and far below what reading /dev/zero would take.
_ADDRESS_SPACE = 2 << 30
#: Refusing takes moments; a FIFO read on the old code waited for a writer forever.
_PROMPT = 20


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (_ADDRESS_SPACE, _ADDRESS_SPACE))


def run(flowproof: Flowproof, *command: str | Path) -> tuple[int, str]:
    try:
        done = subprocess.run([*map(str, command)], env=flowproof.env(), capture_output=True,
                              timeout=_PROMPT, check=False, preexec_fn=_capped, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{command} still ran after {_PROMPT}s (it waits on the file)")
    return done.returncode, (done.stdout + done.stderr).decode("utf-8", "replace")


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.flow.yaml"
    os.mkfifo(path)
    return path


class TestSpecThatIsNotAFile:
    def test_check_refuses_a_fifo_at_once(self, flowproof: Flowproof, fifo: Path) -> None:
        code, output = run(flowproof, FLOWPROOF, "check", fifo)
        assert code == 2, output
        assert f"{fifo}:1:1: the spec path is a FIFO (named pipe), not a regular file" in output
        assert "Traceback" not in output

    def test_check_and_run_refuse_dev_zero_without_reading_it(self, flowproof: Flowproof) -> None:
        for command in ((FLOWPROOF, "check", "/dev/zero"), (FLOWPROOF_RUN, "/dev/zero")):
            code, output = run(flowproof, *command)
            assert code == 2, output
            assert "/dev/zero:1:1: the spec path is a character device" in output
            assert "MemoryError" not in output and "Traceback" not in output

    def test_run_refuses_a_fifo_spec(self, flowproof: Flowproof, fifo: Path) -> None:
        code, output = run(flowproof, FLOWPROOF_RUN, fifo)
        assert code == 2 and "is a FIFO (named pipe)" in output, output


class TestCassetteThatIsNotAFile:
    def test_replay_refuses_a_fifo_cassette_before_anything_starts(
        self, examples: Path, flowproof: Flowproof
    ) -> None:
        cassette = examples / "booking.cassette.json"
        cassette.unlink()
        os.mkfifo(cassette)
        code, output = run(flowproof, FLOWPROOF_RUN, examples / "booking.flow.yaml")
        assert code == 2, output
        assert f"{cassette}: is a FIFO (named pipe), not a regular file" in output

    def test_replay_show_and_diff_refuse_dev_zero(self, examples: Path, flowproof: Flowproof) -> None:
        cassette = examples / "booking.cassette.json"
        cassette.unlink()
        cassette.symlink_to("/dev/zero")
        for command in ((FLOWPROOF_RUN, examples / "booking.flow.yaml"), (FLOWPROOF, "show", cassette),
                        (FLOWPROOF, "diff", cassette, cassette)):
            code, output = run(flowproof, *command)
            assert code == 2, (command, output)
            assert "is a character device, not a regular file" in output, (command, output)
            assert "MemoryError" not in output and "Traceback" not in output
