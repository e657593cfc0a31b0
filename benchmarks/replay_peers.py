"""The proxy-route replay against its floor, narrowly: ``python benchmarks/replay_peers.py``.

A quicker slice of benchmarks/run.py (same agent, same fake server, same peers,
interleaved round by round): only

  (a) floor        the agent straight to the fake model server
  (c) mitm replay  ``mitmdump --server-replay``
  (e) fp proxy     ``flowproof-run`` replay, route proxy
  (g) mitm canned  ``mitmdump`` answering every call with one saved response (the floor of a replay)
  (h) mitm canned-lean  the same, with the addon chain of a proxy ``flowproof-run`` started
                   (`flowproof.addon.lean`): the floor of flowproof's proxy route
  (j) mitm canned-tunnel  canned-lean, with each api.openai.com tunnel's TLS and HTTP taken out of
                   mitmproxy's layers into one layer of the peer's own (``bench_tunnel``)
  (k) mitm canned-connect  canned-tunnel, with the ``CONNECT`` answered in that layer too
                   (``bench_connect``): mitmproxy's accept and connection handler alone
  (i) py tls canned  a bare asyncio + ``ssl`` proxy answering the same way (benchmarks/tls_floor_peer.py):
                   the floor of any proxy-route replay written in Python, mitmproxy or not

for JSON sequential and SSE 8-client calls (``--columns`` picks others: ``json-c8``,
``sse-seq``…). It prints, per peer and column, the
median over rounds of the proxy process's own CPU per call (every thread, from
/proc: what a busy machine inflates least), of the whole CPU per call over the
floor, and of the call time, then flowproof's ratios to the two mitmdump peers.

    .venv/bin/python benchmarks/replay_peers.py [--rounds 5] [--calls 30] [--before DIR] [--peers P,Q]
        [--columns json-seq,sse-c8] [--json PATH]

``--before DIR`` adds a peer "fp-before": flowproof-run with another checkout
first on ``PYTHONPATH`` (its runner and its addon), run in the same rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from flowproof.testing import FakeModelServer

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run  # noqa: E402 — benchmarks/ is a folder of scripts, found through sys.path

PEERS = ("floor", "mitm-replay", "mitm-canned", "mitm-canned-lean", "mitm-canned-tls", "mitm-canned-tunnel",
         "mitm-canned-connect", "py-tls-canned", "fp-proxy")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--before", metavar="DIR", help="another checkout, run as the peer fp-before")
    parser.add_argument("--only", choices=("json", "sse"), help="one column only")
    parser.add_argument("--columns", metavar="C,D", type=_columns,
                        help="these columns instead: json-seq, json-cN, sse-seq, sse-cN (N clients)")
    parser.add_argument("--json", metavar="PATH", help="also save every sample as JSON")
    parser.add_argument("--peers", metavar="P,Q", help="only these peers (floor and mitm-replay always run)")
    args = parser.parse_args(argv)
    configs = args.columns or [run.Config(False, 1), run.Config(True, args.concurrency)]
    if args.only:
        configs = [c for c in configs if c.stream == (args.only == "sse")]
    peers = (*PEERS, "fp-before") if args.before else PEERS
    if args.peers:
        wanted = {"floor", "mitm-replay", *args.peers.split(",")}
        unknown = wanted - set(peers)
        if unknown:
            parser.error(f"unknown peer(s): {', '.join(sorted(unknown))} (known: {', '.join(peers)})")
        peers = tuple(p for p in peers if p in wanted)

    def log(text: str) -> None:
        print(f"# {time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)

    load_start = os.getloadavg()
    samples: dict[str, dict[str, list[dict[str, float]]]] = {c.name: {p: [] for p in peers} for c in configs}
    with tempfile.TemporaryDirectory(prefix="flowproof-bench-") as d, FakeModelServer() as server:
        bench = run.Bench(Path(d), server, args.calls)
        for cfg in configs:
            log(f"recording the replay peers' cassettes for {cfg.name}")
            bench.prepare(cfg)
        before_env = {**bench.fp_env, "PYTHONPATH": str(Path(args.before).resolve())} if args.before else None
        log("warm-up")
        for peer in peers:
            _sample(bench, peer, configs[0], before_env)
        for r in range(args.rounds):
            for cfg in configs:
                log(f"round {r + 1}/{args.rounds}: {cfg.name}")
                for peer in run.rotated(peers, r):
                    samples[cfg.name][peer].append(_sample(bench, peer, cfg, before_env))
    load_end = os.getloadavg()
    print(render(args, peers, samples, load_start, load_end))
    if args.json:
        saved_args = {**vars(args), "columns": [c.slug for c in configs]}
        Path(args.json).write_text(json.dumps({"args": saved_args, "samples": samples,
                                               "load": [load_start, load_end]}, indent=2) + "\n")
    return 0


def _columns(text: str) -> list[run.Config]:
    configs = []
    for column in text.split(","):
        kind, _, clients = column.strip().partition("-")
        if kind not in ("json", "sse") or not (clients == "seq" or (clients[:1] == "c" and clients[1:].isdigit())):
            raise argparse.ArgumentTypeError(f"{column!r}: a column is json-seq, json-cN, sse-seq or sse-cN")
        configs.append(run.Config(kind == "sse", 1 if clients == "seq" else int(clients[1:])))
    return configs


def _sample(bench: run.Bench, peer: str, cfg: run.Config, before_env: dict[str, str] | None) -> dict[str, float]:
    if peer == "fp-before":
        assert before_env is not None
        saved, bench.fp_env = bench.fp_env, before_env
        try:
            return _sample(bench, "fp-proxy", cfg, None)
        finally:
            bench.fp_env = saved
    sample = bench.run_peer(peer, cfg)
    result = json.loads(bench.out.read_text())
    return {"proxy_cpu_ms": result["proxy_cpu_s"] / result["calls"] * 1000, "cpu_ms": sample.cpu_ms,
            "call_ms": sample.per_call_ms}


def render(args: argparse.Namespace, peers: tuple[str, ...], samples: dict[str, dict[str, list[dict[str, float]]]],
           load_start: tuple[float, ...], load_end: tuple[float, ...]) -> str:
    def med(cfg: str, peer: str, key: str) -> float:
        return statistics.median(s[key] for s in samples[cfg][peer])

    lines = [f"{args.calls} calls per process, medians of {args.rounds} interleaved rounds; load average "
             f"{load_start[0]:.1f} at start, {load_end[0]:.1f} at end",
             "proxy cpu: the proxy process's CPU per call; +floor cpu: agent + proxy + server CPU per call "
             "minus the floor's; call: median call (seq) or call phase / calls (cN), ms", ""]
    names = list(samples)
    lines.append(f"{'':14s}" + "".join(f"{n:>33s}" for n in names))
    lines.append(f"{'':14s}" + "".join(f"{'proxy cpu':>11s}{'+floor cpu':>11s}{'call':>11s}" for _ in names))
    for peer in peers:
        row = f"{peer:14s}"
        for n in names:
            over = med(n, peer, "cpu_ms") - med(n, "floor", "cpu_ms")
            row += f"{med(n, peer, 'proxy_cpu_ms'):11.2f}{over:+11.2f}{med(n, peer, 'call_ms'):11.2f}"
        lines.append(row)
    lines.append("")
    pairs = [(fp, other) for fp in peers if fp.startswith("fp-")
             for other in ("py-tls-canned", "mitm-canned-lean", "mitm-canned", "mitm-replay")]
    pairs += [("py-tls-canned", "mitm-replay"), ("mitm-canned-tunnel", "mitm-replay"),
              ("mitm-canned-connect", "mitm-replay"),
              ("mitm-canned-tls", "mitm-replay")]
    for fp, other in pairs:
        if fp in peers and other in peers:
            cells = []
            for n in names:
                a, b = med(n, fp, "proxy_cpu_ms"), med(n, other, "proxy_cpu_ms")
                oa = med(n, fp, "cpu_ms") - med(n, "floor", "cpu_ms")
                ob = med(n, other, "cpu_ms") - med(n, "floor", "cpu_ms")
                cells.append(f"{a / b:6.2f}x proxy, {run.ratio(oa, ob):>6s} +floor")
            lines.append(f"{fp:13s} / {other:16s}" + "".join(f"{c:>33s}" for c in cells))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
