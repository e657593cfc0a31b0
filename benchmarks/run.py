"""flowproof's speed against its peers, in one table: ``python benchmarks/run.py``.

Every peer runs the same agent (benchmarks/agent.py: the openai SDK, N chat
calls with ~33 KB request bodies) as a whole process, in the same run,
interleaved round by round, and the table shows medians over the rounds:

  (a) floor        the agent straight to the fake model server (flowproof.testing)
  (b) mitm pass    plain ``mitmdump`` between them (api.openai.com mapped to the fake server)
  (c) mitm replay  ``mitmdump --server-replay`` of the same calls, recorded first with
                   ``mitmdump -w``; nothing reaches the fake server (checked)
  (d) vcrpy        vcrpy in the agent, matching on the body too; nothing reaches the server
  (e) fp proxy     ``flowproof-run`` replay, route proxy (HTTPS_PROXY + the flowproof CA)
  (f) fp base-url  ``flowproof-run`` replay, route base_url (OPENAI_BASE_URL -> a reverse listener)
  (g) mitm canned  ``mitmdump`` answering every call with one saved response, matching
                   nothing: the floor of any replay inside mitmproxy (benchmarks/mitm_peer.py)

for JSON and SSE answers, sequential and 8 concurrent clients. Then start-up
(whole processes), time to first chunk of a 1-second stream (flowproof record
against a pass-through mitmdump stream tap), and the scale measurements
(benchmarks/scale.py). Not a test: it passes nothing and fails nothing.

    .venv/bin/python benchmarks/run.py [--quick] [--rounds N] [--calls N] [--json PATH] [--no-scale]

Everything binds 127.0.0.1 with OS-chosen ports; no key and no network are
needed. CAs, cassettes and flow files live in a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from flowproof.runner.env import ensure_ca
from flowproof.testing import FakeModelServer, Reply

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

import scale  # noqa: E402 — benchmarks/ is a folder of scripts, not a package: found through sys.path

AGENT = BENCH / "agent.py"
PEER_SCRIPT = BENCH / "mitm_peer.py"
TLS_FLOOR_PEER = BENCH / "tls_floor_peer.py"
BIN = Path(sys.executable).parent
MITMDUMP = str(BIN / "mitmdump")
FLOWPROOF_RUN = str(BIN / "flowproof-run")
OPENAI = "api.openai.com"

#: Variables of the caller's shell that would reroute or re-key the agent.
_SCRUB = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "HTTPS_PROXY", "HTTP_PROXY", "https_proxy",
          "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy", "SSL_CERT_FILE",
          "FLOWPROOF_UPSTREAM", "FLOWPROOF_EXTRA_HOSTS", "REQUESTS_CA_BUNDLE")

#: The answer to every call: about forty words, so an SSE answer is about forty events.
ANSWER = " ".join(f"word{i}" for i in range(40))

PEERS = ("floor", "mitm-pass", "mitm-replay", "vcrpy", "fp-proxy", "fp-base", "mitm-canned")
LABELS = {
    "floor": "(a) SDK -> fake server (floor)",
    "mitm-pass": "(b) mitmdump pass-through",
    "mitm-replay": "(c) mitmdump --server-replay",
    "mitm-canned": "(g) mitmdump canned answer",
    "vcrpy": "(d) vcrpy, body matching",
    "fp-proxy": "(e) flowproof replay, proxy",
    "fp-base": "(f) flowproof replay, base-URL",
}


@dataclass(frozen=True)
class Config:
    """One column of the table: JSON or SSE answers, 1 or 8 clients at once."""

    stream: bool
    concurrency: int

    @property
    def name(self) -> str:
        return f"{'sse' if self.stream else 'json'} {'seq' if self.concurrency == 1 else f'c{self.concurrency}'}"

    @property
    def slug(self) -> str:
        return self.name.replace(" ", "-")


@dataclass
class Sample:
    """One process of one peer: the agent's own call time and the whole wall time around it."""

    calls_s: float
    whole_s: float
    per_call_ms: float
    ttfc_ms: list[float] = field(default_factory=list)
    #: CPU per call: the agent's, the proxy's and the fake server's, over the timed calls.
    cpu_ms: float = 0.0
    proxy_found: bool = False
    #: flowproof-run only, from its --json report: proxy start to ready, and the whole flow.
    proxy_ready_s: float | None = None
    flow_s: float | None = None

    @classmethod
    def of(cls, result: dict[str, Any], whole: float, concurrency: int) -> Sample:
        """Sequential calls: the median call, which shrugs off a descheduled one on a busy
        machine; concurrent calls overlap, so there the call phase divided by the calls."""
        if concurrency == 1:
            per_call = statistics.median(result["total_ms"])
        else:
            per_call = result["calls_s"] / result["calls"] * 1000
        calls = result["calls"]
        # The fake server's CPU covers the untimed warm-up call too: share it over calls + 1.
        cpu = ((result["agent_cpu_s"] + result["proxy_cpu_s"]) / calls
               + result.get("server_cpu_s", 0.0) / (calls + 1)) * 1000
        return cls(result["calls_s"], whole, per_call, result["ttfc_ms"], cpu_ms=cpu,
                   proxy_found=result.get("proxy_found", False))


