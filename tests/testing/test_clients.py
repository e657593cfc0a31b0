"""Tests for flowproof.testing.clients: rude clients, seen from the fake server's side."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from flowproof.testing import (
    FakeModelServer,
    Reply,
    RudeResult,
    abandon,
    close_after_terminal,
    reset_after_terminal,
)
from flowproof.testing.clients import CANCEL, is_terminal_event

from .helpers import MESSAGES, openai_client, raw_post

STREAMS: dict[str, tuple[str, dict[str, Any]]] = {
    "openai-chat": ("/v1/chat/completions", {"model": "m", "messages": [], "stream": True}),
    "openai-responses": ("/v1/responses", {"model": "m", "input": "x", "stream": True}),
    "anthropic": ("/v1/messages", {"model": "m", "messages": [], "stream": True}),
    "gemini": ("/v1beta/models/g:streamGenerateContent?alt=sse", {"contents": []}),
}


class TestTerminalEvent:
    @pytest.mark.parametrize("api", list(STREAMS))
    def test_only_the_last_event_of_each_api_is_terminal(self, api: str) -> None:
        """The terminal event of every API's stream is recognised, and no event before it."""
        path, body = STREAMS[api]
        with FakeModelServer([Reply.tool_call("f", {"a": 1}, text="one two")]) as server:
            raw_post(server, path, body)
            [exchange] = server.exchanges
        assert exchange.response is not None
        events = [chunk.strip() for chunk in exchange.response.chunks]
        assert [is_terminal_event(e) for e in events] == [False] * (len(events) - 1) + [True]

    def test_an_incomplete_response_is_terminal_too(self) -> None:
        """response.incomplete and response.failed end a Responses stream as completed does."""
        assert is_terminal_event(b'event: response.incomplete\ndata: {"type":"response.incomplete"}')
        assert is_terminal_event(b'data: {"type":"response.failed"}')
        assert not is_terminal_event(b"data: not json")


class TestCloseAfterTerminal:
    @pytest.mark.parametrize("api", list(STREAMS))
    def test_leaves_before_a_late_body_end(self, api: str) -> None:
        """Against a server that ends its bodies late, the client leaves first; the server sees it leave."""
        path, body = STREAMS[api]
        with FakeModelServer([Reply.text("one two")], end_delay=30) as server:
            result = close_after_terminal(server.url + path, body)
            [exchange] = server.wait_settled(timeout=10)
            faults = server.faults
        assert (result.status, result.saw_terminal, result.saw_end, result.http_version) == (
            200, True, False, "HTTP/1.1")
        assert result.elapsed < 10
        assert exchange.outcome == "client-closed"
        assert exchange.response is not None and exchange.response.complete
        assert faults == []

    def test_reads_a_whole_body_that_ends_on_time(self) -> None:
        """A non-streamed answer is read to its end: there is no terminal event to leave at."""
        with FakeModelServer([Reply.text("whole")]) as server:
            result = close_after_terminal(server.url + "/v1/chat/completions", {"model": "m", "messages": []})
        assert result.saw_end and not result.saw_terminal and b'"whole"' in result.body


class TestResetAfterTerminal:
    @pytest.mark.parametrize("tls", [False, True], ids=["h2c", "tls-alpn"])
    @pytest.mark.parametrize("api", list(STREAMS))
    def test_server_sees_a_cancel_and_no_fault(self, api: str, tls: bool) -> None:
        """RST_STREAM(CANCEL) after the terminal event is an exchange outcome, never a server fault."""
        path, body = STREAMS[api]
        with FakeModelServer([Reply.text("one two")], end_delay=30, tls=tls) as server:
            verify = server.cert_file if tls else True
            result = reset_after_terminal(server.url + path, body, verify=verify)
            [exchange] = server.wait_settled(timeout=10)
            faults = server.faults
        assert (result.status, result.saw_terminal, result.saw_end, result.http_version) == (
            200, True, False, "HTTP/2")
        assert (exchange.outcome, exchange.reset_code) == ("client-reset", CANCEL)
        assert exchange.request.http_version == "HTTP/2" and exchange.request.tls is tls
        assert faults == []

    def test_refuses_a_proxy_for_a_plain_target(self) -> None:
        """h2 through a proxy is negotiated by TLS, so a plain http:// target is refused clearly."""
        with pytest.raises(ValueError, match="needs an https:// target"):
            reset_after_terminal("http://127.0.0.1:1/v1/responses", {}, proxy="http://127.0.0.1:2")


