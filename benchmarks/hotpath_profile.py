"""The replay per-call path, measured: flowproof's replay against `mitmdump --server-replay`.

Not a test: a timing harness for the per-call and start-up work (docs/hotpath.md).

    .venv/bin/python benchmarks/hotpath_profile.py e2e [--calls 30] [--runs 5] [--sse] [--concurrency 8] [--before DIR]
    .venv/bin/python benchmarks/hotpath_profile.py micro [--calls 300] [--turns 10000] [--sse]
    .venv/bin/python benchmarks/hotpath_profile.py startup [--runs 5] [--before DIR]
    .venv/bin/python benchmarks/hotpath_profile.py session [--calls 300] [--runs 5] [--sse] [--before DIR]

``e2e`` runs whole mitmdump processes on 127.0.0.1 with the peers interleaved, one run of
each per round: the client straight to a local upstream (the floor), `mitmdump --server-replay`
of the same calls (upstream stopped), and flowproof replay (the addon, base-URL route: a
reverse listener for api.openai.com). Each call POSTs a distinct ~33 KB chat-completions body
on a keep-alive connection; the time is the client's loop only (the proxy is already up).
It prints the per-call time, the cost over the floor, and flowproof's ratio to mitmdump's.

``micro`` times the request hook alone, in-process: flowproof's `Replay.request` against
mitmproxy's `ServerPlayback.request` on the same flows; ``--turns`` sizes the cassette
(the scale target: a 10,000-turn cassette within 1.2x of a 10-turn one).

``session`` times, in-process, what a warm proxy's session does per replayed call: the
four hooks of each call (``requestheaders``, ``request``, ``responseheaders``,
``response``) through `flowproof.addon.warm.Session.hook` on an event loop, with logging as
under ``mitmdump -q`` (mitmproxy's handlers: a terminal one at ERROR and the ``add_log``
one); CPU of every thread per call. ``--before DIR`` runs the same in a child with
another checkout first on ``PYTHONPATH``.

``startup`` times a replayed flow (the booking example) with `flowproof-run` against
mitmdump's own start and stop plus the same agent run straight against a fake server.
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

            def do_POST(self) -> None:
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


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_through(proc: subprocess.Popen[bytes], port: int, calls: int, concurrency: int) -> tuple[float, float]:
    """(wall seconds of the client loop, CPU seconds the proxy spent during it)."""
    before = cpu_seconds(proc.pid)
    wall = client_loop(port, calls, concurrency)
    time.sleep(0.05)  # let the proxy finish its last hooks
    return wall, cpu_seconds(proc.pid) - before


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

        def floor() -> tuple[float, float]:
            up = Upstream(args.sse)
            try:
                return client_loop(up.port, args.calls, args.concurrency), 0.0
            finally:
                up.close()

        def mitm_replay() -> tuple[float, float]:
            port = free_port()
            proc = mitmdump(["--mode", f"reverse:http://127.0.0.1:{upstream_port}", "--server-replay", str(flows),
                             "--set", "server_replay_reuse=false"], port, confdir)
            try:
                return timed_through(proc, port, args.calls, args.concurrency)
            finally:
                stop(proc)

        def flowproof_replay(pythonpath: str | None = None) -> tuple[float, float]:
            port = free_port()
            report = tmp / "replay.jsonl"
            report.unlink(missing_ok=True)
            proc = mitmdump(addon_args("replay", cassette, report, None), port, confdir, pythonpath, report)
            try:
                return timed_through(proc, port, args.calls, args.concurrency)
            finally:
                stop(proc)

        peers: dict[str, Callable[[], tuple[float, float]]] = {
            "floor": floor, "mitmdump --server-replay": mitm_replay, "flowproof replay": flowproof_replay,
        }
        if args.before:
            peers["flowproof replay (before)"] = lambda: flowproof_replay(args.before)
        wall: dict[str, list[float]] = {k: [] for k in peers}
        cpu: dict[str, list[float]] = {k: [] for k in peers}
        for run in peers.values():  # one untimed warm-up each
            run()
        for _ in range(args.runs):
            for name, run in peers.items():
                w, c = run()
                wall[name].append(w / args.calls * 1000)
                cpu[name].append(c / args.calls * 1000)
        med = {k: statistics.median(v) for k, v in wall.items()}
        cmed = {k: statistics.median(v) for k, v in cpu.items()}
        kind = "SSE" if args.sse else "JSON"
        print(f"{args.calls} calls, {kind}, concurrency {args.concurrency}, median of {args.runs} "
              "(ms per call: client wall time, and the proxy process's CPU time)")
        for name in peers:
            print(f"  {name:28s} wall {med[name]:7.2f} (over floor {med[name] - med['floor']:6.2f})"
                  f"   proxy CPU {cmed[name]:6.2f}   wall runs {[round(x, 2) for x in wall[name]]}")
        mitm = "mitmdump --server-replay"
        for name in [n for n in peers if n.startswith("flowproof")]:
            over = (med[name] - med["floor"]) / (med[mitm] - med["floor"])
            print(f"  {name} / mitmdump: wall over the floor {over:.2f}x, proxy CPU {cmed[name] / cmed[mitm]:.2f}x")


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


def session(args: argparse.Namespace) -> None:
    if args.before:
        env = {**os.environ, "PYTHONPATH": str(Path(args.before).resolve())}
        argv = [sys.executable, __file__, "session", "--calls", str(args.calls), "--runs", "1", "--raw"]
        if args.sse:
            argv.append("--sse")
        ours, before = [], []
        for _ in range(args.runs):  # interleaved, one run of each per round
            ours.append(session_cpu(args.calls, args.sse))
            done = subprocess.run(argv, env=env, cwd=REPO.parent, capture_output=True, text=True, check=True)
            before.append(float(done.stdout.split()[-1]))
        print(f"warm session, {args.calls} replayed calls ({'SSE' if args.sse else 'JSON'}), CPU per call, "
              f"median of {args.runs}:")
        print(f"  this checkout   {statistics.median(ours):8.1f} us  {[round(x) for x in ours]}")
        print(f"  before          {statistics.median(before):8.1f} us  {[round(x) for x in before]}")
        return
    runs = [session_cpu(args.calls, args.sse) for _ in range(args.runs)]
    if args.raw:
        print(statistics.median(runs))
        return
    print(f"warm session, CPU per call: {statistics.median(runs):.1f} us {[round(x) for x in runs]}")


def session_cpu(calls: int, sse: bool) -> float:
    """CPU microseconds (every thread) per replayed call through one warm session's hooks."""
    import logging

    from mitmproxy import http
    from mitmproxy.test import taddons, tflow

    from flowproof.addon.core import build_flow_state
    from flowproof.addon.warm import Session
    from flowproof.cassette import save_cassette
    from flowproof.options import ProxyOptions, Route

    def flow(i: int) -> http.HTTPFlow:
        f = tflow.tflow()
        f.request = http.Request.make("POST", f"https://{HOST}{PATH}", request_body(i),
                                      {"content-type": "application/json"})
        return f

    with tempfile.TemporaryDirectory(prefix="hotpath-") as t, taddons.context() as tctx:
        # mitmproxy's add_log handler hands each record to the master's loop: the hooks run on it.
        loop = tctx.master.event_loop
        tmp = Path(t)
        save_cassette(synthetic_cassette(calls, sse), tmp / "c.json")
        options = ProxyOptions(cassette=tmp / "c.json", report=tmp / "ev.jsonl", route=Route.BASE_URL)
        state = build_flow_state(options)
        # As `WarmSessions` opens it (--before: older code has no `Session.of`).
        warm = Session.of(1, state) if hasattr(Session, "of") else Session(1, state)
        # As mitmdump -q leaves the root logger: DEBUG, its terminal handler at ERROR (taddons'
        # master has installed mitmproxy's add_log handler already).
        root = logging.getLogger()
        terminal = logging.NullHandler()
        terminal.setLevel(logging.ERROR)
        saved = root.level, root.handlers[:]
        root.setLevel(logging.DEBUG)
        root.handlers = [h for h in root.handlers if type(h).__name__ == "LegacyLogEvents"] + [terminal]
        flows = [flow(i) for i in range(calls)]

        async def drive() -> float:
            await warm.hook("request", flow(0))  # the worker thread starts
            started = time.process_time()
            for f in flows[1:]:
                for name in ("requestheaders", "request", "responseheaders", "response"):
                    await warm.hook(name, f)
                assert f.response is not None and f.response.status_code == 200
            return (time.process_time() - started) / (calls - 1) * 1e6

        try:
            return loop.run_until_complete(drive())
        finally:
            root.setLevel(saved[0])
            root.handlers = saved[1]
            warm.release()
            warm.state.shared.events.close()


