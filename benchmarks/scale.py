"""Scale measurements for benchmarks/run.py: big cassettes, written with the real cassette writer.

- matching: the replay addon's request hook (hash, match, answer, event log)
  per call, 10 requests with ~33 KB bodies, against a cassette holding just
  those 10 turns and against one with 10,000 turns (target: <= 1.2x), with
  the CPU caches emptied before each batch (`evict_caches`) so that both
  start as a replayed call does, its turn not in cache;
- loading: a 10,000-turn cassette, ``load_cassette`` alone and the whole
  addon ``configure`` in replay, and how many sha256 digests loading computes
  (0 means the stored ``body_sha256`` is trusted, nothing is re-hashed);
- memory: peak RSS (VmHWM) of a real ``mitmdump`` replaying a 1,000-turn
  cassette of ~33 KB bodies, against the same proxy with a 10-turn cassette, per
  MB of cassette on disk;
- divergence: the time to refuse and explain a request whose 33 KB body differs
  from a recorded one in one word, when the closest turn is the first and the
  last of 10,000 (every other turn has another system prompt but the same API,
  model, tools and depth, so the closest turn is found by its text; the index
  of the turns is built on the first miss and counted here).

Times are CPU time of the process (``time.process_time``), not wall
time, so a busy machine inflates them little. Filler turns carry ~2 KB bodies
(a 10,000-turn cassette of 33 KB bodies would be 330 MB); the turns that are requested carry ~33 KB ones.

    .venv/bin/python benchmarks/run.py --only-scale [--quick]
"""

from __future__ import annotations

import cProfile
import http.client
import json
import logging
import os
import pstats
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flowproof.cassette import (
    Cassette,
    RecordedRequest,
    RecordedResponse,
    RecordedTurn,
    load_cassette,
    save_cassette,
)
from flowproof.replay import Miss, Replayer
from flowproof.request_key import body_sha256
from flowproof.runner.env import ensure_ca
from flowproof.wire.sse import make_event

REPO = Path(__file__).resolve().parents[1]
ADDON_SCRIPT = REPO / "addon" / "flowproof_addon.py"
URL = "https://api.openai.com/v1/chat/completions"
PATH = "/v1/chat/completions"
#: Every in-process time here is CPU time of this process (all its threads): on a machine shared with other
#: work, wall time mostly measures the others; CPU time measures the code.
clock = time.process_time
_TEXT = "Tool read_file(path: string) returns the text of a file in the working tree. "