class TestAbandon:
    def test_goose_title_call_leaves_before_any_byte(self) -> None:
        """A slow side call abandoned in flight leaves no response; the main call is answered at once."""
        server = FakeModelServer([Reply.text("main answer")],
                                 lanes={"Name this session": [Reply.text("Title", first_byte_delay=30)]})
        with server:
            body = {"model": "m", "stream": True, "messages": [
                {"role": "system", "content": "Name this session."}, {"role": "user", "content": "hi"}]}
            side: list[RudeResult] = []
            title = threading.Thread(target=lambda: side.append(
                abandon(server.url + "/v1/chat/completions", body, after_seconds=0.5)))
            title.start()
            started = time.monotonic()
            answer = openai_client(server).chat.completions.create(model="m", messages=MESSAGES)
            main_took = time.monotonic() - started
            title.join(timeout=10)
            exchanges = server.wait_settled(timeout=10)
        assert answer.choices[0].message.content == "main answer" and main_took < 5
        outcomes = {e.request.json["messages"][0]["role"]: (e.outcome, e.response) for e in exchanges}
        assert outcomes["system"] == ("client-closed", None)
        assert outcomes["user"][0] == "ended"
        assert side[0].status is None and side[0].body == b""

    @pytest.mark.parametrize(("http2", "outcome"), [(False, "client-closed"), (True, "client-reset")])
    def test_after_events_leaves_mid_stream(self, http2: bool, outcome: str) -> None:
        """after_events=N reads N events and leaves; the server records the stream as left early."""
        with FakeModelServer([Reply.text("one two three four", chunk_delay=0.05)]) as server:
            path, body = STREAMS["anthropic"]
            result = abandon(server.url + path, body, after_events=2, http2=http2)
            [exchange] = server.wait_settled(timeout=10)
        assert len(result.events) >= 2 and not result.saw_terminal and not result.saw_end
        assert exchange.outcome == outcome
        assert exchange.response is not None and not exchange.response.complete

    def test_after_zero_events_leaves_after_the_headers(self) -> None:
        """after_events=0 leaves as soon as the status and headers are in."""
        with FakeModelServer([Reply.text("x", first_chunk_delay=30)]) as server:
            path, body = STREAMS["openai-chat"]
            result = abandon(server.url + path, body, after_events=0, http2=True)
            [exchange] = server.wait_settled(timeout=10)
        assert result.status == 200 and result.body == b""
        assert exchange.outcome == "client-reset" and exchange.response is not None

    def test_needs_exactly_one_moment(self) -> None:
        """abandon refuses to guess when to leave."""
        with pytest.raises(ValueError, match="exactly one"):
            abandon("http://127.0.0.1:1/", {})
        with pytest.raises(ValueError, match="exactly one"):
            abandon("http://127.0.0.1:1/", {}, after_seconds=1, after_events=1)


MITM_PORT_ADDON = '''
import os
from pathlib import Path
from mitmproxy import ctx

class ReportPort:
    def running(self) -> None:
        addresses = ctx.master.addons.get("proxyserver").listen_addrs()
        Path(os.environ["FAKE_TEST_PORT_FILE"]).write_text(str(addresses[0][1]))

addons = [ReportPort()]
'''


class TestThroughMitmproxy:
    def test_mitmproxy_speaks_http2_upstream_and_passes_the_cancel_on(self, tmp_path: Path) -> None:
        """Through mitmproxy (trusting the fake's certificate) an h2 client makes an h2 upstream call.

        The client's CANCEL reaches the server as a reset of its own stream, and
        an HTTP/1.1 client's early close as a closed connection.
        """
        addon = tmp_path / "port_addon.py"
        addon.write_text(MITM_PORT_ADDON)
        port_file = tmp_path / "port"
        with FakeModelServer([Reply.text("one two")] * 2, end_delay=30, tls=True) as server:
            proc = subprocess.Popen(
                [str(Path(sys.executable).parent / "mitmdump"), "--listen-host", "127.0.0.1", "--listen-port", "0",
                 "--set", f"confdir={tmp_path}", "--set", f"ssl_verify_upstream_trusted_ca={server.cert_file}",
                 # Stream bodies through, as flowproof's addon does, instead of buffering them.
                 "--set", "stream_large_bodies=1", "-q", "-s", str(addon)],
                env={**os.environ, "FAKE_TEST_PORT_FILE": str(port_file)},
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
            )
            try:
                deadline = time.monotonic() + 60
                while not port_file.exists() and proc.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert port_file.exists(), "mitmdump did not start"
                proxy = f"http://127.0.0.1:{port_file.read_text()}"
                ca = tmp_path / "mitmproxy-ca-cert.pem"
                path, body = STREAMS["openai-responses"]
                h2 = reset_after_terminal(server.url + path, body, proxy=proxy, verify=ca)
                path, body = STREAMS["openai-chat"]
                h1 = close_after_terminal(server.url + path, body, proxy=proxy, verify=ca)
                exchanges = server.wait_settled(timeout=20)
            finally:
                proc.terminate()
                proc.wait(timeout=10)
                assert proc.stderr is not None
                proc.stderr.close()
            faults = server.faults
        assert (h2.http_version, h2.saw_terminal, h1.http_version, h1.saw_terminal) == (
            "HTTP/2", True, "HTTP/1.1", True)
        assert [(e.request.http_version, e.request.tls, e.outcome) for e in exchanges] == [
            ("HTTP/2", True, "client-reset"), ("HTTP/1.1", True, "client-closed")]
        assert exchanges[0].reset_code == CANCEL
        assert faults == []
