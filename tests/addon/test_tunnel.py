"""The replayed tunnel (`flowproof.addon.tunnel`): which tunnels a runner's proxy serves itself,
and what it serves there, driven as mitmproxy's connection handler drives a layer (events in,
commands out, each hook run and answered) with a real TLS client over memory buffers."""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from mitmproxy import certs, connection, http
from mitmproxy.addons.proxyserver import Proxyserver
from mitmproxy.addons.tlsconfig import TlsConfig
from mitmproxy.options import Options
from mitmproxy.proxy import commands, context, events, layer
from mitmproxy.proxy.layers import modes
from mitmproxy.proxy.layers.http import HttpLayer, HTTPMode, HttpStream
from mitmproxy.proxy.layers.tls import ServerTLSLayer
from mitmproxy.proxy.mode_specs import ProxyMode
from mitmproxy.test import taddons

from flowproof.addon import tunnel
from flowproof.addon.tunnel import ReplayConnect, ReplayHttp, ReplayTunnel, TlsContexts, take
from flowproof.options import Mode, ProxyOptions
from flowproof.runner.proxy import ProxyPool

from .conftest import CHAT_PATH, after_handshake, chat_body, chat_turn, write_cassette

HOST = "api.openai.com"
ANSWER = b"data: {\"choices\": []}\n\ndata: [DONE]\n\n"


def replaying(mode: Mode = Mode.REPLAY, hosts: tuple[str, ...] = ()) -> Callable[[Any], Any]:
    """A session's config as `take` reads it: the mode, and the gateway hosts (``extra_hosts``)."""
    return lambda client: SimpleNamespace(mode=mode, options=SimpleNamespace(extra_hosts=hosts))


class Client:
    """A TLS client over memory buffers: what an SDK's socket would be inside the tunnel."""

    def __init__(self, bundle: Path | None, alpn: list[str] | None = None, host: str = HOST) -> None:
        # No bundle: a client that trusts no CA at all, so not the proxy's either.
        tls = ssl.create_default_context(cafile=str(bundle)) if bundle else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if alpn:
            tls.set_alpn_protocols(alpn)
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = tls.wrap_bio(self.incoming, self.outgoing, server_hostname=host)
        self.failed: ssl.SSLError | None = None

    def hello(self) -> bytes:
        with pytest.raises(ssl.SSLWantReadError):
            self.tls.do_handshake()
        return self.outgoing.read()

    def step(self, received: bytes) -> tuple[bool, bytes]:
        """Feed what the proxy sent; (handshake done, what the client sends back)."""
        self.incoming.write(received)
        try:
            self.tls.do_handshake()
            done = True
        except ssl.SSLWantReadError:
            done = False
        except ssl.SSLError as e:
            self.failed, done = e, False
        return done, self.outgoing.read()

    def send(self, data: bytes) -> bytes:
        self.tls.write(data)
        return self.outgoing.read()

    def read(self, received: bytes) -> bytes:
        self.incoming.write(received)
        out = bytearray()
        try:
            while chunk := self.tls.read(65536):
                out += chunk
        except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
            pass
        return bytes(out)


class Handler:
    """mitmproxy's connection handler, as far as a layer sees it: it runs each hook (``answer``)
    and completes it, and keeps what is sent to the client."""

    def __init__(self, top: layer.Layer, client: connection.Client,
                 answer: Callable[[commands.StartHook], None]) -> None:
        self.top, self.client, self.answer = top, client, answer
        self.sent = bytearray()
        self.hooks: list[tuple[str, Any]] = []
        self.closed = False
        self.logs: list[str] = []

    def feed(self, event: events.Event) -> bytes:
        queue = [event]
        while queue:
            for command in self.top.handle_event(queue.pop(0)):
                if isinstance(command, commands.SendData):
                    assert command.connection is self.client
                    self.sent += command.data
                elif isinstance(command, commands.CloseConnection):
                    self.closed = True
                elif isinstance(command, commands.StartHook):
                    self.hooks.append((command.name, command))
                    self.answer(command)
                    if command.blocking:
                        queue.append(events.HookCompleted(command))
                elif isinstance(command, commands.Log):
                    self.logs.append(command.message)
                else:
                    raise AssertionError(f"unexpected command {command!r}")
        sent, self.sent = bytes(self.sent), bytearray()
        return sent


