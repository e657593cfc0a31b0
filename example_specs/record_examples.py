"""Re-record every example cassette with flowproof itself, against the fake model server.

For each script ``fake_model/<name>.json`` beside this file, this starts
`flowproof.testing.FakeModelServer` with that script, runs

    flowproof-run <name>.flow.yaml --record --upstream api.openai.com=<server> \
                                            --upstream api.anthropic.com=<server>

and stops the server. An example with an MCP server (`MCP_SERVERS`) also gets
that server started for the recording, its URL in the spec's variable, and a
check afterwards that the server never ran a tool flowproof answers (its marker
file must not exist). Nothing leaves the machine and no API key is needed (a
dummy key is set, so a real one is never sent anywhere). The fake server is
deterministic (counter ids, fixed timestamps), so re-recording an unchanged
example gives a byte-identical cassette; tests/e2e checks exactly that.

    python example_specs/record_examples.py                 # every example, in place
    python example_specs/record_examples.py booking         # one example
    python example_specs/record_examples.py --dir COPY      # a copy of this folder (tests)

Exits with the worst ``flowproof-run`` exit code (0 when every recording passed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from flowproof.testing import FakeModelServer

HERE = Path(__file__).resolve().parent
#: Model hosts sent to the fake server while recording.
HOSTS = ("api.openai.com", "api.anthropic.com")
#: Set for the agent while recording: SDKs refuse to start without a key.
DUMMY_KEYS = {"OPENAI_API_KEY": "sk-fake-model", "ANTHROPIC_API_KEY": "sk-ant-fake-model"}
#: Examples whose agent talks to an MCP server: (server script beside this file, url variable).
MCP_SERVERS = {"plan_mode_guard": ("plan_mode_mcp_server.py", "EXPORT_MCP_URL")}


@contextmanager
def mcp_server(script: Path, marker: Path) -> Iterator[str]:
    """Run an example MCP server on a free port; yields its URL (the first line it prints)."""
    process = subprocess.Popen(
        [sys.executable, str(script), "--port", "0", "--marker", str(marker)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        if not url.startswith("http"):
            sys.exit(f"{script.name} did not start: {process.stderr.read() if process.stderr else ''}")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def flowproof_run() -> str:
    """The ``flowproof-run`` of the interpreter running this script (else the one on PATH)."""
    beside = Path(sys.executable).parent / "flowproof-run"
    if beside.exists():
        return str(beside)
    found = shutil.which("flowproof-run")
    if found is None:
        sys.exit("flowproof-run was not found: install flowproof (pip install -e .) first")
    return found


def examples(folder: Path, names: list[str]) -> list[tuple[str, Path, Path]]:
    """(name, spec, fake-model script) for every script in ``folder/fake_model`` (or the named ones)."""
    scripts = {p.stem: p for p in sorted((folder / "fake_model").glob("*.json"))}
    unknown = [n for n in names if n not in scripts]
    if unknown:
        sys.exit(f"no fake-model script for {', '.join(unknown)} — known: {', '.join(scripts)}")
    out = []
    for name in names or list(scripts):
        spec = folder / f"{name}.flow.yaml"
        if not spec.is_file():
            sys.exit(f"{scripts[name]}: no matching spec {spec.name}")
        out.append((name, spec, scripts[name]))
    return out


def record(spec: Path, script: Path, *, timeout: float = 60.0, quiet: bool = False) -> int:
    """Record one example against a fresh fake model server; returns flowproof-run's exit code."""
    name = spec.name.removesuffix(".flow.yaml")
    if name not in MCP_SERVERS:
        return _record(spec, script, {}, timeout=timeout, quiet=quiet)
    server_script, variable = MCP_SERVERS[name]
    with tempfile.TemporaryDirectory(prefix="flowproof-mcp-") as scratch:
        marker = Path(scratch) / "tool-ran.marker"
        with mcp_server(spec.parent / server_script, marker) as url:
            code = _record(spec, script, {variable: url}, timeout=timeout, quiet=quiet)
        if marker.exists():
            print(f"{spec.name}: the MCP server ran a tool flowproof should have answered", file=sys.stderr)
            return 1
    return code


def _record(spec: Path, script: Path, extra_env: dict[str, str], *, timeout: float, quiet: bool) -> int:
    env = {**os.environ, **DUMMY_KEYS, **extra_env}
    env.pop("FLOWPROOF_UPSTREAM", None)
    with FakeModelServer.from_json(script) as server:
        argv = [flowproof_run(), str(spec), "--record"]
        for host in HOSTS:
            argv += ["--upstream", f"{host}={server.url}"]
        done = subprocess.run(argv, env=env, capture_output=quiet, timeout=timeout, check=False)
        if done.returncode == 0 and server.remaining:
            print(f"{spec.name}: the fake model still had {server.remaining} unused replies", file=sys.stderr)
            return 1
        if done.returncode != 0 and quiet:
            sys.stderr.write(done.stdout.decode("utf-8", "replace") + done.stderr.decode("utf-8", "replace"))
    return done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="examples to record (default: all)")
    parser.add_argument("--dir", type=Path, default=HERE, help="the examples folder (default: this one)")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only failures")
    args = parser.parse_args(argv)
    worst = 0
    for name, spec, script in examples(args.dir.resolve(), args.names):
        code = record(spec, script, quiet=args.quiet)
        if not args.quiet:
            print(f"{name}: {'recorded' if code == 0 else f'FAILED (exit {code})'}")
        worst = max(worst, code)
    return worst


if __name__ == "__main__":
    sys.exit(main())
