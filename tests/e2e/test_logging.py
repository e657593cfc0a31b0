"""Logging and progress, end to end: ``-v`` per-call lines, ``--log-json``, no key in any line,
and the live status line on a real terminal (a pty) but not in a pipe."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from flowproof.testing import FakeModelServer

from .conftest import FLOWPROOF_RUN, Flowproof, kill_group, upstream_args

Fake = Callable[..., FakeModelServer]

#: Clearly fake, and distinct from every other key in the suite.
KEY = "sk-test-logs-5517-never-shown"
BOOKING = "Booking assistant books a flight"
REFUND = "Support agent refuses a refund for a non-refundable order"
#: A console per-call line: `HH:MM:SS [info] [flow] model_call provider=… model=… outcome=… turn=N ms=F`.
CALL_LINE = re.compile(
    r"^\d\d:\d\d:\d\d \[info\] (?:\[(?P<flow>[^\]]+)\] )?model_call provider=(?P<provider>\S+) "
    r"model=(?P<model>\S+) outcome=(?P<outcome>\w+) turn=(?P<turn>\d+) ms=(?P<ms>\d+\.\d+)$"
)


def call_lines(stderr: str) -> list[dict[str, str]]:
    return [m.groupdict() for line in stderr.splitlines() if (m := CALL_LINE.match(line))]


def json_lines(stderr: str) -> list[dict[str, object]]:
    """Every stderr line, each of which must be one JSON object."""
    return [json.loads(line) for line in stderr.splitlines() if line.strip()]


class TestPerCallLines:
    def test_v_prints_one_readable_line_per_replayed_call(self, examples: Path, flowproof: Flowproof) -> None:
        """`flowproof-run booking.flow.yaml -v`: three lines, provider, model, matched turn and ms, in order."""
        ran = flowproof.run(examples / "booking.flow.yaml", "-v")
        assert ran.code == 0, ran.failure
        lines = call_lines(ran.stderr)
        assert [(c["provider"], c["model"], c["outcome"], c["turn"]) for c in lines] == [
            ("openai-chat", "gpt-4o-mini", "matched", str(turn)) for turn in range(3)
        ], ran.stderr
        assert all(c["flow"] is None for c in lines)  # one flow: no name in front
        assert all(0 <= float(c["ms"]) < 60_000 for c in lines)
        assert "1 of 1 flow(s) passed" in ran.stdout

    def test_without_v_there_is_no_per_call_line(self, examples: Path, flowproof: Flowproof) -> None:
        ran = flowproof.run(examples / "booking.flow.yaml")
        assert ran.code == 0, ran.failure
        assert "model_call" not in ran.output

    def test_log_json_lines_parse_and_name_their_flow_with_j2(self, examples: Path, flowproof: Flowproof) -> None:
        """`-v --log-json -j 2` over two flows: every stderr line is JSON; each call names its flow."""
        ran = flowproof.run(examples / "booking.flow.yaml", examples / "refund_guard.flow.yaml",
                            "-j", "2", "-v", "--log-json")
        assert ran.code == 0, ran.failure
        calls = [e for e in json_lines(ran.stderr) if e["event"] == "model_call"]
        by_flow: dict[object, list[tuple[object, ...]]] = {}
        for call in calls:
            assert set(call) == {"event", "level", "timestamp", "flow", "provider", "model", "outcome", "turn", "ms"}
            assert call["level"] == "info" and isinstance(call["ms"], float)
            by_flow.setdefault(call["flow"], []).append(
                (call["provider"], call["model"], call["outcome"], call["turn"])
            )
        assert by_flow == {
            BOOKING: [("openai-chat", "gpt-4o-mini", "matched", t) for t in range(3)],
            REFUND: [("anthropic", "claude-haiku-4-5", "matched", t) for t in range(2)],
        }
        # Piped stdout: the report only, no status line drawn in it.
        assert "\r" not in ran.stdout and "\x1b" not in ran.stdout
        assert "2 of 2 flow(s) passed" in ran.stdout

    def test_a_miss_is_a_line_with_provider_model_and_the_closest_turn(
        self, examples: Path, flowproof: Flowproof
    ) -> None:
        """A request no turn matches: `outcome=miss` with the call's provider and model (from the proxy)."""
        spec = examples / "booking.flow.yaml"
        spec.write_text(spec.read_text(encoding="utf-8").replace("to Nairobi", "to Mombasa"), encoding="utf-8")
        ran = flowproof.run(spec, "-v", "--log-json")
        assert ran.code == 3, ran.output
        misses = [e for e in json_lines(ran.stderr) if e.get("outcome") == "miss"]
        assert misses, ran.stderr
        assert (misses[0]["provider"], misses[0]["model"]) == ("openai-chat", "gpt-4o-mini")
        assert isinstance(misses[0]["ms"], float) and "closest" in misses[0]


