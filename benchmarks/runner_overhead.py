"""What flowproof costs around an agent run: the whole replayed flow vs the bare agent.

Measures, as medians over N runs (default 5, after one untimed warm-up each):

- flowproof: `flowproof-run example_specs/booking.flow.yaml` (replay) — proxy
  start, the booking agent (openai SDK, three streamed calls) through the
  proxy, proxy stop, verdict;
- direct: `python example_specs/booking_agent.py PROMPT` against the fake model
  server (OPENAI_BASE_URL pointing at it, same three replies, no proxy);
- proxy start-to-ready: `start_proxy` from process start to the addon's
  `ready` event.

    .venv/bin/python benchmarks/runner_overhead.py [--runs N] [--json]

Everything runs on 127.0.0.1; no key and no network are needed. The flowproof
CA is created in a temporary directory, never in your home.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from flowproof.runner.env import ensure_ca
from flowproof.runner.proxy import ProxySettings, start_proxy
from flowproof.spec import load_spec
from flowproof.testing import FakeModelServer

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "example_specs"
SPEC = EXAMPLES / "booking.flow.yaml"
CASSETTE = EXAMPLES / "booking.cassette.json"
AGENT = EXAMPLES / "booking_agent.py"
SCRIPT = EXAMPLES / "fake_model" / "booking.json"
BIN = Path(sys.executable).parent
_SCRUB = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy",
          "FLOWPROOF_UPSTREAM")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(extra)
    return env


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, timeout=120, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout.decode()}{done.stderr.decode()}")
    return elapsed


def flowproof_run(ca_dir: Path) -> float:
    env = clean_env(FLOWPROOF_CA_DIR=str(ca_dir))
    return timed([str(BIN / "flowproof-run"), str(SPEC.relative_to(REPO))], env, REPO)


def direct_run(prompt: str) -> float:
    with FakeModelServer.from_json(SCRIPT) as server:
        env = clean_env(OPENAI_BASE_URL=f"{server.url}/v1", OPENAI_API_KEY="sk-benchmark")
        elapsed = timed([sys.executable, str(AGENT), prompt], env, EXAMPLES)
        if server.calls_served != 3:
            sys.exit(f"the direct run made {server.calls_served} model calls, expected 3")
    return elapsed


def proxy_ready(ca_dir: Path, scratch: Path) -> float:
    ca = ensure_ca(ca_dir)
    settings = ProxySettings(mode="replay", cassette=CASSETTE, report=scratch / "events.jsonl",
                             confdir=ca.cert.parent, spec=SPEC)
    proxy = start_proxy(settings)
    try:
        return proxy.startup_seconds
    finally:
        proxy.stop()


def measure(runs: int) -> dict[str, float | int]:
    prompt = load_spec(SPEC).prompts[0].text
    with tempfile.TemporaryDirectory(prefix="flowproof-bench-") as tmp:
        scratch = Path(tmp)
        ca_dir = scratch / "ca"
        ensure_ca(ca_dir)
        # One untimed warm-up of each (file cache, .pyc files).
        flowproof_run(ca_dir)
        direct_run(prompt)
        proxy_ready(ca_dir, scratch)
        flowproof = [flowproof_run(ca_dir) for _ in range(runs)]
        direct = [direct_run(prompt) for _ in range(runs)]
        ready = [proxy_ready(ca_dir, scratch) for _ in range(runs)]
    f, d, r = statistics.median(flowproof), statistics.median(direct), statistics.median(ready)
    return {"runs": runs, "flowproof_run_s": round(f, 3), "direct_agent_s": round(d, 3),
            "ratio": round(f / d, 2), "overhead_s": round(f - d, 3), "proxy_ready_s": round(r, 3),
            "cpus": os.cpu_count() or 0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="flowproof-run overhead on the booking example")
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each (default 5)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    result = measure(args.runs)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"booking example, median of {result['runs']} runs ({result['cpus']} CPUs)")
    print(f"  flowproof-run (replay, whole flow): {result['flowproof_run_s']:.3f} s")
    print(f"  agent directly vs fake model:       {result['direct_agent_s']:.3f} s")
    print(f"  ratio: {result['ratio']:.2f}x   overhead: {result['overhead_s']:.3f} s")
    print(f"  proxy start-to-ready:               {result['proxy_ready_s']:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
