"""Starting a mitmdump process, on the standard library's cheapest modules alone.

``flowproof-run`` starts the proxy before it imports anything else
(`flowproof.runner.launch`), so what this module imports is on the path to the
proxy's ``ready`` and to the flow's first call. It imports only what a spawn needs
(`subprocess`, `tempfile`, and what they load themselves): no dataclasses, typing or
pathlib, which were about 25 ms of ``python -X importtime`` before the spawn
(docs/performance.md). Paths are strings here; `flowproof.runner.proxy` builds the
proxy's lifecycle (the ready wait, sessions, pools) on `Spawned`.

The process is started so that it never outlives the runner: its own process group
(a terminal's Ctrl-C does not reach it; the runner stops it), killed by the kernel if
the runner dies however it dies (``PR_SET_PDEATHSIG``), and the scratch folders of
runners that died are swept at each start (`sweep_scratch`).
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

TYPE_CHECKING = False  # typing's constant, without importing typing (mypy reads the name)
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "CA_BASENAME",
    "EARLY",
    "Spawned",
    "addon_script",
    "ca_dir",
    "mitmdump_executable",
    "prestart",
    "scratch_prefix",
    "spawn",
    "sweep_scratch",
    "take_early",
]

#: mitmproxy's file basename in its confdir (``mitmproxy-ca.pem`` …).
CA_BASENAME = "mitmproxy"
#: A Unix socket path must fit in sun_path (108 bytes on Linux).
_MAX_SOCKET_PATH = 100
#: The proxy reaches the upstream directly, never through a proxy the runner's environment names.
_PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY", "all_proxy")
#: Written when the repository's one-line script is absent (an installed wheel).
_ADDON_SHIM = "from flowproof.addon import Flowproof\n\naddons = [Flowproof()]\n"
#: The repository's one-line ``mitmdump -s`` script, beside the package.
_REPO_SCRIPT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__)))), "addon", "flowproof_addon.py"
)
_PR_SET_PDEATHSIG = 1
#: Scratch folders carry their owner's pid, so a later run can tell a crashed run's leftovers.
_SCRATCH_NAME = re.compile(r"flowproof-(?:proxy|run)-(\d+)-")


def ca_dir(environ: Mapping[str, str]) -> str:
    """``$FLOWPROOF_CA_DIR``, else ``$XDG_DATA_HOME/flowproof/ca``, else ``~/.local/share/flowproof/ca``."""
    if environ.get("FLOWPROOF_CA_DIR"):
        return os.path.expanduser(environ["FLOWPROOF_CA_DIR"])
    if environ.get("XDG_DATA_HOME"):
        return os.path.join(os.path.expanduser(environ["XDG_DATA_HOME"]), "flowproof", "ca")
    return os.path.join(os.path.expanduser("~"), ".local", "share", "flowproof", "ca")


def scratch_prefix(kind: str) -> str:
    """``flowproof-<kind>-<pid>-``: the prefix of this process's scratch folders."""
    return f"flowproof-{kind}-{os.getpid()}-"


def mitmdump_executable() -> str | None:
    """The ``mitmdump`` console script of the running interpreter's environment, else the
    one on ``PATH``; None when there is neither."""
    beside = os.path.join(os.path.dirname(sys.executable), "mitmdump")
    if os.path.exists(beside):
        return beside
    return shutil.which("mitmdump")


def addon_script(scratch: str) -> str:
    """The ``mitmdump -s`` script: ``$FLOWPROOF_ADDON_SCRIPT``, else the repository's one-line
    script, else a shim written to ``scratch`` (an installed wheel has no ``addon/`` folder)."""
    override = os.environ.get("FLOWPROOF_ADDON_SCRIPT")
    if override:
        # A debugging aid (and the runner's tests): load a modified addon instead.
        return override
    if os.path.isfile(_REPO_SCRIPT):
        return _REPO_SCRIPT
    shim = os.path.join(scratch, "flowproof_addon.py")
    try:
        with open(shim, encoding="utf-8") as existing:
            if existing.read() == _ADDON_SHIM:
                return shim
    except OSError:
        pass
    with open(shim, "w", encoding="utf-8") as out:
        out.write(_ADDON_SHIM)
    return shim


