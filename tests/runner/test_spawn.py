"""Tests for flowproof.runner.spawn: starting mitmdump on the cheapest imports, and the proxy started early.

A stand-in executable takes mitmdump's place (it records its arguments and
environment, then sleeps): what is under test is how the process is started and
cleaned up, not mitmproxy. tests/runner/test_proxy.py starts the real one.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flowproof.runner import spawn
from flowproof.runner.spawn import addon_script, ca_dir, prestart, scratch_prefix, sweep_scratch, take_early

from .conftest import group_gone


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A "mitmdump" that writes its argv and environment to ``seen`` and sleeps, with a child of
    its own sleeping beside it (what mitmdump spawns must die with it)."""
    seen = tmp_path / "seen"
    script = tmp_path / "mitmdump"
    script.write_text(f'#!/bin/sh\nenv > {seen}.env\nsleep 60 &\nprintf "%s\\n" "$@" > {seen}.args\nexec sleep 60\n')
    script.chmod(0o755)
    monkeypatch.setattr(spawn, "mitmdump_executable", lambda: str(script))
    return seen


@pytest.fixture
def started() -> Iterator[list[spawn.Spawned]]:
    """Every process a test starts, killed after it whatever happens."""
    processes: list[spawn.Spawned] = []
    yield processes
    for process in processes:
        process.kill()


def wait_for(path: Path) -> str:
    deadline = time.monotonic() + 10
    while not path.exists() or not path.read_text():
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.01)
    return path.read_text()


