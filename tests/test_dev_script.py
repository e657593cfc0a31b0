"""`./dev`: what each job installs, and what it says meanwhile.

The script runs against stand-in interpreters that log every call (no network, no real
venv): the calls are the contract — the example job installs flowproof with the `example`
extra only, into a venv whose pip is current, without byte-compiling — and its `dev:` lines
are what a newcomer sees during the first run.
"""

from __future__ import annotations

import os
import pty
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: A stand-in for python3.13 (the first interpreter `./dev` looks for), for the venv's python
#: and for its console scripts: each call is logged as one line, and a `pip install` prints
#: what pip prints for two packages.
STUB = r"""#!/bin/bash
echo "$(basename "$0") $*" >> "$STUB_LOG"
case "$*" in
  "-c import sys"*) exit 0 ;;
  "-c import ensurepip"*) echo "$STUB_DIR/pip-23.2.1-py3-none-any.whl"; exit 0 ;;
  "-m venv"*)
    mkdir -p .venv/bin .venv/lib/python3.13/site-packages
    cp "$0" .venv/bin/python; cp "$0" .venv/bin/flowproof-run; exit 0 ;;
  *"-m pip install"*)
    printf 'Obtaining file:///checkout\nCollecting mitmproxy\nCollecting openai\n'
    printf 'Installing collected packages: mitmproxy, openai\nSuccessfully installed\n'; exit 0 ;;
esac
exit 0
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of `dev` and pyproject.toml, with stand-ins on PATH for python and npm."""
    root = tmp_path / "checkout"
    (root / "example_specs").mkdir(parents=True)
    shutil.copy(ROOT / "dev", root / "dev")
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name in ("python3.13", "npm"):
        (stubs / name).write_text(STUB, encoding="utf-8")
        (stubs / name).chmod(0o755)
    return root


def env_for(checkout: Path) -> dict[str, str]:
    stubs = checkout.parent / "stubs"
    return {
        "PATH": f"{stubs}:/usr/bin:/bin",
        "HOME": str(checkout.parent),  # no ~/.pyenv interpreters
        "STUB_LOG": str(checkout.parent / "calls.log"),
        "STUB_DIR": str(stubs),
    }


