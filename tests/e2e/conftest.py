"""Fixtures for the end-to-end tests: real processes all the way.

Every test runs ``flowproof-run`` (as a subprocess through the ``flowproof``
fixture; a module about what a flow does, not about the runner's process, may
use ``in_process_flowproof`` instead: the same command line run in the test's
process, on proxies kept for the worker); the runner starts a real mitmdump
with the addon and a real agent (official SDKs, Python or Node); model calls go
to `flowproof.testing.FakeModelServer` on 127.0.0.1 through ``--upstream``.
Nothing leaves the machine, and no API key is ever needed.

Each test gets its own copy of ``example_specs`` (tests edit specs, agents and
cassettes) and a session-wide flowproof CA in a temporary directory. After each
test, no process may remain whose command line or working directory lies inside
the test's tmp_path.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from flowproof.runner import cli as runner_cli
from flowproof.runner.env import ensure_ca
from flowproof.runner.proxy import ProxyKind, ProxyPool, ProxyProcess
from flowproof.testing import FakeModelServer, Reply, load_script

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "example_specs"
HERE = Path(__file__).resolve().parent
AGENTS = HERE / "agents"
NODE_AGENT = HERE / "node_agent"
BIN = Path(sys.executable).parent
FLOWPROOF_RUN = str(BIN / "flowproof-run")
#: Keys the agents get while recording or comparing against the fake model.
DUMMY_KEYS = {"OPENAI_API_KEY": "sk-e2e-fake-model", "ANTHROPIC_API_KEY": "sk-ant-e2e-fake-model"}
#: Never inherited from the developer's shell: a test must not depend on them.
_SCRUBBED = (
    "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "CODEX_API_KEY",
    "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "FLOWPROOF_UPSTREAM", "FLOWPROOF_ADDON_SCRIPT",
    "HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY", "all_proxy",
    "OPENAI_AGENTS_DISABLE_TRACING",
)


@dataclass(frozen=True)
class Ran:
    """A finished ``flowproof-run``."""

    code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    @property
    def failure(self) -> str:
        """What an assertion on a failed run shows: with a ``--json`` report, the flows that did
        not pass and stderr; otherwise (or when every flow passed) the whole output. A CI log
        keeps the end of a long message, and the reports of seven passing flows pushed the one
        that failed out of it."""
        try:
            flows = json.loads(self.stdout)["flows"]
            failed = [flow for flow in flows if not flow["passed"]]
        except (ValueError, KeyError, TypeError):
            return self.output
        if not failed:
            return self.output
        return f"exit {self.code}; the flows that did not pass:\n{json.dumps(failed, indent=2)}\n{self.stderr}"

    def report(self) -> dict[str, Any]:
        """The ``--json`` report (the run must have been made with ``--json``)."""
        data: dict[str, Any] = json.loads(self.stdout)
        return data


class Flowproof:
    """Runs ``flowproof-run`` as a subprocess in its own process group, with a clean environment."""

    def __init__(self, ca_dir: Path) -> None:
        self.ca_dir = ca_dir

    def env(self, *, keys: bool = False, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
        env["FLOWPROOF_CA_DIR"] = str(self.ca_dir)
        if keys:
            env.update(DUMMY_KEYS)
        env.update(extra)
        return env

    def run(
        self,
        *args: str | Path,
        cwd: Path | None = None,
        keys: bool = False,
        timeout: float = 60.0,
        **extra_env: str,
    ) -> Ran:
        """``flowproof-run ARGS...``; ``keys`` gives the agent dummy API keys (record, compare)."""
        process = subprocess.Popen(
            [FLOWPROOF_RUN, *map(str, args)],
            cwd=cwd,
            env=self.env(keys=keys, **extra_env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(process.pid)
            out, err = process.communicate(timeout=10)
            pytest.fail(f"flowproof-run {args} did not finish within {timeout}s:\n{out.decode()}{err.decode()}")
        finally:
            kill_group(process.pid)
        return Ran(process.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))


class KeptProxies(ProxyPool):
    """The proxies of one pytest worker, shared by the in-process runs of its tests.

    A run's own pool is closed at the end of the run; this one outlives it (``close`` is
    the run's, ``shut`` the session's), so only the first run of a kind pays a mitmdump start.
    Each proxy is started from one long-lived thread: mitmdump dies with the thread that
    started it (``PR_SET_PDEATHSIG``), and a run's flows are threads that end with it.
    """

    def __init__(self, home: Path) -> None:
        self._home = home
        self._keeper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kept-proxies")
        super().__init__(start=self._start_on_keeper)

    def _start_on_keeper(self, kind: ProxyKind, timeout: float) -> ProxyProcess:
        return self._keeper.submit(self._start_at_home, kind, timeout).result()

    def _start_at_home(self, kind: ProxyKind, timeout: float) -> ProxyProcess:
        # mitmdump inherits the working directory: the run's is a test's tmp_path, and a
        # process left there fails that test's no_process_left_behind. The other flows of
        # the run wait on the pool's lock meanwhile, so none of them is reading a relative path.
        cwd = os.getcwd()
        os.chdir(self._home)
        try:
            return ProxyProcess.start(kind, timeout)
        finally:
            os.chdir(cwd)

    def close(self) -> None:
        """A run is over: its sessions are closed, the proxies stay for the next run."""

    def shut(self) -> None:
        super().close()
        self._keeper.shutdown(wait=False)


class InProcessFlowproof(Flowproof):
    """``flowproof-run ARGS`` run by its entry point in this process, with the subprocess's
    environment, working directory, stdin and output: the same command, judge and reports,
    without an interpreter start per run, and (with the warm proxy) on the worker's
    `KeptProxies`. The agent and mitmdump are still real processes."""

    def __init__(self, ca_dir: Path, pool: KeptProxies) -> None:
        super().__init__(ca_dir)
        self.pool = pool

    def run(
        self,
        *args: str | Path,
        cwd: Path | None = None,
        keys: bool = False,
        timeout: float = 60.0,
        **extra_env: str,
    ) -> Ran:
        env = self.env(keys=keys, **extra_env)
        out, err = io.StringIO(), io.StringIO()
        saved_env, saved_cwd, saved_pool = dict(os.environ), os.getcwd(), runner_cli.ProxyPool
        code = 0
        try:
            os.environ.clear()
            os.environ.update(env)
            if cwd is not None:
                os.chdir(cwd)
            runner_cli.ProxyPool = lambda: self.pool  # type: ignore[assignment,misc,return-value]
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                    open(os.devnull, encoding="utf-8") as stdin:
                saved_stdin, sys.stdin = sys.stdin, stdin
                try:
                    runner_cli.run_main([str(a) for a in args])
                except SystemExit as e:
                    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                finally:
                    sys.stdin = saved_stdin
        finally:
            runner_cli.ProxyPool = saved_pool  # type: ignore[misc]
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_env)
        return Ran(code, out.getvalue(), err.getvalue())


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def processes_inside(path: Path) -> list[str]:
    """Live processes whose command line or working directory lies inside ``path``."""
    needle = str(path)
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            try:
                cwd = os.readlink(proc / "cwd")
            except OSError:
                cwd = ""
        except OSError:
            continue
        if (needle in cmdline or cwd.startswith(needle)) and alive(int(proc.name)):
            found.append(f"{proc.name}: {cmdline.strip()} (cwd {cwd})")
    return found


@pytest.fixture(scope="session")
def flowproof_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One flowproof CA for the session (an RSA key costs time)."""
    ca_dir = tmp_path_factory.mktemp("flowproof-ca") / "ca"
    ensure_ca(ca_dir)
    return ca_dir


