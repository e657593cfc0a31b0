"""The threaded fake model server: routes requests, serves the script, writes the bytes."""

from __future__ import annotations

import gzip
import json
import socket
import sys
import threading
import zlib
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import parse_qsl, urlsplit

from flowproof.testing import anthropic, gemini, openai_chat, openai_responses
from flowproof.testing.base import DEFAULT_MODEL, Context, Rendered, render_error
from flowproof.testing.capture import Exchange, ExchangeRecord, ReceivedRequest
from flowproof.testing.detect import (
    GEMINI,
    GEMINI_PATH,
    OPENAI_CHAT,
    OPENAI_RESPONSES,
    detect_api,
    system_prompt,
)
from flowproof.testing.script import Reply, Script, ScriptError, load_script


class _Handler(BaseHTTPRequestHandler):
    """Routes one HTTP request to the fake model; stays stateless (state lives on the server)."""

    protocol_version = "HTTP/1.1"
    # An idle keep-alive connection is dropped after this long, so a left-open client cannot pin a thread.
    timeout = 30
    server: _HTTPServer
    # The headers of the response being written, and the exchange it is recorded in.
    _sent_headers: list[tuple[str, str]]
    _exchange: ExchangeRecord | None = None
    server_version = "flowproof-fake-model"
    sys_version = ""

    def send_response(self, code: int, message: str | None = None) -> None:
        """Status line and Server header only: no Date header, so answers are byte-reproducible."""
        self._sent_headers = []
        self.log_request(code)
        self.send_response_only(code, message)
        self.send_header("server", self.server_version)

    def send_header(self, keyword: str, value: str) -> None:
        """Send a header and remember it for the request's `Exchange`."""
        if hasattr(self, "_sent_headers"):
            self._sent_headers.append((keyword, value))
        super().send_header(keyword, value)

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
        encoding = self.headers.get("content-encoding", "").lower()
        if encoding == "gzip":
            data = gzip.decompress(data)
        elif encoding == "deflate":
            data = zlib.decompress(data)
        return data

    def _handle(self) -> None:
        fake = self.server.fake
        split = urlsplit(self.path)
        path = split.path
        try:
            body = self._read_body()
        except (ValueError, OSError, EOFError, zlib.error):
            self._write(render_error(None, 400, "fake model: could not read the request body"), None)
            return
        try:
            parsed: Any = json.loads(body) if body else None
        except ValueError:
            parsed = None
        api = detect_api(self.command, path)
        request = ReceivedRequest(
            method=self.command, path=path, query=dict(parse_qsl(split.query, keep_blank_values=True)),
            headers={k.lower(): v for k, v in self.headers.items()}, body=body, json=parsed, api=api,
        )
        fake._record(request)
        self._exchange = fake._open_exchange(request)
        if self.command == "GET" and path == "/health":
            self._write(Rendered(200, "application/json", body=b'{"status":"ok"}'), None)
            return
        if api is None:
            self._write(render_error(None, 404, f"fake model: nothing answers {self.command} {path}"), None)
            return
        if not isinstance(parsed, Mapping):
            self._write(render_error(api, 400, "fake model: the request body is not a JSON object"), None)
            return
        rendered, reply = fake._answer(api, path, dict(parse_qsl(split.query)), body, parsed)
        fake._log(f"{self.command} {self.path} -> {rendered.status}")
        self._write(rendered, reply)

    def _sleep(self, seconds: float) -> bool:
        """Wait, unless the server is stopping; False means stop writing."""
        return seconds <= 0 or not self.server.fake._stopping.wait(seconds)

    def _abort(self) -> None:
        # Close without the terminating chunk / the rest of the body: the client sees a cut stream.
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _write(self, rendered: Rendered, reply: Reply | None) -> None:
        cut = reply.cut_after if reply else None
        first_delay = reply.first_chunk_delay if reply else 0.0
        # Set by _handle once the request is recorded (an unreadable body has no record).
        record, self._exchange = self._exchange, None
        try:
            if rendered.events is None:
                if not self._sleep(first_delay):
                    return self._abort()
                self.send_response(rendered.status)
                self.send_header("content-type", rendered.content_type)
                self.send_header("content-length", str(len(rendered.body)))
                for name, value in rendered.headers:
                    self.send_header(name, value)
                if record is not None:
                    record.start(rendered.status, self._sent_headers)
                self.end_headers()
                if cut is not None:
                    if record is not None:
                        record.add(rendered.body[:cut], last=cut >= len(rendered.body))
                    self.wfile.write(rendered.body[:cut])
                    return self._abort()
                if record is not None:
                    record.add(rendered.body, last=True)
                self.wfile.write(rendered.body)
                return None
            self.send_response(rendered.status)
            self.send_header("content-type", rendered.content_type)
            self.send_header("cache-control", "no-cache")
            self.send_header("transfer-encoding", "chunked")
            if record is not None:
                record.start(rendered.status, self._sent_headers)
                if not rendered.events:
                    record.finish()
            self.end_headers()
            for i, event in enumerate(rendered.events):
                if cut is not None and i >= cut:
                    return self._abort()
                if not self._sleep(first_delay if i == 0 else (reply.chunk_delay if reply else 0.0)):
                    return self._abort()
                if record is not None:
                    record.add(event, last=i == len(rendered.events) - 1)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            # The client went away mid-answer (it timed out or gave up): nothing left to do.
            self.close_connection = True
        return None


