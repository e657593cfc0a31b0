"""The stdio stand-in (flowproof.runner.mcp_standin) as the agent runs it: a real process on pipes,
relaying to a stand-in proxy (a small HTTP server here) and, at record, to a real child server.

What only a process shows: the MCP stdio framing on real pipes, the shutdown sequence of the
child (stdin, SIGTERM, SIGKILL, its whole group), dying with the agent, and starting with
nothing but the standard library in an empty environment.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from flowproof.mcp.stdio import STANDIN_HOST
from flowproof.runner.mcp_stdio import STANDIN_SCRIPT
from tests.e2e.conftest import alive

#: A stdio "server": answers each line with a response carrying its id; says hello on stderr and
#: writes one line that is not JSON first (servers do print debug output to stdout by mistake).
ECHO_SERVER = """\
import json, sys
print("hello from the server", file=sys.stderr, flush=True)
sys.stdout.write("debug: not a message\\n"); sys.stdout.flush()
for line in sys.stdin:
    message = json.loads(line)
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message.get("id"), "result": {"echo": message}}) + "\\n")
    sys.stdout.flush()
"""

#: A server that ignores stdin closing and SIGTERM, and has a child of its own in its group.
STUBBORN_SERVER = """\
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
child = subprocess.Popen([sys.executable, "-c", stubborn])
open(sys.argv[1], "w").write(f"{os.getpid()} {child.pid}")
time.sleep(600)
"""


class FakeProxy:
    """Answers the stand-in's relay requests; ``answer(op, body)`` decides, every request is kept."""

    def __init__(self, answer: Callable[[str, bytes], dict[str, Any]]) -> None:
        self.requests: list[tuple[str, bytes]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 — http.server's hook name
                assert self.path.startswith(f"http://{STANDIN_HOST}/"), self.path  # absolute-form, via the proxy
                body = self.rfile.read(int(self.headers["content-length"]))
                op = self.path.split("/", 3)[3]
                outer.requests.append((op, body))
                data = json.dumps(answer(op, body)).encode()
                self.send_response(200)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def ops(self) -> list[str]:
        return [op.split("/")[0] for op, _ in self.requests]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def forward_all(op: str, body: bytes) -> dict[str, Any]:
    if op == "open":
        return {"session": 0, "client": []}
    return {"forward": True, "client": []}


@pytest.fixture
def proxies() -> Iterator[Callable[..., FakeProxy]]:
    started: list[FakeProxy] = []

    def start(answer: Callable[[str, bytes], dict[str, Any]] = forward_all) -> FakeProxy:
        started.append(FakeProxy(answer))
        return started[-1]

    yield start
    for proxy in started:
        proxy.close()


#: The stand-ins the running test started: their pipes are closed after it.
_STARTED: list[subprocess.Popen[bytes]] = []


@pytest.fixture(autouse=True)
def _close_standins() -> Iterator[None]:
    """Every stand-in's pipes are closed after its test (left to the collector, each is a
    ResourceWarning); one still running is killed first."""
    yield
    while _STARTED:
        process = _STARTED.pop()
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        for pipe in (process.stdin, process.stdout, process.stderr):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass


def standin(tmp_path: Path, proxy: FakeProxy, command: list[str] | None, **popen: Any) -> subprocess.Popen[bytes]:
    """The stand-in started the way its launcher starts it: ``python -I script SESSION``, here
    with an empty environment (MCP clients pass servers little more than PATH)."""
    session = tmp_path / "session.json"
    config: dict[str, Any] = {"server": "notes", "proxy": proxy.url, "relay_host": STANDIN_HOST}
    if command is not None:
        config["command"] = command
    session.write_text(json.dumps(config), encoding="utf-8")
    process = subprocess.Popen(
        [sys.executable, "-I", str(STANDIN_SCRIPT), str(session)], env={}, cwd=tmp_path,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen,
    )
    _STARTED.append(process)
    return process


def read_lines(stream: Any, count: int, timeout: float = 10.0) -> list[bytes]:
    """``count`` lines from a pipe, failing the test instead of hanging."""
    out: list[bytes] = []

    def read() -> None:
        while len(out) < count and (line := stream.readline()):
            out.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    assert len(out) == count, out
    return out


def wait_gone(*pids: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


class TestFraming:
    def test_lines_are_relayed_whole_whatever_the_chunks(self, tmp_path: Path, proxies: Any) -> None:
        """Two messages in one write, one split across writes, a blank line, an unterminated tail."""
        proxy = proxies()
        server = tmp_path / "echo.py"
        server.write_text(ECHO_SERVER, encoding="utf-8")
        process = standin(tmp_path, proxy, [sys.executable, str(server)])
        assert process.stdin is not None and process.stdout is not None
        one = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
        two = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"é": "\u2028"}},
                         ensure_ascii=False).encode()
        three = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "ping"}).encode()
        process.stdin.write(one + b"\n" + two + b"\n")
        process.stdin.flush()
        process.stdin.write(three[:10])
        process.stdin.flush()
        time.sleep(0.2)
        process.stdin.write(three[10:] + b"\n\n" + b'{"jsonrpc": "2.0", "id": 4, "meth')
        process.stdin.close()
        lines = read_lines(process.stdout, 4)
        assert lines[0] == b"debug: not a message\n"  # passed on as the server wrote it
        answered = [json.loads(line)["result"]["echo"] for line in lines[1:]]
        assert [m["id"] for m in answered] == [1, 2, 3]
        assert answered[1]["params"] == {"é": "\u2028"}
        assert process.wait(timeout=15) == 0
        client = [body for op, body in proxy.requests if op.startswith("client/")]
        assert client == [one, two, three]  # the blank line and the unterminated tail are no messages
        assert b"debug: not a message" in [body for op, body in proxy.requests if op.startswith("server/")]
        assert proxy.ops()[0] == "open" and proxy.ops()[-1] == "close"
        assert b"hello from the server" in (process.stderr.read() if process.stderr else b"")

    def test_replay_starts_no_server_and_writes_the_proxy_s_lines(self, tmp_path: Path, proxies: Any) -> None:
        def replay(op: str, body: bytes) -> dict[str, Any]:
            if op == "open":
                return {"session": 3, "client": ['{"jsonrpc":"2.0","method":"notifications/message"}']}
            if op.startswith("close/"):
                return {}
            return {"forward": False, "client": [json.dumps({"jsonrpc": "2.0", "id": json.loads(body)["id"],
                                                             "result": {}})]}

        proxy = proxies(replay)
        process = standin(tmp_path, proxy, None)
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(b'{"jsonrpc":"2.0","id":8,"method":"ping"}\n')
        process.stdin.flush()
        first, second = read_lines(process.stdout, 2)
        assert json.loads(first)["method"] == "notifications/message"
        assert json.loads(second) == {"jsonrpc": "2.0", "id": 8, "result": {}}
        process.stdin.close()
        assert process.wait(timeout=10) == 0
        assert proxy.ops() == ["open", "client", "close"]
        assert [op for op, _ in proxy.requests][1] == "client/3"