def system_prompt(kb: int, tag: str = "") -> str:
    return (tag + _TEXT * (kb * 1024 // len(_TEXT) + 1))[: kb * 1024]


def chat_raw(user: str, system: str) -> bytes:
    body = {"model": "gpt-4o", "stream": True,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}
    return json.dumps(body, separators=(",", ":")).encode()


def chat_turn(index: int, raw: bytes) -> RecordedTurn:
    events = [make_event(json.dumps({"id": f"c{index}", "object": "chat.completion.chunk",
                                     "choices": [{"index": 0, "delta": {"content": f"w{k} "},
                                                  "finish_reason": None}]}))
              for k in range(20)]
    events.append(make_event("[DONE]"))
    return RecordedTurn(index, "openai-chat",
                        RecordedRequest("POST", URL, {"content-type": "application/json"}, body_sha256(raw),
                                        json.loads(raw)),
                        RecordedResponse(200, {"content-type": "text/event-stream"}, events=tuple(events)))


def build(path: Path, raws: list[bytes], route: str = "proxy") -> int:
    """Write a cassette of one turn per raw body with the real writer; its size in bytes."""
    save_cassette(Cassette(tuple(chat_turn(i, raw) for i, raw in enumerate(raws)), route=route), path)  # type: ignore[arg-type]
    return path.stat().st_size


def hot_bodies(n: int, kb: int = 33) -> list[bytes]:
    system = system_prompt(kb)
    return [chat_raw(f"question {i}", system) for i in range(n)]


def filler(n: int, start: int = 0) -> list[bytes]:
    return [chat_raw(f"filler {i}", system_prompt(2, f"filler system {i}. ")) for i in range(start, start + n)]


def spread(hot: list[bytes], total: int, start: int = 0) -> list[bytes]:
    """``total`` bodies: the ``hot`` ones spread evenly among filler."""
    out = filler(total - len(hot), start)
    step = total // len(hot)
    for k, raw in enumerate(hot):
        out.insert(k * step, raw)
    return out


# --------------------------------------------------------------------------- in-process addon


@contextmanager
def replay_addon(cassette: Path, tmp: Path, route: str = "proxy") -> Iterator[tuple[Any, Callable[[], float]]]:
    """The real root addon in a mitmproxy test context, configured for replay; (request hook, configure time).

    The hook is called the way mitmproxy calls it: on the root addon, then on each child.
    """
    from mitmproxy.hooks import all_hooks
    from mitmproxy.test import taddons

    from flowproof.addon import Flowproof

    # Each test context binds a log handler to its own event loop, closed afterwards: keep
    # the addon's log lines away from those stale handlers.
    quiet = logging.getLogger("flowproof")
    quiet.propagate = False
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())
    addon = Flowproof()
    with taddons.context(addon) as tctx:
        t0 = clock()
        tctx.options.update(flowproof_mode="replay", flowproof_cassette=str(cassette),
                            flowproof_report=str(tmp / "events.jsonl"), flowproof_route=route)
        elapsed = clock() - t0

        def request(flow: Any) -> None:
            tctx.master.addons.invoke_addon_sync(addon, all_hooks["request"](flow))

        yield request, lambda: elapsed
        tctx.master.addons.invoke_addon_sync(addon, all_hooks["done"]())


def model_flow(raw: bytes) -> Any:
    from mitmproxy.test import tflow, tutils

    return tflow.tflow(req=tutils.treq(host="api.openai.com", port=443, scheme=b"https", method=b"POST",
                                       path=PATH.encode(), content=raw,
                                       headers=((b"content-type", b"application/json"),)))


#: More than this machine's last-level cache (32 MiB here), so touching all of it leaves nothing
#: of what the process touched before in any CPU cache.
EVICT_BYTES = 128 << 20


def evict_caches() -> None:
    """Touch a buffer bigger than the CPU's caches, one byte per cache line.

    Without it the 10-turn case starts with its whole cassette still in cache from loading it
    (a few hundred KB), and the 10,000-turn case with its requested turns long evicted by the
    rest of its 69 MB: the two differed by 1.3x for the same function calls, and by 0.96x once
    both started cold. A replayed call in a real run starts cold too: the agent ran in between."""
    junk = bytearray(EVICT_BYTES)
    junk[::64] = bytes(len(junk) // 64)


def matching(tmp: Path, big: int, repeats: int) -> dict[str, Any]:
    hot = hot_bodies(10)
    out: dict[str, Any] = {}
    for size in (10, big):
        path = tmp / f"match{size}.json"
        build(path, hot if size == len(hot) else spread(hot, size))
        per_call, configure = [], []
        for _ in range(repeats):
            with replay_addon(path, tmp) as (request, configured):
                flows = [model_flow(raw) for raw in hot]
                evict_caches()
                t0 = clock()
                for f in flows:
                    request(f)
                per_call.append((clock() - t0) / len(flows) * 1e6)
                configure.append(configured())
                bad = [f.response.status_code if f.response else None for f in flows if
                       f.response is None or f.response.status_code != 200]
                if bad:
                    raise SystemExit(f"scale: replay of the {size}-turn cassette answered {bad}")
        out[str(size)] = {"per_call_us": statistics.median(per_call), "samples_us": per_call,
                          "configure_ms": statistics.median(configure) * 1000,
                          "file_mb": path.stat().st_size / 1e6}
    out["ratio"] = out[str(big)]["per_call_us"] / out["10"]["per_call_us"]
    return out


def loading(tmp: Path, big: int, repeats: int) -> dict[str, Any]:
    path = tmp / f"match{big}.json"
    if not path.exists():
        build(path, spread(hot_bodies(10), big))
    load = []
    for _ in range(repeats):
        t0 = clock()
        cassette = load_cassette(path)
        load.append(clock() - t0)
    t0 = clock()
    Replayer(cassette)
    index_s = clock() - t0
    configure = []
    for _ in range(max(1, repeats // 2)):
        with replay_addon(path, tmp) as (_, configured):
            configure.append(configured())
    configure_s = statistics.median(configure)
    # Counted in a separate pass: the profiler's own overhead must not reach the times above.
    profile = cProfile.Profile()
    profile.enable()
    with replay_addon(path, tmp):
        pass
    profile.disable()
    stats = pstats.Stats(profile)
    hashes = sum(v[1] for k, v in stats.stats.items() if "sha256" in k[2])  # type: ignore[attr-defined]
    return {"turns": big, "file_mb": path.stat().st_size / 1e6, "load_ms": statistics.median(load) * 1000,
            "index_ms": index_s * 1000, "configure_ms": configure_s * 1000, "sha256_calls": hashes}


def divergence(tmp: Path, big: int, repeats: int) -> dict[str, Any]:
    hot = hot_bodies(1)[0]
    changed = hot.replace(b"question 0", b"question X")
    body = json.loads(changed)
    out: dict[str, Any] = {"request_kb": len(changed) / 1024}
    for where, raws in (("first", [hot, *filler(big - 1)]), ("last", [*filler(big - 1), hot])):
        cassette = Cassette(tuple(chat_turn(i, raw) for i, raw in enumerate(raws)))
        times, render = [], []
        for _ in range(repeats):
            replayer = Replayer(cassette)
            t0 = clock()
            decision = replayer.decide("openai-chat", body_sha256(changed), body)
            times.append(clock() - t0)
            if not isinstance(decision, Miss):
                raise SystemExit("scale: the changed body matched a recorded turn")
            t0 = clock()
            text = decision.divergence.render()
            render.append(clock() - t0)
            if "question" not in text:
                raise SystemExit(f"scale: the divergence does not name the changed field:\n{text}")
        out[where] = {"decide_ms": statistics.median(times) * 1000, "render_ms": statistics.median(render) * 1000}
    out["turns"] = big
    return out


# --------------------------------------------------------------------------- a real mitmdump


def peak_rss(tmp: Path, turns: int, requests: int) -> dict[str, Any]:
    """VmHWM of a real mitmdump replaying ``turns`` 33 KB turns after ``requests`` calls, and the file size."""
    ca = ensure_ca(tmp / "ca")
    hot = hot_bodies(turns)
    path = tmp / f"rss{turns}.json"
    size = build(path, hot, route="base_url")
    report = tmp / f"rss{turns}.events.jsonl"
    report.unlink(missing_ok=True)
    argv = [str(Path(sys.executable).parent / "mitmdump"), "-q", "-s", str(ADDON_SCRIPT),
            "--listen-host", "127.0.0.1", "--listen-port", "0", "--mode", "reverse:https://api.openai.com",
            "--set", f"confdir={ca.cert.parent}", "--set", "connection_strategy=lazy",
            "--set", "flowproof_mode=replay", "--set", f"flowproof_cassette={path}",
            "--set", f"flowproof_report={report}", "--set", "flowproof_route=base_url"]
    with open(tmp / f"rss{turns}.log", "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        port = _wait_ready(proc, report)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for raw in hot[:requests]:
            conn.request("POST", PATH, body=raw, headers={"Host": "api.openai.com",
                                                          "Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                raise SystemExit(f"scale: replay through mitmdump answered {resp.status}")
        conn.close()
        status = Path(f"/proc/{proc.pid}/status").read_text()
        hwm_kb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
    return {"turns": turns, "file_mb": size / 1e6, "peak_rss_mb": hwm_kb / 1024}


def _wait_ready(proc: subprocess.Popen[bytes], report: Path) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"scale: mitmdump exited {proc.returncode}")
        if report.exists():
            for line in report.read_text().splitlines():
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if event.get("event") == "ready":
                    return int(event["listen"][0]["port"])
        time.sleep(0.02)
    raise SystemExit("scale: mitmdump was not ready within 60 s")


def measure(quick: bool = False, log: Callable[[str], None] = print) -> dict[str, Any]:
    big = 1_000 if quick else 10_000
    rss_turns = 100 if quick else 1_000
    repeats = 2 if quick else 5
    with tempfile.TemporaryDirectory(prefix="flowproof-scale-") as d:
        tmp = Path(d)
        log(f"scale: matching, 10 vs {big} turns")
        result: dict[str, Any] = {"matching": matching(tmp, big, repeats)}
        log(f"scale: loading {big} turns")
        result["loading"] = loading(tmp, big, repeats)
        log(f"scale: divergence with {big} turns")
        result["divergence"] = divergence(tmp, big, repeats)
        log(f"scale: peak RSS, 10 vs {rss_turns} turns")
        small = peak_rss(tmp, 10, 10)
        large = peak_rss(tmp, rss_turns, 10)
        result["rss"] = {"small": small, "large": large,
                         "mb_per_file_mb": (large["peak_rss_mb"] - small["peak_rss_mb"])
                         / (large["file_mb"] - small["file_mb"])}
    return result


def render(r: dict[str, Any]) -> list[str]:
    m, lo, dv, rss = r["matching"], r["loading"], r["divergence"], r["rss"]
    big = str(lo["turns"])
    return [
        "scale (in-process, CPU time, medians; RSS from a real mitmdump)",
        (f"  replay per call, 10 requests of ~33 KB: 10-turn cassette {m['10']['per_call_us']:.0f} us, "
        f"{big}-turn {m[big]['per_call_us']:.0f} us: {m['ratio']:.2f}x (target <= 1.2x)"),
        (f"  load {big} turns ({lo['file_mb']:.1f} MB): load_cassette {lo['load_ms']:.0f} ms, replay index "
        f"{lo['index_ms']:.1f} ms, whole addon configure {lo['configure_ms']:.0f} ms; sha256 digests while "
        f"loading: {lo['sha256_calls']} ({'no re-hashing' if lo['sha256_calls'] == 0 else 're-hashes'})"),
        (f"  peak RSS of mitmdump replaying (10 calls): {rss['small']['turns']} turns "
        f"({rss['small']['file_mb']:.1f} MB) {rss['small']['peak_rss_mb']:.0f} MB; {rss['large']['turns']} turns "
        f"({rss['large']['file_mb']:.1f} MB on disk) {rss['large']['peak_rss_mb']:.0f} MB: "
        f"{rss['mb_per_file_mb']:.2f} MB of memory per MB of cassette"),
        (f"  divergence, {dv['request_kb']:.0f} KB bodies, {dv['turns']} turns: closest turn first "
        f"{dv['first']['decide_ms']:.1f} ms, last {dv['last']['decide_ms']:.1f} ms (target < 100 ms); "
        f"render {dv['last']['render_ms']:.1f} ms"),
    ]