def _die_with_parent(runner: int) -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask the kernel to SIGKILL this process when the runner dies, however it dies.

    SIGKILL, not SIGTERM: an orphaned mitmdump that shut down cleanly would write its
    recording at the staging path after the runner is gone. If the runner already died
    before this line ran, exit now.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return  # not Linux: the kill in a finally is then the only guard
    if os.getppid() != runner:
        os._exit(1)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_scratch(root: str | None = None) -> list[str]:
    """Remove scratch folders left by runners that no longer exist (killed with SIGKILL);
    return what was removed. A folder of a live process is never touched."""
    base = root or tempfile.gettempdir()
    removed: list[str] = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return removed
    for entry in entries:
        match = _SCRATCH_NAME.match(entry.name)
        if match is None:
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
        except OSError:
            continue
        pid = int(match.group(1))
        if pid == os.getpid() or _pid_alive(pid):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.path)
    return removed


class Spawned:
    """One started mitmdump: its process, its scratch folder (its event log ``proxy.jsonl``,
    its output ``mitmdump.log``) and its control socket. ``key`` is what it was started
    with: the CA folder, whether it dials upstream lazily, and the ``-s`` script (None:
    the bundled addon)."""

    __slots__ = ("control", "key", "process", "scratch", "socket_dir", "started")

    def __init__(self, key: tuple[str, bool, str | None], process: subprocess.Popen[bytes],
                 scratch: tempfile.TemporaryDirectory[str], control: str, socket_dir: str | None,
                 started: float) -> None:
        self.key = key
        self.process = process
        self.scratch = scratch
        self.control = control
        self.socket_dir = socket_dir
        self.started = started

    @property
    def pid(self) -> int:
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL the proxy's process group (whatever mitmdump spawned dies with it) and remove
        its scratch folder (idempotent)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not fail
            pass
        self.scratch.cleanup()
        if self.socket_dir is not None:
            shutil.rmtree(self.socket_dir, ignore_errors=True)


def spawn(confdir: str, lazy: bool, script: str | None = None) -> Spawned:
    """Start mitmdump with the bundled addon (or ``script``) listening for sessions on a
    control socket, and return at once; `OSError` when it cannot be started (nothing is left
    behind then). The scratch folders of dead runners are swept after the start."""
    started = time.monotonic()
    executable = mitmdump_executable()
    if executable is None:
        raise FileNotFoundError("mitmdump was not found next to the Python interpreter nor on PATH")
    scratch = tempfile.TemporaryDirectory(prefix=scratch_prefix("proxy"))
    socket_dir: str | None = None
    control = os.path.join(scratch.name, "control.sock")
    if len(control) > _MAX_SOCKET_PATH:
        # A long $TMPDIR: the socket alone goes to a short private folder.
        socket_dir = tempfile.mkdtemp(prefix=scratch_prefix("proxy"), dir="/tmp")
        control = os.path.join(socket_dir, "control.sock")
    argv = [
        executable, "-q", "-s", script or addon_script(scratch.name),
        "--listen-host", "127.0.0.1", "--listen-port", "0",
        "--set", f"confdir={confdir}",
        "--set", f"flowproof_control={control}",
        "--set", f"flowproof_report={os.path.join(scratch.name, 'proxy.jsonl')}",
    ]
    if lazy:
        argv += ["--set", "connection_strategy=lazy"]
    env = {k: v for k, v in os.environ.items() if k not in _PROXY_VARIABLES}
    try:
        with open(os.path.join(scratch.name, "mitmdump.log"), "wb") as out:
            process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, env=env,
                # The proxy must not outlive the runner, even one killed with SIGKILL.
                preexec_fn=functools.partial(_die_with_parent, os.getpid()),
            )
    except OSError:
        scratch.cleanup()
        if socket_dir is not None:
            shutil.rmtree(socket_dir, ignore_errors=True)
        raise
    sweep_scratch()
    return Spawned((confdir, lazy, script), process, scratch, control, socket_dir, started)


# ------------------------------------------------------------------ the proxy started first

#: The proxies `prestart` started, until the first pool takes one (`take_early`).
EARLY: list[Spawned] = []
_EARLY_LOCK = threading.Lock()


def prestart(confdir: str, lazy: bool, script: str | None = None) -> None:
    """Start the proxy a run will most likely ask for, and return at once: mitmdump boots
    while the runner imports the rest and reads the spec and the cassette.

    The first `flowproof.runner.proxy.ProxyPool.open` takes it when the flow's kind is this
    one and kills it otherwise; one that no pool took is killed when the runner exits. A
    proxy that cannot start here is left to the flow's own start to report."""
    try:
        early = spawn(confdir, lazy, script)
    except OSError:
        return
    with _EARLY_LOCK:
        EARLY.append(early)
    atexit.register(_kill_early)


def take_early() -> list[Spawned]:
    """The proxies started early that no pool took yet; the list is emptied."""
    with _EARLY_LOCK:
        early = list(EARLY)
        EARLY.clear()
    return early


def _kill_early() -> None:
    for early in take_early():
        early.kill()
