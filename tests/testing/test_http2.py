"""Tests for flowproof.testing.http2: the same script served over HTTP/2."""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from urllib.parse import urlsplit

import h2.config
import h2.connection
import h2.events
import httpx2
import openai
import pytest

from flowproof.testing import FakeModelServer, Reply, abandon

from .helpers import MESSAGES


def h2_openai(server: FakeModelServer) -> tuple[openai.OpenAI, httpx2.Client]:
    http = httpx2.Client(http2=True, verify=str(server.cert_file), timeout=10)
    return openai.OpenAI(base_url=server.url + "/v1", api_key="test-key", max_retries=0, http_client=http), http


def _two_streams(server: FakeModelServer, systems: list[str]) -> list[str]:
    """Send one chat call per system prompt as concurrent streams of one h2 connection; the
    system prompts in the order their streams ended."""
    context = ssl.create_default_context(cafile=str(server.cert_file))
    context.set_alpn_protocols(["h2"])
    target = urlsplit(server.url)
    raw = socket.create_connection((target.hostname, target.port), timeout=10)
    with context.wrap_socket(raw, server_hostname=target.hostname) as sock:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        conn.initiate_connection()
        streams: dict[int, str] = {}
        for system in systems:
            body = json.dumps({"model": "m", "messages": [{"role": "system", "content": system}]}).encode()
            stream_id = conn.get_next_available_stream_id()
            conn.send_headers(stream_id, [(":method", "POST"), (":scheme", "https"), (":authority", target.netloc),
                                          (":path", "/v1/chat/completions"), ("content-type", "application/json"),
                                          ("content-length", str(len(body)))])
            conn.send_data(stream_id, body, end_stream=True)
            streams[stream_id] = system
        sock.sendall(conn.data_to_send())
        ended: list[str] = []
        while len(ended) < len(systems):
            data = sock.recv(65536)
            assert data, "the server closed the connection before answering both streams"
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.DataReceived):
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    ended.append(streams[event.stream_id])
            sock.sendall(conn.data_to_send())
        conn.close_connection()
        sock.sendall(conn.data_to_send())
    return ended


class TestHttp2:
    def test_official_sdk_streams_over_h2(self) -> None:
        """openai over an HTTP/2 transport parses a streamed tool call; the server saw HTTP/2 over TLS."""
        with FakeModelServer([Reply.tool_call("book", {"flight": "KQ311"}, text="On it.")], tls=True) as server:
            client, http = h2_openai(server)
            with http:
                chunks = list(client.chat.completions.create(model="m", messages=MESSAGES, stream=True))
            [exchange] = server.wait_settled()
        arguments = "".join(c.choices[0].delta.tool_calls[0].function.arguments or ""  # type: ignore[index, union-attr]
                            for c in chunks if c.choices and c.choices[0].delta.tool_calls)
        assert arguments == '{"flight":"KQ311"}'
        assert (exchange.request.http_version, exchange.request.tls, exchange.outcome) == ("HTTP/2", True, "ended")
        assert exchange.response is not None
        assert ("transfer-encoding", "chunked") not in exchange.response.headers
        assert exchange.response.headers[0] == ("server", "flowproof-fake-model")

    def test_streams_on_one_connection_are_answered_concurrently(self) -> None:
        """Concurrent h2 calls are served side by side: a slow one does not hold up a fast one.

        Both requests go out on one connection from a bare h2 client, the slow one first, and
        the fast one's stream must end first. (Through an SDK's pooled client, the client's
        own locking sometimes delivered the fast answer only with the slow one.)"""
        script = Reply.text("slow", first_byte_delay=2.0)
        with FakeModelServer([script], lanes={"fast": [Reply.text("fast")]}, tls=True) as server:
            ended = _two_streams(server, ["slow", "fast"])
            exchanges = server.wait_settled()
        assert ended == ["fast", "slow"]
        assert {e.request.http_version for e in exchanges} == {"HTTP/2"}

    def test_large_body_respects_flow_control(self) -> None:
        """A body bigger than the initial window still arrives whole."""
        text = "word " * 40_000
        with FakeModelServer([Reply.text(text)], tls=True) as server:
            client, http = h2_openai(server)
            with http:
                answer = client.chat.completions.create(model="m", messages=MESSAGES)
        assert answer.choices[0].message.content == text

    def test_a_scripted_cut_resets_the_stream(self) -> None:
        """cut_after over HTTP/2 resets the stream: the SDK sees a failed call, the exchange a cut."""
        with FakeModelServer([Reply.text("one two three", cut_after=2)], tls=True) as server:
            client, http = h2_openai(server)
            with http, pytest.raises(openai.APIConnectionError):
                list(client.chat.completions.create(model="m", messages=MESSAGES, stream=True))
            [exchange] = server.wait_settled()
        assert exchange.outcome == "cut"

    def test_stop_interrupts_a_slow_h2_stream(self) -> None:
        """Stopping while an h2 answer waits returns promptly and settles it as stopped."""
        server = FakeModelServer([Reply.text("late", first_chunk_delay=30)]).start()
        errors: list[Exception] = []

        def client() -> None:
            try:
                abandon(server.url + "/v1/chat/completions", {"model": "m", "stream": True}, after_events=1,
                        http2=True, timeout=20)
            except ConnectionError as error:  # the server went away under it, as it should
                errors.append(error)

        worker = threading.Thread(target=client)
        worker.daemon = True
        worker.start()
        deadline = time.monotonic() + 5
        while not server.exchanges and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.monotonic()
        server.stop()
        took = time.monotonic() - started
        [exchange] = server.exchanges
        worker.join(timeout=5)
        assert took < 3 and exchange.outcome == "stopped"
        assert len(errors) == 1

    def test_h2c_can_be_turned_off(self) -> None:
        """With http2=False the HTTP/2 preface is not answered as HTTP/2."""
        with FakeModelServer([Reply.text("x")], http2=False) as server:
            with pytest.raises(ConnectionError):
                abandon(server.url + "/v1/chat/completions", {"model": "m"}, after_events=0, http2=True)