@pytest.fixture(scope="session")
def flowproof(flowproof_ca: Path) -> Flowproof:
    """The runner driver: ``flowproof-run`` as a subprocess."""
    return Flowproof(flowproof_ca)


@pytest.fixture(scope="session")
def subprocess_flowproof(flowproof_ca: Path) -> Flowproof:
    """``flowproof-run`` as a subprocess, for a test of a module whose ``flowproof`` runs
    in-process but that needs a proxy of its own (started with the run's environment)."""
    return Flowproof(flowproof_ca)


@pytest.fixture(scope="session")
def in_process_flowproof(flowproof_ca: Path) -> Iterator[InProcessFlowproof]:
    """The runner driver in this process, on proxies kept for the worker (see `InProcessFlowproof`)."""
    pool = KeptProxies(flowproof_ca.parent)
    try:
        yield InProcessFlowproof(flowproof_ca, pool)
    finally:
        pool.shut()


@pytest.fixture(autouse=True)
def no_process_left_behind(tmp_path: Path) -> Iterator[None]:
    """Fails a test that leaves any process running inside its tmp_path (agent, child, proxy)."""
    yield
    deadline = time.monotonic() + 3.0
    while (left := processes_inside(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, "processes left behind:\n" + "\n".join(left)


@pytest.fixture
def examples(tmp_path: Path) -> Path:
    """A private copy of example_specs (specs, agents, cassettes, fake-model scripts)."""
    dest = tmp_path / "example_specs"
    shutil.copytree(
        EXAMPLES, dest,
        ignore=shutil.ignore_patterns("__pycache__", "*.rejected.json", "*.recording.json"),
    )
    return dest


@pytest.fixture
def fake_model() -> Iterator[Callable[..., FakeModelServer]]:
    """Starts fake model servers (from a script file or replies); every one is stopped after the test."""
    servers: list[FakeModelServer] = []

    def start(script: Path | Sequence[Reply]) -> FakeModelServer:
        replies = load_script(script).replies if isinstance(script, Path) else list(script)
        server = FakeModelServer(replies)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def upstream_args(server: FakeModelServer) -> list[str]:
    """``--upstream`` options sending both model hosts to ``server``."""
    return ["--upstream", f"api.openai.com={server.url}", "--upstream", f"api.anthropic.com={server.url}"]


def write_spec(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def fingerprint(path: Path) -> tuple[bytes, int]:
    """A file's bytes and mtime (ns): both must survive a run that must not write it."""
    return path.read_bytes(), path.stat().st_mtime_ns


@pytest.fixture(scope="session")
def node_agent() -> Path:
    """tests/e2e/node_agent with its npm dependencies installed (./dev installs them too)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        message = "node and npm are not installed on this machine: the Node base-URL test needs Node 20+"
        if os.environ.get("CI") or os.environ.get("FLOWPROOF_REQUIRE_NODE") == "1":
            pytest.fail(message)  # CI machines have Node: a skip there would hide a broken setup
        pytest.skip(message)
    packages = json.loads((NODE_AGENT / "package.json").read_text())["dependencies"]
    if not all((NODE_AGENT / "node_modules" / name / "package.json").is_file() for name in packages):
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--silent"],
            cwd=NODE_AGENT, capture_output=True, timeout=300, check=False,
        )
        assert done.returncode == 0, f"npm install failed:\n{done.stdout.decode()}{done.stderr.decode()}"
    return NODE_AGENT
