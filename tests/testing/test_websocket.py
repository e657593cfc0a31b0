"""The fake server's Responses-over-WebSocket mode and its compressed request bodies.

The WebSocket tests drive the official openai SDK's WebSocket client
(``client.responses.connect()``), so what the fake sends is what that client
accepts; the compression tests post with httpx2, the SDK's own transport.
"""

from __future__ import annotations

import gzip
import json
import socket
import sys
import time
import zlib
from typing import Any

import brotli
import httpx2
import openai
import pytest

from flowproof.testing import FakeModelServer, Reply

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd


def _client(server: FakeModelServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="test-key", max_retries=0, timeout=10)


def _turn(conn: Any, **create: Any) -> list[Any]:
    """Send one response.create and read the events up to the terminal one (or an error)."""
    conn.response.create(**create)
    events = []
    for event in conn:
        events.append(event)
        if event.type in ("response.completed", "response.incomplete", "response.failed", "error"):
            return events
    raise AssertionError("the connection closed before a terminal event")


class TestWebSocket:
    def test_a_tool_loop_chained_by_previous_response_id(self) -> None:
        """Warm-up, then two turns each continuing the last by id with only the new input."""
        script = [Reply.tool_call("get_weather", {"city": "Paris"}), Reply.text("It is sunny.")]
        with FakeModelServer(script) as server, _client(server).responses.connect() as conn:
            warm = _turn(conn, model="m", instructions="You are a bot.", input=[], generate=False, store=False)
            assert [e.type for e in warm] == ["response.created", "response.in_progress", "response.completed"]
            assert warm[-1].response.output == [] and warm[-1].response.id == "resp_fake_warmup_1"
            first = _turn(conn, model="m", input="weather in Paris?", previous_response_id=warm[-1].response.id,
                          store=False)
            done = first[-1].response
            assert (done.id, done.previous_response_id, done.store) == ("resp_fake_1", "resp_fake_warmup_1", False)
            [call] = done.output
            assert (call.name, call.arguments, call.call_id) == ("get_weather", '{"city":"Paris"}', "call_fake_1")
            second = _turn(conn, model="m", previous_response_id=done.id,
                           input=[{"type": "function_call_output", "call_id": "call_fake_1", "output": "sun"}])
            assert second[-1].response.output_text == "It is sunny."
            frames = [r.json for r in server.model_requests]
        # A warm-up consumes no reply; every frame is one request of connection 1.
        assert server.calls_served == 2 and server.remaining == 0
        assert [f["type"] for f in frames] == ["response.create"] * 3
        assert [r.websocket for r in server.requests] == [1, 1, 1]
        assert frames[2]["input"] == [{"type": "function_call_output", "call_id": "call_fake_1", "output": "sun"}]

    def test_each_event_is_one_text_frame_as_sent(self) -> None:
        with FakeModelServer([Reply.text("one two")]) as server, _client(server).responses.connect() as conn:
            events = _turn(conn, model="m", input="hi")
            [exchange] = server.wait_settled()
        assert exchange.outcome == "ended" and exchange.response is not None
        sent = [json.loads(chunk) for chunk in exchange.response.chunks]
        assert [e["type"] for e in sent] == [e.type for e in events]
        assert [e["sequence_number"] for e in sent] == list(range(len(sent)))

    def test_an_unknown_previous_response_is_a_400_error_event(self) -> None:
        with FakeModelServer([Reply.text("never")]) as server, _client(server).responses.connect() as conn:
            [error] = _turn(conn, model="m", input="hi", previous_response_id="resp_elsewhere")
            # The connection stays usable, and the scripted reply is still there.
            assert _turn(conn, model="m", input="hi")[-1].response.output_text == "never"
        assert (error.type, error.status) == ("error", 400)
        assert error.error.code == "previous_response_not_found"
        assert "resp_elsewhere" in error.error.message

    def test_a_response_made_over_http_can_be_continued_over_the_socket(self) -> None:
        with FakeModelServer([Reply.text("first"), Reply.text("second")]) as server:
            client = _client(server)
            first = client.responses.create(model="m", input="hi")
            with client.responses.connect() as conn:
                events = _turn(conn, model="m", input="again", previous_response_id=first.id)
        assert events[-1].response.output_text == "second"

    def test_scripted_errors_and_exhaustion_are_error_events_with_status(self) -> None:
        script = [Reply.error(429, "slow down", retry_after=2)]
        with FakeModelServer(script) as server, _client(server).responses.connect() as conn:
            [limited] = _turn(conn, model="m", input="hi")
            [exhausted] = _turn(conn, model="m", input="hi")
            first = server.wait_settled()[0].response
        assert (limited.status, limited.error.message) == (429, "slow down")
        # retry-after travels as a header map beside the error, where codex reads it.
        assert first is not None and json.loads(first.chunks[0])["headers"] == {"retry-after": "2"}
        assert exhausted.status == 500 and "script exhausted after 1 calls" in exhausted.error.message

    def test_a_frame_that_is_not_response_create_is_refused(self) -> None:
        with FakeModelServer([Reply.text("kept")]) as server, _client(server).responses.connect() as conn:
            conn.send({"type": "response.cancel"})  # type: ignore[arg-type, typeddict-item]
            error = next(iter(conn))
        assert (error.type, error.status) == ("error", 400)
        assert "response.cancel" in error.error.message and server.remaining == 1

    def test_delays_and_a_cut_apply_per_frame(self) -> None:
        script = [Reply.text("a b c", first_chunk_delay=0.4, chunk_delay=0.05), Reply.text("x y z", cut_after=2)]
        with FakeModelServer(script) as server, _client(server).responses.connect() as conn:
            started = time.monotonic()
            conn.response.create(model="m", input="hi")
            next(iter(conn))
            assert time.monotonic() - started >= 0.4
            for event in conn:
                if event.type == "response.completed":
                    break
            conn.response.create(model="m", input="again")
            received = []
            with pytest.raises(Exception):  # noqa: B017 — the SDK's own error for a dropped socket
                for event in conn:
                    received.append(event.type)
            outcomes = [e.outcome for e in server.wait_settled()]
        assert received == ["response.created", "response.in_progress"]
        assert outcomes == ["ended", "cut"]

    def test_a_client_that_leaves_mid_answer_is_client_closed(self) -> None:
        with FakeModelServer([Reply.text("a b c d", chunk_delay=0.3)]) as server:
            conn = _client(server).responses.connect().enter()
            conn.response.create(model="m", input="hi")
            next(iter(conn))
            conn.close()
            [exchange] = server.wait_settled()
        assert exchange.outcome == "client-closed"
        assert server.faults == []

    def test_an_upgrade_elsewhere_is_not_a_websocket(self) -> None:
        """Only the Responses path upgrades; other GETs answer as before."""
        with FakeModelServer() as server, socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(b"GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                         b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                         b"Sec-WebSocket-Version: 13\r\n\r\n")
            assert sock.recv(12) == b"HTTP/1.1 404"


def _compressed(body: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        return gzip.compress(body)
    if encoding == "deflate":
        return zlib.compress(body)
    if encoding == "br":
        return brotli.compress(body)
    return zstd.compress(body)


class TestCompressedRequests:
    @pytest.mark.parametrize("http2", [False, True])
    @pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "zstd"])
    def test_each_encoding_is_read_as_the_json_it_carries(self, encoding: str, http2: bool) -> None:
        body = json.dumps({"model": "m", "input": "hi " * 200}).encode()
        with FakeModelServer([Reply.text("read it")]) as server:
            with httpx2.Client(http1=not http2, http2=http2) as client:
                response = client.post(server.url + "/v1/responses", content=_compressed(body, encoding),
                                       headers={"content-type": "application/json", "content-encoding": encoding})
            [request] = server.requests
        assert response.status_code == 200 and response.json()["output"][0]["content"][0]["text"] == "read it"
        assert (request.body, request.headers["content-encoding"]) == (body, encoding)
        assert request.http_version == ("HTTP/2" if http2 else "HTTP/1.1")

    def test_a_body_that_is_not_its_encoding_is_a_400(self) -> None:
        with FakeModelServer([Reply.text("unused")]) as server, httpx2.Client() as client:
            response = client.post(server.url + "/v1/responses", content=b"not zstd at all",
                                   headers={"content-type": "application/json", "content-encoding": "zstd"})
        assert response.status_code == 400 and "could not read the request body" in response.text
        assert server.remaining == 1