class _HTTPServer(ThreadingHTTPServer):
    """A threading server that remembers its open connections so stop() can close them."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], fake: FakeModelServer) -> None:
        self.fake = fake
        self.open_connections: set[socket.socket] = set()
        self.handler_threads: set[threading.Thread] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.open_connections.add(request)
            self.handler_threads.add(threading.current_thread())
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self.connections_lock:
                self.open_connections.discard(request)
                self.handler_threads.discard(threading.current_thread())

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client hanging up (reset, closed pipe) is normal traffic, not a server fault:
        # socketserver would print a traceback for it.
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


class FakeModelServer:
    """A scripted model API on 127.0.0.1, answering OpenAI, Anthropic and Gemini requests.

    Use it as a context manager (it serves from a daemon thread between
    ``__enter__`` and ``__exit__``) or call `start` / `stop`. Replies are served
    in order, one per model call, from ``script`` (or from a lane, see `Script`).
    When the script runs out, the server answers ``exhausted_status`` (500) with
    "fake model: script exhausted after N calls" so the test fails loudly.
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
    ) -> None:
        if isinstance(script, Script):
            lanes = {**script.lanes, **(lanes or {})}
            script = script.replies
        self._host = host
        self._requested_port = port
        self._exhausted_status = exhausted_status
        self._log_stream = log
        self._lock = threading.Lock()
        self._queue: deque[Reply] = deque(self._check(script))
        self._lanes: dict[str, deque[Reply]] = {k: deque(self._check(v)) for k, v in (lanes or {}).items()}
        self._requests: list[ReceivedRequest] = []
        self._exchanges: list[ExchangeRecord] = []
        self._served = 0
        self._tool_counter = 0
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

    def start(self) -> FakeModelServer:
        """Bind and serve in a daemon thread; returns self. Idempotent while running."""
        if self._httpd is not None:
            return self
        self._stopping.clear()
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

    def __enter__(self) -> FakeModelServer:
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
        """``http://127.0.0.1:PORT``, with no trailing slash (append ``/v1`` for OpenAI clients)."""
        return f"http://{self._host}:{self.port}"

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

    # internals used by the handler ----------------------------------------------

    def _record(self, request: ReceivedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _open_exchange(self, request: ReceivedRequest) -> ExchangeRecord:
        record = ExchangeRecord(request)
        with self._lock:
            self._exchanges.append(record)
        return record

    def _log(self, line: str) -> None:
        if self._log_stream is not None:
            print(line, file=self._log_stream, flush=True)

    def _answer(self, api: str, path: str, query: Mapping[str, str], raw: bytes,
                body: Mapping[str, Any]) -> tuple[Rendered, Reply | None]:
        system = system_prompt(api, body) if self._lanes else ""
        with self._lock:
            lane = next((key for key in self._lanes if key in system), None)
            queue = self._queue if lane is None else self._lanes[lane]
            if not queue:
                where = f" in lane {lane!r}" if lane is not None else ""
                message = f"fake model: script exhausted after {self._served} calls{where}"
                return render_error(api, self._exhausted_status, message), None
            reply = queue.popleft()
            self._served += 1
            n = self._served
            call_ids = tuple(range(self._tool_counter + 1, self._tool_counter + 1 + len(reply.calls)))
            self._tool_counter += len(reply.calls)
        if reply.is_error:
            return render_error(api, reply.status, reply.message, reply.retry_after), reply
        route = GEMINI_PATH.search(path)
        model = reply.model or (route.group("model") if route else None) or body.get("model")
        out_size = len(reply.content) + sum(len(c.name) + len(c.arguments) for c in reply.calls)
        ctx = Context(n=n, call_ids=call_ids, model=model if isinstance(model, str) else DEFAULT_MODEL,
                       body=body, input_tokens=max(1, len(raw) // 4), output_tokens=max(1, out_size // 4))
        if api == GEMINI:
            assert route is not None
            streaming = route.group("method") == "streamGenerateContent"
            return gemini.render(reply, ctx, streaming, query.get("alt") == "sse"), reply
        stream = body.get("stream") is True
        if api == OPENAI_CHAT:
            return openai_chat.render(reply, ctx, stream), reply
        if api == OPENAI_RESPONSES:
            return openai_responses.render(reply, ctx, stream), reply
        return anthropic.render(reply, ctx, stream), reply

