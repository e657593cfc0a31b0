"""Profiles behind docs/performance.md (pyinstrument, from the ``bench`` extra).

    .venv/bin/python benchmarks/profiles.py replay      # the replay request hook, 33 KB bodies
    .venv/bin/python benchmarks/profiles.py load        # load_cassette of 10,000 turns
    .venv/bin/python benchmarks/profiles.py configure   # the replay addon's configure of the same
    .venv/bin/python benchmarks/profiles.py divergence  # explaining a miss against 10,000 turns
    .venv/bin/python benchmarks/profiles.py imports     # what mitmdump + the addon import at start-up

Each prints pyinstrument's call tree (``--flat`` for the functions by own time).
The cassettes are the synthetic ones of benchmarks/scale.py.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from pyinstrument import Profiler

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scale  # benchmarks/ is a folder of scripts, not a package: found through sys.path

from flowproof.cassette import Cassette, load_cassette
from flowproof.replay import Replayer
from flowproof.request_key import body_sha256


def replay(tmp: Path, profiler: Profiler, rounds: int = 30) -> None:
    hot = scale.hot_bodies(10)
    path = tmp / "c.json"
    scale.build(path, hot)
    for _ in range(rounds):
        with scale.replay_addon(path, tmp) as (request, _):
            flows = [scale.model_flow(raw) for raw in hot]
            profiler.start()
            for f in flows:
                request(f)
            profiler.stop()


def load(tmp: Path, profiler: Profiler) -> None:
    path = tmp / "c.json"
    scale.build(path, scale.spread(scale.hot_bodies(10), 10_000))
    profiler.start()
    load_cassette(path)
    profiler.stop()


def configure(tmp: Path, profiler: Profiler) -> None:
    """The replay addon's whole configure of a 10,000-turn cassette (load, checks, index)."""
    path = tmp / "c.json"
    scale.build(path, scale.spread(scale.hot_bodies(10), 10_000))
    profiler.start()
    with scale.replay_addon(path, tmp):
        profiler.stop()


def divergence(tmp: Path, profiler: Profiler) -> None:
    hot = scale.hot_bodies(1)[0]
    changed = hot.replace(b"question 0", b"question X")
    raws = [*scale.filler(9_999), hot]
    cassette = Cassette(tuple(scale.chat_turn(i, raw) for i, raw in enumerate(raws)))
    replayer = Replayer(cassette)
    profiler.start()
    replayer.decide("openai-chat", body_sha256(changed), json.loads(changed))
    profiler.stop()


def imports() -> None:
    """python -X importtime of each process's imports: mitmdump with the addon, and flowproof-run."""
    for title, code in (
        ("the mitmdump process: mitmproxy's tools, then the addon",
         "import mitmproxy.tools.main, mitmproxy.tools.dump; import flowproof.addon"),
        ("the flowproof-run process", "import flowproof.runner.cli"),
    ):
        done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True,
                              check=True, timeout=120)
        rows = []
        for line in done.stderr.splitlines():
            if not line.startswith("import time:") or "cumulative" in line:
                continue
            self_us, cumulative, name = line.replace("import time:", "").split("|")
            rows.append((int(cumulative), int(self_us), name.rstrip()[1:]))  # nested imports keep their indent
        print(f"{title}: {sum(r[1] for r in rows) / 1000:.0f} ms in all")
        print(f"{'cumulative ms':>14s} {'self ms':>8s}  module (indented: imported by a module above)")
        # importtime lists children before their parent; the biggest, by cumulative time.
        for cumulative, self_us, name in sorted(rows, key=lambda r: -r[0])[:25]:
            print(f"{cumulative / 1000:14.1f} {self_us / 1000:8.1f}  {name}")
        print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("replay", "load", "configure", "divergence", "imports"))
    parser.add_argument("--flat", action="store_true", help="functions by own time instead of the call tree")
    parser.add_argument("--all", action="store_true", help="show library frames too (mitmproxy, json)")
    args = parser.parse_args()
    if args.what == "imports":
        imports()
        return 0
    profiler = Profiler(interval=0.0005)
    with tempfile.TemporaryDirectory(prefix="flowproof-profile-") as d:
        {"replay": replay, "load": load, "configure": configure, "divergence": divergence}[args.what](Path(d), profiler)
    print(profiler.output_text(flat=args.flat, show_all=args.all))
    return 0


if __name__ == "__main__":
    sys.exit(main())
