"""Fixtures for the addon tests: a mitmproxy test context and model-call flows.

mitmproxy's test helpers (`taddons`, `tflow`, `tutils`) have no stable API, so
every test goes through the small wrappers here.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mitmproxy import http
from mitmproxy.hooks import all_hooks
from mitmproxy.test import taddons, tflow, tutils

from flowproof.addon import Flowproof
from flowproof.cassette import (
    Cassette,
    RecordedRequest,
    RecordedResponse,
    RecordedTurn,
    save_cassette,
)
from flowproof.request_key import body_sha256
from flowproof.wire.sse import make_event

CHAT_PATH = "/v1/chat/completions"
SYSTEM = "You are a booking assistant."


def chat_body(user: str = "Book a flight to Nairobi", system: str = SYSTEM, **extra: Any) -> bytes:
    """A streamed OpenAI chat request body, as compact JSON bytes."""
    body = {
        "model": "gpt-4o",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        "stream": True,
        **extra,
    }
    return json.dumps(body, separators=(",", ":")).encode()


def chat_events(text: str) -> tuple:
    """The SSE events of a streamed chat completion answering ``text``."""
    chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4o",
             "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}]}
    end = {"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4o",
           "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    return (make_event(json.dumps(chunk)), make_event(json.dumps(end)), make_event("[DONE]"))


def chat_turn(index: int, body: bytes, text: str) -> RecordedTurn:
    """A recorded streamed chat turn whose request is exactly ``body``."""
    return RecordedTurn(
        index=index,
        provider="openai-chat",
        request=RecordedRequest("POST", "https://api.openai.com" + CHAT_PATH,
                                {"content-type": "application/json"}, body_sha256(body), json.loads(body)),
        response=RecordedResponse(200, {"content-type": "text/event-stream"}, events=chat_events(text)),
    )


def write_cassette(path: Path, *turns: RecordedTurn, route: str = "proxy") -> Path:
    save_cassette(Cassette(tuple(turns), route=route), path)  # type: ignore[arg-type]
    return path


def model_flow(
    body: bytes = b"",
    *,
    host: str = "api.openai.com",
    path: str = CHAT_PATH,
    method: str = "POST",
    headers: list[tuple[bytes, bytes]] | None = None,
) -> http.HTTPFlow:
    """A live flow for a request to ``https://host/path`` (no response yet)."""
    hdrs = headers if headers is not None else [
        (b"host", host.encode()),
        (b"content-type", b"application/json"),
        (b"authorization", b"Bearer sk-secret-test-key"),
    ]
    req = tutils.treq(
        host=host, port=443, scheme=b"https", method=method.encode(), path=path.encode(),
        headers=http.Headers(hdrs), content=body,
    )
    return tflow.tflow(req=req)


def read_log(path: Path) -> list[dict[str, Any]]:
    """Every event of a JSON-lines event log."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Hooks:
    """Calls a hook the way mitmproxy does: on the root addon, then on each of its children.

    ``hooks.request(flow)`` is mitmproxy's ``request`` event for the whole flowproof chain.
    """

    def __init__(self, tctx: taddons.context, root: Flowproof) -> None:
        self._tctx = tctx
        self.root = root

    def __getattr__(self, name: str) -> Any:
        hook = all_hooks[name]

        def invoke(*args: Any) -> None:
            self._tctx.master.addons.invoke_addon_sync(self.root, hook(*args))

        return invoke


@dataclass
class Harness:
    """An addon inside a mitmproxy test context, plus the run's files."""

    addon: Hooks
    tctx: taddons.context
    tmp: Path

    @property
    def report(self) -> Path:
        return self.tmp / "events.jsonl"

    def configure(self, **options: Any) -> None:
        options.setdefault("flowproof_report", str(self.report))
        # Not tctx.configure: its rollback re-runs configure with the defaults (replay
        # without a cassette), whose own error would hide the one under test.
        self.tctx.options.update(**options)

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [e for e in read_log(self.report) if kind is None or e["event"] == kind]