def answer_with(status: int = 200, body: bytes = ANSWER) -> Callable[[commands.StartHook], None]:
    def answer(hook: commands.StartHook) -> None:
        if hook.name == "request":
            hook.flow.response = http.Response.make(  # type: ignore[attr-defined]
                status, body, {"content-type": "text/event-stream"})

    return answer


@pytest.fixture
def tunnel_at(ca_bundle: tuple[Path, Path]) -> Any:
    """A function: (ClientHello bytes, replays) → (taken, the NextLayer asked), in a proxy context
    with mitmproxy's TLS config over the test CA."""
    confdir, _bundle = ca_bundle
    with taddons.context(TlsConfig(), Proxyserver()) as tctx:
        tctx.options.update(confdir=str(confdir))
        contexts = TlsContexts()

        def ask(hello: bytes, replays: Callable[[Any], Any], host: str = HOST) -> tuple[bool, layer.NextLayer]:
            client = connection.Client(peername=("127.0.0.1", 50000), sockname=("127.0.0.1", 8080),
                                       timestamp_start=time.time(), proxy_mode=ProxyMode.parse("regular"),
                                       state=connection.ConnectionState.OPEN)
            ctx_ = context.Context(client, tctx.options)
            ctx_.server.address = (host, 443)
            # The stack a CONNECT's tunnel is asked about in: the listener's, its HTTP layer, the stream.
            modes.HttpProxy(ctx_)
            HttpLayer(ctx_, HTTPMode.regular)
            HttpStream(ctx_, 1)
            nextlayer = layer.NextLayer(ctx_)
            nextlayer.events = [events.Start(), events.DataReceived(client, hello)]
            return take(nextlayer, replays, contexts), nextlayer

        yield ask


def handshake(handler: Handler, client: Client, hello: bytes) -> bool:
    handler.feed(events.Start())
    to_client = handler.feed(events.DataReceived(handler.client, hello))
    for _ in range(5):
        done, to_proxy = client.step(to_client)
        to_client = handler.feed(events.DataReceived(handler.client, to_proxy)) if to_proxy else b""
        if done or client.failed:
            client.incoming.write(to_client)  # the session tickets: read with the first answer
            return done
    return False


def exchange(handler: Handler, client: Client, request: bytes) -> bytes:
    return client.read(handler.feed(events.DataReceived(handler.client, client.send(request))))


POST = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: api.openai.com\r\ncontent-type: application/json\r\n"
        b"content-length: 2\r\n\r\n{}")


