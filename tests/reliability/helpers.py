"""Shared pieces of the reliability tests."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from tests.e2e.conftest import BIN, FLOWPROOF_RUN, Flowproof, kill_group, processes_inside

FLOWPROOF = str(BIN / "flowproof")


def start_run(flowproof: Flowproof, *args: str | Path, keys: bool = True,
              **extra_env: str) -> subprocess.Popen[bytes]:
    """``flowproof-run ARGS`` started in the background, in its own session."""
    return subprocess.Popen(
        [FLOWPROOF_RUN, *map(str, args)], env=flowproof.env(keys=keys, **extra_env),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,
    )


def cleanup(process: subprocess.Popen[bytes], inside: Path) -> None:
    """Stop whatever a failed test left (the runner's group, then anything inside ``inside``)."""
    kill_group(process.pid)
    process.wait(timeout=10)
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()  # left to the collector, each is a ResourceWarning
    for line in processes_inside(inside):
        kill_group(int(line.split(":", 1)[0]))


def children(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the live direct children of ``pid``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[1]) == pid:
            found.append((int(proc.name), cmdline))
    return found


def wait_until(predicate, timeout: float, what: str, interval: float = 0.02) -> float:
    """Poll ``predicate`` until it holds; return the seconds it took (AssertionError on timeout)."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"{what} did not happen within {timeout}s")
        time.sleep(interval)
    return time.monotonic() - started


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) != "Z"
    except OSError:
        return False
