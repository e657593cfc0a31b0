"""flowproof-run as a real subprocess: SIGINT/SIGTERM mid-record stop everything and record nothing;
every user error is one message with no traceback."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import (
    BIN,
    FLOWPROOF_RUN,
    Flowproof,
    alive,
    fingerprint,
    kill_group,
    processes_inside,
    write_spec,
)

FLOWPROOF = str(BIN / "flowproof")


def wait_for_pid(path: Path, process: subprocess.Popen[bytes], timeout: float = 30.0) -> int:
    """The pid an agent wrote to ``path`` (the proxy is up and the agent runs by then)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        assert process.poll() is None, "flowproof-run exited before the agent started"
        time.sleep(0.05)
    raise AssertionError(f"the agent did not start within {timeout}s")


class TestInterruptMidRecord:
    @pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
    def test_signal_stops_proxy_and_agent_and_records_nothing(
        self, examples: Path, flowproof: Flowproof, sig: signal.Signals, code: int
    ) -> None:
        """A signal to flowproof-run mid-record stops its proxy and agent, exits 128+N and leaves no recording."""
        pidfile = examples / "agent.pid"
        spec = write_spec(examples / "slow.flow.yaml", "\n".join([
            "name: slow agent",
            "agent:",
            f"  command: echo $$ > {pidfile}; exec sleep 60",
            "  timeout: 60",
            "cassette: booking.cassette.json",
            "steps:",
            "  - prompt: Book me a flight",
            "",
        ]))
        cassette = examples / "booking.cassette.json"
        before = fingerprint(cassette)
        process = subprocess.Popen(
            [FLOWPROOF_RUN, str(spec), "--record"], env=flowproof.env(keys=True),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )
        try:
            agent = wait_for_pid(pidfile, process)
            time.sleep(0.3)
            started = time.monotonic()
            process.send_signal(sig)
            out, err = process.communicate(timeout=30)
        finally:
            kill_group(process.pid)
            process.wait(timeout=10)
            # Only if the runner failed to: its proxy and agent run in their own sessions.
            time.sleep(0.5)
            for line in processes_inside(examples):
                kill_group(int(line.split(":", 1)[0]))
        assert process.returncode == code, out.decode() + err.decode()
        assert time.monotonic() - started < 15
        assert "interrupted" in out.decode() and "Traceback" not in err.decode()
        assert not alive(agent)
        assert fingerprint(cassette) == before
        assert not list(examples.glob("*.recording.json")) and not list(examples.glob("*.rejected.json"))


def _spec(tmp: Path) -> Path:
    return write_spec(tmp / "ok.flow.yaml", 'name: ok\nagent:\n  command: "true"\nsteps:\n  - prompt: hi\n')


#: (name, builder of (argv, extra env), expected exit code)
CASES: list[tuple[str, Callable[[Path], tuple[list[str], dict[str, str]]], int]] = [
    ("missing spec", lambda t: ([FLOWPROOF_RUN, str(t / "nope.flow.yaml")], {}), 2),
    ("binary spec", lambda t: (
        [FLOWPROOF_RUN, str((t / "bin.flow.yaml", (t / "bin.flow.yaml").write_bytes(b"\xff\xfe\x00"))[0])], {}), 2),
    ("corrupt cassette", lambda t: (
        [FLOWPROOF_RUN, str(_spec(t)), "--cassette",
         str((t / "c.json", (t / "c.json").write_text("{bad"))[0])], {}), 2),
    ("missing agent.cwd", lambda t: ([FLOWPROOF_RUN, str(write_spec(
        t / "cwd.flow.yaml", 'name: cwd\nagent:\n  command: "true"\n  cwd: nowhere\nsteps:\n  - prompt: hi\n')),
        "--record"], {}), 5),
    ("junit under a file", lambda t: ([FLOWPROOF_RUN, str(_spec(t)), "--junit", str(_spec(t) / "j.xml")], {}), 2),
    ("bad shard", lambda t: ([FLOWPROOF_RUN, str(_spec(t)), "--shard", "3/2"], {}), 2),
    ("bad upstream", lambda t: ([FLOWPROOF_RUN, str(_spec(t)), "--upstream", "nonsense"], {}), 2),
    ("unwritable CA dir", lambda t: (
        [FLOWPROOF_RUN, str(_spec(t))], {"FLOWPROOF_CA_DIR": str(_spec(t) / "ca")}), 2),
    ("env with unwritable CA dir", lambda t: ([FLOWPROOF, "env"], {"FLOWPROOF_CA_DIR": str(_spec(t) / "ca")}), 2),
    ("diff of a non-cassette", lambda t: (
        [FLOWPROOF, "diff", *[str((t / "l.json", (t / "l.json").write_text("[1]"))[0])] * 2], {}), 2),
    ("show of a missing file", lambda t: ([FLOWPROOF, "show", str(t / "nope.json")], {}), 2),
    ("check of a missing spec", lambda t: ([FLOWPROOF, "check", str(t / "nope.flow.yaml")], {}), 2),
]


class TestUserErrorsAsSubprocesses:
    @pytest.mark.parametrize(("name", "build", "code"), CASES, ids=[c[0] for c in CASES])
    def test_one_message_no_traceback(
        self, tmp_path: Path, flowproof: Flowproof, name: str,
        build: Callable[[Path], tuple[list[str], dict[str, str]]], code: int,
    ) -> None:
        """Each user error exits with its documented code and prints a short message without a traceback."""
        argv, extra = build(tmp_path)
        done = subprocess.run(argv, env=flowproof.env(**extra), cwd=tmp_path, capture_output=True,
                              timeout=60, stdin=subprocess.DEVNULL, check=False)
        output = (done.stdout + done.stderr).decode("utf-8", "replace")
        assert done.returncode == code, output
        assert "Traceback" not in output and output.strip()
        assert len(output.strip().splitlines()) <= 8, output

