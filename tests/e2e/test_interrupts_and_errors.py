"""flowproof-run as a real subprocess: SIGINT/SIGTERM mid-record stop everything and record nothing;
every user error is one message with no traceback."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from flowproof.testing import FakeModelServer

from .conftest import (
    BIN,
    FLOWPROOF_RUN,
    Flowproof,
    alive,
    fingerprint,
    kill_group,
    processes_inside,
    upstream_args,
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


def wait_for_change(path: Path, before: tuple[bytes, int], process: subprocess.Popen[bytes],
                    timeout: float = 60.0) -> None:
    """Until ``path`` is no longer ``before`` (a flow kept its recording as the cassette)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and fingerprint(path) != before:
            return
        assert process.poll() is None, "flowproof-run exited before the cassette was written"
        time.sleep(0.05)
    raise AssertionError(f"{path} was not written within {timeout}s")


class TestInterruptAfterAFlowKeptItsCassette:
    def test_the_last_lines_list_the_cassette_kept_and_the_flow_not_recorded(
        self, examples: Path, flowproof: Flowproof, fake_model: Callable[..., FakeModelServer]
    ) -> None:
        """`a b -j 2 --record`, SIGINT once a has replaced its cassette and b's agent runs: the
        run exits 130 and its last lines name a's cassette as kept and b as not recorded, instead
        of saying nothing was recorded."""
        booking, cassette = examples / "booking.flow.yaml", examples / "booking.cassette.json"
        pidfile = examples / "agent.pid"
        slow = write_spec(examples / "slow.flow.yaml", "\n".join([
            "name: slow agent",
            "agent:",
            f"  command: echo $$ > {pidfile}; exec sleep 60",
            "  timeout: 60",
            "cassette: slow.cassette.json",
            "steps:",
            "  - prompt: Book me a flight",
            "",
        ]))
        before = fingerprint(cassette)
        server = fake_model(examples / "fake_model" / "booking.json")
        process = subprocess.Popen(
            [FLOWPROOF_RUN, str(booking), str(slow), "-j", "2", "--record", *upstream_args(server)],
            env=flowproof.env(keys=True), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True,
        )
        try:
            agent = wait_for_pid(pidfile, process)
            wait_for_change(cassette, before, process)
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=30)
        finally:
            kill_group(process.pid)
            process.wait(timeout=10)
            for line in processes_inside(examples):
                kill_group(int(line.split(":", 1)[0]))
        text = out.decode()
        assert process.returncode == 130, text + err.decode()
        assert "Traceback" not in err.decode()
        assert text.rstrip().splitlines()[-4:] == [
            "flowproof-run was interrupted; flows that finished before the signal kept their recordings:",
            f"  kept: {cassette} (cassette written, recorded by {booking})",
            f"  not recorded: {slow} (interrupted; its cassette is unchanged)",
            "Review the kept cassettes (flowproof show CASSETTE), then record the other flows again.",
        ]
        assert "nothing was recorded or checked" not in text
        assert not alive(agent)
        assert not (examples / "slow.cassette.json").exists()
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

