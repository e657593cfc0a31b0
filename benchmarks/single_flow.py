"""One replayed flow as whole processes: ``flowproof-run`` against mitmdump around the same agent.

The bundled example (example_specs/booking.flow.yaml: the openai SDK, three streamed
calls) replayed two ways, each a whole process started fresh:

- A, flowproof-run: ``flowproof-run booking.flow.yaml`` (replay);
- B, mitmdump + agent: one process that starts ``mitmdump`` with a 40-line script serving
  the cassette's responses in order (benchmarks/mitm_replay_peer.py), waits until it
  listens, runs the same agent through it with the same environment (HTTPS_PROXY, the
  CA), and stops it with SIGINT: mitmdump's own start, ready and stop, and the agent.

A - B is what flowproof-run costs beyond them (the target: at most 0.1 s). The runs
alternate, A B A B ..., after one untimed warm-up of each; the table gives min, median and
max of the wall and CPU seconds (the CPU of every process of the run: the runner, mitmdump
and the agent, from the kernel's accounting of the waited children) and the ratio A/B
taken pair by pair. The load average is printed at the start and the end.

    .venv/bin/python benchmarks/single_flow.py [--rounds 9] [--json]
    .venv/bin/python benchmarks/single_flow.py setup DIR   # the folder alone, for an outside timer:
    #   A: cd DIR && FLOWPROOF_CA_DIR=DIR/ca .venv/bin/flowproof-run booking.flow.yaml
    #   B: .venv/bin/python benchmarks/single_flow.py peer DIR

Everything runs on 127.0.0.1; no key and no network. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
EXAMPLE = BENCH.parent / "example_specs"
BIN = Path(sys.executable).parent
PROMPT = "Book me a flight to Nairobi tomorrow"
_SCRUB = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy",
          "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE",
          "FLOWPROOF_UPSTREAM", "FLOWPROOF_ADDON_SCRIPT", "FLOWPROOF_WARM_PROXY", "FLOWPROOF_CA_DIR",
          "PYTHONDONTWRITEBYTECODE")
_PORT = "@PORT@"


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(extra)
    return env


def setup(folder: Path) -> None:
    """The example's spec, agent and cassette, a CA, and the agent's environment for peer B
    (built by flowproof's own `agent_env`, so both peers hand the agent the same variables)."""
    from flowproof.options import Route
    from flowproof.runner.env import agent_env, ensure_ca, interpreter_first_path

    folder.mkdir(parents=True, exist_ok=True)
    for name in ("booking.flow.yaml", "booking_agent.py", "booking.cassette.json"):
        shutil.copy(EXAMPLE / name, folder / name)
    ca = ensure_ca(folder / "ca")
    env = agent_env(clean_env(FLOWPROOF_PROMPT=PROMPT), proxy_url=f"http://127.0.0.1:{_PORT}", ca=ca,
                    route=Route.PROXY, placeholder_keys=True)
    env["PATH"] = interpreter_first_path(env.get("PATH")) or env.get("PATH", "")
    (folder / "agent_env.json").write_text(json.dumps(env), encoding="utf-8")


def peer(folder: Path) -> None:
    """Peer B, once: mitmdump started, ready (listening), the agent through it, mitmdump stopped."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    process = subprocess.Popen(
        [str(BIN / "mitmdump"), "-q", "-s", str(BENCH / "mitm_replay_peer.py"),
         "--listen-host", "127.0.0.1", "--listen-port", str(port),
         "--set", f"confdir={folder / 'ca'}", "--set", "connection_strategy=lazy",
         "--set", f"bench_cassette={folder / 'booking.cassette.json'}"],
        env=clean_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"mitmdump exited {process.returncode} or did not listen")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.01)
        env = {k: v.replace(_PORT, str(port)) for k, v in
               json.loads((folder / "agent_env.json").read_text(encoding="utf-8")).items()}
        done = subprocess.run([sys.executable, "booking_agent.py"], env=env, cwd=folder, capture_output=True,
                              timeout=120, check=False)
        if done.returncode != 0 or b"booked" not in done.stdout.lower():
            sys.exit(f"the agent failed ({done.returncode}): {done.stdout.decode()}{done.stderr.decode()}")
    finally:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=30)


def flowproof_run(folder: Path) -> None:
    done = subprocess.run([str(BIN / "flowproof-run"), "booking.flow.yaml"], cwd=folder, capture_output=True,
                          env=clean_env(FLOWPROOF_CA_DIR=str(folder / "ca")), timeout=120, check=False)
    if done.returncode != 0:
        sys.exit(f"flowproof-run exited {done.returncode}:\n{done.stdout.decode()}{done.stderr.decode()}")


def timed(run: object, folder: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one whole run (CPU: every process it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    if run == "A":
        flowproof_run(folder)
    else:
        subprocess.run([sys.executable, __file__, "peer", str(folder)], check=True, env=clean_env())
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def spread(xs: list[float]) -> str:
    return f"{min(xs):7.3f} {statistics.median(xs):7.3f} {max(xs):7.3f}"


def measure(rounds: int, as_json: bool) -> None:
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="flowproof-single-flow-") as tmp:
        folder = Path(tmp) / "flow"
        setup(folder)
        for run in ("A", "B"):  # warm-up: bytecode, the page cache, the SDK's first import
            timed(run, folder)
        samples: dict[str, list[tuple[float, float]]] = {"A": [], "B": []}
        for i in range(rounds):
            for run in ("A", "B") if i % 2 == 0 else ("B", "A"):
                samples[run].append(timed(run, folder))
    load_end = os.getloadavg()
    wall = {k: [s[0] for s in v] for k, v in samples.items()}
    cpu = {k: [s[1] for s in v] for k, v in samples.items()}
    result = {
        "rounds": rounds, "load_start": load_start, "load_end": load_end,
        "median_wall": {k: statistics.median(v) for k, v in wall.items()},
        "median_cpu": {k: statistics.median(v) for k, v in cpu.items()},
        "wall_ratio": statistics.median(a / b for a, b in zip(wall["A"], wall["B"], strict=True)),
        "cpu_ratio": statistics.median(a / b for a, b in zip(cpu["A"], cpu["B"], strict=True)),
        "wall_diff": statistics.median(a - b for a, b in zip(wall["A"], wall["B"], strict=True)),
        "cpu_diff": statistics.median(a - b for a, b in zip(cpu["A"], cpu["B"], strict=True)),
        "samples": samples,
    }
    if as_json:
        print(json.dumps(result, indent=2))
        return
    print(f"load average {[round(x, 2) for x in load_start]} at start, {[round(x, 2) for x in load_end]} at end; "
          f"{rounds} rounds, A B alternating")
    print("                               min  median     max")
    for key, name in (("A", "A flowproof-run"), ("B", "B mitmdump + agent")):
        print(f"{name:<20} wall s {spread(wall[key])}")
        print(f"{'':<20} cpu s  {spread(cpu[key])}")
    print(f"A/B, pair by pair, median: wall {result['wall_ratio']:.3f}, cpu {result['cpu_ratio']:.3f}; "
          f"A - B: wall {result['wall_diff']:+.3f} s, cpu {result['cpu_diff']:+.3f} s (target: wall <= +0.1 s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", choices=("setup", "peer"), help="setup DIR, or one peer-B run in DIR")
    parser.add_argument("folder", nargs="?", type=Path)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--json", action="store_true", help="print every number and sample as JSON")
    args = parser.parse_args()
    if args.command == "setup":
        setup(args.folder.resolve())
    elif args.command == "peer":
        peer(args.folder.resolve())
    else:
        measure(args.rounds, args.json)


if __name__ == "__main__":
    main()