@pytest.fixture(autouse=True)
def _event_logs_closed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every event log a test's addon state opened is closed after the test. mitmproxy's
    ``done`` closes it in a proxy; a test that builds `Shared` by hand never reaches ``done``,
    and a log left to the collector is a ResourceWarning."""
    from flowproof.addon import eventlog

    opened: list[eventlog.EventLog] = []

    original = eventlog.EventLog.__init__

    def tracked(self: eventlog.EventLog, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        opened.append(self)

    # The class keeps its identity (tests compare the addon's children by type).
    monkeypatch.setattr(eventlog.EventLog, "__init__", tracked)
    yield
    for log in opened:
        log.close()


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    """A fresh addon in a mitmproxy test context."""
    addon = Flowproof()
    with taddons.context(addon) as tctx:
        yield Harness(Hooks(tctx, addon), tctx, tmp_path)
    addon.events.close()


SPEC = """\
name: Booking
app: agent
agent:
  command: python agent.py
tools:
  - name: search_flights
    result: { flights: [ { id: KQ311 } ] }
steps:
  - prompt: Book me a flight
"""


def tool_round_body(result: str) -> bytes:
    """A chat request that carries a search_flights tool result."""
    body = {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Book"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "search_flights", "arguments": "{\"dest\":\"NBO\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": result},
        ],
        "stream": True,
    }
    return json.dumps(body, separators=(",", ":")).encode()


def sse_response(flow: http.HTTPFlow) -> None:
    flow.response = tutils.tresp(
        status_code=200, headers=http.Headers([(b"content-type", b"text/event-stream")]), content=b""
    )


def stream_through(h: Harness, flow: http.HTTPFlow, chunks: list[bytes]) -> list[bytes]:
    """Run the response side of a streamed flow; return what the client received."""
    sse_response(flow)
    h.addon.responseheaders(flow)
    stream: Any = flow.response.stream  # type: ignore[union-attr]
    assert callable(stream)
    out = [stream(c) for c in chunks]
    out.append(stream(b""))
    h.addon.response(flow)
    return out


def json_response(flow: http.HTTPFlow, body: dict[str, Any]) -> None:
    flow.response = tutils.tresp(
        status_code=200, headers=http.Headers([(b"content-type", b"application/json")]),
        content=json.dumps(body).encode(),
    )


def gzipped(data: bytes) -> bytes:
    """``data`` gzip-compressed, reproducibly."""
    return gzip.compress(data, mtime=0)


CUT_EMOJI_BODY = json.dumps(
    {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "cut \ud83d"}]}
).encode()


# --------------------------------------------------------------------------- end to end

REPO = Path(__file__).resolve().parents[2]
ADDON_SCRIPT = REPO / "addon" / "flowproof_addon.py"
AGENT = Path(__file__).resolve().parent / "sdk_agent.py"


def _mitmdump() -> str:
    beside = Path(sys.executable).parent / "mitmdump"
    if beside.exists():
        return str(beside)
    found = shutil.which("mitmdump")
    if found is None:
        pytest.fail("mitmdump is not installed next to the interpreter: mitmproxy is a dependency, reinstall flowproof")
    return found


@dataclass
class Mitmdump:
    """A real mitmdump running the flowproof addon in its own process group."""

    proc: subprocess.Popen[bytes]
    report: Path
    port: int = 0

    @property
    def url(self) -> str:
        """The explicit proxy's URL, for clients that take one."""
        return f"http://127.0.0.1:{self.port}"

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [e for e in read_log(self.report) if kind is None or e["event"] == kind]

    def stop(self, timeout: float = 20.0) -> int:
        """SIGINT (so the done hook runs), wait, and kill the group if it lingers."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGINT)
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
            finally:
                self.kill()
        return self.proc.returncode

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass


def start_mitmdump(
    tmp: Path,
    confdir: Path,
    *options: str,
    name: str = "proxy",
    script: Path | None = ADDON_SCRIPT,
    timeout: float = 30.0,
    args: tuple[str, ...] = (),
) -> Mitmdump:
    """Start mitmdump on 127.0.0.1 (OS-chosen port), wait until it listens, return it."""
    report = tmp / f"{name}.events.jsonl"
    log = open(tmp / f"{name}.stderr", "wb")  # noqa: SIM115 — handed to the child
    argv = [_mitmdump(), "--listen-host", "127.0.0.1", "--listen-port", "0",
            "--set", f"confdir={confdir}", "--set", "connection_strategy=lazy", *args]
    if script is not None:
        argv += ["-s", str(script), "--set", f"flowproof_report={report}"]
    for opt in options:
        argv += ["--set", opt]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp)
    log.close()
    proxy = Mitmdump(proc, report)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"mitmdump exited {proc.returncode}: {(tmp / f'{name}.stderr').read_text()}")
            if script is None:
                port = _port_from_log(tmp / f"{name}.stderr")
                if port:
                    proxy.port = port
                    return proxy
            else:
                ready = proxy.events("ready")
                if ready:
                    proxy.port = int(ready[0]["listen"][0]["port"])
                    return proxy
            time.sleep(0.05)
        raise RuntimeError("mitmdump did not start listening in time")
    except BaseException:
        proxy.kill()
        raise


def _port_from_log(path: Path) -> int | None:
    import re

    m = re.search(r"listening at .*?:(\d+)", path.read_text(errors="replace"))
    return int(m.group(1)) if m else None


@pytest.fixture(scope="session")
def ca_bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(confdir, bundle): a mitmproxy CA made once per session, and certifi's roots plus it."""
    import certifi

    tmp = tmp_path_factory.mktemp("ca")
    confdir = tmp / "conf"
    proxy = start_mitmdump(tmp, confdir, script=None, name="ca")
    proxy.stop()
    bundle = tmp / "bundle.pem"
    bundle.write_bytes(Path(certifi.where()).read_bytes() + b"\n" + (confdir / "mitmproxy-ca-cert.pem").read_bytes())
    return confdir, bundle