class BenchError(SystemExit):
    pass


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(extra)
    return env


def machine() -> dict[str, Any]:
    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                text=True, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, check=True, timeout=10).stdout.strip()
        commit += " (uncommitted changes)" if dirty else ""
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    return {
        "cpus": os.cpu_count() or 0,
        "cpu": _cpu_model(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "mitmproxy": version("mitmproxy"),
        "openai": version("openai"),
        "vcrpy": version("vcrpy"),
        "flowproof_commit": commit,
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# --------------------------------------------------------------------------- processes


def run_agent(cfg: Config, calls: int, env: dict[str, str], out: Path, *extra: str) -> tuple[dict[str, Any], float]:
    """Run the agent to completion; (its JSON, whole wall seconds)."""
    out.unlink(missing_ok=True)
    argv = [sys.executable, str(AGENT), *agent_args(cfg, calls), *extra]
    started, cpu = time.perf_counter(), time.process_time()
    done = subprocess.run(argv, env={**env, "BENCH_OUT": str(out)}, capture_output=True, timeout=300, check=False)
    whole, cpu = time.perf_counter() - started, time.process_time() - cpu
    if done.returncode != 0 or not out.exists():
        raise BenchError(f"the agent failed (exit {done.returncode}):\n{done.stderr.decode()[-3000:]}")
    result = json.loads(out.read_text())
    # This process only waits for the agent, so its CPU meanwhile is the fake server's threads.
    result["server_cpu_s"] = cpu
    return result, whole


def agent_args(cfg: Config, calls: int) -> list[str]:
    args = ["--calls", str(calls), "--concurrency", str(cfg.concurrency)]
    return [*args, "--stream"] if cfg.stream else args


class Mitmdump:
    """A plain mitmdump on 127.0.0.1 (OS-chosen port), started and stopped as a user would."""

    def __init__(self, tmp: Path, confdir: Path, *args: str, argv: list[str] | None = None) -> None:
        self.log = tmp / "mitmdump.log"
        # flow_detail=0: no per-flow printing, as flowproof's own mitmdump runs with -q.
        # connection_strategy=lazy: the upstream is dialled at the request, after the upstream
        # mapping, never at CONNECT (api.openai.com is not reachable here, nor needed).
        # ``argv``: another proxy that prints the same "listening at" line (tls_floor_peer.py).
        if argv is None:
            argv = [MITMDUMP, "--listen-host", "127.0.0.1", "--listen-port", "0", "--set", f"confdir={confdir}",
                    "--set", "flow_detail=0", "--set", "connection_strategy=lazy", *args]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.port = self._wait_listening()

    def _wait_listening(self) -> int:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            m = re.search(r"listening at [^\s]*:(\d+)", self.log.read_text(errors="replace"))
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None:
                raise BenchError(f"mitmdump exited {self.proc.returncode}:\n{self.log.read_text()}")
            time.sleep(0.01)
        self.stop()
        raise BenchError("mitmdump did not start listening within 60 s")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def flowproof_run(spec: Path, env: dict[str, str], *args: str, allow: tuple[int, ...] = (0,)) -> float:
    return flowproof_run_json(spec, env, *args, allow=allow)[0]


def flowproof_run_json(spec: Path, env: dict[str, str], *args: str,
                       allow: tuple[int, ...] = (0,)) -> tuple[float, dict[str, Any]]:
    """Run flowproof-run; (whole wall seconds, its --json flow entry when asked for, else {})."""
    started = time.perf_counter()
    done = subprocess.run([FLOWPROOF_RUN, str(spec), *args], env=env, capture_output=True, timeout=600,
                          check=False)
    whole = time.perf_counter() - started
    if done.returncode not in allow:
        raise BenchError(f"flowproof-run {spec.name} {' '.join(args)} exited {done.returncode}:\n"
                         f"{done.stdout.decode()[-3000:]}{done.stderr.decode()[-2000:]}")
    if "--json" not in args:
        return whole, {}
    flows = json.loads(done.stdout).get("flows") or [{}]
    return whole, flows[0]


def write_spec(path: Path, cfg_args: list[str], cassette: Path, route: str, extra_agent_env: str = "") -> Path:
    command = shlex.join([sys.executable, str(AGENT), *cfg_args])
    path.write_text(
        f"name: benchmark {path.stem}\n"
        "agent:\n"
        f"  command: {json.dumps(command)}\n"
        f"  route: {route}\n"
        "  timeout: 300\n"
        f"{extra_agent_env}"
        f"cassette: {json.dumps(str(cassette))}\n"
        "steps:\n"
        "  - prompt: go\n",
        encoding="utf-8",
    )
    return path


# --------------------------------------------------------------------------- the bench


class Bench:
    def __init__(self, tmp: Path, server: FakeModelServer, calls: int) -> None:
        self.tmp = tmp
        self.server = server
        self.calls = calls
        self.ca_dir = tmp / "ca"
        ca = ensure_ca(self.ca_dir)
        self.confdir = ca.cert.parent
        self.bundle = ca.bundle
        self.out = tmp / "agent.json"
        self.fp_env = clean_env(FLOWPROOF_CA_DIR=str(self.ca_dir))

    def proxy_env(self, proxy: Mitmdump) -> dict[str, str]:
        return clean_env(HTTPS_PROXY=proxy.url, https_proxy=proxy.url, SSL_CERT_FILE=str(self.bundle),
                         OPENAI_API_KEY="sk-benchmark", BENCH_PROXY_PID=str(proxy.proc.pid))

    def direct_env(self) -> dict[str, str]:
        return clean_env(OPENAI_BASE_URL=f"{self.server.url}/v1", OPENAI_API_KEY="sk-benchmark")

    def script(self, reply: Reply, n: int) -> None:
        self.server.set_script([reply] * n)

    @contextmanager
    def offline(self, peer: str) -> Iterator[None]:
        """A replay peer must answer every call itself: the fake server sees none of them."""
        before = self.server.calls_served
        self.server.set_script([])
        yield
        if self.server.calls_served != before:
            raise BenchError(f"{peer} let {self.server.calls_served - before} calls reach the upstream")

    # Recording each replay peer's cassette once per configuration.
    def prepare(self, cfg: Config) -> None:
        d = self.tmp / cfg.slug
        d.mkdir()
        reply = Reply.text(ANSWER)
        # mitmdump -w, then point the saved flows back at api.openai.com (they hold the fake
        # server's address after the upstream mapping) so --server-replay matches them.
        self.script(reply, self.calls + 1)
        raw = d / "raw.mitm"
        proxy = Mitmdump(d, self.confdir, "-s", str(PEER_SCRIPT), "--set", f"bench_upstream={self.server.url}",
                         "-w", str(raw))
        try:
            run_agent(cfg, self.calls, self.proxy_env(proxy), self.out)
        finally:
            proxy.stop()
        _retarget_flows(raw, d / "flows.mitm", self.calls + 1)
        # vcrpy records in the agent process.
        self.script(reply, self.calls + 1)
        run_agent(cfg, self.calls, self.direct_env(), self.out, "--vcr", str(d / "vcr.yaml"), "--vcr-mode", "record")
        # flowproof records through its own runner, on each route.
        for route in ("proxy", "base_url"):
            spec = write_spec(d / f"fp-{route}.flow.yaml", agent_args(cfg, self.calls), d / f"fp-{route}.cassette.json",
                              route)
            self.script(reply, self.calls + 1)
            flowproof_run(spec, self.fp_env, "--record", "--upstream", f"{OPENAI}={self.server.url}")

    def _replay_through(self, peer: str, cfg: Config, start: Callable[[], Mitmdump]) -> Sample:
        """A replay peer that is a proxy process: started (its start counted), the agent run
        through it offline, stopped."""
        with self.offline(peer):
            started = time.perf_counter()
            proxy = start()
            try:
                result, _ = run_agent(cfg, self.calls, self.proxy_env(proxy), self.out)
            finally:
                proxy.stop()
            return Sample.of(result, time.perf_counter() - started, cfg.concurrency)

    def run_peer(self, peer: str, cfg: Config) -> Sample:
        d = self.tmp / cfg.slug
        if peer == "floor":
            self.script(Reply.text(ANSWER), self.calls + 1)
            result, whole = run_agent(cfg, self.calls, self.direct_env(), self.out)
            return Sample.of(result, whole, cfg.concurrency)
        if peer == "mitm-pass":
            self.script(Reply.text(ANSWER), self.calls + 1)
            started = time.perf_counter()
            proxy = Mitmdump(d, self.confdir, "-s", str(PEER_SCRIPT), "--set", f"bench_upstream={self.server.url}")
            try:
                result, _ = run_agent(cfg, self.calls, self.proxy_env(proxy), self.out)
            finally:
                proxy.stop()
            return Sample.of(result, time.perf_counter() - started, cfg.concurrency)
        if peer == "mitm-replay":
            return self._replay_through(peer, cfg, lambda: Mitmdump(
                d, self.confdir, "--server-replay", str(d / "flows.mitm"), "--set", "server_replay_extra=kill"))
        if peer in ("mitm-canned", "mitm-canned-lean", "mitm-canned-tunnel", "mitm-canned-connect",
                    "mitm-canned-tls"):
            return self._replay_through(peer, cfg, lambda: Mitmdump(
                d, self.confdir, "-s", str(PEER_SCRIPT), "--set", f"bench_canned={d / 'flows.mitm'}",
                "--set", f"bench_lean={str(peer != 'mitm-canned').lower()}",
                "--set", f"bench_tunnel={str(peer == 'mitm-canned-tunnel').lower()}",
                "--set", f"bench_connect={str(peer == 'mitm-canned-connect').lower()}",
                "--set", f"bench_tls={str(peer == 'mitm-canned-tls').lower()}"))
        if peer == "py-tls-canned":
            return self._replay_through(peer, cfg, lambda: Mitmdump(
                d, self.confdir, argv=[sys.executable, str(TLS_FLOOR_PEER), "--confdir", str(self.confdir),
                                       "--flows", str(d / "flows.mitm")]))
        if peer == "vcrpy":
            with self.offline(peer):
                result, whole = run_agent(cfg, self.calls, self.direct_env(), self.out,
                                          "--vcr", str(d / "vcr.yaml"), "--vcr-mode", "none")
                return Sample.of(result, whole, cfg.concurrency)
        if peer in ("fp-proxy", "fp-base"):
            route = "proxy" if peer == "fp-proxy" else "base_url"
            with self.offline(peer):
                self.out.unlink(missing_ok=True)
                cpu = time.process_time()
                whole, report = flowproof_run_json(d / f"fp-{route}.flow.yaml",
                                                   {**self.fp_env, "BENCH_OUT": str(self.out)}, "--json")
                result = json.loads(self.out.read_text())
                result["server_cpu_s"] = time.process_time() - cpu
                if not result["proxy_found"]:
                    raise BenchError("the agent found no mitmdump under flowproof-run: its CPU would be missing")
                sample = Sample.of(result, whole, cfg.concurrency)
                sample.proxy_ready_s = report.get("proxy_startup_seconds")
                sample.flow_s = report.get("duration_seconds")
                return sample
        raise ValueError(peer)

    # Time to first chunk of a one-second stream, recorded.
    def ttfc(self, peer: str, streams: int, reply: Reply) -> Sample:
        cfg = Config(stream=True, concurrency=1)
        self.script(reply, streams + 1)
        if peer == "floor":
            result, whole = run_agent(cfg, streams, self.direct_env(), self.out)
        elif peer == "mitm-tap":
            started = time.perf_counter()
            proxy = Mitmdump(self.tmp, self.confdir, "-s", str(PEER_SCRIPT), "--set",
                             f"bench_upstream={self.server.url}", "--set", "bench_tap=true")
            try:
                result, _ = run_agent(cfg, streams, self.proxy_env(proxy), self.out)
            finally:
                proxy.stop()
            whole = time.perf_counter() - started
        else:
            spec = write_spec(self.tmp / "ttfc.flow.yaml", agent_args(cfg, streams), self.tmp / "ttfc.cassette.json",
                              "proxy")
            whole = flowproof_run(spec, {**self.fp_env, "BENCH_OUT": str(self.out)}, "--record",
                                  "--upstream", f"{OPENAI}={self.server.url}")
            result = json.loads(self.out.read_text())
        return Sample.of(result, whole, 1)


def _retarget_flows(src: Path, dst: Path, expected: int) -> None:
    from mitmproxy import io

    with open(src, "rb") as f:
        flows = [fl for fl in io.FlowReader(f).stream() if getattr(fl, "request", None) is not None]
    if len(flows) != expected:
        raise BenchError(f"mitmdump -w saved {len(flows)} flows, expected {expected}")
    with open(dst, "wb") as f:
        writer = io.FlowWriter(f)
        for fl in flows:
            fl.request.scheme, fl.request.host, fl.request.port = "https", OPENAI, 443
            writer.add(fl)


# --------------------------------------------------------------------------- report


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def rotated(seq: tuple[str, ...], by: int) -> list[str]:
    by %= len(seq)
    return list(seq[by:] + seq[:by])


def measure(args: argparse.Namespace, log: Callable[[str], None]) -> dict[str, Any]:
    configs = [Config(False, 1), Config(False, args.concurrency), Config(True, 1), Config(True, args.concurrency)]
    if args.quick:
        # A smoke run: every peer, both answer kinds and both client counts, in two columns.
        configs = [configs[0], configs[3]]
    if args.only_ttfc:
        configs = []
    samples: dict[str, dict[str, list[Sample]]] = {c.name: {p: [] for p in PEERS} for c in configs}
    ttfc: dict[str, list[Sample]] = {"floor": [], "mitm-tap": [], "fp-record": []}
    with tempfile.TemporaryDirectory(prefix="flowproof-bench-") as d, FakeModelServer() as server:
        bench = Bench(Path(d), server, args.calls)
        for cfg in configs:
            log(f"recording the replay peers' cassettes for {cfg.name}")
            bench.prepare(cfg)
        one_second = Reply.text(" ".join(f"w{i}" for i in range(10)), chunk_delay=0.1)
        if args.only_ttfc:
            log("warm-up")
            for peer in ttfc:
                bench.ttfc(peer, 1, one_second)
        elif not args.quick:
            # Untimed warm-up of every process kind (file cache, .pyc files).
            log("warm-up")
            for peer in PEERS:
                bench.run_peer(peer, configs[0])
        for r in range(args.rounds):
            for cfg in configs:
                log(f"round {r + 1}/{args.rounds}: {cfg.name}")
                for peer in rotated(PEERS, r):
                    samples[cfg.name][peer].append(bench.run_peer(peer, cfg))
            log(f"round {r + 1}/{args.rounds}: time to first chunk")
            for peer in rotated(tuple(ttfc), r):
                ttfc[peer].append(bench.ttfc(peer, args.streams, one_second))
    return summarise(args, configs, samples, ttfc)


def summarise(args: argparse.Namespace, configs: list[Config], samples: dict[str, dict[str, list[Sample]]],
              ttfc: dict[str, list[Sample]]) -> dict[str, Any]:
    per_call: dict[str, dict[str, Any]] = {}
    for cfg in configs:
        col: dict[str, Any] = {}
        for peer in PEERS:
            ss = samples[cfg.name][peer]
            col[peer] = {"per_call_ms": [s.per_call_ms for s in ss], "whole_s": [s.whole_s for s in ss],
                         "proxy_ready_s": med([s.proxy_ready_s for s in ss if s.proxy_ready_s is not None]),
                         "flow_s": med([s.flow_s for s in ss if s.flow_s is not None]),
                         "cpu_ms": [s.cpu_ms for s in ss]}
            col[peer]["median_ms"] = med(col[peer]["per_call_ms"])
            col[peer]["cpu_median_ms"] = med(col[peer]["cpu_ms"])
            col[peer]["whole_median_s"] = med(col[peer]["whole_s"])
        floor = col["floor"]
        for peer in PEERS:
            col[peer]["over_floor_ms"] = col[peer]["median_ms"] - floor["median_ms"]
            col[peer]["cpu_over_floor_ms"] = col[peer]["cpu_median_ms"] - floor["cpu_median_ms"]
            # Paired within each round (the two processes ran seconds apart), then the median:
            # steadier than a ratio of medians when the machine's load drifts.
            col[peer]["x_floor"] = med([a / b for a, b in zip(col[peer]["per_call_ms"], floor["per_call_ms"],
                                                               strict=True)])
        per_call[cfg.name] = col
    first = {peer: med([t for s in ttfc[peer] for t in s.ttfc_ms]) for peer in ttfc}
    whole = {peer: med([s.whole_s for s in ttfc[peer]]) for peer in ttfc}
    # Paired within each round, like x_floor: each process's median first chunk against the tap's.
    paired = med([med(a.ttfc_ms) / med(b.ttfc_ms) for a, b in zip(ttfc["fp-record"], ttfc["mitm-tap"], strict=True)])
    return {"per_call": per_call, "ttfc_ms": first, "ttfc_whole_s": whole, "ttfc_paired_ratio": paired,
            "ttfc_samples_ms": {p: [s.ttfc_ms for s in ttfc[p]] for p in ttfc}}


def ratio(a: float, b: float) -> str:
    """a / b; n/a when the denominator is not a positive cost (noise put the peer at the floor),
    below when only the numerator is not (the first answers below the floor: no ratio says more)."""
    if b <= 0:
        return "n/a"
    return f"{a / b:.2f}x" if a > 0 else "below"


def render(args: argparse.Namespace, info: dict[str, Any], result: dict[str, Any],
           scaled: dict[str, Any] | None) -> str:
    lines = []
    m = info
    lines.append(f"machine: {m['cpus']} CPUs ({m['cpu']}), Python {m['python']}, mitmproxy {m['mitmproxy']}, "
                 f"openai {m['openai']}, vcrpy {m['vcrpy']}, {m['platform']}")
    lines.append(f"flowproof commit {m['flowproof_commit']}; load average {m['loadavg_start']} at start, "
                 f"{m['loadavg_end']} at end")
    lines.append(f"{args.calls} calls per process, ~{args.body_kb} KB request bodies, medians of {args.rounds} "
                 f"interleaved rounds; 'c{args.concurrency}' = {args.concurrency} concurrent clients")
    lines.append("call: seq = median call latency in the process; cN = the process's call phase / calls. "
                 "+floor: call - (a). xfloor: call / (a) paired per round, median")
    lines.append("")
    per_call = result["per_call"]
    names = list(per_call)
    if names:
        lines.extend(render_per_call(per_call, names))
    t = result["ttfc_ms"]
    lines.append(f"time to first chunk, recorded 1-second stream (10 words 100 ms apart), {args.streams} per process, "
                 f"median ms: direct {t['floor']:.1f}; mitmdump + stream tap {t['mitm-tap']:.1f}; "
                 f"flowproof record {t['fp-record']:.1f}")
    lines.append(f"  flowproof record / mitmdump stream tap: {ratio(t['fp-record'], t['mitm-tap'])} of the medians, "
                 f"{result['ttfc_paired_ratio']:.2f}x paired per round (target <= 1.1x)")
    if scaled is not None:
        lines.append("")
        lines.extend(scale.render(scaled))
    return "\n".join(lines)


def render_per_call(per_call: dict[str, dict[str, Any]], names: list[str]) -> list[str]:
    lines: list[str] = []
    lines.append(f"{'per call, ms':32s}" + "".join(f"{n:>25s}" for n in names))
    lines.append(f"{'':32s}" + "".join(f"{'call':>9s}{'+floor':>9s}{'xfloor':>7s}" for _ in names))
    for peer in PEERS:
        row = f"{LABELS[peer]:32s}"
        for n in names:
            c = per_call[n][peer]
            if peer == "floor":
                row += f"{c['median_ms']:9.2f}{'':>16s}"
            else:
                row += f"{c['median_ms']:9.2f}{c['over_floor_ms']:+9.2f}{c['x_floor']:7.2f}"
        lines.append(row)
    lines.append("")
    lines.append("CPU per call, ms: the agent + the proxy + the fake server over the timed calls (what a busy")
    lines.append("machine inflates least); +floor: the cost a peer adds, in CPU")
    lines.append(f"{'':32s}" + "".join(f"{n:>18s}" for n in names))
    lines.append(f"{'':32s}" + "".join(f"{'cpu':>9s}{'+floor':>9s}" for _ in names))
    for peer in PEERS:
        row = f"{LABELS[peer]:32s}"
        for n in names:
            c = per_call[n][peer]
            over = "" if peer == "floor" else f"{c['cpu_over_floor_ms']:+9.2f}"
            row += f"{c['cpu_median_ms']:9.2f}{over:>9s}"
        lines.append(row)
    lines.append("")
    heading = "ratios (of +floor unless said; n/a, below: a +floor <= 0)"
    lines.append(f"{heading:62s}" + "".join(f"{n:>9s}" for n in names))
    rows = [
        ("flowproof proxy / mitmdump server-replay (target <= 0.5)", "fp-proxy", "mitm-replay", "over_floor_ms"),
        ("  the same in CPU", "fp-proxy", "mitm-replay", "cpu_over_floor_ms"),
        ("mitmdump canned answer / server-replay (the proxy floor)", "mitm-canned", "mitm-replay", "over_floor_ms"),
        ("  the same in CPU", "mitm-canned", "mitm-replay", "cpu_over_floor_ms"),
        ("flowproof proxy / mitmdump canned answer", "fp-proxy", "mitm-canned", "over_floor_ms"),
        ("  the same in CPU", "fp-proxy", "mitm-canned", "cpu_over_floor_ms"),
        ("flowproof base-URL / mitmdump server-replay", "fp-base", "mitm-replay", "over_floor_ms"),
        ("  the same in CPU", "fp-base", "mitm-replay", "cpu_over_floor_ms"),
        ("flowproof proxy / vcrpy", "fp-proxy", "vcrpy", "over_floor_ms"),
        ("  the same in CPU", "fp-proxy", "vcrpy", "cpu_over_floor_ms"),
        ("flowproof proxy / mitmdump pass-through", "fp-proxy", "mitm-pass", "over_floor_ms"),
        ("flowproof base-URL / floor, whole call (target <= 1.5)", "fp-base", None, "x_floor"),
        ("  the same in CPU", "fp-base", "floor", "cpu_median_ms"),
    ]
    for label, a, b, key in rows:
        cells = []
        for n in names:
            if b is None:
                cells.append(f"{per_call[n][a][key]:.2f}x")
            else:
                cells.append(ratio(per_call[n][a][key], per_call[n][b][key]))
        lines.append(f"  {label:60s}" + "".join(f"{c:>9s}" for c in cells))
    lines.append("")
    first = names[0]
    w = {p: per_call[first][p]["whole_median_s"] for p in PEERS}
    lines.append(f"start-up, {first}, whole processes, median s: the agent alone {w['floor']:.2f}; "
                 f"mitmdump start + agent + stop: --server-replay {w['mitm-replay']:.2f}, pass-through "
                 f"{w['mitm-pass']:.2f}; flowproof-run: proxy {w['fp-proxy']:.2f}, base-URL {w['fp-base']:.2f}")
    lines.append(f"  flowproof-run (proxy) - mitmdump --server-replay around the same agent: "
                 f"{w['fp-proxy'] - w['mitm-replay']:+.2f} s (target <= +0.10 s)")
    lines.append(f"  cost over the agent alone: flowproof-run {w['fp-proxy'] - w['floor']:.2f} s, "
                 f"mitmdump --server-replay {w['mitm-replay'] - w['floor']:.2f} s")
    fp = per_call[first]["fp-proxy"]
    lines.append(f"  inside flowproof-run (its --json): proxy start to ready {fp['proxy_ready_s']:.2f} s, the flow "
                 f"{fp['flow_s']:.2f} s, so {w['fp-proxy'] - fp['flow_s']:.2f} s outside the flow (interpreter, "
                 "imports, spec, report)")
    lines.append("")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="flowproof against its peers, one table")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 1 round, 10 calls, json seq and sse c8 only, small scale"
    )
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 5; --quick 1)")
    parser.add_argument("--calls", type=int, default=None, help="calls per process (default 30; --quick 10)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--streams", type=int, default=None, help="1-second streams per TTFC process (default 5)")
    parser.add_argument("--json", metavar="PATH", help="also save every number and sample as JSON")
    parser.add_argument("--no-scale", action="store_true", help="skip the scale measurements")
    parser.add_argument("--only-scale", action="store_true", help="only the scale measurements")
    parser.add_argument("--only-ttfc", action="store_true",
                        help="only the time to first chunk at record (implies --no-scale)")
    args = parser.parse_args(argv)
    args.rounds = args.rounds or (1 if args.quick else 5)
    args.calls = args.calls or (10 if args.quick else 30)
    args.streams = args.streams or (1 if args.quick else 5)
    args.body_kb = 33
    args.no_scale = args.no_scale or args.only_ttfc
    if min(args.rounds, args.calls, args.streams, args.concurrency) < 1:
        parser.error("--rounds, --calls, --streams and --concurrency must be at least 1")

    def log(text: str) -> None:
        print(f"# {time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)

    info = machine()
    result: dict[str, Any] = {}
    if not args.only_scale:
        result = measure(args, log)
    scaled = None if args.no_scale else scale.measure(quick=args.quick, log=log)
    info["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    if args.only_scale:
        print("\n".join(scale.render(scaled or {})))
    else:
        print(render(args, info, result, scaled))
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": info, "args": vars(args), **result, "scale": scaled},
                                              indent=2, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
