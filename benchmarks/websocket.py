"""WebSocket replay per frame, against plain mitmdump passing the same frames through.

    .venv/bin/python benchmarks/websocket.py [--rounds 5] [--turns 20] [--words 40]

One client (openai-python's own ``client.responses.connect()``, the way codex talks: a
WebSocket to the Responses API, one ``response.create`` frame a turn, the answer as one
server frame per event) opens one connection through an explicit proxy with TLS
interception and runs ``--turns`` turns on it. Peers, interleaved round by round:

  (a) direct       the client straight to the fake model server's WebSocket (the floor)
  (b) mitm pass    plain ``mitmdump`` between them, api.openai.com mapped to the fake server
                   (benchmarks/mitm_peer.py): every frame relayed both ways
  (c) fp replay    ``mitmdump -s`` flowproof's addon replaying the same turns from a cassette
                   recorded first through flowproof; nothing reaches the fake server (checked)
  (d) fp session   the same replay as ``flowproof-run`` serves it: a session on the proxy the
                   runner starts (``ProxyPool``), which drops the mitmproxy addons it never
                   uses (flowproof.addon.lean)

Per frame: the connection's wall time from the first ``response.create`` to the last
terminal event, divided by the frames it carried (client and server); proxy CPU per frame
from /proc (the mitmdump process alone, over the same span). Medians over rounds, and the
ratio to (b) paired per round. Not a test: it passes nothing and fails nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import openai

from flowproof.options import Mode, ProxyOptions
from flowproof.runner.env import ensure_ca
from flowproof.runner.proxy import ProxyPool
from flowproof.testing import FakeModelServer, Reply

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

from run import Mitmdump, clean_env  # noqa: E402 — benchmarks/ is a folder of scripts

PEER_SCRIPT = BENCH / "mitm_peer.py"
ADDON_SCRIPT = REPO / "addon" / "flowproof_addon.py"
TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")
PEERS = ("direct", "mitm-pass", "fp-replay", "fp-session")
LABELS = {"direct": "(a) client -> fake server (floor)", "mitm-pass": "(b) mitmdump pass-through",
          "fp-replay": "(c) flowproof replay, mitmdump -s", "fp-session": "(d) flowproof replay, runner's proxy"}
_TICKS = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process (its threads included), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def run_turns(client: openai.OpenAI, turns: int, options: dict[str, Any]) -> tuple[float, int]:
    """One connection, ``turns`` turns chained by previous_response_id: (seconds, frames)."""
    frames = 0
    with client.responses.connect(websocket_connection_options={"open_timeout": 60, **options}) as conn:
        previous: str | None = None
        started = time.perf_counter()
        for i in range(turns):
            create: dict[str, Any] = {"model": "gpt-x", "input": f"question {i}", "store": False}
            if previous is not None:
                create["previous_response_id"] = previous
            conn.response.create(**create)
            frames += 1
            for event in conn:
                frames += 1
                if event.type in TERMINAL:
                    if event.type != "response.completed":
                        raise SystemExit(f"turn {i} ended with {event.type}: {event}")
                    previous = event.response.id
                    break
        return time.perf_counter() - started, frames


class AddonProxy(Mitmdump):
    """mitmdump with flowproof's addon, ready when its event log says so (stopped as `Mitmdump` is)."""

    def __init__(self, tmp: Path, confdir: Path, *options: str) -> None:
        self.report = tmp / "events.jsonl"
        self.report.unlink(missing_ok=True)
        argv = [str(Path(sys.executable).parent / "mitmdump"), "-q", "--listen-host", "127.0.0.1",
                "--listen-port", "0", "--set", f"confdir={confdir}", "--set", "connection_strategy=lazy",
                "-s", str(ADDON_SCRIPT), "--set", f"flowproof_report={self.report}"]
        for opt in options:
            argv += ["--set", opt]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True, env=clean_env())
        deadline = time.monotonic() + 60

        while time.monotonic() < deadline:
            if self.report.exists():
                for line in self.report.read_text().splitlines():
                    event = json.loads(line)
                    if event.get("event") == "ready":
                        self.port = int(event["listen"][0]["port"])
                        return
            if self.proc.poll() is not None:
                raise SystemExit(f"mitmdump with the addon exited {self.proc.returncode}")
            time.sleep(0.02)
        raise SystemExit("mitmdump with the addon did not get ready in 60 s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--turns", type=int, default=20, help="turns on the one connection")
    parser.add_argument("--words", type=int, default=40, help="words per answer: about one server frame each")
    args = parser.parse_args(argv)
    answer = " ".join(f"word{i}" for i in range(args.words))
    samples: dict[str, list[tuple[float, float, int]]] = {p: [] for p in PEERS}
    with tempfile.TemporaryDirectory(prefix="flowproof-ws-bench-") as d, FakeModelServer() as server:
        tmp = Path(d)
        ca = ensure_ca(tmp / "ca")
        confdir = ca.cert.parent
        context = ssl.create_default_context(cafile=str(ca.bundle))
        proxied = openai.OpenAI(api_key="sk-benchmark", max_retries=0)
        direct = openai.OpenAI(api_key="sk-benchmark", max_retries=0, base_url=f"{server.url}/v1")
        cassette = tmp / "ws.cassette.json"

        # Record once through flowproof: the replay peer's cassette.
        server.set_script([Reply.text(answer)] * args.turns)
        recorder = AddonProxy(tmp, confdir, "flowproof_mode=record", f"flowproof_cassette={cassette}",
                              f"flowproof_upstream=api.openai.com={server.url}")
        try:
            run_turns(proxied, args.turns, {"ssl": context, "proxy": recorder.url})
        finally:
            recorder.stop()
        if not cassette.exists():
            raise SystemExit("the recording proxy wrote no cassette")

        def one(peer: str) -> tuple[float, float, int]:
            if peer == "direct":
                server.set_script([Reply.text(answer)] * args.turns)
                seconds, frames = run_turns(direct, args.turns, {})
                return seconds, 0.0, frames
            if peer == "fp-session":
                server.set_script([])
                before_served = server.calls_served
                with ProxyPool() as pool:
                    session = pool.open(ProxyOptions(mode=Mode.REPLAY, cassette=cassette,
                                                     report=tmp / "session.jsonl"), confdir)
                    try:
                        pid = session.process.pid
                        cpu = proc_cpu_s(pid)
                        seconds, frames = run_turns(proxied, args.turns, {"ssl": context, "proxy": session.url})
                        cpu = proc_cpu_s(pid) - cpu
                    finally:
                        session.stop()
                if server.calls_served != before_served:
                    raise SystemExit("flowproof replay let a call reach the fake server")
                return seconds, cpu, frames
            proxy: Mitmdump
            if peer == "mitm-pass":
                server.set_script([Reply.text(answer)] * args.turns)
                proxy = Mitmdump(tmp, confdir, "-s", str(PEER_SCRIPT), "--set", f"bench_upstream={server.url}")
            else:
                server.set_script([])
                proxy = AddonProxy(tmp, confdir, "flowproof_mode=replay", f"flowproof_cassette={cassette}")
            before_served = server.calls_served
            try:
                cpu = proc_cpu_s(proxy.proc.pid)
                seconds, frames = run_turns(proxied, args.turns, {"ssl": context, "proxy": proxy.url})
                cpu = proc_cpu_s(proxy.proc.pid) - cpu
            finally:
                proxy.stop()
            if peer == "fp-replay" and server.calls_served != before_served:
                raise SystemExit("flowproof replay let a call reach the fake server")
            return seconds, cpu, frames

        for peer in PEERS:  # warm-up: file cache, .pyc files
            one(peer)
        for r in range(args.rounds):
            print(f"# round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
            for peer in PEERS[r % len(PEERS):] + PEERS[:r % len(PEERS)]:
                samples[peer].append(one(peer))

    frames = samples["direct"][0][2]
    print(f"load average {[round(x, 2) for x in os.getloadavg()]}; {args.turns} turns of {args.words} words on one "
          f"connection, {frames} frames; medians of {args.rounds} interleaved rounds")
    print(f"{'per frame':36s}{'wall us':>10s}{'proxy CPU us':>14s}{'x mitm wall':>13s}{'x mitm CPU':>12s}")
    for peer in PEERS:
        wall = [s[0] / s[2] * 1e6 for s in samples[peer]]
        cpu = [s[1] / s[2] * 1e6 for s in samples[peer]]
        base_wall = [s[0] / s[2] * 1e6 for s in samples["mitm-pass"]]
        base_cpu = [s[1] / s[2] * 1e6 for s in samples["mitm-pass"]]
        xw = statistics.median(a / b for a, b in zip(wall, base_wall, strict=True))
        xc = (statistics.median(a / b for a, b in zip(cpu, base_cpu, strict=True))
              if peer != "direct" and min(base_cpu) > 0 else float("nan"))
        print(f"{LABELS[peer]:36s}{statistics.median(wall):10.1f}{statistics.median(cpu):14.1f}{xw:13.2f}"
              f"{xc:12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