class TestSpawn:
    def test_the_command_line_and_the_environment(self, standin: Path, started: list[spawn.Spawned],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
        """The proxy listens on 127.0.0.1, takes the CA folder, the control socket and the event
        log in its scratch folder, and never reaches the upstream through the runner's proxy."""
        monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
        monkeypatch.setenv("FLOWPROOF_ADDON_SCRIPT", "/the/addon.py")
        proxy = spawn.spawn("/the/ca", lazy=True)
        started.append(proxy)
        args = wait_for(standin.with_suffix(".args")).splitlines()
        scratch = proxy.scratch.name
        assert args == [
            "-q", "-s", "/the/addon.py", "--listen-host", "127.0.0.1", "--listen-port", "0",
            "--set", "confdir=/the/ca", "--set", f"flowproof_control={scratch}/control.sock",
            "--set", f"flowproof_report={scratch}/proxy.jsonl", "--set", "connection_strategy=lazy",
        ]
        assert proxy.control == f"{scratch}/control.sock" and proxy.key == ("/the/ca", True, None)
        assert "HTTPS_PROXY=" not in wait_for(standin.with_suffix(".env"))
        assert os.path.basename(scratch).startswith(scratch_prefix("proxy"))

    def test_an_eager_proxy_dials_as_mitmproxy_does(self, standin: Path, started: list[spawn.Spawned]) -> None:
        started.append(spawn.spawn("/the/ca", lazy=False, script="/other.py"))
        args = wait_for(standin.with_suffix(".args")).splitlines()
        assert "connection_strategy=lazy" not in args and args[2] == "/other.py"

    def test_its_own_process_group_and_a_kill_that_leaves_nothing(
        self, standin: Path, started: list[spawn.Spawned]
    ) -> None:
        proxy = spawn.spawn("/the/ca", lazy=True)
        started.append(proxy)
        wait_for(standin.with_suffix(".args"))
        assert os.getpgid(proxy.pid) == proxy.pid != os.getpgid(0)
        proxy.kill()
        proxy.kill()  # idempotent
        assert group_gone(proxy.pid) and not Path(proxy.scratch.name).exists()

    def test_a_long_temporary_folder_puts_the_socket_in_a_short_one(
        self, standin: Path, started: list[spawn.Spawned], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A Unix socket path must fit in 108 bytes: a long $TMPDIR gets a socket folder of its own."""
        deep = tmp_path / ("d" * 60) / ("e" * 60)
        deep.mkdir(parents=True)
        monkeypatch.setattr(spawn.tempfile, "tempdir", str(deep))
        proxy = spawn.spawn("/the/ca", lazy=True)
        started.append(proxy)
        assert proxy.socket_dir is not None and len(proxy.control) <= 100
        proxy.kill()
        assert not os.path.exists(proxy.socket_dir)

    def test_no_mitmdump_is_an_os_error_and_leaves_no_folder(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(spawn, "mitmdump_executable", lambda: None)
        monkeypatch.setattr(spawn.tempfile, "tempdir", str(tmp_path))
        with pytest.raises(OSError, match="mitmdump was not found"):
            spawn.spawn("/the/ca", lazy=True)
        broken = tmp_path / "not-executable"
        broken.write_text("")
        monkeypatch.setattr(spawn, "mitmdump_executable", lambda: str(broken))
        with pytest.raises(PermissionError):
            spawn.spawn("/the/ca", lazy=True)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["not-executable"]


class TestPrestart:
    def test_the_early_proxy_waits_to_be_taken(self, standin: Path, started: list[spawn.Spawned]) -> None:
        prestart("/the/ca", True)
        early = take_early()
        started.extend(early)
        assert [p.key for p in early] == [("/the/ca", True, None)] and take_early() == []

    def test_a_proxy_that_cannot_start_is_left_to_the_flow_to_report(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(spawn, "mitmdump_executable", lambda: None)
        prestart("/the/ca", True)
        assert take_early() == []


class TestWhere:
    def test_the_ca_folder(self) -> None:
        home = os.path.expanduser("~")
        assert ca_dir({"FLOWPROOF_CA_DIR": "~/ca", "XDG_DATA_HOME": "/x"}) == f"{home}/ca"
        assert ca_dir({"XDG_DATA_HOME": "/x"}) == "/x/flowproof/ca"
        assert ca_dir({}) == f"{home}/.local/share/flowproof/ca"

    def test_the_addon_script(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """The override, else the repository's script, else a shim written once (a wheel)."""
        monkeypatch.setenv("FLOWPROOF_ADDON_SCRIPT", "/mine.py")
        assert addon_script(str(tmp_path)) == "/mine.py"
        monkeypatch.delenv("FLOWPROOF_ADDON_SCRIPT")
        assert addon_script(str(tmp_path)).endswith("/addon/flowproof_addon.py")
        monkeypatch.setattr(spawn, "_REPO_SCRIPT", str(tmp_path / "absent.py"))
        shim = addon_script(str(tmp_path))
        assert Path(shim).read_text() == "from flowproof.addon import Flowproof\n\naddons = [Flowproof()]\n"
        before = os.stat(shim).st_mtime_ns
        assert addon_script(str(tmp_path)) == shim and os.stat(shim).st_mtime_ns == before


class TestSweepScratch:
    def test_removes_only_dead_owners_folders(self, tmp_path: Path) -> None:
        """A folder whose pid is gone is removed; this process's, unrelated ones and links stay."""
        dead = subprocess.Popen(["true"])
        dead.wait()
        gone = tmp_path / f"flowproof-proxy-{dead.pid}-abc"
        mine = tmp_path / f"{scratch_prefix('run')}xyz"
        other = tmp_path / "flowproof-run-notapid"
        for folder in (gone, mine, other):
            folder.mkdir()
            (folder / "events.jsonl").write_text("{}\n")
        link = tmp_path / f"flowproof-run-{dead.pid}-link"
        link.symlink_to(mine)
        assert sweep_scratch(str(tmp_path)) == [str(gone)]
        assert not gone.exists() and mine.exists() and other.exists() and link.is_symlink()

    def test_the_runner_s_sweep_gives_paths(self, tmp_path: Path) -> None:
        from flowproof.runner.proxy import sweep_scratch as sweep_paths

        dead = subprocess.Popen(["true"])
        dead.wait()
        gone = tmp_path / f"flowproof-run-{dead.pid}-abc"
        gone.mkdir()
        assert sweep_paths(tmp_path) == [gone] and not gone.exists()