class TestTheServerProcess:
    def test_a_server_that_ignores_stdin_and_sigterm_is_killed_with_its_group(
        self, tmp_path: Path, proxies: Any
    ) -> None:
        proxy = proxies()
        script, pids = tmp_path / "stubborn.py", tmp_path / "pids"
        script.write_text(STUBBORN_SERVER, encoding="utf-8")
        process = standin(tmp_path, proxy, [sys.executable, str(script), str(pids)])
        deadline = time.monotonic() + 10
        while not (pids.exists() and pids.read_text().count(" ") == 1) and time.monotonic() < deadline:
            time.sleep(0.05)
        server, grandchild = map(int, pids.read_text().split())
        assert process.stdin is not None
        started = time.monotonic()
        process.stdin.close()
        assert process.wait(timeout=15) == 0
        # stdin closed, 2 s; SIGTERM (ignored), 2 s; SIGKILL of the group, grandchild included.
        assert 3.5 < time.monotonic() - started < 10
        assert wait_gone(server, grandchild, timeout=2), "the server's group survived"

    def test_the_stand_in_and_its_server_die_with_the_agent(self, tmp_path: Path, proxies: Any) -> None:
        """The agent is SIGKILLed: the stand-in (parent-death signal, its stdin closing) stops the server."""
        proxy = proxies()
        script, pids = tmp_path / "stubborn.py", tmp_path / "pids"
        script.write_text(STUBBORN_SERVER, encoding="utf-8")
        session = tmp_path / "session.json"
        session.write_text(json.dumps({"server": "notes", "proxy": proxy.url, "relay_host": STANDIN_HOST,
                                       "command": [sys.executable, str(script), str(pids)]}), encoding="utf-8")
        # The "agent": a process that starts the stand-in on pipes and then just waits.
        agent = subprocess.Popen(
            [sys.executable, "-c", "import subprocess, sys, time; p = subprocess.Popen(sys.argv[1:], "
             "stdin=subprocess.PIPE, stdout=subprocess.PIPE); print(p.pid, flush=True); time.sleep(600)",
             sys.executable, "-I", str(STANDIN_SCRIPT), str(session)],
            stdout=subprocess.PIPE, env={}, start_new_session=True,
        )
        assert agent.stdout is not None
        stand_in = int(agent.stdout.readline())
        deadline = time.monotonic() + 10
        while not (pids.exists() and pids.read_text().count(" ") == 1) and time.monotonic() < deadline:
            time.sleep(0.05)
        server, grandchild = map(int, pids.read_text().split())
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait(timeout=5)
        agent.stdout.close()
        assert wait_gone(stand_in, server, grandchild, timeout=10), "something outlived the agent"

    def test_a_server_that_exits_while_the_agent_is_connected_is_reported(
        self, tmp_path: Path, proxies: Any
    ) -> None:
        proxy = proxies()
        process = standin(tmp_path, proxy, [sys.executable, "-c", "import sys; sys.exit(3)"])
        assert process.stdout is not None
        assert process.stdout.read() == b""  # the agent sees the server gone
        assert process.wait(timeout=10) == 1
        op, body = proxy.requests[-1]
        assert op == "close/0"
        assert json.loads(body) == {"error": "the server exited (status 3) while the agent was still connected"}

    def test_a_server_that_cannot_start_is_reported(self, tmp_path: Path, proxies: Any) -> None:
        proxy = proxies()
        process = standin(tmp_path, proxy, ["/nonexistent/mcp-server", "--flag"])
        assert process.wait(timeout=10) == 1
        op, body = proxy.requests[-1]
        assert op == "close/0" and "could not start `/nonexistent/mcp-server`" in json.loads(body)["error"]

    def test_an_unreachable_proxy_fails_the_start_clearly(self, tmp_path: Path, proxies: Any) -> None:
        proxy = proxies()
        proxy.close()
        process = standin(tmp_path, proxy, None)
        _out, err = process.communicate(timeout=10)
        assert process.returncode == 1
        assert b"flowproof mcp stand-in `notes`: the flowproof proxy at 127.0.0.1:" in err
        assert b"Traceback" not in err


def test_the_stand_in_imports_only_the_standard_library() -> None:
    """It runs as a script with -I, in whatever environment the agent gives it."""
    tree = ast.parse(STANDIN_SCRIPT.read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported - {"__future__"} <= sys.stdlib_module_names, imported - sys.stdlib_module_names