def run_agent(port: int | None, bundle: Path, timeout: float = 60.0, **env: str) -> tuple[int, dict[str, Any]]:
    """Run sdk_agent.py through the proxy (or, with no port, by base URL); return (exit code, JSON output)."""
    child_env = {k: v for k, v in os.environ.items()
                 if k.lower() not in ("no_proxy", "http_proxy", "https_proxy", "all_proxy")
                 and not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    if port is not None:
        proxy = f"http://127.0.0.1:{port}"
        child_env.update(HTTPS_PROXY=proxy, https_proxy=proxy)
    child_env.update(SSL_CERT_FILE=str(bundle), **env)
    done = subprocess.run(
        [sys.executable, str(AGENT)], env=child_env, capture_output=True, timeout=timeout, check=False
    )
    try:
        out = json.loads(done.stdout.decode().strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise AssertionError(f"agent failed (rc {done.returncode}): {done.stderr.decode()[-3000:]}") from None
    return done.returncode, out


def after_handshake(port: int, bundle: Path, host: str = "api.openai.com", wait: float = 0.5) -> tuple[str, bytes]:
    """(TLS version, what the proxy sent in ``wait`` seconds after the handshake): a client
    that says nothing yet, through a CONNECT tunnel to ``host``. A TLS 1.3 session ticket
    is the bytes a threaded client can lose its first request to (docs/addon.md)."""
    import socket
    import ssl

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            assert chunk, f"the proxy closed the tunnel: {head!r}"
            head += chunk
        assert head.startswith(b"HTTP/1.1 200"), head
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = ssl.create_default_context(cafile=str(bundle)).wrap_bio(incoming, outgoing, server_hostname=host)
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                sock.sendall(outgoing.read())
                chunk = sock.recv(65536)
                assert chunk, "the proxy closed the connection in the handshake"
                incoming.write(chunk)
        sock.sendall(outgoing.read())  # the client's Finished
        sock.settimeout(wait)
        try:
            return str(tls.version()), sock.recv(65536)
        except TimeoutError:
            return str(tls.version()), b""
