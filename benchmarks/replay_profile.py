"""Where a replaying proxy's CPU goes per call: cProfile over flowproof-run's proxy and the canned peer.

Not a test. Records the benchmark agent's calls once (benchmarks/run.py's `Bench`),
then runs, under cProfile (benchmarks/cprofile_addon.py, loaded as the proxy's
``-s`` script), the ``flowproof-run`` replay — its warm mitmdump, from the session's
open to its close — and `mitmdump` answering every call with one canned response
(benchmarks/mitm_peer.py), the floor of any replay inside mitmproxy, from its start
to its stop. It prints for each the profiled CPU per call, the functions with the
most self time, and flowproof's own frames by cumulative time.

    .venv/bin/python benchmarks/replay_profile.py [--calls 200] [--sse] [--concurrency 1] [--keep DIR] [--top 30]

The stats files stay in ``--keep DIR`` (``python -m pstats``, snakeviz). cProfile
slows every Python call, so compare the two profiles' shares, not their times
with the unprofiled benchmark's.
"""

from __future__ import annotations

import argparse
import os
import pstats
import sys
import tempfile
from pathlib import Path

from flowproof.testing import FakeModelServer

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run  # noqa: E402 — benchmarks/ is a folder of scripts, found through sys.path

SCRIPT = Path(__file__).resolve().parent / "cprofile_addon.py"


def label(key: tuple[str, int, str]) -> str:
    file, line, func = key
    for marker in ("site-packages/", "flowproof/", "lib/python3.12/"):
        if marker in file:
            file = (marker if marker == "flowproof/" else "") + file.split(marker, 1)[1]
            break
    return f"{func} ({file}:{line})"


def summary(name: str, stats: pstats.Stats, calls: int, top: int) -> list[str]:
    table = stats.stats  # type: ignore[attr-defined]
    total = sum(tt for _cc, _nc, tt, _ct, _callers in table.values())
    lines = [f"== {name}: {total:.2f} s profiled, {total / calls * 1000:.2f} ms per call",
             "self time (ms per call, share):"]
    by_self = sorted(table.items(), key=lambda kv: kv[1][2], reverse=True)
    for key, (_cc, nc, tt, _ct, _callers) in by_self[:top]:
        lines.append(f"  {tt / calls * 1000:7.3f} {tt / total:6.1%} {nc / calls:6.1f}x  {label(key)}")
    lines.append("flowproof frames by cumulative time (ms per call, share, calls per call):")
    ours = [(k, v) for k, v in table.items() if "/flowproof/" in k[0]]
    for key, (_cc, nc, _tt, ct, _callers) in sorted(ours, key=lambda kv: kv[1][3], reverse=True)[:top]:
        lines.append(f"  {ct / calls * 1000:7.3f} {ct / total:6.1%} {nc / calls:6.1f}x  {label(key)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--sse", action="store_true")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--keep", metavar="DIR", help="keep the stats files here")
    args = parser.parse_args(argv)
    cfg = run.Config(args.sse, args.concurrency)
    with tempfile.TemporaryDirectory(prefix="flowproof-prof-") as d, FakeModelServer() as server:
        tmp = Path(d)
        bench = run.Bench(tmp, server, args.calls)
        bench.prepare(cfg)
        case = tmp / cfg.slug
        keep = Path(args.keep) if args.keep else tmp
        keep.mkdir(parents=True, exist_ok=True)
        fp_out, canned_out = keep / f"fp-{cfg.slug}.prof", keep / f"canned-{cfg.slug}.prof"
        with bench.offline("fp-proxy"):
            run.flowproof_run(case / "fp-proxy.flow.yaml", {**bench.fp_env, "BENCH_OUT": str(bench.out),
                                                            "FLOWPROOF_ADDON_SCRIPT": str(SCRIPT),
                                                            "BENCH_PROFILE": str(fp_out)})
        with bench.offline("mitm-canned"):
            saved = dict(os.environ)
            os.environ.update(BENCH_PROFILE=str(canned_out), BENCH_PROFILE_BARE="1")
            try:
                proxy = run.Mitmdump(case, bench.confdir, "-s", str(run.PEER_SCRIPT), "-s", str(SCRIPT),
                                     "--set", f"bench_canned={case / 'flows.mitm'}")
            finally:
                os.environ.clear()
                os.environ.update(saved)
            try:
                run.run_agent(cfg, args.calls, bench.proxy_env(proxy), bench.out)
            finally:
                proxy.stop()
        calls = args.calls + 1  # the agent's warm-up call goes through the proxy too
        for name, out in ((f"flowproof-run replay, proxy route, {cfg.name}", fp_out),
                          (f"mitmdump canned answer, {cfg.name}", canned_out)):
            print("\n".join(summary(name, pstats.Stats(str(out)), calls, args.top)))
            print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
