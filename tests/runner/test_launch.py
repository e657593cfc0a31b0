"""Tests for flowproof.runner.launch: the console scripts start the proxy before the CLI's imports."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flowproof.options import ProxyOptions
from flowproof.runner.launch import early_kind
from flowproof.runner.proxy import ProxyKind, ProxyPool


def env_of(ca_dir: Path, **extra: str) -> dict[str, str]:
    return {"FLOWPROOF_CA_DIR": str(ca_dir), **extra}


class TestEarlyKind:
    def test_a_replay_gets_the_kind_its_pool_asks_for(self, ca_dir: Path, ca_files: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
        """The guess is the very kind the command line's pool gives a replay flow, so the
        pool takes it (`ProxyPool.open` matches kinds by equality)."""
        monkeypatch.delenv("FLOWPROOF_ADDON_SCRIPT", raising=False)
        kind = early_kind(["x.flow.yaml", "-v"], env_of(ca_dir))
        assert kind is not None and ProxyKind.of(kind) == ProxyPool().kind(ProxyOptions(), ca_dir)

    def test_the_addon_script_override_is_part_of_the_guess(self, ca_dir: Path, ca_files: Any,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("FLOWPROOF_ADDON_SCRIPT", "/somewhere/addon.py")
        kind = early_kind(["x.flow.yaml"], env_of(ca_dir, FLOWPROOF_ADDON_SCRIPT="/somewhere/addon.py"))
        assert kind is not None and ProxyKind.of(kind) == ProxyPool().kind(ProxyOptions(), ca_dir)
        assert ProxyKind.of(kind).script == Path("/somewhere/addon.py")

    @pytest.mark.parametrize("flag", ["--record", "--compare", "--record-missing", "--help", "-h"])
    def test_no_guess_for_a_run_that_is_not_a_replay(self, flag: str, ca_dir: Path, ca_files: Any) -> None:
        """A live run needs a proxy that dials eagerly, and --help runs nothing."""
        assert early_kind(["x.flow.yaml", flag], env_of(ca_dir)) is None

    def test_no_guess_without_arguments(self, ca_dir: Path, ca_files: Any) -> None:
        assert early_kind([], env_of(ca_dir)) is None

    def test_no_guess_before_the_ca_exists(self, tmp_path: Path) -> None:
        """mitmdump would write a CA of its own into the folder while the runner creates it."""
        assert early_kind(["x.flow.yaml"], env_of(tmp_path / "no-ca-yet")) is None


class TestImportsBeforeTheProxy:
    def test_the_entry_point_imports_only_the_proxy_module_before_starting_it(self) -> None:
        """What runs before mitmdump is spawned: the standard library, the error types and
        runner/proxy.py; the CLI, click, the options and the spec stack come after."""
        code = (
            "import sys; import flowproof.runner.launch; "
            "print(sorted(m for m in sys.modules if m.startswith(('flowproof', 'click', 'yaml', 'mitmproxy', "
            "'structlog', 'certifi'))))"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
        loaded = ast.literal_eval(out.stdout.strip())
        assert set(loaded) == {"flowproof", "flowproof.runner", "flowproof.runner.launch", "flowproof.runner.spawn"}

    def test_nor_the_standard_library_s_heavier_modules(self) -> None:
        """dataclasses (with inspect), typing and pathlib were about 25 ms before the spawn
        (python -X importtime): nothing before it needs them."""
        code = (
            "import sys; import flowproof.runner.launch; "
            "print(sorted(m for m in ('dataclasses', 'inspect', 'typing', 'pathlib', 'json', 'socket') "
            "if m in sys.modules))"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
        assert ast.literal_eval(out.stdout.strip()) == []


def leave_in_a_process(body: str) -> subprocess.CompletedProcess[str]:
    """Run ``body`` then ``leave(...)`` as its last line, in a fresh interpreter."""
    code = "import atexit, sys, threading, time\nfrom flowproof.runner.launch import leave\n" + body
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


class TestLeave:
    """A finished command skips the interpreter's teardown and loses nothing for it."""

    def test_the_exit_handlers_run_and_buffered_output_is_written(self) -> None:
        done = leave_in_a_process(
            "atexit.register(lambda: print('handler ran'))\n"
            "sys.stdout.write('report, unflushed')\nsys.stderr.write('a warning')\nleave(3)\n"
        )
        assert done.returncode == 3
        assert done.stdout == "report, unflushedhandler ran\n"
        assert done.stderr == "a warning"

    @pytest.mark.parametrize(("status", "code", "stderr"), [(None, 0, ""), (0, 0, ""), (4, 4, ""),
                                                            ("a message", 1, "a message\n")])
    def test_a_status_means_what_it_means_to_sys_exit(self, status: object, code: int, stderr: str) -> None:
        done = leave_in_a_process(f"leave({status!r})\n")
        assert (done.returncode, done.stderr) == (code, stderr)

    def test_a_thread_still_running_is_waited_for(self) -> None:
        """The interpreter waits for a non-daemon thread; so does `leave` (it exits normally)."""
        done = leave_in_a_process(
            "def late():\n    time.sleep(0.3)\n    print('thread finished', flush=True)\n"
            "threading.Thread(target=late).start()\nleave(2)\n"
        )
        assert (done.returncode, done.stdout) == (2, "thread finished\n")

    def test_the_teardown_is_skipped(self) -> None:
        """An object alive at the end is never finalized: the teardown did not run."""
        done = leave_in_a_process(
            "class Noisy:\n    def __del__(self):\n        print('finalized')\n"
            "kept = Noisy()\nleave(0)\n"
        )
        assert (done.returncode, done.stdout) == (0, "")
