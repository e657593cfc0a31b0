"""Rude model clients: they leave a call the way real agents do, so a proxy can be tested against them.

Each sends one model request (a JSON POST) and leaves early, on purpose:

- `close_after_terminal`: HTTP/1.1; reads the stream until the API's terminal
  event and closes the connection without reading the rest of the body, as
  openai-python's sync stream does at ``data: [DONE]``.
- `reset_after_terminal`: HTTP/2; resets its stream with RST_STREAM(CANCEL)
  right after the terminal event, as Codex CLI does after ``response.completed``.
- `abandon`: leaves before the answer ends: after some seconds with nothing
  read (a fire-and-forget call still in flight when the agent exits), or after
  N events; over HTTP/1.1 (close) or HTTP/2 (RST_STREAM(CANCEL)).

Each returns a `RudeResult` saying what it read and whether the body had ended
before it left. ``proxy="http://127.0.0.1:PORT"`` sends through an explicit
proxy (CONNECT for ``https://`` targets, absolute-form requests for plain
``http://`` over HTTP/1.1); ``verify`` is ``True`` (the system's trust),
``False`` (no verification), or a CA file (the fake server's `cert_file`, or a
proxy's CA).

The terminal event is recognised the same way for every API, without
``flowproof.wire``: ``data: [DONE]``, a ``response.completed`` /
``response.incomplete`` / ``response.failed`` or ``message_stop`` event, or a
Gemini chunk whose candidate carries a ``finishReason``.
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import h2.config
import h2.connection
import h2.errors
import h2.events

__all__ = [
    "CANCEL",
    "RudeResult",
    "abandon",
    "close_after_terminal",
    "is_terminal_event",
    "reset_after_terminal",
]

#: The HTTP/2 error code of a cancelled stream, as Codex CLI sends it.
CANCEL = int(h2.errors.ErrorCodes.CANCEL)

_TERMINAL_TYPES = frozenset({"response.completed", "response.incomplete", "response.failed", "message_stop"})
_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


@dataclass(frozen=True, slots=True)
class RudeResult:
    """What a rude client saw before it left.

    ``status`` is ``None`` when it left before the status line; ``body`` is the
    payload read (chunk framing removed); ``events`` the complete SSE events in
    it; ``saw_terminal`` whether the terminal event was among them;
    ``saw_end`` whether the body had ended (last chunk, END_STREAM) before the
    client left — with a server that ends its bodies late, a client that
    leaves at the terminal event has ``saw_terminal`` and not ``saw_end``.
    """

    status: int | None
    headers: tuple[tuple[str, str], ...]
    body: bytes
    saw_terminal: bool
    saw_end: bool
    http_version: str
    elapsed: float

    @property
    def events(self) -> list[bytes]:
        """The complete SSE events read, each without its blank-line terminator."""
        return _complete_events(self.body)[0]


def is_terminal_event(event: bytes) -> bool:
    """Whether one SSE event (its ``event:`` / ``data:`` lines) ends a model call of any API."""
    data: list[str] = []
    for line in event.decode("utf-8", "replace").splitlines():
        if line.startswith("event:") and line[6:].strip() in _TERMINAL_TYPES:
            return True
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    payload = "\n".join(data)
    if payload.strip() == "[DONE]":
        return True
    try:
        parsed = json.loads(payload) if payload else None
    except ValueError:
        return False
    if not isinstance(parsed, Mapping):
        return False
    if parsed.get("type") in _TERMINAL_TYPES:
        return True
    candidates = parsed.get("candidates")
    return isinstance(candidates, list) and any(
        isinstance(c, Mapping) and c.get("finishReason") for c in candidates
    )


def _complete_events(body: bytes) -> tuple[list[bytes], int]:
    """The complete SSE events in ``body`` and how many bytes they span."""
    events: list[bytes] = []
    position = 0
    while (match := _EVENT_END.search(body, position)) is not None:
        events.append(body[position : match.start()])
        position = match.end()
    return [e for e in events if e.strip()], position


def _stop_reading(body: bytes, after_events: int | None) -> tuple[bool, bool]:
    """(leave now, terminal seen): leave at the terminal event, or after ``after_events`` events."""
    events, _ = _complete_events(body)
    terminal = any(is_terminal_event(e) for e in events)
    if after_events is not None:
        return len(events) >= after_events, terminal
    return terminal, terminal


def _encode(body: Mapping[str, Any] | bytes) -> bytes:
    return body if isinstance(body, bytes) else json.dumps(body).encode()


def _tls_context(verify: bool | str | Path, alpn: Sequence[str]) -> ssl.SSLContext:
    if verify is False:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif verify is True:
        context = ssl.create_default_context()
    else:
        context = ssl.create_default_context(cafile=str(verify))
    context.set_alpn_protocols(list(alpn))
    return context


def _connect(url: str, *, proxy: str | None, verify: bool | str | Path, alpn: Sequence[str],
             timeout: float) -> tuple[socket.socket, str, int, bool]:
    """A connected socket to ``url`` (TLS when https, through ``proxy`` when given): (sock, host, port, tls)."""
    target = urlsplit(url)
    if target.scheme not in ("http", "https") or not target.hostname:
        raise ValueError(f"rude client: expected an http:// or https:// URL, got {url!r}")
    tls = target.scheme == "https"
    host, port = target.hostname, target.port or (443 if tls else 80)
    if proxy is None:
        sock = socket.create_connection((host, port), timeout=timeout)
    else:
        via = urlsplit(proxy)
        if via.scheme != "http" or not via.hostname:
            raise ValueError(f"rude client: the proxy must be an http:// URL, got {proxy!r}")
        sock = socket.create_connection((via.hostname, via.port or 80), timeout=timeout)
        if tls:
            authority = f"{host}:{port}"
            sock.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
            head = _read_head(sock)
            status = int(head.split(b" ", 2)[1])
            if status != 200:
                sock.close()
                raise ConnectionError(f"rude client: the proxy refused CONNECT {authority}: {head!r}")
    if tls:
        sock = _tls_context(verify, alpn).wrap_socket(sock, server_hostname=host)
    return sock, host, port, tls


def _read_head(sock: socket.socket) -> bytes:
    """Read up to the end of an HTTP/1.1 response head, byte by byte (nothing of the body is consumed)."""
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        byte = sock.recv(1)
        if not byte:
            raise ConnectionError(f"rude client: the connection closed inside a response head: {head!r}")
        head += byte
    return head


def _leave(sock: socket.socket) -> None:
    """Close without draining: unread bytes make the kernel answer with a reset, as real clients cause."""
    try:
        sock.close()
    except OSError:
        pass


# HTTP/1.1 -------------------------------------------------------------------------


def _http1(url: str, body: Mapping[str, Any] | bytes, *, headers: Mapping[str, str] | None, proxy: str | None,
           verify: bool | str | Path, timeout: float, after_events: int | None,
           after_seconds: float | None) -> RudeResult:
    started = time.monotonic()
    sock, host, port, tls = _connect(url, proxy=proxy, verify=verify, alpn=["http/1.1"], timeout=timeout)
    target = urlsplit(url)
    path = (target.path or "/") + (f"?{target.query}" if target.query else "")
    if proxy is not None and not tls:
        path = url  # absolute form, as a client speaks to an explicit proxy for a plain-HTTP target
    payload = _encode(body)
    default_port = 443 if tls else 80
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}" + ("" if port == default_port else f":{port}"),
             "Content-Type: application/json", "Accept: text/event-stream, application/json",
             f"Content-Length: {len(payload)}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    status: int | None = None
    response_headers: tuple[tuple[str, str], ...] = ()
    received = bytearray()
    saw_end = False
    try:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
        if after_seconds is not None:
            time.sleep(after_seconds)  # reads nothing: whatever the server sent stays unread
            return RudeResult(None, (), b"", False, False, "HTTP/1.1", time.monotonic() - started)
        head = _read_head(sock).decode("latin-1")
        status_line, *header_lines = head.split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        response_headers = tuple(
            (name.strip().lower(), value.strip())
            for name, _, value in (line.partition(":") for line in header_lines if line)
        )
        fields = dict(response_headers)
        chunked = fields.get("transfer-encoding", "").lower() == "chunked"
        length = int(fields["content-length"]) if "content-length" in fields else None
        buffer = b""
        leave, terminal = _stop_reading(bytes(received), after_events)
        while not leave:
            data = sock.recv(65536)
            if not data:
                saw_end = length is None and not chunked  # a close-delimited body ends at EOF
                break
            buffer += data
            if chunked:
                while True:
                    size_line, sep, rest = buffer.partition(b"\r\n")
                    if not sep:
                        break
                    size = int(size_line.split(b";")[0] or b"0", 16)
                    if size == 0:
                        saw_end = True
                        buffer = b""
                        break
                    if len(rest) < size + 2:
                        break
                    received += rest[:size]
                    buffer = rest[size + 2 :]
            else:
                received += buffer
                buffer = b""
                saw_end = length is not None and len(received) >= length
            leave, terminal = _stop_reading(bytes(received), after_events)
            if saw_end:
                break
        return RudeResult(status, response_headers, bytes(received), terminal, saw_end, "HTTP/1.1",
                          time.monotonic() - started)
    finally:
        _leave(sock)


def close_after_terminal(url: str, body: Mapping[str, Any] | bytes, *, headers: Mapping[str, str] | None = None,
                         proxy: str | None = None, verify: bool | str | Path = True,
                         timeout: float = 10.0) -> RudeResult:
    """POST over HTTP/1.1, read until the terminal event, close without reading the rest (openai-python sync)."""
    return _http1(url, body, headers=headers, proxy=proxy, verify=verify, timeout=timeout, after_events=None,
                  after_seconds=None)


# HTTP/2 ---------------------------------------------------------------------------


def _http2(url: str, body: Mapping[str, Any] | bytes, *, headers: Mapping[str, str] | None, proxy: str | None,
           verify: bool | str | Path, timeout: float, after_events: int | None, after_seconds: float | None,
           error_code: int) -> RudeResult:
    started = time.monotonic()
    target = urlsplit(url)
    if proxy is not None and target.scheme != "https":
        raise ValueError("rude client: HTTP/2 through a proxy needs an https:// target (h2 is negotiated by TLS)")
    sock, host, port, tls = _connect(url, proxy=proxy, verify=verify, alpn=["h2"], timeout=timeout)
    if tls and isinstance(sock, ssl.SSLSocket) and sock.selected_alpn_protocol() != "h2":
        _leave(sock)
        raise ConnectionError(f"rude client: {host}:{port} did not agree to HTTP/2 (ALPN "
                              f"{sock.selected_alpn_protocol()!r})")
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    payload = _encode(body)
    path = (target.path or "/") + (f"?{target.query}" if target.query else "")
    default_port = 443 if tls else 80
    request_headers = [(":method", "POST"), (":scheme", target.scheme),
                       (":authority", host if port == default_port else f"{host}:{port}"), (":path", path),
                       ("content-type", "application/json"), ("accept", "text/event-stream, application/json"),
                       ("content-length", str(len(payload)))]
    request_headers += [(k.lower(), v) for k, v in (headers or {}).items()]
    status: int | None = None
    response_headers: tuple[tuple[str, str], ...] = ()
    received = bytearray()
    saw_end = terminal = False
    try:
        conn.initiate_connection()
        stream_id = conn.get_next_available_stream_id()
        conn.send_headers(stream_id, request_headers)
        remaining = memoryview(payload)
        sock.sendall(conn.data_to_send())
        while True:
            window = min(conn.local_flow_control_window(stream_id), conn.max_outbound_frame_size)
            if window > 0 or not len(remaining):
                piece, remaining = remaining[:window], remaining[window:]
                conn.send_data(stream_id, bytes(piece), end_stream=not len(remaining))
                sock.sendall(conn.data_to_send())
                if not len(remaining):
                    break
                continue
            _receive(sock, conn)  # wait for the server to open the window
            sock.sendall(conn.data_to_send())
        leave = after_seconds is not None
        if after_seconds is not None:
            time.sleep(after_seconds)  # reads nothing: whatever the server sent stays unread
        while not leave and not saw_end:
            for event in _receive(sock, conn):
                if isinstance(event, h2.events.ResponseReceived) and event.stream_id == stream_id:
                    fields = [(str(k), str(v)) for k, v in event.headers or ()]
                    status = int(dict(fields).get(":status", "0"))
                    response_headers = tuple((k, v) for k, v in fields if not k.startswith(":"))
                elif isinstance(event, h2.events.DataReceived) and event.stream_id == stream_id:
                    received += event.data or b""
                    conn.acknowledge_received_data(event.flow_controlled_length, stream_id)
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream_id:
                    saw_end = True
                elif isinstance(event, h2.events.StreamReset) and event.stream_id == stream_id:
                    raise ConnectionError(f"rude client: the server reset the stream (error {event.error_code})")
            sock.sendall(conn.data_to_send())
            leave, terminal = _stop_reading(bytes(received), after_events)
            leave = leave and status is not None  # even after_events=0 waits for the response headers
        if not saw_end:
            conn.reset_stream(stream_id, error_code=error_code)
            sock.sendall(conn.data_to_send())
        conn.close_connection()
        sock.sendall(conn.data_to_send())
        return RudeResult(status, response_headers, bytes(received), terminal, saw_end, "HTTP/2",
                          time.monotonic() - started)
    finally:
        _leave(sock)


def _receive(sock: socket.socket, conn: h2.connection.H2Connection) -> list[h2.events.Event]:
    data = sock.recv(65536)
    if not data:
        raise ConnectionError("rude client: the server closed the HTTP/2 connection")
    return list(conn.receive_data(data))


def reset_after_terminal(url: str, body: Mapping[str, Any] | bytes, *, headers: Mapping[str, str] | None = None,
                         proxy: str | None = None, verify: bool | str | Path = True, timeout: float = 10.0,
                         error_code: int = CANCEL) -> RudeResult:
    """POST over HTTP/2, read until the terminal event, then RST_STREAM(``error_code``) (Codex CLI).

    ``https://`` negotiates h2 by ALPN; ``http://`` speaks h2 with prior
    knowledge (the fake server accepts both). When the body has already ended
    there is no stream left to reset: `RudeResult.saw_end` says so.
    """
    return _http2(url, body, headers=headers, proxy=proxy, verify=verify, timeout=timeout, after_events=None,
                  after_seconds=None, error_code=error_code)


def abandon(url: str, body: Mapping[str, Any] | bytes, *, after_seconds: float | None = None,
            after_events: int | None = None, http2: bool = False, headers: Mapping[str, str] | None = None,
            proxy: str | None = None, verify: bool | str | Path = True, timeout: float = 10.0) -> RudeResult:
    """POST and leave before the answer ends: after ``after_seconds`` reading nothing, or after ``after_events``.

    Give exactly one. ``after_seconds`` is a fire-and-forget call whose agent
    exits while it is in flight (with a slow server: before any response
    byte); ``after_events=0`` leaves right after the response headers. Over
    HTTP/1.1 it closes the connection; with ``http2`` it resets its stream
    with CANCEL and closes.
    """
    if (after_seconds is None) == (after_events is None):
        raise ValueError("abandon: give exactly one of after_seconds and after_events")
    if after_seconds is not None and after_seconds < 0 or after_events is not None and after_events < 0:
        raise ValueError("abandon: after_seconds and after_events must be >= 0")
    if http2:
        return _http2(url, body, headers=headers, proxy=proxy, verify=verify, timeout=timeout,
                      after_events=after_events, after_seconds=after_seconds, error_code=CANCEL)
    return _http1(url, body, headers=headers, proxy=proxy, verify=verify, timeout=timeout,
                  after_events=after_events, after_seconds=after_seconds)
