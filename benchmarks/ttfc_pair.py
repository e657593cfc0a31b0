"""Time to first chunk at record, paired call by call: flowproof against a mitmdump stream tap.

`run.py` times whole processes, one peer after another, so the machine's load moves
between the samples it compares; at about 16 ms a first chunk is mostly that noise. Here
every peer is a proxy already running, and one client process sends the same streamed
call through each in turn (A B A B ...), so each pair of samples is taken a few
milliseconds apart:

- ``tap``: `mitmdump` with benchmarks/mitm_peer.py's copying stream tap (``bench_tap``),
  the upstream mapped to the fake model server;
- ``flowproof``: a warm flowproof proxy (the one `flowproof-run` starts) with a record
  session open, the same upstream mapping (``--upstream``);
- ``before`` (``--before DIR``): the same with another checkout's flowproof first on the
  proxy's ``PYTHONPATH``.

Each call is the openai SDK's streamed chat completion with a ~33 KB body (a coding
agent's system prompt), over keep-alive HTTPS through the proxy; the first chunk is the
first SSE event the SDK yields. Prints the median per peer and the median of the
per-pair ratios against the tap.

    .venv/bin/python benchmarks/ttfc_pair.py [--calls 200] [--body-kb 33] [--before DIR]

Everything runs on 127.0.0.1; no key and no network.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import httpx2
import openai

sys.path.insert(0, str(Path(__file__).resolve().parent))
from agent import request_messages  # noqa: E402 — a folder of scripts, found through sys.path
from run import OPENAI, PEER_SCRIPT, Mitmdump  # noqa: E402

from flowproof.options import Mode, ProxyOptions, parse_upstreams  # noqa: E402
from flowproof.runner.env import ensure_ca  # noqa: E402
from flowproof.runner.proxy import ProxyPool  # noqa: E402
from flowproof.testing import FakeModelServer, Reply  # noqa: E402


def first_chunk_ms(client: openai.OpenAI, i: int, body_kb: int) -> float:
    started = time.perf_counter()
    first = None
    for _chunk in client.chat.completions.create(model="gpt-4o", messages=request_messages(i, body_kb),  # type: ignore[arg-type]
                                                 stream=True):
        if first is None:
            first = (time.perf_counter() - started) * 1000
    if first is None:
        raise SystemExit(f"call {i}: empty stream")
    return first


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--calls", type=int, default=200, help="calls through each peer (default 200)")
    parser.add_argument("--body-kb", type=int, default=33)
    parser.add_argument("--before", metavar="DIR", help="also a warm proxy running another checkout's flowproof")
    args = parser.parse_args(argv)
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="ttfc-pair-") as t, FakeModelServer() as server, ExitStack() as stack:
        tmp = Path(t)
        ca = ensure_ca(tmp / "ca")
        confdir = ca.cert.parent
        # Short streams: three words 5 ms apart; the first chunk is what is timed.
        server.set_script([Reply.text("w0 w1 w2", chunk_delay=0.005)] * (args.calls * 3 + 30))
        tap = Mitmdump(tmp, confdir, "-s", str(PEER_SCRIPT), "--set", f"bench_upstream={server.url}",
                       "--set", "bench_tap=true")
        stack.callback(tap.stop)
        proxies = {"tap": tap.url}

        def flowproof_proxy(name: str, pythonpath: str | None) -> str:
            saved = os.environ.get("PYTHONPATH")
            if pythonpath is not None:
                os.environ["PYTHONPATH"] = pythonpath
            try:
                pool = stack.enter_context(ProxyPool())
                options = ProxyOptions(mode=Mode.RECORD, cassette=tmp / f"{name}.cassette.json",
                                       upstream=parse_upstreams([f"{OPENAI}={server.url}"]),
                                       report=tmp / f"{name}.events.jsonl")
                session = pool.open(options, confdir)
            finally:
                if pythonpath is not None:
                    if saved is None:
                        os.environ.pop("PYTHONPATH", None)
                    else:
                        os.environ["PYTHONPATH"] = saved
            stack.callback(session.stop)
            return session.url

        proxies["flowproof"] = flowproof_proxy("flowproof", None)
        if args.before:
            proxies["before"] = flowproof_proxy("before", str(Path(args.before).resolve()))
        clients = {}
        for name, url in proxies.items():
            http_client = stack.enter_context(httpx2.Client(proxy=url, verify=str(ca.bundle)))
            clients[name] = stack.enter_context(
                openai.OpenAI(api_key="sk-benchmark", http_client=http_client, max_retries=0))
        samples: dict[str, list[float]] = {name: [] for name in clients}
        for i in range(10):  # warm-up: TLS to each proxy, the upstream connection, first-call imports
            for client in clients.values():
                first_chunk_ms(client, i, args.body_kb)
        names = list(clients)
        for i in range(args.calls):
            order = names[i % len(names):] + names[: i % len(names)]  # who goes first rotates
            for name in order:
                samples[name].append(first_chunk_ms(clients[name], i, args.body_kb))
    load_end = os.getloadavg()
    print(f"{args.calls} streamed calls per peer, ~{args.body_kb} KB bodies, load average "
          f"{[round(x, 2) for x in load_start]} at start, {[round(x, 2) for x in load_end]} at end")
    print(f"{'time to first chunk, ms':26s}{'min':>8s}{'median':>8s}{'max':>8s}   per-call ratio to the tap, median")
    for name, xs in samples.items():
        ratio = "" if name == "tap" else \
            f"{statistics.median(a / b for a, b in zip(xs, samples['tap'], strict=True)):.3f}x"
        print(f"{name:26s}{min(xs):8.2f}{statistics.median(xs):8.2f}{max(xs):8.2f}   {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