def dev(checkout: Path, *args: str) -> tuple[list[str], list[str]]:
    """Run ./dev; returns (its stderr lines, the calls the stand-ins logged)."""
    ran = subprocess.run(["bash", str(checkout / "dev"), *args], cwd=checkout, env=env_for(checkout),
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    log = checkout.parent / "calls.log"
    calls = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return ran.stderr.splitlines(), calls


class TestExample:
    def test_first_run_installs_only_the_example_extra_with_a_current_pip(self, checkout: Path) -> None:
        """A fresh checkout: a venv without the bundled pip, a current pip from the bundled
        wheel, then one install of flowproof[example] with no byte-compiling, then the flow.
        Nothing of the test job (its extra, npm) is installed."""
        lines, calls = dev(checkout, "example")
        installs = [c for c in calls if "install" in c]
        assert "python3.13 -m venv --without-pip .venv" in calls
        assert installs[0].startswith("python ") and installs[0].endswith(
            "pip-23.2.1-py3-none-any.whl/pip install --quiet --disable-pip-version-check --no-compile --upgrade pip"
        )
        assert installs[1:] == [
            "python -m pip install --disable-pip-version-check --no-compile --progress-bar off -e .[example]"
        ]
        assert calls[-1] == "flowproof-run example_specs/booking.flow.yaml"
        assert not any(c.startswith("npm") for c in calls)
        assert lines[0] == "dev: creating .venv with a current pip"
        assert lines[1] == (
            "dev: installing flowproof and the openai SDK the example agent uses into .venv (first run only)"
        )
        assert lines[2].startswith("dev: installed in ") and lines[2].endswith(" s")
        assert lines[3] == "dev: running flowproof-run example_specs/booking.flow.yaml (replay: no key, no network)"

    def test_second_run_installs_nothing_until_pyproject_changes(self, checkout: Path) -> None:
        dev(checkout, "example")
        lines, calls = dev(checkout, "example")
        assert not [c for c in calls if "install" in c] and len(lines) == 1
        future = time.time() + 5
        os.utime(checkout / "pyproject.toml", (future, future))
        _, calls = dev(checkout, "example")
        assert [c for c in calls if "install" in c] == [
            "python -m pip install --disable-pip-version-check --no-compile --progress-bar off -e .[example]"
        ]

    def test_the_distribution_of_the_old_name_is_removed(self, checkout: Path) -> None:
        """A .venv made before the rename holds a distribution named flowproof, and the
        checkout its build metadata: both go before flowproof-llm is installed."""
        dev(checkout, "example")
        (checkout / ".venv/lib/python3.13/site-packages/flowproof-0.1.0.dist-info").mkdir()
        (checkout / "flowproof.egg-info").mkdir()
        future = time.time() + 5
        os.utime(checkout / "pyproject.toml", (future, future))
        lines, calls = dev(checkout, "example")
        assert "python -m pip uninstall --quiet --yes flowproof" in calls
        assert calls.index("python -m pip uninstall --quiet --yes flowproof") < next(
            i for i, c in enumerate(calls) if "pip install" in c)
        assert not (checkout / "flowproof.egg-info").exists()
        assert "dev: removing the distribution named flowproof from .venv (this one is flowproof-llm)" in lines

    def test_a_terminal_sees_the_packages_counted(self, checkout: Path) -> None:
        """On a terminal, pip's line per package becomes one line that counts them, wiped
        before the next dev: line; in a pipe (above) there is no such line."""
        leader, follower = pty.openpty()
        try:
            proc = subprocess.Popen(["bash", str(checkout / "dev"), "example"], cwd=checkout,
                                    env=env_for(checkout), stdout=subprocess.DEVNULL, stderr=follower)
            os.close(follower)
            output = b""
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                ready, _, _ = select.select([leader], [], [], 1)
                if not ready:
                    if proc.poll() is not None:
                        break
                    continue
                try:
                    chunk = os.read(leader, 4096)
                except OSError:  # the terminal closed: the script ended
                    break
                if not chunk:
                    break
                output += chunk
            assert proc.wait(timeout=30) == 0
        finally:
            os.close(leader)
        text = output.decode()
        assert "\rdev: resolving: 3 packages\x1b[K" in text
        assert "\rdev: unpacking 3 packages\x1b[K\r\x1b[Kdev: installed in " in text


class TestOtherJobs:
    def test_lint_installs_the_dev_extra(self, checkout: Path) -> None:
        (checkout / ".venv/bin").mkdir(parents=True)
        for tool in ("python", "ruff", "mypy"):
            shutil.copy(checkout.parent / "stubs" / "python3.13", checkout / ".venv/bin" / tool)
        lines, calls = dev(checkout, "lint")
        assert [c for c in calls if "install" in c] == [
            "python -m pip install --disable-pip-version-check --no-compile --progress-bar off -e .[dev]"
        ]
        assert lines[0] == "dev: installing flowproof with its dev extra (ruff, mypy) into .venv (first run only)"

    def test_test_runs_the_suite_on_every_core_without_the_real_agents(self, checkout: Path) -> None:
        """`./dev test` alone is the README's test command: xdist with three workers per two
        cores, the real coding agents deselected (their own lane, as .ci/run runs it); any
        argument replaces that."""
        (checkout / ".venv/bin").mkdir(parents=True)
        shutil.copy(checkout.parent / "stubs" / "python3.13", checkout / ".venv/bin" / "python")
        cores = len(os.sched_getaffinity(0))
        lines, calls = dev(checkout, "test")
        assert calls[-1] == f"python -m pytest -n {cores + cores // 2} --dist worksteal -m not real_agent"
        assert lines[-1] == (f"dev: running the suite in {cores + cores // 2} workers on {cores} core(s) "
                             "(the real agents: ./dev test -m real_agent)")
        _, calls = dev(checkout, "test", "-m", "real_agent")
        assert calls[-1] == "python -m pytest -m real_agent"

    def test_every_job_keeps_the_bytecode_python_writes(self, checkout: Path) -> None:
        """With PYTHONDONTWRITEBYTECODE=1 (set on some CI images) every process of the suite
        would recompile mitmproxy and the SDKs it imports; the jobs unset it."""
        stub = checkout.parent / "stubs" / "python3.13"
        stub.write_text(STUB.replace('echo "$(basename "$0") $*"',
                                     'echo "$(basename "$0") $* [bytecode=${PYTHONDONTWRITEBYTECODE-kept}]"'))
        env = {**env_for(checkout), "PYTHONDONTWRITEBYTECODE": "1"}
        ran = subprocess.run(["bash", str(checkout / "dev"), "example"], cwd=checkout, env=env,
                             capture_output=True, text=True, timeout=60)
        assert ran.returncode == 0, ran.stderr
        calls = (checkout.parent / "calls.log").read_text().splitlines()
        assert calls[-1] == "flowproof-run example_specs/booking.flow.yaml [bytecode=kept]"
