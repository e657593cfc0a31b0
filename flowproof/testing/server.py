"""The threaded fake model server: routes requests, serves the script, writes the bytes.

One port speaks plain HTTP/1.1, HTTP/2 with prior knowledge (h2c) and, with
``tls=True``, TLS where ALPN picks ``h2`` or ``http/1.1``: the first bytes of a
connection say which (a TLS record, the HTTP/2 preface, or a request line).
"""

from __future__ import annotations

import gzip
import json
import select
import socket
import ssl
import sys
import tempfile
import threading
import time
import traceback
import zlib
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self, TextIO
from urllib.parse import parse_qsl, urlsplit

import brotli  # type: ignore[import-untyped]  # ships no type information

if sys.version_info >= (3, 14):
    from compression import zstd
else:  # mitmproxy depends on the backport
    from backports import zstd

# One renderer module per API, named as modules: `from flowproof.testing import …` would
# make this module depend on the package __init__ that re-exports it (an import cycle).
import flowproof.testing.anthropic as anthropic
import flowproof.testing.gemini as gemini
import flowproof.testing.openai_chat as openai_chat
import flowproof.testing.openai_responses as openai_responses
import flowproof.testing.websocket as websocket
from flowproof.testing.base import DEFAULT_MODEL, Context, Rendered, render_error
from flowproof.testing.capture import (
    CLIENT_CLOSED,
    STOPPED,
    Exchange,
    ExchangeRecord,
    ReceivedRequest,
)
from flowproof.testing.detect import (
    GEMINI,
    GEMINI_PATH,
    OPENAI_CHAT,
    OPENAI_RESPONSES,
    detect_api,
    system_prompt,
)
from flowproof.testing.http2 import H2Session
from flowproof.testing.livelike import LiveLike
from flowproof.testing.script import Reply, Script, ScriptError, load_script
from flowproof.testing.tls import server_context, write_certificate
from flowproof.testing.transport import Gone, Transport, write_answer

SERVER_NAME = "flowproof-fake-model"
# An idle connection is dropped after this long, so a left-open client cannot pin a thread.
IDLE_TIMEOUT = 30.0
# How often a paused answer looks at the client and at stop(): a client that leaves is seen this fast.
_POLL = 0.02


def _decode_body(data: bytes, encoding: str) -> bytes:
    """A request body as sent before ``content-encoding`` (gzip, deflate, br, zstd; several in order).

    Raises ValueError when the body is not what its encoding says."""
    try:
        return _decode_codings(data, encoding)
    except (zlib.error, brotli.error, zstd.ZstdError, EOFError, OSError) as e:
        raise ValueError(f"cannot decode a {encoding} body: {e}") from None


def _decode_codings(data: bytes, encoding: str) -> bytes:
    for coding in reversed([c.strip().lower() for c in encoding.split(",") if c.strip()]):
        if coding in ("gzip", "x-gzip"):
            data = gzip.decompress(data)
        elif coding == "deflate":
            # RFC 9110's deflate is zlib-wrapped; some clients send raw DEFLATE.
            try:
                data = zlib.decompress(data)
            except zlib.error:
                data = zlib.decompress(data, -zlib.MAX_WBITS)
        elif coding == "br":
            data = brotli.decompress(data)
        elif coding == "zstd":
            data = zstd.decompress(data)
        elif coding != "identity":
            raise ValueError(f"unknown content-encoding {coding!r}")
    return data


