"""Tests for flowproof.testing.server: faults, recording, lifecycle and lanes."""

from __future__ import annotations

import http.client
import json
import socket
import time
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from flowproof.testing import FakeModelServer, ReceivedRequest, Reply, Script, abandon

from .helpers import MESSAGES, anthropic_client, openai_client, raw_exchange, raw_post, sse_data


class TestFaults:
    def test_500_raises_after_no_retries(self) -> None:
        """A scripted 500 reaches the SDK as InternalServerError with the message."""
        with FakeModelServer([Reply.error(500, "boom")]) as server:
            with pytest.raises(openai.InternalServerError, match="boom"):
                openai_client(server).chat.completions.create(model="m", messages=MESSAGES)
            assert len(server.requests) == 1

    def test_429_sends_retry_after(self) -> None:
        """A scripted 429 carries retry-after and OpenAI's rate-limit error code."""
        with FakeModelServer([Reply.error(429, "slow down", retry_after=1.5)]) as server:
            with pytest.raises(openai.RateLimitError) as caught:
                openai_client(server).chat.completions.create(model="m", messages=MESSAGES)
        assert caught.value.response.headers["retry-after"] == "1.5"
        assert caught.value.code == "rate_limit_exceeded"

    def test_sdk_retries_honour_retry_after(self) -> None:
        """An SDK with retries waits retry-after and then gets the next scripted reply."""
        with FakeModelServer([Reply.error(429, retry_after=0.2), Reply.text("ok")]) as server:
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="test-key", max_retries=1)
            started = time.monotonic()
            result = client.chat.completions.create(model="m", messages=MESSAGES)
            elapsed = time.monotonic() - started
        assert result.choices[0].message.content == "ok"
        assert elapsed >= 0.2

    def test_cut_stream_openai_raises_connection_error(self) -> None:
        """A stream cut after N events makes the openai SDK raise APIConnectionError after N chunks."""
        seen: list[Any] = []
        with FakeModelServer([Reply.text("one two three four five", cut_after=3)]) as server:
            stream = openai_client(server).chat.completions.create(model="m", messages=MESSAGES, stream=True)
            with pytest.raises(openai.APIConnectionError):
                for chunk in stream:
                    seen.append(chunk)
        assert len(seen) == 3

    def test_cut_stream_anthropic_raises_protocol_error(self) -> None:
        """A cut Anthropic stream surfaces as the transport's RemoteProtocolError: raised as it is,
        or (newer SDKs) as the cause of the SDK's connection error."""
        with FakeModelServer([Reply.text("one two three", cut_after=2)]) as server:
            with pytest.raises((httpx2.RemoteProtocolError, anthropic.APIConnectionError)) as raised:
                list(anthropic_client(server).messages.create(model="m", max_tokens=5, messages=MESSAGES,
                                                              stream=True))
        error: BaseException | None = raised.value
        while error is not None and not isinstance(error, httpx2.RemoteProtocolError):
            error = error.__cause__
        assert isinstance(error, httpx2.RemoteProtocolError), raised.value

    def test_cut_non_streaming_body(self) -> None:
        """A non-streamed body cut after N bytes is a connection error for the SDK."""
        with FakeModelServer([Reply.text("hello", cut_after=10)]) as server:
            with pytest.raises(openai.APIConnectionError):
                openai_client(server).chat.completions.create(model="m", messages=MESSAGES)

    def test_first_chunk_delay_is_measurable(self) -> None:
        """The first stream event arrives no sooner than first_chunk_delay, headers at once."""
        with FakeModelServer([Reply.text("a b", first_chunk_delay=1.0)]) as server:
            started = time.monotonic()
            stream = openai_client(server).chat.completions.create(model="m", messages=MESSAGES, stream=True)
            headers_at = time.monotonic() - started
            next(iter(stream))
            first_at = time.monotonic() - started
            stream.close()
        assert first_at >= 1.0
        # Headers held back with the chunk would arrive with it (a gap near 0). Half the delay
        # is a generous margin for a client thread slowed down on a loaded machine.
        assert first_at - headers_at >= 0.5, (headers_at, first_at)

    def test_chunk_delay_spaces_events(self) -> None:
        """chunk_delay puts time between stream events."""
        with FakeModelServer([Reply.text("a b c d", chunk_delay=0.05)]) as server:
            started = time.monotonic()
            list(openai_client(server).chat.completions.create(model="m", messages=MESSAGES, stream=True))
            elapsed = time.monotonic() - started
        assert elapsed >= 0.05 * 6  # role + 4 pieces + finish + [DONE] => 6 gaps

    def test_exhausted_script_fails_loudly(self) -> None:
        """A call past the end of the script gets a 500 naming how many calls were served."""
        with FakeModelServer([Reply.text("only one")]) as server:
            client = openai_client(server)
            client.chat.completions.create(model="m", messages=MESSAGES)
            with pytest.raises(openai.InternalServerError, match="script exhausted after 1 calls"):
                client.chat.completions.create(model="m", messages=MESSAGES)

    def test_max_tokens_ends_with_each_providers_length_reason(self) -> None:
        """max_tokens maps to length, max_tokens, MAX_TOKENS and an incomplete response."""
        script = [Reply.text("cut short", max_tokens=True)] * 4
        with FakeModelServer(script) as server:
            chat = openai_client(server).chat.completions.create(model="m", messages=MESSAGES)
            message = anthropic_client(server).messages.create(model="m", max_tokens=5, messages=MESSAGES)
            events = list(openai_client(server).responses.create(model="m", input="x", stream=True))
            _, _, raw = raw_post(server, "/v1beta/models/g:generateContent", {"contents": []})
        assert chat.choices[0].finish_reason == "length"
        assert message.stop_reason == "max_tokens"
        assert events[-1].type == "response.incomplete"
        assert json.loads(raw)["candidates"][0]["finishReason"] == "MAX_TOKENS"

    def test_non_object_arguments_fail_for_anthropic(self) -> None:
        """Invalid JSON arguments cannot become a tool_use input, so the server says why."""
        with FakeModelServer([Reply.tool_call("f", "not json")]) as server:
            status, _, raw = raw_post(server, "/v1/messages", {"model": "m", "messages": []})
        assert status == 500 and b"not a JSON object" in raw


