"""Tests for flowproof.testing.capture: exchanges hold exactly the bytes sent."""

from __future__ import annotations

import http.client
import time

import openai
import pytest

from flowproof.testing import (
    OUTCOMES,
    Exchange,
    FakeModelServer,
    ReceivedRequest,
    Reply,
)
from flowproof.testing.capture import ExchangeRecord

from .helpers import (
    MESSAGES,
    dechunk,
    openai_client,
    raw_exchange,
    raw_post,
    sse_data,
)


class TestExchanges:
    def test_plain_answer_is_kept_byte_for_byte(self) -> None:
        """A non-streamed answer is kept with its status, headers and exactly the body bytes sent."""
        with FakeModelServer([Reply.tool_call("f", {"a": 1})]) as server:
            status, headers, body = raw_post(server, "/v1/messages", {"model": "m", "messages": []})
            [exchange] = server.exchanges
            request = server.requests[0]
        assert exchange.request == request
        assert exchange.response is not None and exchange.response.complete
        assert exchange.response.status == status == 200
        assert exchange.response.body == body and exchange.response.chunks == (body,)
        assert dict(exchange.response.headers) == headers
        assert exchange.response.content_type == "application/json"

    def test_stream_is_kept_without_chunk_framing(self) -> None:
        """A stream is kept as its chunk payloads, whose join is the de-chunked body on the wire."""
        with FakeModelServer([Reply.text("a b c")]) as server:
            raw = raw_exchange(server, "/v1/chat/completions", b'{"model": "m", "stream": true}')
            [exchange] = server.exchanges
        head, _, rest = raw.partition(b"\r\n\r\n")
        chunks, trailer = dechunk(rest)
        assert trailer == b"\r\n"
        response = exchange.response
        assert response is not None and response.complete
        assert response.chunks == tuple(chunks) and len(chunks) == 6
        assert response.body == b"".join(chunks) and b"\r\n" not in response.body
        assert ("transfer-encoding", "chunked") in response.headers
        assert response.content_type.startswith("text/event-stream")
        assert head.startswith(b"HTTP/1.1 200")

    def test_cut_stream_is_incomplete(self) -> None:
        """A stream cut after N events keeps those N events and is marked incomplete."""
        with FakeModelServer([Reply.text("one two three four", cut_after=2)]) as server:
            with pytest.raises(openai.APIConnectionError):
                list(openai_client(server).chat.completions.create(model="m", messages=MESSAGES, stream=True))
            [exchange] = server.exchanges
        assert exchange.response is not None and not exchange.response.complete
        assert len(exchange.response.chunks) == 2
        assert sse_data(exchange.response.body)[1] != "[DONE]"

    def test_errors_and_non_model_paths_are_kept(self) -> None:
        """Error answers keep their headers, and model_exchanges leaves out non-model requests."""
        with FakeModelServer([Reply.error(429, "slow down", retry_after=2)]) as server:
            raw_post(server, "/health", {})
            status, _, body = raw_post(server, "/v1/chat/completions", {"model": "m", "messages": []})
            exchanges, model_exchanges = server.exchanges, server.model_exchanges
        assert [e.request.path for e in exchanges] == ["/health", "/v1/chat/completions"]
        assert [e.request.path for e in model_exchanges] == ["/v1/chat/completions"]
        response = model_exchanges[0].response
        assert response is not None and response.status == status == 429
        assert ("retry-after", "2") in response.headers and response.body == body
        assert exchanges[0].response is not None and exchanges[0].response.status == 404

    def test_response_is_none_before_headers_go_out(self) -> None:
        """A request whose delayed answer has not started yet has no response recorded."""
        server = FakeModelServer([Reply.text("late", first_chunk_delay=30)]).start()
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        try:
            conn.request("POST", "/v1/chat/completions", body=b'{"model": "m", "messages": []}')
            deadline = time.monotonic() + 5
            while not server.exchanges and time.monotonic() < deadline:
                time.sleep(0.01)
            exchanges = server.exchanges
        finally:
            server.stop()
            conn.close()
        assert len(exchanges) == 1 and exchanges[0].response is None


class TestOutcome:
    def test_the_first_outcome_stands(self) -> None:
        """An exchange settles once: a later word (a reset after a close) does not rewrite it."""
        record = ExchangeRecord(ReceivedRequest("POST", "/v1/messages", {}, {}, b"", None, "anthropic"))
        assert record.snapshot() == Exchange(record.request, None, None, None)
        record.settle("client-reset", 8)
        record.settle("client-closed")
        snapshot = record.snapshot()
        assert (snapshot.outcome, snapshot.reset_code, snapshot.response) == ("client-reset", 8, None)
        assert record.settled.is_set() and snapshot.outcome in OUTCOMES
