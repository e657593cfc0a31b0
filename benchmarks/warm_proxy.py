"""One warm proxy for many flows: the cost of N flows, for N = 1, 10, 50.

Every flow is the same tiny stdlib agent (one chat call, no SDK import, so the
proxy's share is what shows), replayed from a cassette recorded once at setup.
Peers, each a whole run of N flows, sequential:

- direct: the agent N times straight to the fake model server (the floor);
- mitmdump xN: N separate `mitmdump` starts, each a plain pass-through proxy
  (``--map-remote`` to the fake server, lazy upstream dialling, since the real
  host is never reachable here) around one agent run, then stopped;
- flowproof cold: one `flowproof-run` over the N specs with
  ``FLOWPROOF_WARM_PROXY=0`` (a proxy per flow, as before the warm proxy);
- flowproof warm: one `flowproof-run` over the N specs (one proxy, a session per flow).

The runs are interleaved (every peer of every N once per round, in a shuffled
order) and the table shows medians over the rounds, the cost per flow over the
floor ((peer - direct) / N) and the ratios warm / mitmdump xN and warm / cold.
The marginal cost of one more warm flow is the slope between N = 1 and the
largest N.

    .venv/bin/python benchmarks/warm_proxy.py [--runs 3] [--sizes 1,10,50] [--json]

Everything runs on 127.0.0.1; no key and no network. The CA lives in a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from flowproof.runner.env import ensure_ca
from flowproof.testing import FakeModelServer, Reply

BIN = Path(sys.executable).parent
_SCRUB = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy",
          "ALL_PROXY", "all_proxy", "FLOWPROOF_UPSTREAM", "FLOWPROOF_ADDON_SCRIPT", "FLOWPROOF_WARM_PROXY")

AGENT = '''\
import json, os, urllib.request
base = os.environ.get("BENCH_BASE_URL", "https://api.openai.com")
body = json.dumps({"model": "gpt-4o-mini",
                   "messages": [{"role": "user", "content": os.environ.get("FLOWPROOF_PROMPT", "hi")}]})
request = urllib.request.Request(base + "/v1/chat/completions", data=body.encode(), method="POST",
                                 headers={"content-type": "application/json",
                                          "authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "x")})
with urllib.request.urlopen(request, timeout=60) as response:
    print(json.loads(response.read())["choices"][0]["message"]["content"])
'''

SPEC = """\
name: warm bench {i}
agent:
  command: python agent.py
steps:
  - prompt: Say ok
  - assert: reply contains ok
