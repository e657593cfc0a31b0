"""``python -m flowproof.testing``: serve a script file from a shell."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from flowproof.testing.script import Script, ScriptError, load_script
from flowproof.testing.server import FakeModelServer


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m flowproof.testing``: serve a script file until SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(
        prog="python -m flowproof.testing",
        description="Serve a scripted fake model API (OpenAI, Anthropic, Gemini) on 127.0.0.1.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind (default: any free port)")
    parser.add_argument("--script", type=Path, help="script JSON file (see docs/testing.md)")
    parser.add_argument("--quiet", action="store_true", help="do not log requests to stderr")
    parser.add_argument("--end-delay", type=float, default=0.0, metavar="SECONDS",
                        help="pause between a stream's last event and the end of its body (default 0)")
    parser.add_argument("--live-like", type=int, default=None, metavar="SEED",
                        help="answer like a live model: fresh ids, reordered argument keys, recased prose")
    parser.add_argument("--tls", action="store_true",
                        help="serve TLS with a self-signed certificate (ALPN h2 and http/1.1); "
                             "its path is printed on the second stdout line")
    args = parser.parse_args(argv)
    try:
        script = load_script(args.script) if args.script else Script()
        server = FakeModelServer(script, host=args.host, port=args.port,
                                 log=None if args.quiet else sys.stderr, end_delay=args.end_delay,
                                 live=args.live_like, tls=args.tls)
        server.start()
    except ScriptError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(f"listening on {server.url}", flush=True)
    if args.tls:
        print(f"certificate {server.cert_file}", flush=True)
    try:
        while not stop.wait(0.2):
            pass
    finally:
        server.stop()
    return 0