class TestServer:
    def test_records_requests_in_order(self) -> None:
        """Each request is recorded with path, query, lowercase headers, body and parsed JSON."""
        with FakeModelServer([Reply.text("a"), Reply.text("b")]) as server:
            client = openai_client(server)
            client.chat.completions.create(model="first", messages=MESSAGES)
            client.responses.create(model="second", input="x")
            requests = server.requests
        assert [r.path for r in requests] == ["/v1/chat/completions", "/v1/responses"]
        assert [r.api for r in requests] == ["openai-chat", "openai-responses"]
        assert requests[0].json["model"] == "first" and json.loads(requests[0].body) == requests[0].json
        assert requests[0].headers["authorization"] == "Bearer test-key"
        assert isinstance(requests[1], ReceivedRequest) and requests[1].method == "POST"

    def test_health_and_unknown_paths(self) -> None:
        """GET /health answers 200 and an unknown path 404, neither consuming the script."""
        with FakeModelServer([Reply.text("kept")]) as server:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
            conn.request("GET", "/health")
            health = conn.getresponse()
            health.read()
            conn.request("GET", "/v1/models")
            missing = conn.getresponse()
            body = json.loads(missing.read())
            conn.close()
            remaining = server.remaining
        assert (health.status, missing.status, remaining) == (200, 404, 1)
        assert "nothing answers GET /v1/models" in body["error"]["message"]

    def test_client_reset_prints_no_traceback(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A client that resets its connection is normal traffic: the server stays quiet and serving."""
        import struct

        with FakeModelServer([Reply.text("still here")]) as server:
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            time.sleep(0.1)  # the handler is now blocked reading the request line
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
            time.sleep(0.2)
            answer = openai_client(server).chat.completions.create(model="m", messages=MESSAGES)
        assert answer.choices[0].message.content == "still here"
        assert "Traceback" not in capsys.readouterr().err

    def test_port_closed_after_exit(self) -> None:
        """After the context exits the port refuses connections."""
        with FakeModelServer() as server:
            port = server.port
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2)

    def test_stop_interrupts_a_slow_stream(self) -> None:
        """Stopping while a delayed stream is in flight returns promptly."""
        server = FakeModelServer([Reply.text("a", first_chunk_delay=30)]).start()
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        try:
            conn.request("POST", "/v1/chat/completions", body=b'{"stream": true}')
            conn.getresponse()
            started = time.monotonic()
            server.stop()
            assert time.monotonic() - started < 3
        finally:
            conn.close()

    def test_set_and_extend_script(self) -> None:
        """set_script replaces the pending replies and extend_script appends."""
        with FakeModelServer([Reply.text("dropped")]) as server:
            server.set_script([Reply.text("one")])
            server.extend_script([Reply.text("two")])
            client = openai_client(server)
            texts = [client.chat.completions.create(model="m", messages=MESSAGES).choices[0].message.content
                     for _ in range(2)]
            served = server.calls_served
        assert texts == ["one", "two"] and served == 2

    def test_lanes_answer_by_system_prompt(self) -> None:
        """A request whose system prompt contains a lane key is answered from that lane."""
        with FakeModelServer([Reply.text("main answer")], lanes={"Name this session": [Reply.text("Title")]}) as s:
            client = anthropic_client(s)
            title = client.messages.create(model="m", max_tokens=5, system="Name this session briefly.",
                                           messages=MESSAGES)
            main = client.messages.create(model="m", max_tokens=5, system="You book flights.", messages=MESSAGES)
        assert title.content[0].text == "Title"  # type: ignore[union-attr]
        assert main.content[0].text == "main answer"  # type: ignore[union-attr]

    def test_bytes_are_reproducible(self) -> None:
        """Two servers given the same script and requests send identical bytes."""
        script = [Reply.tool_call("f", {"a": 1}, text="x y"), Reply.text("done")]
        outputs = []
        for _ in range(2):
            with FakeModelServer(script) as server:
                outputs.append([
                    raw_post(server, "/v1/chat/completions", {"model": "m", "messages": [], "stream": True})[2],
                    raw_post(server, "/v1/messages", {"model": "m", "messages": []})[2],
                ])
        assert outputs[0] == outputs[1]

    def test_headers_carry_no_date(self) -> None:
        """Responses omit the Date header so recorded headers do not depend on the clock."""
        with FakeModelServer([Reply.text("x")]) as server:
            _, headers, _ = raw_post(server, "/v1/chat/completions", {"model": "m", "messages": []})
        assert "date" not in headers and headers["content-type"] == "application/json"

    def test_streams_use_chunked_transfer(self) -> None:
        """A stream is sent with chunked transfer encoding, one event per chunk."""
        with FakeModelServer([Reply.text("a b")]) as server:
            with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
                body = b'{"stream": true}'
                sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
                             b"Connection: close\r\n\r\n%s" % (len(body), body))
                raw = b""
                while chunk := sock.recv(65536):
                    raw += chunk
        head, _, rest = raw.partition(b"\r\n\r\n")
        assert b"transfer-encoding: chunked" in head.lower()
        assert rest.endswith(b"0\r\n\r\n") and rest.count(b"data: ") == 5


class TestLateEnd:
    def test_openai_sync_stream_returns_before_the_body_ends(self) -> None:
        """openai-python's sync stream stops at [DONE] and closes: it returns long before a late body end."""
        with FakeModelServer([Reply.text("one two three")], end_delay=30) as server:
            started = time.monotonic()
            stream = openai_client(server).chat.completions.create(model="m", messages=MESSAGES, stream=True)
            text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
            took = time.monotonic() - started
            [exchange] = server.wait_settled(timeout=10)
            faults = server.faults
        assert text == "one two three" and took < 10
        assert exchange.outcome == "client-closed"
        assert exchange.response is not None and exchange.response.complete
        assert sse_data(exchange.response.body)[-1] == "[DONE]"
        assert faults == []

    def test_a_reply_can_end_late_on_its_own(self) -> None:
        """A reply's end_delay makes only that answer end late; the body still ends for a patient client."""
        script = [Reply.text("late", end_delay=1.0), Reply.text("on time")]
        with FakeModelServer(script) as server:
            timings = []
            for _ in range(2):
                started = time.monotonic()
                raw_exchange(server, "/v1/chat/completions", b'{"model": "m", "stream": true}')
                timings.append(time.monotonic() - started)
            exchanges = server.wait_settled()
        # A local exchange takes milliseconds; 1 s leaves a loaded machine a wide margin.
        assert timings[0] >= 1.0 > timings[1], timings
        assert [e.outcome for e in exchanges] == ["ended", "ended"]

    def test_default_bodies_end_with_their_last_event(self) -> None:
        """Off by default: the body ends with the last event, the exchange says ended."""
        with FakeModelServer([Reply.text("a b")]) as server:
            raw = raw_exchange(server, "/v1/chat/completions", b'{"model": "m", "stream": true}')
            [exchange] = server.wait_settled()
        assert raw.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n") and exchange.outcome == "ended"


class TestSlowAnswers:
    def test_first_byte_delay_holds_back_the_status_line(self) -> None:
        """first_byte_delay delays even the headers, unlike first_chunk_delay."""
        with FakeModelServer([Reply.text("a", first_byte_delay=0.3)]) as server:
            started = time.monotonic()
            stream = openai_client(server).chat.completions.create(model="m", messages=MESSAGES, stream=True)
            headers_at = time.monotonic() - started
            stream.close()
        assert headers_at >= 0.3

    def test_a_slow_side_lane_does_not_slow_the_main_call(self) -> None:
        """A slow title answer (its own lane) and a fast main answer, per call, whatever the order."""
        script = Script(replies=(Reply.text("main"),),
                        lanes={"Name this session": (Reply.text("Title", first_byte_delay=2.0),)})
        with FakeModelServer(script) as server:
            client = anthropic_client(server)
            started = time.monotonic()
            main = client.messages.create(model="m", max_tokens=5, messages=MESSAGES)
            main_took = time.monotonic() - started
            title = client.messages.create(model="m", max_tokens=5, system="Name this session.", messages=MESSAGES)
            total = time.monotonic() - started
        assert main.content[0].text == "main" and title.content[0].text == "Title"  # type: ignore[union-attr]
        # The main call takes milliseconds; 2 s leaves a loaded machine a wide margin.
        assert main_took < 2.0 <= total, (main_took, total)

    def test_wait_settled_names_what_is_still_open(self) -> None:
        """wait_settled gives up with the requests still being answered."""
        server = FakeModelServer([Reply.text("x", first_chunk_delay=30)]).start()
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        try:
            conn.request("POST", "/v1/chat/completions", body=b'{"stream": true}')
            conn.getresponse()
            with pytest.raises(TimeoutError, match="POST /v1/chat/completions"):
                server.wait_settled(timeout=0.2)
        finally:
            server.stop()
            conn.close()
        assert server.exchanges[0].outcome == "stopped"


class TestFaultsList:
    @pytest.mark.parametrize("http2", [False, True])
    def test_a_server_bug_is_a_fault_and_the_server_keeps_serving(self, http2: bool,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
        """An exception inside the server is listed once in faults; the next call is answered."""
        calls = {"n": 0}
        original = FakeModelServer._answer

        def broken_once(self: FakeModelServer, *args: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == 1:
                raise RuntimeError("renderer bug")
            return original(self, *args)

        monkeypatch.setattr(FakeModelServer, "_answer", broken_once)
        with FakeModelServer([Reply.text("fine")]) as server:
            url = server.url + "/v1/chat/completions"
            with pytest.raises((ConnectionError, OSError)):
                abandon(url, {"model": "m"}, after_events=1, http2=http2)
            result = abandon(url, {"model": "m", "stream": True}, after_events=99, http2=http2)
            faults = server.faults
        assert len(faults) == 1 and "renderer bug" in faults[0]
        assert result.saw_end and b"fine" in result.body
