"""The hold server: what a client got of an abandoned call, then silence until it leaves."""

from __future__ import annotations

import socket
import time

import pytest

from flowproof.addon.hold import HOLD_HEADER, Held, HoldServer


@pytest.fixture
def server():
    hold = HoldServer()
    yield hold
    hold.close()


def ask(port: int, token: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(
        f"POST /v1/messages HTTP/1.1\r\nhost: x\r\n{HOLD_HEADER}: {token}\r\ncontent-length: 2\r\n\r\n{{}}".encode()
    )
    return sock


def read_for(sock: socket.socket, seconds: float) -> bytes:
    """Everything the server sends within ``seconds`` (it never ends a held body)."""
    sock.settimeout(0.1)
    data = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        if not chunk:
            break
        data += chunk
    return data


def test_sends_the_partial_answer_and_never_ends_the_body(server: HoldServer) -> None:
    """The head and the events that arrived at record, as one chunk; no terminating chunk."""
    held = Held(200, {"content-type": "text/event-stream"}, b"event: message_start\ndata: {}\n\n")
    sock = ask(server.port, server.hold(held))
    data = read_for(sock, 0.5)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"content-type: text/event-stream" in head and b"transfer-encoding: chunked" in head
    assert body == b"1f\r\nevent: message_start\ndata: {}\n\n\r\n"  # 31 bytes, one chunk
    assert not body.endswith(b"0\r\n\r\n")
    assert server.holding == 1
    sock.close()


def test_a_call_that_got_nothing_gets_nothing(server: HoldServer) -> None:
    """No response had started at record: the client waits, as it did then."""
    sock = ask(server.port, server.hold(Held(None, {}, b"")))
    assert read_for(sock, 0.3) == b""
    sock.close()


def test_the_client_leaving_ends_the_hold(server: HoldServer) -> None:
    sock = ask(server.port, server.hold(Held(None, {}, b"")))
    deadline = time.monotonic() + 5
    while server.holding == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.holding == 1
    sock.close()
    while server.holding and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.holding == 0


def test_close_ends_every_hold(server: HoldServer) -> None:
    """At shutdown every held line is closed: the client sees the end of the connection."""
    sock = ask(server.port, server.hold(Held(200, {}, b"")))
    read_for(sock, 0.2)
    server.close()
    sock.settimeout(5)
    assert sock.recv(65536) == b""
    sock.close()


def test_an_unknown_token_is_held_without_an_answer(server: HoldServer) -> None:
    """A token is served once: a second request with it gets no answer."""
    token = server.hold(Held(200, {}, b"x"))
    first = ask(server.port, token)
    assert read_for(first, 0.3).startswith(b"HTTP/1.1 200")
    second = ask(server.port, token)
    assert read_for(second, 0.3) == b""
    first.close()
    second.close()
