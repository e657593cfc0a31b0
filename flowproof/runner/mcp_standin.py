"""flowproof's stand-in for a stdio MCP server (docs/mcp.md, "MCP over stdio").

The agent's MCP config launches this in place of the real server (the runner
writes a launcher and hands the agent its path, `flowproof.runner.mcp_stdio`).
It speaks the MCP stdio transport with the agent — one JSON-RPC message a line,
UTF-8, newline-delimited, nothing else on stdout — and relays every line, both
ways, to the flow's proxy, which decides what happens to it
(`flowproof.addon.mcp_stdio`): answer a declared tool, forward the line to the
real server, or serve it from the cassette.

At record and compare it starts the real server (the spec's ``command``, plus any
arguments the agent's config gives the stand-in) as its child, in a process group
of its own, and stops it the way the MCP lifecycle says a client does: close its
stdin, wait, SIGTERM, wait, SIGKILL — on every way out (the agent closing the
pipe, a signal, the agent dying: a parent-death signal). At replay it starts no
server at all.

Standard library only, and run as a script (``python -I mcp_standin.py SESSION``):
it must start in any environment the agent gives it — MCP clients commonly pass a
server only HOME and PATH — whatever way flowproof was installed.
"""

from __future__ import annotations

import ctypes
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

#: The longest line relayed (a large tool result is a few MB); past it the session ends.
MAX_LINE = 64 * 1024 * 1024
#: Seconds the real server gets to exit after its stdin closes, and after SIGTERM.
GRACE = 2.0
_PR_SET_PDEATHSIG = 1


class RelayError(Exception):
    """The proxy could not be reached, or refused a relay request."""


class LineTooLong(Exception):
    """A line longer than `MAX_LINE` (no newline in sight)."""


class Shutdown(Exception):
    """A signal asked the stand-in to stop."""


def lines(fd: int) -> Iterator[bytes]:
    """Each newline-terminated line read from ``fd``, without its line break. An unterminated
    last line is no message (the transport delimits messages by newlines) and is dropped."""
    buffer = bytearray()
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            return
        start = len(buffer)
        buffer += chunk
        end = buffer.find(b"\n", start)
        while end >= 0:
            yield bytes(buffer[:end])
            del buffer[: end + 1]
            end = buffer.find(b"\n")
        if len(buffer) > MAX_LINE:
            raise LineTooLong(f"a line longer than {MAX_LINE} bytes")


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class Relay:
    """Relay requests to the flow's proxy over one keep-alive connection (one per thread)."""

    def __init__(self, proxy: str, host: str) -> None:
        address = proxy.removeprefix("http://").rstrip("/")
        hostname, _, port = address.rpartition(":")
        self.address = (hostname, int(port))
        self.host = host
        self._conn: http.client.HTTPConnection | None = None

    def post(self, path: str, body: bytes) -> dict[str, Any]:
        # Absolute-form: the request goes through the proxy listener, as any proxied request.
        url = f"http://{self.host}{path}"
        for attempt in (0, 1):
            reused = self._conn is not None
            conn = self._conn or http.client.HTTPConnection(*self.address, timeout=30)
            self._conn = conn
            try:
                conn.request("POST", url, body=body, headers={"content-type": "application/octet-stream"})
                response = conn.getresponse()
                data = response.read()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                self._conn = None
                # A keep-alive connection the proxy closed meanwhile: one fresh try.
                if attempt == 0 and reused:
                    continue
                host, port = self.address
                raise RelayError(f"the flowproof proxy at {host}:{port} is unreachable: {e}") from None
            if response.status != 200:
                raise RelayError(f"the flowproof proxy refused {path}: {data[:300].decode('utf-8', 'replace')}")
            doc = json.loads(data)
            if not isinstance(doc, dict):
                raise RelayError(f"the flowproof proxy answered {path} with {data[:100]!r}")
            return doc
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