class TestNoKeyInAnyLogLine:
    def test_the_agents_key_is_in_no_v_or_log_json_line(
        self, examples: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        """The agent's OPENAI_API_KEY reaches the model in its headers and sits in the runner's
        environment, yet no -vv, -v or --log-json line shows it."""
        spec, script = examples / "booking.flow.yaml", examples / "fake_model" / "booking.json"
        cassette = examples / "booking.cassette.json"
        cassette.unlink()
        server = fake_model(script)
        recorded = flowproof.run(spec, *upstream_args(server), "--record", "-vv", "--log-json",
                                 keys=True, OPENAI_API_KEY=KEY)
        assert recorded.code == 0, recorded.output
        assert {r.headers["authorization"] for r in server.model_requests} == {f"Bearer {KEY}"}
        logged = json_lines(recorded.stderr)
        assert [e["outcome"] for e in logged if e["event"] == "model_call"] == ["recorded"] * 3
        assert any(e["event"] == "proxy_event" for e in logged)  # -vv: every event has a line

        replayed = flowproof.run(spec, "-v", OPENAI_API_KEY=KEY)
        assert replayed.code == 0, replayed.output
        assert len(call_lines(replayed.stderr)) == 3
        for ran in (recorded, replayed):
            assert KEY not in ran.stdout and KEY not in ran.stderr


def run_on_pty(flowproof: Flowproof, *args: str | Path, timeout: float = 90.0) -> tuple[int, str, str]:
    """``flowproof-run ARGS`` with stdout on a real terminal (200 columns), stderr piped.

    Returns the exit code, everything the terminal received and stderr.
    """
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    env = flowproof.env(CI="false", TERM="xterm")
    # The terminal's own size must count: an xdist worker sets COLUMNS=80 and LINES=24, which
    # the runner (shutil.get_terminal_size) would read first.
    for name in ("COLUMNS", "LINES"):
        env.pop(name, None)
    process = subprocess.Popen(
        [FLOWPROOF_RUN, *map(str, args)], stdin=subprocess.DEVNULL, stdout=slave,
        stderr=subprocess.PIPE, env=env, start_new_session=True,
    )
    os.close(slave)
    received = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError as e:  # EIO: the last writer closed the terminal
                if e.errno != errno.EIO:
                    raise
                break
            if not chunk:
                break
            received += chunk
        else:
            pytest.fail(f"flowproof-run {args} did not finish within {timeout}s:\n{received.decode()}")
        assert process.stderr is not None
        stderr = process.stderr.read().decode("utf-8", "replace")
        code = process.wait(timeout=10)
    finally:
        kill_group(process.pid)
        os.close(master)
        if process.stderr is not None:
            process.stderr.close()  # left to the collector, it is a ResourceWarning
    return code, received.decode("utf-8", "replace"), stderr


class TestStatusLine:
    def test_a_terminal_gets_a_live_line_wiped_before_the_report(self, examples: Path, flowproof: Flowproof) -> None:
        """On a tty: the flow, its prompt, the model calls and the elapsed time, redrawn in place
        with \\r and wiped before the report, which then reads as usual."""
        code, screen, stderr = run_on_pty(flowproof, examples / "booking.flow.yaml")
        assert code == 0, screen + stderr
        draws = re.findall(r"\r(Booking assistant[^\r\x1b]*)\x1b\[K", screen)
        assert draws, screen
        status = re.compile(
            rf"{BOOKING} · prompt “Book me a flight to Nairobi tomorrow” · \d+ model calls? · \d+\.\ds"
        )
        assert all(status.fullmatch(d) for d in draws), draws
        report = screen.index("1 of 1 flow(s) passed")
        assert screen.rindex("\r\x1b[K") < report  # wiped, then the report
        assert "model call" not in screen[report:]  # and never drawn again
        assert "\r" not in stderr  # the status line is on stdout only

    def test_several_flows_share_one_compact_line(self, examples: Path, flowproof: Flowproof) -> None:
        code, screen, _ = run_on_pty(flowproof, examples / "booking.flow.yaml",
                                     examples / "refund_guard.flow.yaml", "-j", "2")
        assert code == 0, screen
        draws = re.findall(r"\r(\[\d/2 done\][^\r\x1b]*)\x1b\[K", screen)
        assert draws, screen
        # Both flows are running from the first draw on (each proxy alone takes longer than a redraw).
        assert any(BOOKING in d and REFUND in d for d in draws), draws
        assert not [d for d in draws if not re.search(r" \d+ calls? \d+s", d)], draws
        assert screen.rindex("\r\x1b[K") < screen.index("2 of 2 flow(s) passed")

    @pytest.mark.parametrize("flag", ["--json", "-q"])
    def test_json_and_quiet_draw_nothing_even_on_a_terminal(
        self, examples: Path, flowproof: Flowproof, flag: str
    ) -> None:
        code, screen, _ = run_on_pty(flowproof, examples / "booking.flow.yaml", flag)
        assert code == 0, screen
        assert "\x1b[K" not in screen and "model call" not in screen

    def test_ci_draws_nothing_on_a_terminal(self, examples: Path, flowproof: Flowproof, monkeypatch) -> None:
        original = flowproof.env
        monkeypatch.setattr(flowproof, "env", lambda **kw: {**original(**kw), "CI": "true"})
        code, screen, _ = run_on_pty(flowproof, examples / "booking.flow.yaml")
        assert code == 0, screen
        assert "\x1b[K" not in screen and "1 of 1 flow(s) passed" in screen
