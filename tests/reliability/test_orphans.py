"""Case 3: SIGKILL of the runner mid-record leaves no proxy running, its scratch folders
are swept by the next run, and a stale ``*.recording.json`` is never used as a cassette."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from flowproof.testing import FakeModelServer, Reply, ScriptedCall
from tests.e2e.conftest import Flowproof, kill_group, upstream_args, write_spec

from .helpers import children, cleanup, pid_alive, start_run, wait_until

Fake = Callable[..., FakeModelServer]


def slow_replies() -> list[Reply]:
    # The first reply stalls, so the kill lands while the proxy is mid-record.
    return [
        Reply(calls=(ScriptedCall.make("search_flights", {"destination": "NBO"}),), first_chunk_delay=20),
        Reply(content="booked"),
    ]


def orphan_spec(examples: Path) -> Path:
    return write_spec(examples / "orphan.flow.yaml", "\n".join([
        "name: orphan",
        "agent:",
        "  command: python booking_agent.py",
        "  timeout: 60",
        "cassette: orphan.cassette.json",
        "steps:",
        "  - prompt: Book me a flight to Nairobi tomorrow",
        "",
    ]))


class TestSigkillOfTheRunner:
    def test_proxy_dies_with_the_runner_and_leftovers_are_swept(
        self, examples: Path, flowproof: Flowproof, fake_model: Fake, tmp_path: Path
    ) -> None:
        """kill -9 of flowproof-run: mitmdump is gone within a second, writes nothing later,
        and the next run removes the dead run's scratch folders."""
        scratch_root = tmp_path / "tmp"
        scratch_root.mkdir()
        spec = orphan_spec(examples)
        server = fake_model(slow_replies())
        process = start_run(flowproof, spec, "--record", *upstream_args(server), TMPDIR=str(scratch_root))
        agents: list[int] = []
        try:
            wait_until(lambda: bool(server.model_requests), 30, "the agent's first model call")
            kids = children(process.pid)
            proxies = [pid for pid, cmd in kids if "mitmdump" in cmd]
            agents = [pid for pid, cmd in kids if "mitmdump" not in cmd]
            assert len(proxies) == 1, kids
            assert sorted(p.name.split("-")[1] for p in scratch_root.iterdir()) == ["proxy", "run"]
            process.kill()
            process.wait(timeout=10)
            took = wait_until(lambda: not pid_alive(proxies[0]), 5, "the proxy's death")
            assert took < 1.0, f"the proxy outlived the runner by {took:.2f}s"
            time.sleep(1.0)
            # A proxy that shut down cleanly after the runner would have written this.
            assert not list(examples.glob("orphan*.json"))
        finally:
            for pid in agents:
                kill_group(pid)
            cleanup(process, examples)
        left = list(scratch_root.iterdir())
        assert left, "the killed runner's scratch folders were expected to remain until the next run"
        # The next run (any run that starts a proxy) sweeps the dead runner's folders.
        shutil.copy(examples / "booking.cassette.json", examples / "orphan.cassette.json")
        replay = flowproof.run(spec, TMPDIR=str(scratch_root))
        assert replay.code in (0, 1, 3), replay.output
        assert not any(p.exists() for p in left), [p.name for p in left if p.exists()]


class TestStaleRecording:
    def test_a_stale_recording_is_not_a_cassette(self, examples: Path, flowproof: Flowproof) -> None:
        """With only `x.cassette.recording.json` beside the spec, replay says the cassette is missing."""
        spec = orphan_spec(examples)
        shutil.copy(examples / "booking.cassette.json", examples / "orphan.cassette.recording.json")
        ran = flowproof.run(spec)
        assert ran.code == 2, ran.output
        assert "orphan.cassette.json" in ran.output and "--record" in ran.output

    def test_a_stale_recording_is_never_named_as_the_cassette(self, examples: Path, flowproof: Flowproof) -> None:
        """`--cassette x.recording.json` is refused: an unfinished recording, not a cassette."""
        spec = orphan_spec(examples)
        stale = examples / "orphan.cassette.recording.json"
        shutil.copy(examples / "booking.cassette.json", stale)
        ran = flowproof.run(spec, "--cassette", stale)
        assert ran.code == 2 and "unfinished recording" in ran.output, ran.output
