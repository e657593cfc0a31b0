"""Tests for flowproof.testing.http2: the same script served over HTTP/2."""

from __future__ import annotations

import threading
import time

import httpx2
import openai
import pytest

from flowproof.testing import FakeModelServer, Reply, abandon

from .helpers import MESSAGES


def h2_openai(server: FakeModelServer) -> tuple[openai.OpenAI, httpx2.Client]:
    http = httpx2.Client(http2=True, verify=str(server.cert_file), timeout=10)
    return openai.OpenAI(base_url=server.url + "/v1", api_key="test-key", max_retries=0, http_client=http), http


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
        """Concurrent h2 calls are served side by side: a slow one does not hold up a fast one."""
        # The slow answer waits well past what a fast call takes even on a loaded machine, and
        # the check is that the slow call was still in flight when the fast one came back: an
        # ordering of two finish times alone failed under load when the fast call took 0.7 s.
        slow_delay = 2.5
        script = Reply.text("slow", first_byte_delay=slow_delay)
        with FakeModelServer([script], lanes={"fast": [Reply.text("fast")] * 2}, tls=True) as server:
            client, http = h2_openai(server)
            with http:
                def call(system: str) -> None:
                    client.chat.completions.create(model="m", messages=[{"role": "system", "content": system}])

                call("fast")  # the connection is up (and known to be h2) before the slow call starts
                slow = threading.Thread(target=call, args=("slow",))
                started = time.monotonic()
                slow.start()
                time.sleep(0.3)
                call("fast")
                slow_in_flight = slow.is_alive()
                fast_done = time.monotonic() - started
                slow.join(timeout=10)
            exchanges = server.wait_settled()
        assert slow_in_flight, f"the fast call came back only after the slow one ({fast_done:.2f} s)"
        assert fast_done < slow_delay
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
