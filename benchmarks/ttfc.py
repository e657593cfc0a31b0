"""Measure what the addon costs: time to first chunk in record mode, and replay cost per call.

Run from a checkout: ``python benchmarks/ttfc.py [--runs N]``. Not part of the test suite.

1. Time to first chunk (TTFC) of a streamed chat completion from the fake model
   server (first chunk at once, then several chunks ``--chunk-delay`` apart), sent
   through a proxy on 127.0.0.1, median of N runs:
   direct (no proxy) / plain mitmdump (no addon; it buffers bodies by default) /
   plain mitmdump with ``stream_large_bodies=1`` / mitmdump + flowproof in record mode.
2. Replay cost per call, in-process: ``Flowproof.request`` (hash path, replay
   decision, response construction) against a 10-turn and a 10,000-turn cassette.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from flowproof.cassette import (
    Cassette,
    RecordedRequest,
    RecordedResponse,
    RecordedTurn,
    body_sha256,
    save_cassette,
)
from flowproof.testing import FakeModelServer, Reply
from flowproof.wire.sse import make_event

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "addon" / "flowproof_addon.py"
BODY = json.dumps({"model": "gpt-4o", "stream": True,
                   "messages": [{"role": "user", "content": "Say six words."}]}).encode()


def start(tmp: Path, name: str, *args: str) -> tuple[subprocess.Popen[bytes], int]:
    log = tmp / f"{name}.log"
    mitmdump = str(Path(sys.executable).parent / "mitmdump")
    cmd = [mitmdump, "--listen-host", "127.0.0.1", "--listen-port", "0",
           "--set", f"confdir={tmp / 'conf'}", *args]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 30
    import re

    while time.monotonic() < deadline:
        m = re.search(r"listening at [^:]+:(\d+)", log.read_text(errors="replace"))
        if m:
            return proc, int(m.group(1))
        if proc.poll() is not None:
            raise SystemExit(f"mitmdump exited: {log.read_text()}")
        time.sleep(0.05)
    stop(proc)
    raise SystemExit("mitmdump did not start")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def ttfc(url: str, proxy_port: int | None, runs: int) -> tuple[float, float]:
    """(median TTFC, median total) in ms over ``runs`` streamed requests on one kept-alive connection."""
    parts = urlsplit(url)
    if proxy_port is None:
        conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
        target = parts.path
    else:
        conn = http.client.HTTPConnection("127.0.0.1", proxy_port, timeout=30)
        target = url  # absolute-form: a plain-HTTP proxy request
    conn.connect()
    # Without NODELAY, headers and body go out as two segments and delayed ACKs add ~40 ms.
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    firsts, totals = [], []
    try:
        for _ in range(runs + 1):
            t0 = time.perf_counter()
            conn.request("POST", target, body=BODY, headers={"content-type": "application/json"})
            resp = conn.getresponse()
            first = resp.read1(65536)
            t1 = time.perf_counter()
            assert first, "empty first chunk"
            resp.read()
            t2 = time.perf_counter()
            firsts.append((t1 - t0) * 1000)
            totals.append((t2 - t0) * 1000)
    finally:
        conn.close()
    # The first request pays connection setup; leave it out.
    return statistics.median(firsts[1:]), statistics.median(totals[1:])


def bench_ttfc(runs: int, chunk_delay: float) -> None:
    replies = [Reply.text("one two three four five six", chunk_delay=chunk_delay) for _ in range(4 * (runs + 1))]
    with tempfile.TemporaryDirectory() as d, FakeModelServer(replies) as server:
        tmp = Path(d)
        url = server.url + "/v1/chat/completions"
        rows = [("direct (no proxy)", *ttfc(url, None, runs))]
        setups = [
            ("plain mitmdump (buffers)", ()),
            ("plain mitmdump stream_large_bodies=1", ("--set", "stream_large_bodies=1")),
            ("mitmdump + flowproof record", ("-s", str(SCRIPT), "--set", "flowproof_mode=record",
                                             "--set", f"flowproof_cassette={tmp / 'c.json'}")),
        ]
        for name, args in setups:
            proc, port = start(tmp, name.split()[0] + str(len(rows)), *args)
            try:
                rows.append((name, *ttfc(url, port, runs)))
            finally:
                stop(proc)
    print(f"TTFC, streamed chat completion, 9 SSE events {chunk_delay * 1000:.0f} ms apart, median of {runs}:")
    for name, first, total in rows:
        print(f"  {name:40s} first chunk {first:8.2f} ms   whole stream {total:8.2f} ms")


def chat_turn(i: int) -> RecordedTurn:
    body = json.dumps({"model": "gpt-4o", "stream": True,
                       "messages": [{"role": "user", "content": f"question {i}"}]}).encode()
    chunk = json.dumps({"id": "c", "object": "chat.completion.chunk",
                        "choices": [{"index": 0, "delta": {"content": f"answer {i}"}, "finish_reason": None}]})
    return RecordedTurn(i, "openai-chat",
                        RecordedRequest("POST", "https://api.openai.com/v1/chat/completions", {},
                                        body_sha256(body), json.loads(body)),
                        RecordedResponse(200, {"content-type": "text/event-stream"},
                                         events=(make_event(chunk), make_event("[DONE]"))))


def bench_replay(sizes: tuple[int, ...], calls: int, repeats: int) -> None:
    # Each test context installs a mitmproxy log handler bound to its own event loop, which
    # is closed afterwards; keep the addon's log lines away from the stale handlers.
    import logging

    from mitmproxy.test import taddons, tflow, tutils

    from flowproof.addon import Flowproof

    logging.getLogger("flowproof.addon").disabled = True

    print(f"Replay cost per call (Flowproof.request: hash, decide, build response), {calls} calls x {repeats}:")
    with tempfile.TemporaryDirectory() as d:
        for size in sizes:
            turns = [chat_turn(i) for i in range(size)]
            path = Path(d) / f"c{size}.json"
            save_cassette(Cassette(tuple(turns)), path)
            picks = [turns[(k * size) // calls] for k in range(calls)]
            per_call, loads = [], []
            for _ in range(repeats):
                addon = Flowproof()
                with taddons.context(addon) as tctx:
                    t0 = time.perf_counter()
                    tctx.options.update(flowproof_mode="replay", flowproof_cassette=str(path),
                                        flowproof_report=str(Path(d) / "events.jsonl"))
                    loads.append(time.perf_counter() - t0)
                    flows = [tflow.tflow(req=tutils.treq(
                        host="api.openai.com", port=443, scheme=b"https", method=b"POST",
                        path=b"/v1/chat/completions", content=json.dumps(t.request.body).encode()))
                        for t in picks]
                    t0 = time.perf_counter()
                    for f in flows:
                        addon.request(f)
                    per_call.append((time.perf_counter() - t0) / calls)
                    assert all(f.response is not None and f.response.status_code == 200 for f in flows)
                    addon.done()
            print(f"  {size:6d} turns: {statistics.median(per_call) * 1e6:8.1f} µs per call"
                  f"   (cassette load in configure: {statistics.median(loads) * 1000:8.1f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--chunk-delay", type=float, default=0.02)
    args = parser.parse_args()
    if args.runs:
        bench_ttfc(args.runs, args.chunk_delay)
    bench_replay((10, 10_000), calls=10, repeats=5)


if __name__ == "__main__":
    main()