# --------------------------------------------------------------------------- start-up


def startup(args: argparse.Namespace) -> None:
    """A replayed flow (the booking example, 3 calls) through flowproof-run, against mitmdump's own
    start and stop plus the same agent run straight against a fake model server.

    Wall and CPU (every child process: the runner's, the proxy's, the agent's) per run.
    """
    import resource

    from flowproof.testing import FakeModelServer

    examples = REPO / "example_specs"
    scrub = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy")
    base_env = {k: v for k, v in os.environ.items() if k not in scrub}

    def measured(fn: Callable[[], None]) -> tuple[float, float]:
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        fn()
        wall = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)

    def run(argv: list[str], env: dict[str, str], cwd: Path) -> None:
        done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, check=False)
        if done.returncode != 0:
            sys.exit(f"{argv} exited {done.returncode}: {done.stdout.decode()}{done.stderr.decode()}")

    def flowproof_run(pythonpath: str | None, ca: Path) -> Callable[[], None]:
        env = {**base_env, "FLOWPROOF_CA_DIR": str(ca)}
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        # cwd: example_specs, so a --before checkout is not shadowed by this one on sys.path.
        return lambda: run([str(BIN / "flowproof-run"), "booking.flow.yaml"], env, examples)

    def mitmdump_and_agent(tmp: Path) -> Callable[[], None]:
        def go() -> None:
            port = free_port()
            proc = mitmdump(["--mode", "regular"], port, tmp)
            with FakeModelServer.from_json(examples / "fake_model" / "booking.json") as server:
                env = {**base_env, "OPENAI_BASE_URL": f"{server.url}/v1", "OPENAI_API_KEY": "sk-bench"}
                run([sys.executable, "booking_agent.py", "Book me a flight to Nairobi tomorrow"], env, examples)
            stop(proc)
        return go

    with tempfile.TemporaryDirectory(prefix="hotpath-") as t:
        tmp = Path(t)
        peers: dict[str, Callable[[], None]] = {
            "mitmdump start+stop + agent": mitmdump_and_agent(tmp),
            "flowproof-run (replay)": flowproof_run(None, tmp / "ca"),
        }
        if args.before:
            peers["flowproof-run (before)"] = flowproof_run(args.before, tmp / "ca")
        wall: dict[str, list[float]] = {k: [] for k in peers}
        cpu: dict[str, list[float]] = {k: [] for k in peers}
        for fn in peers.values():
            fn()  # warm-up: file cache, .pyc, the CA
        for _ in range(args.runs):
            for name, fn in peers.items():
                w, c = measured(fn)
                wall[name].append(w)
                cpu[name].append(c)
    base = "mitmdump start+stop + agent"
    print(f"booking example (3 calls), median of {args.runs} (seconds; CPU = every child process)")
    for name in peers:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        print(f"  {name:30s} wall {w:5.2f} (+{w - statistics.median(wall[base]):5.2f})  "
              f"CPU {c:5.2f} (+{c - statistics.median(cpu[base]):5.2f})  wall runs {[round(x, 2) for x in wall[name]]}")


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
    p = sub.add_parser("session")
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--sse", action="store_true")
    p.add_argument("--before", metavar="DIR", help="also time the flowproof package found in DIR (PYTHONPATH)")
    p.add_argument("--raw", action="store_true", help=argparse.SUPPRESS)
    p = sub.add_parser("startup")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--before", metavar="DIR", help="also time the flowproof package found in DIR (PYTHONPATH)")
    args = parser.parse_args()
    {"e2e": e2e, "micro": micro, "session": session, "startup": startup}[args.what](args)


if __name__ == "__main__":
    main()