class TestEncryptedReasoning:
    def test_a_store_false_client_gets_encrypted_reasoning_and_sends_it_back(self) -> None:
        """With include reasoning.encrypted_content the reasoning item carries it; a client that
        does not store state sends the item back in its next request, as codex does over HTTP."""
        script = [Reply.tool_call("get_weather", {"city": "Paris"}, reasoning="Look it up."), Reply.text("Sunny.")]
        with FakeModelServer(script) as server:
            client = _client(server)
            first = client.responses.create(model="m", input="weather?", store=False,
                                            include=["reasoning.encrypted_content"])
            reasoning, call = first.output
            assert reasoning.type == "reasoning" and reasoning.summary[0].text == "Look it up."
            assert reasoning.encrypted_content and reasoning.encrypted_content.startswith("gAAAAA")
            again = client.responses.create(model="m", store=False, include=["reasoning.encrypted_content"], input=[
                {"type": "message", "role": "user", "content": "weather?"},
                reasoning.model_dump(exclude_none=True), call.model_dump(exclude_none=True),
                {"type": "function_call_output", "call_id": call.call_id, "output": "sun"}])
            plain = FakeModelServer([Reply.text("x", reasoning="r")])
        assert again.output_text == "Sunny."
        sent = server.model_requests[1].json["input"][1]
        assert sent["encrypted_content"] == reasoning.encrypted_content
        with plain, _client(plain).responses.connect() as conn:
            [item, _] = _turn(conn, model="m", input="hi")[-1].response.output
        assert item.type == "reasoning" and item.encrypted_content is None  # not asked for