class TestWhichTunnelsAreTaken:
    def test_a_replaying_model_host_over_http_1_is_taken_under_mitmproxy_s_server_tls(
        self, tunnel_at: Any, ca_bundle: tuple[Path, Path]
    ) -> None:
        taken, nextlayer = tunnel_at(Client(ca_bundle[1], ["http/1.1"]).hello(), replaying())
        assert taken
        assert isinstance(nextlayer.layer, ServerTLSLayer)
        assert isinstance(nextlayer.layer.child_layer, ReplayTunnel)
        assert isinstance(nextlayer.layer.child_layer.child_layer, ReplayHttp)

    def test_no_alpn_at_all_is_http_1_and_taken(self, tunnel_at: Any, ca_bundle: tuple[Path, Path]) -> None:
        assert tunnel_at(Client(ca_bundle[1]).hello(), replaying())[0]

    @pytest.mark.parametrize("alpn", [["h2", "http/1.1"], ["h2"]])
    def test_a_client_offering_http_2_is_left_to_mitmproxy(
        self, tunnel_at: Any, ca_bundle: tuple[Path, Path], alpn: list[str]
    ) -> None:
        taken, nextlayer = tunnel_at(Client(ca_bundle[1], alpn).hello(), replaying())
        assert not taken and nextlayer.layer is None

    @pytest.mark.parametrize("mode", [Mode.RECORD, Mode.COMPARE])
    def test_a_session_that_reaches_the_model_is_left_to_mitmproxy(
        self, tunnel_at: Any, ca_bundle: tuple[Path, Path], mode: Mode
    ) -> None:
        assert not tunnel_at(Client(ca_bundle[1]).hello(), replaying(mode))[0]

    def test_no_session_on_the_listener_is_left_to_mitmproxy(
        self, tunnel_at: Any, ca_bundle: tuple[Path, Path]
    ) -> None:
        assert not tunnel_at(Client(ca_bundle[1]).hello(), lambda client: None)[0]

    def test_a_host_that_is_not_a_model_s_is_left_unless_the_session_names_it(
        self, tunnel_at: Any, ca_bundle: tuple[Path, Path]
    ) -> None:
        hello = Client(ca_bundle[1], host="telemetry.example.com").hello()
        assert not tunnel_at(hello, replaying(), host="telemetry.example.com")[0]
        assert tunnel_at(hello, replaying(hosts=("telemetry.example.com",)), host="telemetry.example.com")[0]

    def test_a_tunnel_outside_a_connect_is_left_to_mitmproxy(self, ca_bundle: tuple[Path, Path]) -> None:
        client = connection.Client(peername=("127.0.0.1", 50000), sockname=("127.0.0.1", 8080),
                                   timestamp_start=time.time(), proxy_mode=ProxyMode.parse("regular"))
        ctx_ = context.Context(client, Options())
        ctx_.server.address = (HOST, 443)
        modes.HttpProxy(ctx_)
        nextlayer = layer.NextLayer(ctx_)
        nextlayer.events = [events.DataReceived(client, Client(ca_bundle[1]).hello())]
        assert not take(nextlayer, replaying(), TlsContexts())

    def test_bytes_that_are_not_a_whole_client_hello_are_left_to_mitmproxy(
        self, tunnel_at: Any, ca_bundle: tuple[Path, Path]
    ) -> None:
        hello = Client(ca_bundle[1]).hello()
        assert not tunnel_at(hello[: len(hello) // 2], replaying())[0]
        assert not tunnel_at(b"GET / HTTP/1.1\r\n\r\n", replaying())[0]


CONNECT = b"CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n\r\n"
ESTABLISHED = b"HTTP/1.1 200 Connection established\r\n\r\n"


@pytest.fixture
def connect_at(ca_bundle: tuple[Path, Path]) -> Any:
    """A function: (first bytes, replays) → (taken, the NextLayer asked), at a regular
    listener's first decision, in a proxy context with mitmproxy's TLS config over the test CA."""
    confdir, _bundle = ca_bundle
    with taddons.context(TlsConfig(), Proxyserver()) as tctx:
        tctx.options.update(confdir=str(confdir), connection_strategy="lazy")
        contexts = TlsContexts()

        def ask(data: bytes, replays: Callable[[Any], Any]) -> tuple[bool, layer.NextLayer]:
            client = connection.Client(peername=("127.0.0.1", 50000), sockname=("127.0.0.1", 8080),
                                       timestamp_start=time.time(), proxy_mode=ProxyMode.parse("regular"),
                                       state=connection.ConnectionState.OPEN)
            ctx_ = context.Context(client, tctx.options)
            modes.HttpProxy(ctx_)
            nextlayer = layer.NextLayer(ctx_)
            nextlayer.events = [events.Start(), events.DataReceived(client, data)]
            return take(nextlayer, replays, contexts), nextlayer

        yield ask, tctx


class TestTheConnect:
    def test_a_whole_connect_to_a_replayed_model_host_is_answered_by_flowproof(self, connect_at: Any) -> None:
        ask, _ = connect_at
        taken, nextlayer = ask(CONNECT, replaying())
        assert taken and isinstance(nextlayer.layer, ReplayConnect)

    @pytest.mark.parametrize("data", [
        CONNECT[:20],  # in pieces: mitmproxy's HTTP layer reads the rest
        b"GET http://api.openai.com/v1/models HTTP/1.1\r\nHost: api.openai.com\r\n\r\n",
        CONNECT.replace(b"api.openai.com", b"telemetry.example.com"),
        b"CONNECT api.openai.com:443 HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
    ])
    def test_anything_else_is_left_to_mitmproxy(self, connect_at: Any, data: bytes) -> None:
        ask, _ = connect_at
        taken, nextlayer = ask(data, replaying())
        assert not taken and nextlayer.layer is None

    @pytest.mark.parametrize("mode", [Mode.RECORD, Mode.COMPARE])
    def test_a_session_that_reaches_the_model_keeps_mitmproxy_s_connect(self, connect_at: Any, mode: Mode) -> None:
        ask, _ = connect_at
        assert not ask(CONNECT, replaying(mode))[0]
        assert not ask(CONNECT, lambda client: None)[0]

    def test_an_eager_proxy_keeps_mitmproxy_s_connect(self, connect_at: Any) -> None:
        ask, tctx = connect_at
        tctx.options.update(connection_strategy="eager")
        assert not ask(CONNECT, replaying())[0]

    def _connected(self, connect_at: Any, answer: Callable[[commands.StartHook], None],
                   ) -> tuple[Handler, bytes]:
        ask, _ = connect_at
        taken, nextlayer = ask(CONNECT, replaying())
        assert taken
        handler = Handler(nextlayer.layer, nextlayer.context.client, answer)
        handler.feed(events.Start())
        return handler, handler.feed(events.DataReceived(handler.client, CONNECT))

    def test_the_connect_runs_mitmproxy_s_hooks_then_the_tunnel_is_a_replayed_one(
        self, connect_at: Any, ca_bundle: tuple[Path, Path]
    ) -> None:
        handler, sent = self._connected(connect_at, answer_with())
        assert sent == ESTABLISHED
        assert [name for name, _ in handler.hooks] == ["http_connect", "http_connected"]
        flow = handler.hooks[0][1].flow
        assert (flow.request.method, flow.request.host, flow.request.port) == ("CONNECT", HOST, 443)
        assert handler.top.context.server.address == (HOST, 443)
        handler.hooks.clear()
        client = Client(ca_bundle[1], ["http/1.1"])
        assert handshake(handler, client, client.hello())
        assert isinstance(handler.top.child, ServerTLSLayer)
        reply = exchange(handler, client, POST)
        assert reply.startswith(b"HTTP/1.1 200 OK\r\n") and reply.endswith(ANSWER)
        assert [name for name, _ in handler.hooks] == ["requestheaders", "request", "responseheaders", "response"]

    def test_the_connect_s_head_is_read_once_by_the_decision_and_the_answer_together(
        self, connect_at: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        heads: list[object] = []
        read_head = tunnel.http1.read_request_head
        monkeypatch.setattr(tunnel.http1, "read_request_head", lambda lines: heads.append(lines) or read_head(lines))
        handler, sent = self._connected(connect_at, answer_with())
        assert sent == ESTABLISHED and [name for name, _ in handler.hooks] == ["http_connect", "http_connected"]
        assert len(heads) == 1

    def test_a_client_offering_http_2_gets_mitmproxy_s_next_layer_inside_the_tunnel(
        self, connect_at: Any, ca_bundle: tuple[Path, Path]
    ) -> None:
        handler, _ = self._connected(connect_at, answer_with())
        handler.hooks.clear()
        handler.feed(events.DataReceived(handler.client, Client(ca_bundle[1], ["h2", "http/1.1"]).hello()))
        assert isinstance(handler.top.child, layer.NextLayer)
        assert [name for name, _ in handler.hooks] == ["next_layer"]

    def test_a_hook_that_refuses_the_connect_is_answered_and_the_connection_closed(self, connect_at: Any) -> None:
        def refuse(hook: commands.StartHook) -> None:
            if hook.name == "http_connect":
                hook.flow.response = http.Response.make(403, b"no")  # type: ignore[attr-defined]

        handler, sent = self._connected(connect_at, refuse)
        assert sent.startswith(b"HTTP/1.1 403 Forbidden\r\n") and sent.endswith(b"no")
        assert [name for name, _ in handler.hooks] == ["http_connect", "http_connect_error"]
        assert handler.closed

    def test_a_killed_connect_closes_without_an_answer(self, connect_at: Any) -> None:
        def kill(hook: commands.StartHook) -> None:
            if hook.name == "http_connect":
                hook.flow.kill()  # type: ignore[attr-defined]

        handler, sent = self._connected(connect_at, kill)
        assert sent == b"" and handler.closed


class TestTheExchange:
    def _open(self, tunnel_at: Any, bundle: Path | None, answer: Callable[[commands.StartHook], None],
              ) -> tuple[Handler, Client, bool]:
        client = Client(bundle, ["http/1.1"])
        hello = client.hello()
        taken, nextlayer = tunnel_at(hello, replaying())
        assert taken
        handler = Handler(nextlayer.layer, nextlayer.context.client, answer)
        return handler, client, handshake(handler, client, hello)

    def test_each_request_runs_mitmproxy_s_four_hooks_in_order_and_gets_its_answer(
        self, tunnel_at: Any, ca_bundle: tuple[Path, Path]
    ) -> None:
        handler, client, done = self._open(tunnel_at, ca_bundle[1], answer_with())
        assert done
        assert client.tls.selected_alpn_protocol() == "http/1.1"
        assert handler.hooks == []  # a handshake that succeeds fires none
        for _ in range(2):  # one connection, kept open: the same again
            reply = exchange(handler, client, POST)
            head, _, body = reply.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 OK\r\n")
            assert b"content-length: %d" % len(ANSWER) in head.lower()
            assert body == ANSWER
            assert [name for name, _ in handler.hooks] == ["requestheaders", "request", "responseheaders", "response"]
            flow = handler.hooks[1][1].flow
            assert (flow.request.pretty_url, flow.request.content) == (f"https://{HOST}/v1/chat/completions", b"{}")
            assert not flow.live and not handler.closed
            handler.hooks.clear()

    def test_a_request_split_across_records_is_answered_once_whole_its_head_read_once(
        self, tunnel_at: Any, ca_bundle: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        heads: list[object] = []
        read_head = tunnel.http1.read_request_head
        monkeypatch.setattr(tunnel.http1, "read_request_head", lambda lines: heads.append(lines) or read_head(lines))
        handler, client, _ = self._open(tunnel_at, ca_bundle[1], answer_with())
        received = b""
        for k in range(0, len(POST), 7):
            received += client.read(handler.feed(events.DataReceived(handler.client, client.send(POST[k:k + 7]))))
        assert received.endswith(ANSWER) and received.count(b"HTTP/1.1 200") == 1
        assert [name for name, _ in handler.hooks].count("request") == 1
        assert len(heads) == 1  # the body's later pieces do not parse the head again

    def test_connection_close_is_honoured(self, tunnel_at: Any, ca_bundle: tuple[Path, Path]) -> None:
        handler, client, _ = self._open(tunnel_at, ca_bundle[1], answer_with())
        reply = exchange(handler, client, POST.replace(b"Host: api.openai.com\r\n",
                                                       b"Host: api.openai.com\r\nConnection: close\r\n"))
        assert reply.endswith(ANSWER) and handler.closed

    def test_close_notify_then_the_socket_s_close_closes_once(
        self, tunnel_at: Any, ca_bundle: tuple[Path, Path]
    ) -> None:
        handler, client, _ = self._open(tunnel_at, ca_bundle[1], answer_with())
        exchange(handler, client, POST)
        with pytest.raises(ssl.SSLWantReadError):
            client.tls.unwrap()  # sends close_notify, waits for the proxy's
        handler.feed(events.DataReceived(handler.client, client.outgoing.read()))
        assert handler.closed
        handler.closed = False
        handler.feed(events.ConnectionClosed(handler.client))
        assert not handler.closed  # the child was told once; nothing is closed twice

    def test_a_killed_flow_closes_the_connection_with_the_error_hook(
        self, tunnel_at: Any, ca_bundle: tuple[Path, Path]
    ) -> None:
        def kill(hook: commands.StartHook) -> None:
            if hook.name == "request":
                hook.flow.kill()  # type: ignore[attr-defined]

        handler, client, _ = self._open(tunnel_at, ca_bundle[1], kill)
        assert exchange(handler, client, POST) == b""
        assert [name for name, _ in handler.hooks] == ["requestheaders", "request", "error"] and handler.closed

    def test_a_websocket_upgrade_goes_to_mitmproxy_s_own_http_layer_under_this_tls(
        self, tunnel_at: Any, ca_bundle: tuple[Path, Path]
    ) -> None:
        plain, refuse = answer_with(), answer_with(426, b"use http")

        def answer(hook: commands.StartHook) -> None:
            upgrading = "upgrade" in hook.flow.request.headers  # type: ignore[attr-defined]
            (refuse if upgrading else plain)(hook)

        handler, client, _ = self._open(tunnel_at, ca_bundle[1], answer)
        assert exchange(handler, client, POST).endswith(ANSWER)
        upgrade = (b"GET /v1/responses HTTP/1.1\r\nHost: api.openai.com\r\nUpgrade: websocket\r\n"
                   b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                   b"Sec-WebSocket-Version: 13\r\n\r\n")
        handler.hooks.clear()
        reply = exchange(handler, client, upgrade)
        http_layer = handler.top.child_layer.child_layer  # type: ignore[attr-defined]
        assert isinstance(http_layer.handover, HttpLayer)
        assert reply.startswith(b"HTTP/1.1 426") and reply.endswith(b"use http")
        names = [name for name, _ in handler.hooks]
        assert names[:2] == ["requestheaders", "request"]
        assert handler.hooks[1][1].flow.request.headers["upgrade"] == "websocket"

    def test_a_client_that_does_not_trust_the_ca_fires_tls_failed_client_in_mitmproxy_s_words(
        self, tunnel_at: Any
    ) -> None:
        handler, client, done = self._open(tunnel_at, None, answer_with())
        assert not done and isinstance(client.failed, ssl.SSLCertVerificationError)
        failed = [hook for name, hook in handler.hooks if name == "tls_failed_client"]
        assert len(failed) == 1
        error = failed[0].data.conn.error
        assert error.startswith(f"The client does not trust the proxy's certificate for {HOST} (")
        assert any(line.startswith("Client TLS handshake failed.") for line in handler.logs)
        assert handler.closed
        # What the client sends after a failed handshake reaches no HTTP layer.
        assert handler.feed(events.DataReceived(handler.client, b"GET / HTTP/1.1\r\n\r\n")) == b""


class TestTheLeaf:
    """The leaf a replayed tunnel serves: mitmproxy's own for the host, over a P-256 key."""

    def test_the_leaf_is_mitmproxy_s_for_the_host_over_an_ecdsa_key_signed_by_the_ca(
        self, tunnel_at: Any, ca_bundle: tuple[Path, Path]
    ) -> None:
        confdir, bundle = ca_bundle
        client = Client(bundle, ["http/1.1"])  # verifies the chain and the host name
        hello = client.hello()
        taken, nextlayer = tunnel_at(hello, replaying())
        assert taken
        assert handshake(Handler(nextlayer.layer, nextlayer.context.client, answer_with()), client, hello)
        served = x509.load_der_x509_certificate(client.tls.getpeercert(binary_form=True))
        key = served.public_key()
        assert isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name == "secp256r1"
        ca = x509.load_pem_x509_certificate((confdir / "mitmproxy-ca-cert.pem").read_bytes())
        assert served.issuer == ca.subject
        ca_key = ca.public_key()
        assert isinstance(ca_key, rsa.RSAPublicKey)
        ca_key.verify(served.signature, served.tbs_certificate_bytes, padding.PKCS1v15(),
                      served.signature_hash_algorithm)  # type: ignore[arg-type]
        theirs = tls_entry(nextlayer).cert.to_cryptography()
        assert served.subject == theirs.subject
        assert list(served.extensions) == list(theirs.extensions)
        assert (served.not_valid_before_utc, served.not_valid_after_utc) == (
            theirs.not_valid_before_utc, theirs.not_valid_after_utc)
        assert served.serial_number != theirs.serial_number

    def test_one_context_per_leaf_and_a_new_one_for_a_new_leaf(self, tunnel_at: Any) -> None:
        _, nextlayer = tunnel_at(Client(None).hello(), replaying())
        entry = tls_entry(nextlayer)
        contexts = TlsContexts()
        first = contexts.get(entry)
        assert contexts.get(entry) is first
        other = certs.CertStoreEntry(entry.cert, entry.privatekey, entry.chain_file, entry.chain_certs)
        assert contexts.get(other) is not first

    def test_a_leaf_mitmproxy_did_not_make_from_its_ca_is_served_as_it_is(self, tunnel_at: Any) -> None:
        _, nextlayer = tunnel_at(Client(None).hello(), replaying())
        entry = tls_entry(nextlayer)
        own_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        own = certs.dummy_cert(own_key, entry.chain_certs[0].to_cryptography(), HOST, [x509.DNSName(HOST)])
        custom = certs.CertStoreEntry(own, own_key, None, [])  # a user's --certs: its own key
        assert tunnel._ecdsa_leaf(custom, ec.generate_private_key(ec.SECP256R1())) is None
        assert tunnel._ecdsa_leaf(entry, ec.generate_private_key(ec.SECP256R1())) is not None


def tls_entry(nextlayer: layer.NextLayer) -> certs.CertStoreEntry:
    """mitmproxy's certificate store entry for the tunnel's host, as the tunnel asks for it."""
    from mitmproxy import ctx

    return ctx.master.addons.get("tlsconfig").get_cert(nextlayer.context)


# A runner's proxy with one more addon: it notes each TLS handshake mitmproxy's own client TLS
# layer completes, and each response, so a test sees which layers served the tunnel.
PROBE = '''
from flowproof.addon import Flowproof


class Probe:
    def _note(self, what):
        with open(NOTES, "a") as f:
            f.write(what + "\\n")

    def next_layer(self, nextlayer):
        # After flowproof's own hook: a layer of flowproof's, or None (mitmproxy's to choose).
        self._note(f"layer {type(nextlayer.layer).__name__}")

    def http_connect(self, flow):
        self._note("connect")

    def tls_established_client(self, data):
        self._note("mitmproxy tls")

    def response(self, flow):
        self._note(f"response {flow.response.status_code}")


addons = [Flowproof(), Probe()]
'''


def post_through(port: int, bundle: Path, body: bytes, alpn: list[str] | None = None,
                 headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """One call through the proxy's CONNECT tunnel to api.openai.com, on a connection of its own."""
    import http.client

    tls = ssl.create_default_context(cafile=str(bundle))
    if alpn:
        tls.set_alpn_protocols(alpn)
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=tls, timeout=30)
    conn.set_tunnel(HOST, 443)
    try:
        conn.request("POST", CHAT_PATH, body=body, headers={"content-type": "application/json", **(headers or {})})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


# A runner's proxy with an addon whose hooks do what user addons do, chosen by a header: one
# schedules a callback for the loop's next turn, one awaits in ``request``, one intercepts the
# flow and resumes it later.
WAITING_PROBE = '''
import asyncio

from flowproof.addon import Flowproof


def note(what):
    with open(NOTES, "a") as f:
        f.write(what + "\\n")


class Probe:
    def requestheaders(self, flow):
        if flow.request.headers.get("x-probe") == "loop":
            asyncio.get_running_loop().call_soon(note, "loop turned")

    async def request(self, flow):
        probe = flow.request.headers.get("x-probe")
        if probe == "await":
            note("await start")
            await asyncio.sleep(0.05)
            note("await end")
        elif probe == "intercept":
            flow.intercept()

            def resume():
                note("resumed")
                flow.resume()

            asyncio.get_running_loop().call_later(0.05, resume)

    def response(self, flow):
        note(f"response {flow.request.headers['x-probe']} {flow.response.status_code}")


addons = [Flowproof(), Probe()]
'''


def calls_through_probe(tmp_path: Path, ca_bundle: tuple[Path, Path], probe: str,
                        calls: list[dict[str, Any]]) -> tuple[list[tuple[int, bytes]], Path]:
    """Replay one call per entry of ``calls`` (``post_through``'s options), call k asking
    "question k" of a cassette that answers "answer k", through a runner's proxy whose script
    is ``probe``; return what each got and the file the probe notes to."""
    confdir, bundle = ca_bundle
    notes = tmp_path / "notes.txt"
    script = tmp_path / "probe_addon.py"
    script.write_text(f"NOTES = {str(notes)!r}\n" + probe, encoding="utf-8")
    bodies = [chat_body(f"question {k}") for k in range(len(calls))]
    cassette = write_cassette(tmp_path / "c.json", *(chat_turn(k, b, f"answer {k}") for k, b in enumerate(bodies)))
    with ProxyPool(script=script) as pool:
        session = pool.open(ProxyOptions(mode=Mode.REPLAY, cassette=cassette, report=tmp_path / "s.jsonl"), confdir)
        try:
            served = [post_through(session.port, bundle, body, **options)
                      for body, options in zip(bodies, calls, strict=True)]
        finally:
            session.stop()
    return served, notes


class TestThroughARunnersProxy:
    def test_replayed_calls_skip_mitmproxy_s_tls_unless_the_client_offers_another_protocol(
        self, tmp_path: Path, ca_bundle: tuple[Path, Path]
    ) -> None:
        served, notes = calls_through_probe(tmp_path, ca_bundle, PROBE,
                                            [{}, {"alpn": ["http/1.1"]}, {"alpn": ["http/1.1", "spdy/3"]}])
        assert [status for status, _ in served] == [200, 200, 200]
        assert [b"answer %d" % k in payload for k, (_, payload) in enumerate(served)] == [True] * 3
        # Each CONNECT answered by flowproof (one decision, no HTTP layer of mitmproxy's); the
        # first two tunnels through flowproof's own layers; the third offered a protocol besides
        # HTTP/1.1, so mitmproxy chose its layers (TLS, then HTTP), and the same hooks answered it.
        ours = ["layer ReplayConnect", "connect", "response 200"]
        assert notes.read_text().splitlines() == [
            *ours, *ours,
            "layer ReplayConnect", "connect", "layer NoneType", "mitmproxy tls", "layer NoneType", "response 200"]

    def test_a_replayed_tunnel_speaks_tls_1_3_and_sends_nothing_before_the_first_request(
        self, tmp_path: Path, ca_bundle: tuple[Path, Path]
    ) -> None:
        """No session ticket after the handshake, so a threaded client cannot lose its first
        request to one (docs/addon.md); 1.3 is flowproof's own TLS (mitmproxy's offers 1.2)."""
        confdir, bundle = ca_bundle
        cassette = write_cassette(tmp_path / "c.json", chat_turn(0, chat_body(), "answer"))
        with ProxyPool() as pool:
            session = pool.open(ProxyOptions(mode=Mode.REPLAY, cassette=cassette, report=tmp_path / "s.jsonl"),
                                confdir)
            try:
                version, after = after_handshake(session.port, bundle, HOST)
            finally:
                session.stop()
        assert (version, after) == ("TLSv1.3", b"")

    def test_the_tunnel_s_hooks_run_inline_and_wait_for_a_handler_that_waits(
        self, tmp_path: Path, ca_bundle: tuple[Path, Path]
    ) -> None:
        """A replayed call's hooks run within the event that completed its request, as long as
        no handler waits (docs/hotpath.md); one that awaits, or intercepts the flow, holds the
        call until it is done, as it would under mitmproxy's own layers."""
        probes = ("loop", "await", "intercept")
        served, notes = calls_through_probe(tmp_path, ca_bundle, WAITING_PROBE,
                                            [{"headers": {"x-probe": probe}} for probe in probes])
        assert [status for status, _ in served] == [200, 200, 200]
        assert [b"answer %d" % k in payload for k, (_, payload) in enumerate(served)] == [True] * 3
        assert notes.read_text().splitlines() == [
            # Every hook of the first call ran before the loop turned once.
            "response loop 200", "loop turned",
            "await start", "await end", "response await 200",
            "resumed", "response intercept 200"]