class _Handler(BaseHTTPRequestHandler):
    """One HTTP/1.1 connection; each request is answered through this object as its `Transport`."""

    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT
    server: _HTTPServer
    server_version = SERVER_NAME
    sys_version = ""
    # Whether the body of the response being written is chunked.
    _chunked = False

    def send_response(self, code: int, message: str | None = None) -> None:
        """Status line and Server header only: no Date header, so answers are byte-reproducible."""
        self.log_request(code)
        self.send_response_only(code, message)
        self.send_header("server", self.server_version)

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default per-request stderr line; the CLI logs its own."""

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def _read_body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            body = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
            data = bytes(body)
        else:
            data = self.rfile.read(int(self.headers.get("content-length") or 0))
        return _decode_body(data, self.headers.get("content-encoding", ""))

    @property
    def is_tls(self) -> bool:
        return isinstance(self.connection, ssl.SSLSocket)

    def _handle(self) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        path = urlsplit(self.path).path
        if websocket.is_upgrade(self.command, path, headers):
            self.server.fake._websocket(self, path, headers)
            return
        try:
            body: bytes | None = self._read_body()
        except (ValueError, OSError, EOFError):
            body = None
        self.server.fake._respond(
            self, self.command, self.path, list(self.headers.items()), body,
            http_version=self.request_version, tls=self.is_tls,
        )

    # Transport -------------------------------------------------------------

    def headers_sent(self, headers: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        return [("server", self.server_version), *headers]

    def begin(self, status: int, headers: Sequence[tuple[str, str]]) -> None:
        self._chunked = ("transfer-encoding", "chunked") in headers
        try:
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
        except OSError:
            raise self._gone() from None

    def send(self, payload: bytes) -> None:
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload) if self._chunked else payload)
        except OSError:
            raise self._gone() from None

    def end(self) -> None:
        if self._chunked:
            try:
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                raise self._gone() from None

    def abort(self) -> None:
        # Close without the terminating chunk / the rest of the body: the client sees a cut stream.
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def wait(self, seconds: float) -> None:
        if seconds <= 0:
            return
        stopping = self.server.fake._stopping
        deadline = time.monotonic() + seconds
        watch = True
        while (remaining := deadline - time.monotonic()) > 0:
            if stopping.is_set():
                raise Gone(STOPPED)
            if not watch:
                stopping.wait(min(remaining, _POLL))
                continue
            readable, _, _ = select.select([self.connection], [], [], min(remaining, _POLL))
            if readable:
                if self._client_left():
                    raise self._gone()
                watch = False  # the client sent more (pipelining): just sleep out the pause

    def _gone(self) -> Gone:
        # stop() shuts the connections down after setting the flag: that close is the server's, not the client's.
        return Gone(STOPPED if self.server.fake._stopping.is_set() else CLIENT_CLOSED)

    def _client_left(self) -> bool:
        """Whether a readable connection is at its end (the client closed or reset it)."""
        conn = self.connection
        try:
            if isinstance(conn, ssl.SSLSocket):
                # TLS cannot peek: read; any application data makes this connection unusable after the answer.
                conn.setblocking(False)
                try:
                    data = conn.recv(1)
                finally:
                    conn.setblocking(True)
                    conn.settimeout(self.timeout)
                self.close_connection = True
                return data == b""
            return bool(conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"")
        except (ssl.SSLWantReadError, BlockingIOError):
            return False
        except OSError:
            return True


class _HTTPServer(ThreadingHTTPServer):
    """A threading server that tells the protocols apart and remembers connections so stop() can close them."""

    daemon_threads = True
    block_on_close = False
    # socketserver's default backlog of 5 drops SYNs when a hundred calls arrive at once;
    # a live provider never does, and a dropped SYN costs a one-second retransmit.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], fake: FakeModelServer) -> None:
        self.fake = fake
        self.open_connections: set[socket.socket] = set()
        self.handler_threads: set[threading.Thread] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def track(self, conn: socket.socket, *, add: bool) -> None:
        with self.connections_lock:
            if add:
                self.open_connections.add(conn)
            else:
                self.open_connections.discard(conn)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        self.track(request, add=True)
        with self.connections_lock:
            self.handler_threads.add(threading.current_thread())
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.track(request, add=False)
            with self.connections_lock:
                self.handler_threads.discard(threading.current_thread())

    def finish_request(self, request: Any, client_address: Any) -> None:
        conn: socket.socket = request
        conn.settimeout(IDLE_TIMEOUT)
        first = _peek(conn, 4)
        if not first:
            return
        if first[:1] == b"\x16":  # a TLS handshake record
            context = self.fake._tls_context
            if context is None:
                return  # a plain server: drop it, as a plain port would fail the handshake
            try:
                conn = context.wrap_socket(conn, server_side=True)
            except (ssl.SSLError, OSError):
                return  # a client that gave up on the handshake (or does not trust the certificate)
            self.track(conn, add=True)
            try:
                if conn.selected_alpn_protocol() == "h2":
                    H2Session(conn, self.fake._respond, self.fake._stopping, tls=True, decode=_decode_body).run()
                    return
                _Handler(conn, client_address, self)
                return
            finally:
                self.track(conn, add=False)
                _close(conn)
        if first == b"PRI " and self.fake._http2:  # the HTTP/2 connection preface: h2c with prior knowledge
            H2Session(conn, self.fake._respond, self.fake._stopping, tls=False, decode=_decode_body).run()
            return
        _Handler(conn, client_address, self)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client hanging up (reset, closed pipe) is normal traffic, not a server fault:
        # socketserver would print a traceback for it.
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionResetError, BrokenPipeError, TimeoutError)):
            return
        self.fake._fault(traceback.format_exc())
        super().handle_error(request, client_address)


def _peek(conn: socket.socket, size: int) -> bytes:
    """The first ``size`` bytes the client sent, left unread (fewer when it sends fewer and pauses)."""
    try:
        data = conn.recv(size, socket.MSG_PEEK)
        deadline = time.monotonic() + 1.0
        while data and len(data) < size and time.monotonic() < deadline:
            time.sleep(0.005)
            data = conn.recv(size, socket.MSG_PEEK)
        return data
    except OSError:
        return b""


def _close(conn: socket.socket) -> None:
    try:
        conn.close()
    except OSError:
        pass


class FakeModelServer:
    """A scripted model API on 127.0.0.1, answering OpenAI, Anthropic and Gemini requests.

    Use it as a context manager (it serves from a daemon thread between
    ``__enter__`` and ``__exit__``) or call `start` / `stop`. Replies are served
    in order, one per model call, from ``script`` (or from a lane, see `Script`).
    When the script runs out, the server answers ``exhausted_status`` (500) with
    "fake model: script exhausted after N calls" so the test fails loudly.

    Live-like behaviour, all off by default so recorded bytes stay the same:

    - ``end_delay``: seconds between a stream's last event and the end of its
      body (a `Reply` may set its own).
    - ``live``: a `LiveLike` (or a seed) — fresh ids, reordered argument keys,
      other case and whitespace in prose, on every answer.
    - ``tls``: serve TLS too, with a self-signed certificate (`cert_file`)
      covering localhost, 127.0.0.1 and ``tls_hostnames``; ALPN offers ``h2``
      when ``http2``. HTTP/2 with prior knowledge (h2c) is accepted on the
      plain port whenever ``http2`` is on.
    """

    def __init__(
        self,
        script: Sequence[Reply] | Script = (),
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        lanes: Mapping[str, Sequence[Reply]] | None = None,
        exhausted_status: int = 500,
        log: TextIO | None = None,
        end_delay: float = 0.0,
        live: LiveLike | int | None = None,
        tls: bool = False,
        tls_hostnames: Iterable[str] = (),
        http2: bool = True,
    ) -> None:
        if isinstance(script, Script):
            lanes = {**script.lanes, **(lanes or {})}
            script = script.replies
        if end_delay < 0:
            raise ScriptError("server", f"end_delay must be >= 0 seconds, got {end_delay}")
        self._host = host
        self._requested_port = port
        self._exhausted_status = exhausted_status
        self._log_stream = log
        self._end_delay = end_delay
        if isinstance(live, bool) or not isinstance(live, (LiveLike, int, type(None))):
            raise ScriptError("server", f"live must be a LiveLike or an int seed, got {live!r}")
        self._live: LiveLike | None = LiveLike(seed=live) if isinstance(live, int) else live
        self._tls = tls
        self._tls_hostnames = tuple(tls_hostnames)
        self._http2 = http2
        self._tls_context: ssl.SSLContext | None = None
        self._cert_dir: tempfile.TemporaryDirectory[str] | None = None
        self._cert_file: Path | None = None
        self._lock = threading.Lock()
        self._queue: deque[Reply] = deque(self._check(script))
        self._lanes: dict[str, deque[Reply]] = {k: deque(self._check(v)) for k, v in (lanes or {}).items()}
        self._requests: list[ReceivedRequest] = []
        self._exchanges: list[ExchangeRecord] = []
        self._faults: list[str] = []
        self._served = 0
        self._tool_counter = 0
        self._websockets = 0
        self._warmups = 0
        self._response_ids: set[str] = set()
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def from_json(cls, path: str | Path, *, host: str = "127.0.0.1", port: int = 0) -> FakeModelServer:
        """A server scripted by a JSON script file (see `load_script`)."""
        return cls(load_script(path), host=host, port=port)

    @staticmethod
    def _check(replies: Iterable[Reply]) -> list[Reply]:
        replies = list(replies)
        for i, reply in enumerate(replies):
            if not isinstance(reply, Reply):
                raise ScriptError(f"script[{i}]", f"expected a Reply, got {type(reply).__name__}")
        return replies

    # lifecycle ------------------------------------------------------------

    def start(self) -> Self:
        """Bind and serve in a daemon thread; returns self. Idempotent while running."""
        if self._httpd is not None:
            return self
        self._stopping.clear()
        if self._tls and self._tls_context is None:
            self._cert_dir = tempfile.TemporaryDirectory(prefix="flowproof-fake-tls-")
            cert_file, key_file = write_certificate(Path(self._cert_dir.name), self._tls_hostnames)
            self._cert_file = cert_file
            self._tls_context = server_context(cert_file, key_file, http2=self._http2)
        self._httpd = _HTTPServer((self._host, self._requested_port), self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
            name=f"fake-model-{self.port}", daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, close the port and every open connection, and join the threads."""
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        self._stopping.set()  # wakes handlers sleeping on a scripted delay
        httpd.shutdown()
        httpd.server_close()
        with httpd.connections_lock:
            connections = list(httpd.open_connections)
            threads = list(httpd.handler_threads)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if thread is not None:
            thread.join(timeout=5)
        for handler in threads:
            handler.join(timeout=5)
        self._httpd = None
        self._thread = None
        if self._cert_dir is not None:
            # The certificate lives as long as the server serves: left to the garbage
            # collector, the folder outlived the server (a ResourceWarning each time).
            # A restart makes a new one.
            self._cert_dir.cleanup()
            self._cert_dir = self._cert_file = self._tls_context = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # properties -----------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound port (only while running)."""
        if self._httpd is None:
            raise RuntimeError("the fake model server is not running; use it as a context manager")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (``https://`` with ``tls=True``), no trailing slash (append ``/v1`` for OpenAI)."""
        return f"{'https' if self._tls else 'http'}://{self._host}:{self.port}"

    @property
    def cert_file(self) -> Path:
        """The PEM certificate a client must trust to reach a ``tls=True`` server (it is its own CA)."""
        if self._cert_file is None:
            raise RuntimeError("the fake model server has no certificate: start it with tls=True")
        return self._cert_file

    @property
    def requests(self) -> list[ReceivedRequest]:
        """Every request received so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def model_requests(self) -> list[ReceivedRequest]:
        """The received requests that were model calls (``api`` is set)."""
        return [r for r in self.requests if r.api is not None]

    @property
    def exchanges(self) -> list[Exchange]:
        """Every request with the exact response bytes written for it, in arrival order (snapshots).

        A response's bytes are recorded just before they are written, so once a
        client has read an answer its `Exchange` already holds it.
        """
        with self._lock:
            records = list(self._exchanges)
        return [record.snapshot() for record in records]

    @property
    def model_exchanges(self) -> list[Exchange]:
        """The exchanges whose request was a model call (``request.api`` is set)."""
        return [e for e in self.exchanges if e.request.api is not None]

    def wait_settled(self, timeout: float = 10.0) -> list[Exchange]:
        """The exchanges once every one has an ``outcome`` (the server finished or the client left).

        A client returns as soon as it has what it wants; the server notices a
        moment later. Raises ``TimeoutError`` naming the requests still open.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            records = list(self._exchanges)
        for record in records:
            if not record.settled.wait(max(0.0, deadline - time.monotonic())):
                open_ = [f"{r.request.method} {r.request.path}" for r in records if not r.settled.is_set()]
                raise TimeoutError(f"fake model: exchanges still open after {timeout}s: {open_}")
        return self.exchanges

    @property
    def faults(self) -> list[str]:
        """Tracebacks of errors inside the server itself; a client that leaves is never one."""
        with self._lock:
            return list(self._faults)

    @property
    def calls_served(self) -> int:
        """How many model calls were answered from the script (errors included)."""
        with self._lock:
            return self._served

    @property
    def remaining(self) -> int:
        """Replies not yet served, lanes included."""
        with self._lock:
            return len(self._queue) + sum(len(q) for q in self._lanes.values())

    # script ----------------------------------------------------------------

    def set_script(self, script: Sequence[Reply], *, lane: str | None = None) -> None:
        """Replace the replies still to come (of the main script, or of ``lane``)."""
        replies = self._check(script)
        with self._lock:
            if lane is None:
                self._queue = deque(replies)
            else:
                self._lanes[lane] = deque(replies)

    def extend_script(self, script: Sequence[Reply], *, lane: str | None = None) -> None:
        """Append replies to the main script or to ``lane``."""
        replies = self._check(script)
        with self._lock:
            if lane is None:
                self._queue.extend(replies)
            else:
                self._lanes.setdefault(lane, deque()).extend(replies)

    # internals used by the connections -------------------------------------------

    def _track(self, request: ReceivedRequest, record: ExchangeRecord) -> None:
        with self._lock:
            self._requests.append(request)
            self._exchanges.append(record)

    def _websocket(self, handler: _Handler, path: str, headers: Mapping[str, str]) -> None:
        """Serve an upgraded connection (`flowproof.testing.websocket`) until it closes."""
        with self._lock:
            self._websockets += 1
            number = self._websockets
        self._log(f"GET {path} -> 101 (WebSocket {number})")
        websocket.serve(self, handler, path, headers, number)

    def _mint_warmup_id(self) -> str:
        with self._lock:
            self._warmups += 1
            return f"resp_fake_warmup_{self._warmups}"

    def _remember_response(self, response_id: str) -> None:
        with self._lock:
            self._response_ids.add(response_id)

    def _knows_response(self, response_id: Any) -> bool:
        with self._lock:
            return isinstance(response_id, str) and response_id in self._response_ids

    def _fault(self, text: str) -> None:
        with self._lock:
            self._faults.append(text)

    def _log(self, line: str) -> None:
        if self._log_stream is not None:
            print(line, file=self._log_stream, flush=True)

    def _respond(self, transport: Transport, method: str, target: str, headers: Sequence[tuple[str, str]],
                 body: bytes | None, *, http_version: str, tls: bool) -> None:
        """Record one request and write its answer through ``transport`` (any HTTP version).

        ``body`` is ``None`` when it could not be read or decoded.
        """
        try:
            self._respond_unguarded(transport, method, target, headers, body, http_version=http_version, tls=tls)
        except Exception:
            # A bug of the fake server itself: kept for `faults`, and the client sees a broken answer.
            self._fault(traceback.format_exc())
            try:
                transport.abort()
            except Exception:
                pass

    def _respond_unguarded(self, transport: Transport, method: str, target: str,
                           headers: Sequence[tuple[str, str]], body: bytes | None, *,
                           http_version: str, tls: bool) -> None:
        if body is None:
            write_answer(transport, render_error(None, 400, "fake model: could not read the request body"),
                         None, None)
            return
        split = urlsplit(target)
        path = split.path
        try:
            parsed: Any = json.loads(body) if body else None
        except ValueError:
            parsed = None
        api = detect_api(method, path)
        request = ReceivedRequest(
            method=method, path=path, query=dict(parse_qsl(split.query, keep_blank_values=True)),
            headers={k.lower(): v for k, v in headers}, body=body, json=parsed, api=api,
            http_version=http_version, tls=tls,
        )
        record = ExchangeRecord(request)
        self._track(request, record)
        if method == "GET" and path == "/health":
            write_answer(transport, Rendered(200, "application/json", body=b'{"status":"ok"}'), None, record)
            return
        if api is None:
            write_answer(transport, render_error(None, 404, f"fake model: nothing answers {method} {path}"),
                         None, record)
            return
        if not isinstance(parsed, Mapping):
            write_answer(transport, render_error(api, 400, "fake model: the request body is not a JSON object"),
                         None, record)
            return
        rendered, reply = self._answer(api, path, dict(parse_qsl(split.query)), body, parsed)
        self._log(f"{method} {target} -> {rendered.status}")
        write_answer(transport, rendered, reply, record, end_delay=self._end_delay)

    def _take(self, api: str, body: Mapping[str, Any]) -> tuple[Reply, int, tuple[int, ...]] | str:
        """The next reply for a call (from its lane), its call number and tool-call counters;
        the exhausted message when none is left."""
        system = system_prompt(api, body) if self._lanes else ""
        with self._lock:
            lane = next((key for key in self._lanes if key in system), None)
            queue = self._queue if lane is None else self._lanes[lane]
            if not queue:
                where = f" in lane {lane!r}" if lane is not None else ""
                return f"fake model: script exhausted after {self._served} calls{where}"
            reply = queue.popleft()
            self._served += 1
            n = self._served
            call_ids = tuple(range(self._tool_counter + 1, self._tool_counter + 1 + len(reply.calls)))
            self._tool_counter += len(reply.calls)
        return reply, n, call_ids

    def _context(self, reply: Reply, n: int, call_ids: tuple[int, ...], model: Any, raw: bytes,
                 body: Mapping[str, Any]) -> Context:
        out_size = len(reply.content) + sum(len(c.name) + len(c.arguments) for c in reply.calls)
        return Context(n=n, call_ids=call_ids, model=model if isinstance(model, str) else DEFAULT_MODEL,
                       body=body, input_tokens=max(1, len(raw) // 4), output_tokens=max(1, out_size // 4),
                       live=self._live)

    def _answer(self, api: str, path: str, query: Mapping[str, str], raw: bytes,
                body: Mapping[str, Any]) -> tuple[Rendered, Reply | None]:
        taken = self._take(api, body)
        if isinstance(taken, str):
            return render_error(api, self._exhausted_status, taken), None
        reply, n, call_ids = taken
        if reply.is_error:
            return render_error(api, reply.status, reply.message, reply.retry_after), reply
        if self._live is not None:
            reply = self._live.apply(reply, n)
        route = GEMINI_PATH.search(path)
        model = reply.model or (route.group("model") if route else None) or body.get("model")
        ctx = self._context(reply, n, call_ids, model, raw, body)
        if api == GEMINI:
            assert route is not None
            streaming = route.group("method") == "streamGenerateContent"
            return gemini.render(reply, ctx, streaming, query.get("alt") == "sse"), reply
        stream = body.get("stream") is True
        if api == OPENAI_CHAT:
            return openai_chat.render(reply, ctx, stream), reply
        if api == OPENAI_RESPONSES:
            events = openai_responses.stream_events(reply, ctx)
            self._remember_response(events[-1]["response"]["id"])
            return openai_responses.render(reply, ctx, stream), reply
        return anthropic.render(reply, ctx, stream), reply
