"""One warm proxy for many flows, end to end: flowproof-run over several specs starts one
mitmdump, and every flow keeps its own verdict, cassette, recording and event log."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from flowproof.testing import FakeModelServer, Reply, ScriptedCall, load_script
from tests.reliability.helpers import children, cleanup, pid_alive, start_run, wait_until

from .conftest import AGENTS, Flowproof, fingerprint, kill_group, upstream_args, write_spec

Fake = Callable[..., FakeModelServer]


def booking_copies(examples: Path, names: list[str]) -> list[Path]:
    """Copies of the booking flow and its cassette under ``names`` (``NAME.flow.yaml``)."""
    spec, cassette = examples / "booking.flow.yaml", examples / "booking.cassette.json"
    out = []
    for name in names:
        shutil.copy(spec, examples / f"{name}.flow.yaml")
        shutil.copy(cassette, examples / f"{name}.cassette.json")
        out.append(examples / f"{name}.flow.yaml")
    spec.unlink()
    cassette.unlink()
    return out


def run_watching_proxies(flowproof: Flowproof, *args: str | Path, timeout: float = 240,
                         **env: str) -> tuple[int, str, set[int]]:
    """``flowproof-run ARGS`` in the background; (exit code, stdout, every mitmdump pid seen
    among its children while it ran, sampled every 20 ms)."""
    process = start_run(flowproof, *args, **env)
    seen: set[int] = set()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.update(pid for pid, cmd in children(process.pid) if "mitmdump" in cmd)
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        out, err = process.communicate(timeout=timeout)
    finally:
        stop.set()
        watcher.join()
        kill_group(process.pid)
    return process.returncode, out.decode() + err.decode(), seen


def codes(output: str) -> dict[str, int]:
    """Each flow's exit code (by spec stem) from the ``--json`` report on stdout."""
    report = json.loads(output[: output.rindex("}") + 1])
    return {Path(f["spec"]).name.removesuffix(".flow.yaml"): f["exit_code"] for f in report["flows"]}


class TestOneProxy:
    def test_several_flows_start_one_proxy_and_each_passes(
        self, examples: Path, flowproof: Flowproof
    ) -> None:
        """The example folder plus copies (six flows, MCP boundary included), two at a time:
        one mitmdump serves them all, and it is gone when the run ends."""
        names = ["f1", "f2", "f3", "f4"]
        booking_copies(examples, names)
        code, output, proxies = run_watching_proxies(flowproof, examples, "-j", "2", "--json", keys=False)
        assert code == 0, output
        assert codes(output) == dict.fromkeys([*names, "plan_mode_guard", "refund_guard"], 0), output
        assert len(proxies) == 1, proxies
        assert not any(pid_alive(pid) for pid in proxies)

    def test_one_flows_divergence_leaves_the_others_alone(
        self, examples: Path, flowproof: Flowproof
    ) -> None:
        """Three flows at once, the middle one asks something never recorded: it alone diverges."""
        names = ["f1", "f2", "f3"]
        specs = booking_copies(examples, names)
        specs[1].write_text(specs[1].read_text().replace("Nairobi", "Mombasa"))
        code, output, proxies = run_watching_proxies(flowproof, *specs, "-j", "3", "--json", keys=False)
        assert code == 3, output
        assert codes(output) == {"f1": 0, "f2": 3, "f3": 0}, output
        assert len(proxies) == 1, proxies

    def test_a_timed_out_flow_does_not_poison_the_next(
        self, examples: Path, flowproof: Flowproof, tmp_path: Path
    ) -> None:
        """A hanging agent times out (exit 5); the flow after it on the same proxy passes."""
        [good] = booking_copies(examples, ["z_good"])
        hang = write_spec(examples / "a_hang.flow.yaml", "\n".join([
            "name: hangs",
            "agent:",
            f"  command: {shlex.quote(sys.executable)} {shlex.quote(str(AGENTS / 'hang_agent.py'))}",
            "  timeout: 2",
            "cassette: z_good.cassette.json",
            "steps:",
            "  - prompt: Book me a flight to Nairobi tomorrow",
            "",
        ]))
        code, output, proxies = run_watching_proxies(
            flowproof, hang, good, "--json", keys=False, HANG_PIDS=str(tmp_path / "pids"))
        assert code == 5, output
        assert codes(output) == {"a_hang": 5, "z_good": 0}, output
        assert len(proxies) == 1, proxies