"""

PEERS = ("direct", "mitmdump xN", "flowproof cold", "flowproof warm")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(argv: list[str], env: dict[str, str], cwd: Path) -> None:
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, timeout=900, check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout.decode()}{done.stderr.decode()}")


def wait_listening(port: int, process: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"mitmdump exited {process.returncode}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.01)
    sys.exit("mitmdump did not listen in time")


class Bench:
    def __init__(self, root: Path, server: FakeModelServer) -> None:
        self.root = root
        self.server = server
        self.ca = ensure_ca(root / "ca")
        (root / "agent.py").write_text(AGENT)
        self.specs: dict[int, Path] = {}

    def record(self) -> Path:
        """The one cassette every flow replays, recorded through flowproof from the fake server."""
        folder = self.root / "recording"
        folder.mkdir()
        shutil.copy(self.root / "agent.py", folder)
        spec = folder / "s.flow.yaml"
        spec.write_text(SPEC.format(i=0))
        run([str(BIN / "flowproof-run"), str(spec), "--record", "--upstream", f"api.openai.com={self.server.url}"],
            clean_env(FLOWPROOF_CA_DIR=str(self.root / "ca")), folder)
        return folder / "s.cassette.json"

    def folder(self, n: int, cassette: Path) -> Path:
        folder = self.root / f"n{n}"
        folder.mkdir()
        shutil.copy(self.root / "agent.py", folder)
        for i in range(n):
            (folder / f"s{i:03}.flow.yaml").write_text(SPEC.format(i=i))
            shutil.copy(cassette, folder / f"s{i:03}.cassette.json")
        return folder

    def direct(self, n: int, folder: Path) -> None:
        env = clean_env(BENCH_BASE_URL=self.server.url)
        for _ in range(n):
            run([sys.executable, "agent.py"], env, folder)

    def mitmdump(self, n: int, folder: Path) -> None:
        for _ in range(n):
            port = free_port()
            process = subprocess.Popen(
                [str(BIN / "mitmdump"), "-q", "--listen-host", "127.0.0.1", "--listen-port", str(port),
                 "--set", f"confdir={self.ca.cert.parent}", "--set", "connection_strategy=lazy",
                 "--map-remote", f"|https://api.openai.com|{self.server.url}"],
                env=clean_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            try:
                wait_listening(port, process)
                run([sys.executable, "agent.py"],
                    clean_env(HTTPS_PROXY=f"http://127.0.0.1:{port}", SSL_CERT_FILE=str(self.ca.bundle)), folder)
            finally:
                os.killpg(process.pid, signal.SIGINT)
                process.wait(timeout=30)

    def flowproof(self, folder: Path, warm: bool) -> None:
        env = clean_env(FLOWPROOF_CA_DIR=str(self.root / "ca"), FLOWPROOF_WARM_PROXY="1" if warm else "0")
        run([str(BIN / "flowproof-run"), str(folder)], env, folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="rounds (medians over them)")
    parser.add_argument("--sizes", default="1,10,50", help="numbers of flows, comma-separated")
    parser.add_argument("--json", action="store_true", help="print the medians as JSON")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    with tempfile.TemporaryDirectory(prefix="flowproof-warm-bench-") as tmp:
        root = Path(tmp)
        calls = (1 + args.runs) * sum(sizes) * 3 + 10  # direct, mitmdump and cold/warm record nothing
        with FakeModelServer([Reply(content="ok") for _ in range(calls)]) as server:
            bench = Bench(root, server)
            cassette = bench.record()
            folders = {n: bench.folder(n, cassette) for n in sizes}
            peers: dict[str, Callable[[int], None]] = {
                "direct": lambda n: bench.direct(n, folders[n]),
                "mitmdump xN": lambda n: bench.mitmdump(n, folders[n]),
                "flowproof cold": lambda n: bench.flowproof(folders[n], warm=False),
                "flowproof warm": lambda n: bench.flowproof(folders[n], warm=True),
            }
            for peer in peers.values():  # one untimed warm-up of each (imports, page cache)
                peer(min(sizes))
            times: dict[tuple[str, int], list[float]] = {(p, n): [] for p in PEERS for n in sizes}
            cpu: dict[tuple[str, int], list[float]] = {(p, n): [] for p in PEERS for n in sizes}
            load_start = os.getloadavg()
            for _ in range(args.runs):
                order = [(p, n) for p in PEERS for n in sizes]
                random.shuffle(order)
                for peer, n in order:
                    # CPU: every process the run waited for (agents, mitmdump, flowproof-run and
                    # its children), from the kernel's accounting; the fake server is not in it.
                    before = resource.getrusage(resource.RUSAGE_CHILDREN)
                    started = time.perf_counter()
                    peers[peer](n)
                    times[(peer, n)].append(time.perf_counter() - started)
                    after = resource.getrusage(resource.RUSAGE_CHILDREN)
                    cpu[(peer, n)].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            load_end = os.getloadavg()

    medians = {f"{p}/{n}": statistics.median(times[(p, n)]) for p in PEERS for n in sizes}
    cpu_medians = {f"{p}/{n}": statistics.median(cpu[(p, n)]) for p in PEERS for n in sizes}
    if args.json:
        print(json.dumps({"sizes": sizes, "runs": args.runs, "median_seconds": medians,
                          "median_cpu_seconds": cpu_medians, "load": [load_start, load_end]}, indent=2))
        return
    print(f"load average {[round(x, 2) for x in load_start]} at start, {[round(x, 2) for x in load_end]} at end")
    print(f"N flows, sequential; medians of {args.runs} interleaved rounds (seconds)\n")
    print(f"{'N':>4}  " + "  ".join(f"{p:>15}" for p in PEERS) + "  per flow over direct: mitmdump / cold / warm"
          "   warm/mitmdump  warm/cold")
    for n in sizes:
        row = [medians[f"{p}/{n}"] for p in PEERS]
        floor = row[0]
        over = [(t - floor) / n for t in row[1:]]
        print(f"{n:>4}  " + "  ".join(f"{t:>15.2f}" for t in row)
              + f"  {over[0]:>8.3f} / {over[1]:.3f} / {over[2]:.3f}"
              + f"   {row[3] / row[1]:>13.2f}  {row[3] / row[2]:>9.2f}")
    if len(sizes) > 1:
        small, large = min(sizes), max(sizes)
        slope = ((medians[f"flowproof warm/{large}"] - medians[f"direct/{large}"])
                 - (medians[f"flowproof warm/{small}"] - medians[f"direct/{small}"])) / (large - small)
        cpu_slope = ((cpu_medians[f"flowproof warm/{large}"] - cpu_medians[f"direct/{large}"])
                     - (cpu_medians[f"flowproof warm/{small}"] - cpu_medians[f"direct/{small}"])) / (large - small)
        print(f"\nwarm: one more flow costs {slope:.3f} s over the agent itself (slope N={small}..{large}), "
              f"and {cpu_slope:.3f} CPU-s over the agent's own CPU")
    print("\nCPU seconds (every waited process), medians:")
    for n in sizes:
        print(f"{n:>4}  " + "  ".join(f"{cpu_medians[f'{p}/{n}']:>15.2f}" for p in PEERS))


if __name__ == "__main__":
    main()
