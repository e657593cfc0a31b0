"""The replay per-call path, measured: flowproof's replay against `mitmdump --server-replay`.

Not a test: a timing harness for the per-call and start-up work (docs/hotpath.md).

    .venv/bin/python benchmarks/hotpath_profile.py e2e [--calls 30] [--runs 5] [--sse] [--concurrency 8]
    .venv/bin/python benchmarks/hotpath_profile.py micro [--calls 300] [--turns 10000] [--sse]
    .venv/bin/python benchmarks/hotpath_profile.py startup [--runs 5]

``e2e`` runs whole mitmdump processes on 127.0.0.1 with the peers interleaved, one run of
each per round: the client straight to a local upstream (the floor), `mitmdump --server-replay`
of the same calls (upstream stopped), and flowproof replay (the addon, base-URL route: a
reverse listener for api.openai.com). Each call POSTs a distinct ~33 KB chat-completions body
on a keep-alive connection; the time is the client's loop only (the proxy is already up).
It prints the per-call time, the cost over the floor, and flowproof's ratio to mitmdump's.

``micro`` times the request hook alone, in-process: flowproof's `Replay.request` against
mitmproxy's `ServerPlayback.request` on the same flows; ``--turns`` sizes the cassette
(the scale target: a 10,000-turn cassette within 1.2x of a 10-turn one).

``startup`` times a replayed single-call flow with `flowproof-run` against mitmdump's own
start and stop around the same agent.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
HOST = "api.openai.com"
PATH = "/v1/chat/completions"


# --------------------------------------------------------------------------- traffic


def request_body(i: int, size: int = 33_000) -> bytes:
    """A distinct chat-completions body of about ``size`` bytes (call ``i``)."""
    filler = ("The quick brown fox jumps over the lazy dog. " * (size // 45 + 1))[:size]
    doc = {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": filler},
            {"role": "user", "content": f"call {i}"},
        ],
        "tools": [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}],
    }
    return json.dumps(doc).encode()


def json_reply(i: int) -> bytes:
    return json.dumps({
        "id": f"chatcmpl-{i}", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": f"answer {i} " + "word " * 100}}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 100, "total_tokens": 109},
    }).encode()


def sse_reply(i: int) -> bytes:
    chunks = []
    for k in range(40):
        delta = {"role": "assistant", "content": ""} if k == 0 else {"content": f"w{k} "}
        chunks.append({"id": f"chatcmpl-{i}", "object": "chat.completion.chunk", "created": 1,
                       "model": "gpt-4o-mini", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    chunks.append({"id": f"chatcmpl-{i}", "object": "chat.completion.chunk", "created": 1,
                   "model": "gpt-4o-mini", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


class Upstream:
    """A local model server: the i-th distinct body gets the i-th reply (JSON or SSE)."""

    def __init__(self, sse: bool) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall

            def do_POST(self) -> None:  # noqa: N802 — http.server's name
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                i = json.loads(body)["messages"][1]["content"].split()[1]
                data = sse_reply(int(i)) if outer.sse else json_reply(int(i))
                self.send_response(200)
                self.send_header("content-type", "text/event-stream" if outer.sse else "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.sse = sse
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def client_loop(port: int, calls: int, concurrency: int, host: str | None = None) -> float:
    """POST ``calls`` distinct bodies over ``concurrency`` keep-alive connections; seconds taken."""
    bodies = [request_body(i) for i in range(calls)]
    errors: list[str] = []

    def worker(indices: list[int]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for i in indices:
            headers = {"content-type": "application/json"}
            if host:
                headers["host"] = host
            conn.request("POST", PATH, body=bodies[i], headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200 or not data:
                errors.append(f"call {i}: {resp.status} {data[:300]!r}")
        conn.close()

    # Concurrent clients: call k goes to worker k % concurrency, so each keeps recorded order.
    shares = [list(range(w, calls, concurrency)) for w in range(concurrency)]
    threads = [threading.Thread(target=worker, args=(s,)) for s in shares]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    if errors:
        sys.exit("\n".join(errors[:3]))
    return elapsed


# --------------------------------------------------------------------------- processes


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"mitmdump exited {proc.returncode}: {proc.stdout.read().decode() if proc.stdout else ''}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    sys.exit("mitmdump never listened")


def mitmdump(args: list[str], port: int, confdir: Path, pythonpath: str | None = None,
             report: Path | None = None) -> subprocess.Popen[bytes]:
    """Start mitmdump; wait for its port, or for the addon's ``ready`` event when ``report`` is given
    (the addon loads after mitmproxy listens: calls before ``ready`` would time its import)."""
    argv = [str(BIN / "mitmdump"), "-q", "--listen-host", "127.0.0.1", "--listen-port", str(port),
            "--set", f"confdir={confdir}", "--set", "connection_strategy=lazy", *args]
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath  # another flowproof checkout (--before)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                            env=env, cwd="/")
    wait_port(port, proc)
    while report is not None and b'"event": "ready"' not in (report.read_bytes() if report.exists() else b""):
        if proc.poll() is not None:
            sys.exit(f"mitmdump exited {proc.returncode}")
        time.sleep(0.01)
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(2)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def addon_args(mode: str, cassette: Path, report: Path, upstream: int | None) -> list[str]:
    args = ["-s", str(REPO / "addon" / "flowproof_addon.py"), "--mode", f"reverse:https://{HOST}",
            "--set", f"flowproof_mode={mode}", "--set", f"flowproof_cassette={cassette}",
            "--set", f"flowproof_report={report}", "--set", "flowproof_route=base_url"]
    if upstream is not None:
        args += ["--set", f"flowproof_upstream={HOST}=http://127.0.0.1:{upstream}"]
    return args


def prepare(tmp: Path, calls: int, sse: bool) -> tuple[Path, Path, int]:
    """Record the calls once through flowproof (a cassette) and once through mitmdump (a flow file)."""
    upstream = Upstream(sse)
    cassette, flows, confdir = tmp / "c.json", tmp / "flows.mitm", tmp / "conf"
    try:
        port = free_port()
        proc = mitmdump(addon_args("record", cassette, tmp / "rec.jsonl", upstream.port), port, confdir,
                        report=tmp / "rec.jsonl")
        client_loop(port, calls, 1)
        stop(proc)
        port = free_port()
        proc = mitmdump(["--mode", f"reverse:http://127.0.0.1:{upstream.port}", "-w", str(flows)], port, confdir)
        client_loop(port, calls, 1)
        stop(proc)
    finally:
        upstream.close()
    if not cassette.exists() or not flows.exists():
        sys.exit("recording failed")
    # mitmdump's replay key holds the upstream's host and port: replay against the same (now closed) port.
    return cassette, flows, upstream.port


def e2e(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="hotpath-") as t:
        tmp = Path(t)
        cassette, flows, upstream_port = prepare(tmp, args.calls, args.sse)
        confdir = tmp / "conf"
        times: dict[str, list[float]] = {"floor": [], "mitmdump --server-replay": [], "flowproof replay": []}

        def floor() -> float:
            up = Upstream(args.sse)
            try:
                return client_loop(up.port, args.calls, args.concurrency)
            finally:
                up.close()

        def mitm_replay() -> float:
            port = free_port()
            proc = mitmdump(["--mode", f"reverse:http://127.0.0.1:{upstream_port}", "--server-replay", str(flows),
                             "--set", "server_replay_reuse=false"], port, confdir)
            try:
                return client_loop(port, args.calls, args.concurrency)
            finally:
                stop(proc)

        def flowproof_replay(pythonpath: str | None = None) -> float:
            port = free_port()
            report = tmp / "replay.jsonl"
            report.unlink(missing_ok=True)
            proc = mitmdump(addon_args("replay", cassette, report, None), port, confdir, pythonpath, report)
            try:
                return client_loop(port, args.calls, args.concurrency)
            finally:
                stop(proc)

        peers: dict[str, Callable[[], float]] = {
            "floor": floor, "mitmdump --server-replay": mitm_replay, "flowproof replay": flowproof_replay,
        }
        if args.before:
            peers["flowproof replay (before)"] = lambda: flowproof_replay(args.before)
            times["flowproof replay (before)"] = []
        for name, run in peers.items():  # one untimed warm-up each
            run()
        for _ in range(args.runs):
            for name, run in peers.items():
                times[name].append(run() / args.calls * 1000)
        med = {k: statistics.median(v) for k, v in times.items()}
        kind = "SSE" if args.sse else "JSON"
        print(f"{args.calls} calls, {kind}, concurrency {args.concurrency}, median of {args.runs} (ms per call)")
        for name, value in med.items():
            over = value - med["floor"]
            print(f"  {name:28s} {value:7.2f}   over floor {over:6.2f}   runs {[round(x, 2) for x in times[name]]}")
        mitm_over = med["mitmdump --server-replay"] - med["floor"]
        fp_over = med["flowproof replay"] - med["floor"]
        print(f"  ratio flowproof/mitmdump over the floor: {fp_over / mitm_over:.2f}x")
        if args.before:
            before_over = med["flowproof replay (before)"] - med["floor"]
            print(f"  ratio flowproof (before)/mitmdump over the floor: {before_over / mitm_over:.2f}x")
        print(f"  ratio flowproof/mitmdump per call: {med['flowproof replay'] / med['mitmdump --server-replay']:.2f}x")


# --------------------------------------------------------------------------- in-process


def synthetic_cassette(turns: int, sse: bool) -> Any:
    """A cassette of ``turns`` recorded calls built in memory (the bodies of `request_body`)."""
    from flowproof.cassette import Cassette, RecordedRequest, RecordedResponse, RecordedTurn
    from flowproof.wire.sse import parse_sse

    out = []
    for i in range(turns):
        raw = request_body(i)
        resp = (RecordedResponse(200, {"content-type": "text/event-stream"}, events=tuple(parse_sse(sse_reply(i))))
                if sse else RecordedResponse(200, {"content-type": "application/json"}, body=json.loads(json_reply(i))))
        out.append(RecordedTurn(i, "openai-chat", RecordedRequest(
            "POST", f"https://{HOST}{PATH}", {"content-type": "application/json"},
            hashlib.sha256(raw).hexdigest(), json.loads(raw)), resp))
    return Cassette(tuple(out), route="base_url")


def micro(args: argparse.Namespace) -> None:
    from mitmproxy import http
    from mitmproxy.addons.serverplayback import ServerPlayback
    from mitmproxy.test import taddons, tflow

    from flowproof.addon import Flowproof
    from flowproof.cassette import save_cassette

    def flow(i: int) -> http.HTTPFlow:
        f = tflow.tflow()
        f.request = http.Request.make("POST", f"https://{HOST}{PATH}", request_body(i),
                                      {"content-type": "application/json"})
        return f

    with tempfile.TemporaryDirectory(prefix="hotpath-") as t:
        tmp = Path(t)
        cassette_path = tmp / "c.json"
        started = time.perf_counter()
        save_cassette(synthetic_cassette(args.turns, args.sse), cassette_path)
        print(f"cassette of {args.turns} turns written in {time.perf_counter() - started:.2f}s "
              f"({cassette_path.stat().st_size / 1e6:.1f} MB)")
        calls = min(args.calls, args.turns)

        def time_flowproof() -> float:
            addon = Flowproof()
            with taddons.context(addon) as tctx:
                t0 = time.perf_counter()
                tctx.configure(addon, flowproof_mode="replay", flowproof_cassette=str(cassette_path),
                               flowproof_route="base_url", flowproof_report=str(tmp / "ev.jsonl"))
                load = time.perf_counter() - t0
                flows = [flow(i) for i in range(calls)]
                profiler = None
                if args.profile:
                    from pyinstrument import Profiler

                    profiler = Profiler(interval=0.0002)
                    profiler.start()
                t0 = time.perf_counter()
                for f in flows:
                    for hook in (addon, *addon.addons):
                        if hasattr(hook, "request"):
                            hook.request(f)
                    assert f.response is not None and f.response.status_code == 200, f.response
                per = (time.perf_counter() - t0) / calls
                if profiler is not None:
                    profiler.stop()
                    print(profiler.output_text(unicode=False, color=False, show_all=False))
                addon.events.close()
                print(f"    (load {load * 1000:.0f} ms)", end="")
                return per

        def time_mitm() -> float:
            recorded = []
            for i in range(calls):
                f = flow(i)
                f.response = http.Response.make(200, json_reply(i), {"content-type": "application/json"})
                recorded.append(f)
            sp = ServerPlayback()
            with taddons.context(sp) as tctx:
                tctx.configure(sp, server_replay_reuse=False)
                sp.load_flows(recorded)
                flows = [flow(i) for i in range(calls)]
                t0 = time.perf_counter()
                for f in flows:
                    sp.request(f)
                    assert f.response is not None
                return (time.perf_counter() - t0) / calls

        fp, mm = [], []
        for _ in range(args.runs):
            fp.append(time_flowproof() * 1e6)
            mm.append(time_mitm() * 1e6)
            print()
        print(f"request hook, {calls} calls of a {args.turns}-turn cassette ({'SSE' if args.sse else 'JSON'}), "
              f"median of {args.runs}:")
        print(f"  flowproof Replay.request      {statistics.median(fp):8.1f} us  {[round(x) for x in fp]}")
        print(f"  mitmproxy ServerPlayback      {statistics.median(mm):8.1f} us  {[round(x) for x in mm]}")


# --------------------------------------------------------------------------- start-up


def startup(args: argparse.Namespace) -> None:
    """A one-call replayed flow through flowproof-run vs mitmdump's own start+stop around the agent."""
    env = {k: v for k, v in os.environ.items() if "PROXY" not in k.upper() and not k.startswith("OPENAI")}
    spec = REPO / "example_specs" / "booking.flow.yaml"

    def run_flowproof() -> float:
        t0 = time.perf_counter()
        done = subprocess.run([str(BIN / "flowproof-run"), str(spec)], env=env, cwd=REPO,
                              capture_output=True, check=False)
        if done.returncode != 0:
            sys.exit(done.stdout.decode() + done.stderr.decode())
        return time.perf_counter() - t0

    def run_mitmdump() -> float:
        with tempfile.TemporaryDirectory(prefix="hotpath-") as t:
            t0 = time.perf_counter()
            port = free_port()
            proc = mitmdump(["--mode", "regular"], port, Path(t))
            stop(proc)
            return time.perf_counter() - t0

    fp, mm = [], []
    run_flowproof()
    run_mitmdump()
    for _ in range(args.runs):
        fp.append(run_flowproof())
        mm.append(run_mitmdump())
    print(f"median of {args.runs}: flowproof-run booking (replay) {statistics.median(fp):.2f}s {[round(x, 2) for x in fp]}; "
          f"mitmdump start+stop {statistics.median(mm):.2f}s {[round(x, 2) for x in mm]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("e2e")
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--sse", action="store_true")
    p.add_argument("--before", metavar="DIR", help="also time the flowproof package found in DIR (PYTHONPATH)")
    p = sub.add_parser("micro")
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--turns", type=int, default=300)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--sse", action="store_true")
    p.add_argument("--profile", action="store_true", help="print a pyinstrument profile of flowproof's hook")
    p = sub.add_parser("startup")
    p.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    {"e2e": e2e, "micro": micro, "startup": startup}[args.what](args)


if __name__ == "__main__":
    main()
