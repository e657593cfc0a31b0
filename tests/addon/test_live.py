"""Live calls (record and compare): forwarding, tapping, hook failures."""

from __future__ import annotations

from typing import Any

import pytest
from mitmproxy.connection import ConnectionState
from mitmproxy.test import tflow

from flowproof.addon.live import client_left

from .conftest import Harness, chat_body, json_response, model_flow


class TestLiveHookFailure:
    def test_a_crash_while_recording_a_response_fails_the_run(
        self, harness: Harness, monkeypatch: pytest.MonkeyPatch
    ):
        """A response flowproof cannot record is an error event, so no recording silently lacks a turn."""
        path = harness.tmp / "rec.json"
        harness.configure(flowproof_mode="record", flowproof_cassette=str(path))
        f = model_flow(chat_body(stream=False))
        harness.addon.request(f)

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("boom")

        monkeypatch.setattr(harness.addon.root.concern, "_recorded_response", broken)
        json_response(f, {"id": "x", "choices": []})
        harness.addon.responseheaders(f)
        harness.addon.response(f)
        (event,) = harness.events("error")
        assert event["id"] == f.id and "response hook" in event["text"]


class TestClientLeft:
    """Which side a failed call's error came from: the client leaving, or the upstream."""

    def flow(self, message: str, *, client_h2: bool = False, upstream_h2: bool = False) -> Any:
        f = tflow.tflow(resp=True)
        f.error = tflow.terr(message)
        f.request.http_version = "HTTP/2.0" if client_h2 else "HTTP/1.1"
        f.server_conn.alpn = b"h2" if upstream_h2 else b"http/1.1"
        f.client_conn.state = ConnectionState.OPEN
        f.server_conn.state = ConnectionState.OPEN
        return f

    def test_an_http1_client_that_closed(self) -> None:
        assert client_left(self.flow("Client disconnected."))

    def test_an_http2_stream_reset_on_an_http1_upstream_is_the_client(self) -> None:
        assert client_left(self.flow("stream reset by client (CANCEL)", client_h2=True))
        assert client_left(self.flow("stream reset by client (INTERNAL_ERROR)", client_h2=True))

    def test_an_http2_reset_on_an_http2_upstream_is_the_client_only_for_cancel(self) -> None:
        """The proxy words both sides' resets alike: CANCEL is how a client drops a stream."""
        assert client_left(self.flow("stream reset by client (CANCEL)", client_h2=True, upstream_h2=True))
        assert not client_left(self.flow("stream reset by client (INTERNAL_ERROR)", client_h2=True, upstream_h2=True))

    def test_a_closed_client_connection_is_the_client_whatever_the_message(self) -> None:
        f = self.flow("HTTP/2 connection closed: <ConnectionTerminated>", client_h2=True, upstream_h2=True)
        f.client_conn.state = ConnectionState.CLOSED
        assert client_left(f)

    def test_a_closed_upstream_is_a_fault(self) -> None:
        f = self.flow("peer closed connection without sending complete message body")
        f.server_conn.state = ConnectionState.CAN_WRITE
        assert not client_left(f)
        assert not client_left(self.flow("server closed connection"))
