"""Case 1: a `matches` clause that backtracks catastrophically neither hangs the run nor
ignores signals; it fails as an assertion naming the clause (file:line)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from flowproof.testing import FakeModelServer, Reply, ScriptedCall
from tests.e2e.conftest import Flowproof, upstream_args, write_spec

from .helpers import cleanup, start_run

Fake = Callable[..., FakeModelServer]
#: The argument of the issue: 30 characters that `(a|aa)+$` cannot match, exponentially.
HOSTILE_VALUE = "a" * 30 + "!"


def hostile_replies() -> list[Reply]:
    return [
        Reply(calls=(ScriptedCall.make("search_flights", {"destination": HOSTILE_VALUE,
                                                           "date": "2025-06-02"}),)),
        Reply(calls=(ScriptedCall.make("create_booking", {"flight": {"id": "KQ311"}}),)),
        Reply(content="You're booked on KQ311. Your booking reference is B-1042."),
    ]


def hostile_spec(examples: Path, clauses: int) -> Path:
    where = " and ".join(["destination matches (a|aa)+$"] * clauses)
    return write_spec(examples / "hostile.flow.yaml", "\n".join([
        "name: hostile regex",
        "agent:",
        "  command: python booking_agent.py",
        "  timeout: 60",
        "cassette: hostile.cassette.json",
        "steps:",
        "  - prompt: Book me a flight to Nairobi tomorrow",
        f"  - assert_tool_call: search_flights where {where}",
        "  - assert: reply contains booked",
        "",
    ]))


class TestBoundedMatching:
    def test_catastrophic_pattern_fails_the_clause_quickly(
        self, examples: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        """`(a|aa)+$` against 30 `a` and `!`: exit 1 within seconds, the clause named, nothing kept."""
        spec = hostile_spec(examples, 1)
        server = fake_model(hostile_replies())
        started = time.monotonic()
        ran = flowproof.run(spec, "--record", *upstream_args(server), keys=True, timeout=90)
        assert ran.code == 1, ran.output
        assert time.monotonic() - started < 30
        assert "hostile.flow.yaml:8:" in ran.output and "gave up" in ran.output, ran.output
        assert "backtracks catastrophically" in ran.output
        assert not (examples / "hostile.cassette.json").exists()

    @pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
    def test_signal_during_assertions_wins_within_a_second(
        self, examples: Path, flowproof: Flowproof, fake_model: Fake, sig: signal.Signals, code: int
    ) -> None:
        """A signal while hostile clauses are being evaluated: exit 128+N within a second, nothing recorded."""
        spec = hostile_spec(examples, 40)
        server = fake_model(hostile_replies())
        process = start_run(flowproof, spec, "--record", *upstream_args(server))
        try:
            deadline = time.monotonic() + 60
            while server.remaining and time.monotonic() < deadline:
                assert process.poll() is None, process.communicate()
                time.sleep(0.02)
            assert server.remaining == 0, "the agent did not make its model calls"
            # The agent has its reply; in a moment the runner is stopped and checking.
            time.sleep(1.5)
            assert process.poll() is None, "the run finished before the signal (clauses too fast?)"
            sent = time.monotonic()
            process.send_signal(sig)
            out, err = process.communicate(timeout=30)
            took = time.monotonic() - sent
        finally:
            cleanup(process, examples)
        assert process.returncode == code, out.decode() + err.decode()
        assert took < 1.5, f"the run took {took:.2f}s to stop after the signal"
        assert "interrupted" in (out + err).decode() and "Traceback" not in err.decode()
        assert not (examples / "hostile.cassette.json").exists()
        assert not list(examples.glob("hostile*.json"))
