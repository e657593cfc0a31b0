"""The agent every peer of benchmarks/run.py drives: the openai SDK, N chat calls, ~33 KB bodies.

It reads where to send its calls from the environment, as any agent would
(OPENAI_BASE_URL, HTTPS_PROXY, SSL_CERT_FILE, OPENAI_API_KEY), so the same
process runs straight against the fake model server, through mitmdump, and
under flowproof-run. It times only its calls (process start-up is timed by the
harness) and writes one JSON object to the file named by $BENCH_OUT (flowproof-run
keeps the agent's stdout for its report):

    {"calls": 30, "calls_s": 0.41, "ttfc_ms": [...], "total_ms": [...],
     "agent_cpu_s": 0.2, "proxy_cpu_s": 0.1}

CPU seconds are what a shared machine does not inflate the way it inflates wall
time: the agent's own (all threads) and the proxy's (all threads, from
/proc/PID/task/*/schedstat, nanoseconds) over the timed calls. The proxy is
$BENCH_PROXY_PID, or the mitmdump child of the flowproof-run this agent runs under;
none (0) without a proxy.

Every request body is deterministic (call i always sends the same bytes), so a
recording made in one process is matched by the next. One untimed warm-up call
comes first: it is recorded and replayed like the others.

    python benchmarks/agent.py --calls 30 [--stream] [--concurrency 8] [--body-kb 33]
                               [--vcr CASSETTE --vcr-mode record|none]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import openai

#: One tool description, repeated to make the system prompt of a coding agent's size.
_TOOL_TEXT = (
    "Tool read_file(path: string) returns the text of a file in the working tree. "
    "Use it before editing; never guess a file's contents. "
)


def request_messages(i: int, body_kb: int) -> list[dict[str, str]]:
    """Call ``i``'s messages: a large shared system prompt and a short user turn of its own."""
    system = (_TOOL_TEXT * (body_kb * 1024 // len(_TOOL_TEXT) + 1))[: body_kb * 1024]
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Step {i}: summarise what you would do next."},
    ]


def one_call(client: openai.OpenAI, i: int, stream: bool, body_kb: int) -> tuple[float, float]:
    """Make call ``i``; (time to first chunk, whole call) in ms. Without a stream both are the call."""
    started = time.perf_counter()
    messages: Any = request_messages(i, body_kb)
    if not stream:
        reply = client.chat.completions.create(model="gpt-4o", messages=messages)
        if not reply.choices[0].message.content:
            raise SystemExit(f"call {i}: empty reply")
        done = (time.perf_counter() - started) * 1000
        return done, done
    first = None
    text = []
    for chunk in client.chat.completions.create(model="gpt-4o", messages=messages, stream=True):
        if first is None:
            first = (time.perf_counter() - started) * 1000
        if chunk.choices and chunk.choices[0].delta.content:
            text.append(chunk.choices[0].delta.content)
    if not text or first is None:
        raise SystemExit(f"call {i}: empty stream")
    return first, (time.perf_counter() - started) * 1000


def proxy_pid() -> int | None:
    """The proxy process between this agent and the model, if there is one we can find."""
    if os.environ.get("BENCH_PROXY_PID"):
        return int(os.environ["BENCH_PROXY_PID"])
    pid = os.getppid()
    for _ in range(4):  # the agent runs under /bin/sh -c, under flowproof-run
        if pid <= 1:
            return None
        if b"flowproof-run" in _read(f"/proc/{pid}/cmdline"):
            # Any of its threads may have started the proxy: each task lists its own children.
            for task in os.listdir(f"/proc/{pid}/task"):
                for child in _read(f"/proc/{pid}/task/{task}/children").split():
                    if b"mitmdump" in _read(f"/proc/{int(child)}/cmdline"):
                        return int(child)
            return None
        pid = int(_read(f"/proc/{pid}/stat").rsplit(b")", 1)[1].split()[1])
    return None


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def process_cpu(pid: int | None) -> float:
    """CPU seconds of every thread of ``pid`` so far (0 without one)."""
    if pid is None:
        return 0.0
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        stat = _read(f"/proc/{pid}/task/{task}/schedstat").split()
        total += int(stat[0]) if stat else 0
    return total / 1e9


def cassette_context(path: str | None, mode: str) -> AbstractContextManager[Any]:
    """vcrpy around the calls when asked (matching on the body too, like flowproof), else nothing."""
    if path is None:
        return nullcontext()
    import vcr

    recorder = vcr.VCR(
        record_mode=mode,
        match_on=("method", "scheme", "host", "port", "path", "query", "body"),
        filter_headers=("authorization",),
    )
    return recorder.use_cassette(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--body-kb", type=int, default=33)
    parser.add_argument("--vcr", default=None, help="vcrpy cassette path")
    parser.add_argument("--vcr-mode", default="none", choices=("record", "none"))
    parser.add_argument("--warmup", type=int, default=1,
                        help="untimed calls first (the SDK's first call pays ~0.3 s of lazy set-up)")
    args = parser.parse_args()
    out = os.environ.get("BENCH_OUT")
    # The SDK retries a failed call after a back-off: a benchmark must fail instead.
    client = openai.OpenAI(max_retries=0, timeout=60)
    with cassette_context(args.vcr, "all" if args.vcr_mode == "record" else "none"):
        for i in range(args.warmup):
            one_call(client, -1 - i, args.stream, args.body_kb)
        proxy = proxy_pid()
        proxy_cpu, agent_cpu = process_cpu(proxy), time.process_time()
        started = time.perf_counter()
        if args.concurrency == 1:
            timings = [one_call(client, i, args.stream, args.body_kb) for i in range(args.calls)]
        else:
            with ThreadPoolExecutor(args.concurrency) as pool:
                timings = list(pool.map(lambda i: one_call(client, i, args.stream, args.body_kb),
                                        range(args.calls)))
        elapsed = time.perf_counter() - started
        agent_cpu, proxy_cpu = time.process_time() - agent_cpu, process_cpu(proxy) - proxy_cpu
    result = {"calls": args.calls, "calls_s": elapsed, "agent_cpu_s": agent_cpu, "proxy_cpu_s": proxy_cpu,
              "proxy_found": proxy is not None,
              "ttfc_ms": [t[0] for t in timings], "total_ms": [t[1] for t in timings]}
    if out:
        with open(out, "w", encoding="utf-8") as f:
            json.dump(result, f)
    else:
        print(json.dumps(result))
    print("done")  # the agent's reply, for flowproof-run's report
    return 0


if __name__ == "__main__":
    sys.exit(main())