def _prctl_deathsig(sig: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False  # not Linux: stdin closing is then the signal that the agent is gone


class StandIn:
    """One stdio session: the agent on fds 0 and 1, the real server (record, compare) as a child."""

    def __init__(self, config: dict[str, Any], extra_args: list[str]) -> None:
        self.server = str(config["server"])
        self.proxy = str(config["proxy"])
        self.host = str(config["relay_host"])
        command = config.get("command")
        self.command = [*command, *extra_args] if command else None
        self.session: int | None = None
        self.child: subprocess.Popen[bytes] | None = None
        self._agent_out = threading.Lock()
        self._server_in = threading.Lock()
        self._stopping = False
        self._reader: threading.Thread | None = None

    def on_signal(self, signum: int, frame: object) -> None:
        # Once the server is being stopped, a second signal (the parent-death signal after the
        # pipe closed, say) must not cut that short: it would leave the server running.
        if not self._stopping:
            raise Shutdown()

    def to_agent(self, texts: list[Any]) -> None:
        """Write lines the proxy gave (text, no line break) to the agent."""
        with self._agent_out:
            for text in texts:
                try:
                    write_all(1, str(text).encode("utf-8") + b"\n")
                except OSError:
                    return  # the agent is gone; shutdown follows from its closed stdin

    def run(self) -> int:
        relay = Relay(self.proxy, self.host)
        try:
            opened = relay.post("/open", json.dumps({"server": self.server}).encode())
            self.session = int(opened["session"])
            self.to_agent(list(opened.get("client") or ()))
            if self.command is not None and not self.start_server(relay):
                return 1
            for line in lines(0):
                if not line.strip():
                    continue  # a blank line is no message
                answer = relay.post(f"/client/{self.session}", line)
                self.to_agent(list(answer.get("client") or ()))
                if answer.get("forward") and self.child is not None:
                    self.to_server(line)
            self.stop_server()
            relay.post(f"/close/{self.session}", b"{}")
            return 0
        except Shutdown:
            self.stop_server()
            return 0
        except (RelayError, LineTooLong) as e:
            print(f"flowproof mcp stand-in `{self.server}`: {e}", file=sys.stderr, flush=True)
            self.stop_server()
            return 1
        finally:
            relay.close()

    def start_server(self, relay: Relay) -> bool:
        assert self.command is not None
        try:
            self.child = subprocess.Popen(
                self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                # A group of its own, so stopping it stops whatever it started too; and it
                # dies with the stand-in even when the stand-in cannot clean up (SIGKILL).
                start_new_session=True, preexec_fn=lambda: _prctl_deathsig(signal.SIGKILL),
            )
        except OSError as e:
            text = f"could not start `{self.command[0]}`: {e.strerror or e}"
            print(f"flowproof mcp stand-in `{self.server}`: {text}", file=sys.stderr, flush=True)
            relay.post(f"/close/{self.session}", json.dumps({"error": text}).encode())
            return False
        self._reader = threading.Thread(target=self.relay_server, daemon=True)
        self._reader.start()
        return True

    def to_server(self, line: bytes) -> None:
        assert self.child is not None and self.child.stdin is not None
        with self._server_in:
            try:
                write_all(self.child.stdin.fileno(), line + b"\n")
            except OSError:
                pass  # the server exited; relay_server reports it

    def relay_server(self) -> None:
        """The server's stdout to the agent, line by line, each relayed to the proxy first."""
        child = self.child
        assert child is not None and child.stdout is not None
        relay = Relay(self.proxy, self.host)
        try:
            for line in lines(child.stdout.fileno()):
                if not line.strip():
                    continue
                answer = relay.post(f"/server/{self.session}", line)
                if answer.get("forward"):
                    with self._agent_out:
                        try:
                            write_all(1, line + b"\n")
                        except OSError:
                            pass
            if self._stopping:
                return
            status = child.poll() if _exited(child.pid, GRACE) else None
            # The agent is still connected: it must see the server gone, and the run must say why.
            gone = "closed its stdout" if status is None else f"exited (status {status})"
            text = f"the server {gone} while the agent was still connected"
            print(f"flowproof mcp stand-in `{self.server}`: {text}", file=sys.stderr, flush=True)
            relay.post(f"/close/{self.session}", json.dumps({"error": text}).encode())
            self.stop_server()
            os._exit(1)
        except (RelayError, LineTooLong, OSError) as e:
            if not self._stopping:
                print(f"flowproof mcp stand-in `{self.server}`: {e}", file=sys.stderr, flush=True)
                self.stop_server()
                os._exit(1)
        finally:
            relay.close()

    def stop_server(self) -> None:
        """Close the server's stdin, wait; SIGTERM its group, wait; SIGKILL it (the MCP shutdown)."""
        self._stopping = True
        child, self.child = self.child, None
        if child is None:
            return
        if child.stdin is not None:
            try:
                child.stdin.close()
            except OSError:
                pass
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None:
                _signal_group(child.pid, sig)
            if _exited(child.pid, GRACE):
                break
        # While the server is a zombie its group id cannot be reused: sweep what it left in it.
        _signal_group(child.pid, signal.SIGKILL)
        child.wait()
        reader = self._reader
        if reader is not None and reader is not threading.current_thread():
            # What the server wrote before it exited still reaches the agent (and the recording).
            reader.join(GRACE)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _exited(pid: int, timeout: float) -> bool:
    """True once ``pid`` has exited (left as a zombie, not reaped), waiting up to ``timeout``."""
    done = threading.Event()
    result: list[bool] = []

    def wait() -> None:
        try:
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
            result.append(True)
        except ChildProcessError:
            result.append(True)
        done.set()

    threading.Thread(target=wait, daemon=True).start()
    done.wait(timeout)
    return bool(result)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: mcp_standin.py SESSION_FILE [ARGS...] (started by flowproof, docs/mcp.md)", file=sys.stderr)
        return 2
    parent = os.getppid()
    # Die with the agent, however it dies; if it already died, stop now.
    if _prctl_deathsig(signal.SIGTERM) and os.getppid() != parent:
        return 1
    try:
        # Out of the agent's process group: the runner kills that group once the agent has
        # exited, which would cut the server's shutdown short (SIGKILL to the stand-in leaves
        # what the server started running). While the agent runs, the runner still finds the
        # stand-in as its descendant.
        os.setsid()
    except OSError:
        pass  # already a session leader (the MCP SDK's client starts servers that way)

    try:
        with open(argv[1], encoding="utf-8") as fh:
            config = json.load(fh)
    except (OSError, ValueError) as e:
        print(f"flowproof mcp stand-in: cannot read its session file {argv[1]}: {e}", file=sys.stderr)
        return 2
    standin = StandIn(config, argv[2:])
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, standin.on_signal)
    return standin.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