class TestRecordingsStayPerFlow:
    def test_a_failed_record_leaves_its_cassette_while_the_other_flow_records(
        self, examples: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        """Two flows recorded through one proxy: the one whose assertion fails keeps its old
        cassette byte-identical (the recording is set aside), the other is re-recorded."""
        names = ["f1", "f2"]
        specs = booking_copies(examples, names)
        specs[1].write_text(specs[1].read_text().replace("reply contains booked", "reply contains cancelled"))
        old = [fingerprint(examples / f"{n}.cassette.json") for n in names]
        replies = load_script(examples / "fake_model" / "booking.json").replies
        server = fake_model([*replies, *replies])
        code, output, proxies = run_watching_proxies(
            flowproof, *specs, "--record", *upstream_args(server), keys=True)
        assert code == 1, output
        assert len(proxies) == 1, proxies
        assert fingerprint(examples / "f2.cassette.json") == old[1]
        assert (examples / "f2.cassette.rejected.json").exists()
        assert fingerprint(examples / "f1.cassette.json") != old[0]
        assert not list(examples.glob("*.recording.json"))
        assert len(server.model_requests) == 6

    def test_compare_over_several_flows_never_writes(
        self, examples: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        """Two flows compared live through one proxy: both pass, neither cassette is touched."""
        names = ["f1", "f2"]
        specs = booking_copies(examples, names)
        old = [fingerprint(examples / f"{n}.cassette.json") for n in names]
        replies = load_script(examples / "fake_model" / "booking.json").replies
        server = fake_model([*replies, *replies])
        code, output, proxies = run_watching_proxies(
            flowproof, *specs, "--compare", *upstream_args(server), keys=True)
        assert code == 0, output
        assert len(proxies) == 1, proxies
        assert [fingerprint(examples / f"{n}.cassette.json") for n in names] == old


class TestOrphans:
    def test_the_warm_proxy_dies_with_a_killed_runner_and_writes_nothing(
        self, examples: Path, flowproof: Flowproof, fake_model: Fake, tmp_path: Path
    ) -> None:
        """kill -9 of a runner recording two flows through one proxy: the proxy is gone within
        a second and no recording appears afterwards."""
        scratch_root = tmp_path / "tmp"
        scratch_root.mkdir()
        specs = booking_copies(examples, ["f1", "f2"])
        for name in ("f1", "f2"):
            (examples / f"{name}.cassette.json").unlink()
        # Both flows' first replies stall, so the kill lands while the proxy is mid-record.
        stalled = Reply(calls=(ScriptedCall.make("search_flights", {"destination": "NBO"}),), first_chunk_delay=20)
        server = fake_model([stalled, stalled])
        process = start_run(flowproof, *specs, "--record", "-j", "2", *upstream_args(server),
                            TMPDIR=str(scratch_root))
        agents: list[int] = []
        try:
            wait_until(lambda: len(server.model_requests) == 2, 60, "both agents' first model call")
            kids = children(process.pid)
            proxies = [pid for pid, cmd in kids if "mitmdump" in cmd]
            agents = [pid for pid, cmd in kids if "mitmdump" not in cmd]
            assert len(proxies) == 1, kids
            process.kill()
            process.wait(timeout=10)
            took = wait_until(lambda: not pid_alive(proxies[0]), 5, "the proxy's death")
            assert took < 1.0, f"the proxy outlived the runner by {took:.2f}s"
            time.sleep(1.0)
            assert not list(examples.glob("f*.json")), list(examples.glob("f*.json"))
        finally:
            for pid in agents:
                kill_group(pid)
            cleanup(process, examples)


class TestBaseUrlRoute:
    def test_two_base_url_flows_record_and_replay_through_one_proxy(
        self, examples: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        """On the base-URL route each flow gets its own reverse listeners on the one proxy:
        two flows record base_url cassettes, then replay them, one mitmdump per run."""
        names = ["f1", "f2"]
        specs = booking_copies(examples, names)
        for spec in specs:
            spec.write_text(spec.read_text().replace(
                "  command: python booking_agent.py", "  command: python booking_agent.py\n  route: base_url"))
            spec.with_name(spec.name.replace(".flow.yaml", ".cassette.json")).unlink()
        replies = load_script(examples / "fake_model" / "booking.json").replies
        server = fake_model([*replies, *replies])
        code, output, proxies = run_watching_proxies(
            flowproof, *specs, "--record", *upstream_args(server), keys=True)
        assert code == 0, output
        assert len(proxies) == 1, proxies
        for name in names:
            recorded = json.loads((examples / f"{name}.cassette.json").read_text())
            assert recorded["route"] == "base_url" and len(recorded["turns"]) == 3
        server.stop()
        code, output, proxies = run_watching_proxies(flowproof, *specs, "-j", "2", "--json", keys=False)
        assert code == 0, output
        assert codes(output) == {"f1": 0, "f2": 0}
        assert len(proxies) == 1, proxies
