"""A replayed model host's tunnel, served in two layers of flowproof's own.

On the proxy route an agent opens a ``CONNECT`` tunnel per connection, and
openai-python opens one per streamed call (it closes a stream's connection at
``[DONE]``). mitmproxy then runs, for each, its client TLS layer (pyOpenSSL over
memory buffers, three TLS hooks, the leaf converted to pyOpenSSL objects per
connection) and its HTTP layer, stream and HTTP/1 server: most of what a replayed
call costs the proxy (docs/performance.md). With nothing to forward, a replay
needs neither. In a runner's proxy, a tunnel to a provider's or a gateway's host,
of a session that replays (where replay answers every request itself), is
instead served by:

- `ReplayConnect`, which answers the tunnel's ``CONNECT`` (with mitmproxy's own
  ``http_connect`` and ``http_connected`` hooks) when its first bytes are a whole
  ``CONNECT``, in place of mitmproxy's HTTP layer, stream and HTTP/1 server,
  which would otherwise stay between the listener and the tunnel for the
  connection's whole life; then, by the ClientHello, the two layers below, or
  mitmproxy's own next layer;
- `ReplayTunnel`, the client side's TLS with the standard library's ``ssl``
  (memory buffers, the leaf mitmproxy's own certificate store makes for the
  connection, ALPN ``http/1.1``), in place of mitmproxy's ``ClientTLSLayer``
  under its ``ServerTLSLayer``, as mitmproxy's next layer stacks them;
- `ReplayHttp`, which reads each HTTP/1.1 request itself and runs it through
  the same hooks, in the same order, as mitmproxy's HTTP stream does for an
  answer an addon sets in ``request``: ``requestheaders``, ``request``,
  ``responseheaders``, ``response`` (every addon, flowproof's sessions
  included, sees what it sees today), then writes the response as mitmproxy's
  HTTP/1 server would (``assemble_response``).

Both run their hooks through `flowproof.addon.inline.fire`: the same handlers,
without the connection handler's round trip unless one of them waits.

What it does not serve it hands over unchanged: a client that offers HTTP/2 (or
any protocol beside HTTP/1.1) is left to mitmproxy altogether (the choice is
made on its ClientHello); a request that is not a plain one (an ``Upgrade``,
such as a WebSocket, an ``Expect``, a chunked body, ``HEAD``, a head mitmproxy's
parser refuses…) and everything after it on the connection goes to mitmproxy's
own HTTP layer, under this TLS. A failed handshake fires ``tls_failed_client``
with mitmproxy's wording, so the runner still says the agent does not trust the
CA. The TLS hooks of a handshake that succeeds are not fired: no addon of a
runner's proxy acts on them.

``mitmdump -s`` by hand (no control socket) never takes this path.
"""

from __future__ import annotations

import logging
import ssl
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from mitmproxy import certs, ctx, flow, http
from mitmproxy.net.http import http1
from mitmproxy.proxy import commands, context, events, layer, mode_specs, tunnel
from mitmproxy.proxy.layers import http as http_layers
from mitmproxy.proxy.layers import modes
from mitmproxy.proxy.layers.http._hooks import (
    HttpConnectedHook,
    HttpConnectErrorHook,
    HttpConnectHook,
    HttpErrorHook,
    HttpRequestHeadersHook,
    HttpRequestHook,
    HttpResponseHeadersHook,
    HttpResponseHook,
)
from mitmproxy.proxy.layers.tls import ServerTLSLayer, TlsFailedClientHook, parse_client_hello
from mitmproxy.tls import ClientHello, TlsData

from flowproof.addon.inline import fire
from flowproof.options import Mode
from flowproof.wire import is_model_host

__all__ = ["ReplayConnect", "ReplayHttp", "ReplayTunnel", "TlsContexts", "take"]

#: A head longer than this is left to mitmproxy, whose own limit then answers it.
_MAX_HEAD = 64 * 1024
#: Request headers after which the request is not a plain one (`ReplayHttp` hands it over).
_NOT_PLAIN = (b"upgrade", b"expect", b"transfer-encoding")


class TlsContexts:
    """The standard library's server contexts, one per leaf certificate (mitmproxy's store
    makes one leaf per host and keeps it).

    The leaf served is mitmproxy's own for the host, re-issued by the same CA over an ECDSA
    P-256 key of this proxy's (`_ecdsa_leaf`): mitmproxy signs its leaves for the CA's own
    RSA key, and an RSA-2048 signature costs the proxy about 0.3 ms of CPU per handshake
    against a few hundredths for P-256. openai-python opens a connection per streamed call,
    so a replayed stream paid it once per call (docs/performance.md, the ninth pass)."""

    #: Contexts kept at most; a proxy serves a handful of model hosts, so more means churn.
    LIMIT = 256

    def __init__(self) -> None:
        self._by_entry: dict[int, tuple[certs.CertStoreEntry, ssl.SSLContext]] = {}
        self._key: ec.EllipticCurvePrivateKey | None = None

    def get(self, entry: certs.CertStoreEntry) -> ssl.SSLContext:
        # By identity: mitmproxy's store hands out the same entry for a host until it expires
        # it, and the entry is held here, so its id is not reused while it is a key.
        found = self._by_entry.get(id(entry))
        if found is not None and found[0] is entry:
            return found[1]
        if len(self._by_entry) >= self.LIMIT:
            self._by_entry.clear()
        if self._key is None:
            self._key = ec.generate_private_key(ec.SECP256R1())
        context = _server_context(entry, self._key)
        self._by_entry[id(entry)] = (entry, context)
        return context


def _ecdsa_leaf(entry: certs.CertStoreEntry, key: ec.EllipticCurvePrivateKey) -> x509.Certificate | None:
    """``entry``'s leaf with ``key``'s public key, signed by the same CA, or None to serve it as
    it is: a leaf mitmproxy did not make from its CA (a user's own ``--certs``), or one of a
    CA whose key is not RSA (its leaves are as cheap to sign with already)."""
    leaf = entry.cert.to_cryptography()
    ca_key = entry.privatekey
    if not isinstance(ca_key, rsa.RSAPrivateKey) or not entry.chain_certs:
        return None
    ca = entry.chain_certs[0].to_cryptography()
    # mitmproxy's generated leaf carries its CA's own key and names the CA as issuer.
    if leaf.public_key() != ca_key.public_key() or ca.public_key() != ca_key.public_key() or leaf.issuer != ca.subject:
        return None
    builder = (x509.CertificateBuilder()
               .issuer_name(leaf.issuer)
               .subject_name(leaf.subject)
               .public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(leaf.not_valid_before_utc)
               .not_valid_after(leaf.not_valid_after_utc))
    for extension in leaf.extensions:
        builder = builder.add_extension(extension.value, extension.critical)
    return builder.sign(ca_key, leaf.signature_hash_algorithm or hashes.SHA256())  # type: ignore[arg-type]


def _server_context(entry: certs.CertStoreEntry, leaf_key: ec.EllipticCurvePrivateKey) -> ssl.SSLContext:
    reissued = _ecdsa_leaf(entry, leaf_key)
    leaf_pem = entry.cert.to_pem() if reissued is None else reissued.public_bytes(serialization.Encoding.PEM)
    private_key = entry.privatekey if reissued is None else leaf_key
    chain = leaf_pem + b"".join(c.to_pem() for c in entry.chain_certs if c != entry.cert)
    key = private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    # ``ssl`` loads a key from a file only: a directory of our own (mode 0700), gone at once.
    with tempfile.TemporaryDirectory(prefix="flowproof-leaf-") as d:
        cert_file, key_file = Path(d) / "leaf.pem", Path(d) / "leaf.key"
        cert_file.write_bytes(chain)
        key_file.touch(mode=0o600)
        key_file.write_bytes(key)
        server.load_cert_chain(cert_file, key_file)
    server.set_alpn_protocols(["http/1.1"])
    # No TLS 1.3 session ticket after the handshake: one arriving while a threaded client
    # writes its first request loses that request (docs/addon.md, "TLS 1.2 for agents, and why").
    server.num_tickets = 0
    return server


def take(nextlayer: layer.NextLayer, replays: Callable[[Any], Any | None], contexts: TlsContexts) -> bool:
    """Serve the connection ``nextlayer`` is asked about with flowproof's own layers when it
    can; True if so.

    ``replays(client)`` gives the config of the replaying session ``client`` (a client
    connection) belongs to, or None. Taken, of a regular listener's connection of a session
    that replays:

    - at its first decision, a whole ``CONNECT`` request to a provider's or a gateway's host:
      `ReplayConnect` answers it and serves the tunnel;
    - inside a ``CONNECT`` mitmproxy answered (one whose head came in pieces), a tunnel to
      such a host whose first bytes are a whole TLS ClientHello that offers no protocol but
      HTTP/1.1: `ReplayTunnel` under mitmproxy's server TLS layer."""
    ctx_ = nextlayer.context
    if nextlayer.layer is not None:
        return False
    if len(ctx_.layers) == 1 and isinstance(ctx_.layers[0], modes.HttpProxy):
        return _take_connect(nextlayer, replays, contexts)
    if ctx_.server.address is None:
        return False
    # Inside a CONNECT: the stack is the regular listener's, its HTTP layer then the CONNECT's stream.
    if not any(isinstance(outer, http_layers.HttpLayer) and outer.mode is http_layers.HTTPMode.regular
               for outer in ctx_.layers):
        return False
    if not isinstance(ctx_.client.proxy_mode, mode_specs.RegularMode) or ctx_.client.tls:
        return False
    data = nextlayer.data_client()
    if data[:1] != b"\x16":
        return False
    try:
        hello = parse_client_hello(data)
    except ValueError:
        return False
    if hello is None or not _offers_http1_only(hello):
        return False
    config = replays(ctx_.client)
    if config is None or config.mode is not Mode.REPLAY:
        return False
    host = hello.sni or str(ctx_.server.address[0])
    # A provider's host or a gateway's (``extra_hosts``), where replay answers every request
    # itself; a host mapped upstream alone sends what is not a model call on to the mapping.
    if not is_model_host(host, config.options.extra_hosts):
        return False
    nextlayer.layer = _tunnel_layers(ctx_, hello, contexts)
    return True


def _offers_http1_only(hello: ClientHello) -> bool:
    return all(p == b"http/1.1" for p in hello.alpn_protocols)


def _tunnel_layers(ctx_: context.Context, hello: ClientHello, contexts: TlsContexts) -> layer.Layer:
    """`ReplayTunnel` under mitmproxy's server TLS layer, as mitmproxy's next layer stacks TLS."""
    server_tls = ServerTLSLayer(ctx_)
    server_tls.child_layer = ReplayTunnel(ctx_, hello, contexts)
    return server_tls


def _take_connect(nextlayer: layer.NextLayer, replays: Callable[[Any], Any | None], contexts: TlsContexts) -> bool:
    ctx_ = nextlayer.context
    if not isinstance(ctx_.client.proxy_mode, mode_specs.RegularMode) or ctx_.client.tls:
        return False
    data = nextlayer.data_client()
    if not data.startswith(b"CONNECT "):
        return False
    end = data.find(b"\r\n\r\n")
    if end < 0 or end > _MAX_HEAD:
        return False  # in pieces (or too long): mitmproxy's HTTP layer reads it
    try:
        request = http1.read_request_head(data[:end].split(b"\r\n"))
    except ValueError:
        return False
    if request.method != "CONNECT" or not request.host or request.headers.get("content-length", "0") != "0":
        return False
    # An eager proxy dials the target at CONNECT; a runner's proxy is lazy (flowproof.runner.spawn).
    if getattr(ctx_.options, "connection_strategy", "lazy") != "lazy":
        return False
    config = replays(ctx_.client)
    if config is None or config.mode is not Mode.REPLAY:
        return False
    if not is_model_host(request.host, config.options.extra_hosts):
        return False
    nextlayer.layer = ReplayConnect(ctx_, contexts, (request, end))
    return True


class ReplayConnect(layer.Layer):
    """A regular listener's ``CONNECT`` to a replayed model host, answered as mitmproxy's HTTP
    stream answers one (``http_connect``, then ``http_connected`` and ``200 Connection
    established``), then its tunnel: `ReplayTunnel` when the ClientHello offers HTTP/1.1
    alone, else mitmproxy's own next layer (its client TLS, its HTTP layer).

    mitmproxy would keep its HTTP layer, stream and HTTP/1 server between the listener and
    the tunnel for the connection's whole life, every chunk of a stream passing through
    them; here the tunnel's layers are this one's only child."""

    def __init__(self, context: context.Context, contexts: TlsContexts,
                 head: tuple[http.Request, int] | None = None) -> None:
        super().__init__(context)
        self.contexts = contexts
        #: The ``CONNECT`` head the decision read (`take`), and where it ends: read once.
        self.head = head
        self.buffer = b""
        self.child: layer.Layer | None = None
        self.connected = False
        self.closed = False

    def _handle_event(self, event: events.Event) -> layer.CommandGenerator[None]:
        client = self.context.client
        if self.child is not None:
            yield from self.child.handle_event(event)
        elif isinstance(event, events.DataReceived) and event.connection is client and not self.closed:
            self.buffer += event.data
            if not self.connected:
                yield from self._connect()
            if self.connected and self.buffer:
                yield from self._choose_tunnel()
        elif isinstance(event, events.ConnectionClosed) and event.connection is client and not self.closed:
            self.closed = True
            yield commands.CloseConnection(client)

    def _connect(self) -> layer.CommandGenerator[None]:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:  # the decision saw it whole: a guard, not a path
            return
        client = self.context.client
        if self.head is not None and self.head[1] == end:
            request = self.head[0]
        else:
            request = http1.read_request_head(self.buffer[:end].split(b"\r\n"))
        self.head = None
        request.timestamp_end = time.time()
        self.buffer = self.buffer[end + 4:]
        flow_ = http.HTTPFlow(client, self.context.server)
        flow_.request = request
        flow_.live = True
        yield from fire(HttpConnectHook(flow_))
        if flow_.error and flow_.error.msg == flow.Error.KILLED_MESSAGE:
            self.closed = True
            yield commands.CloseConnection(client)
            return
        self.context.server.address = (request.host, request.port)
        if flow_.response is None:
            flow_.response = http.Response(request.data.http_version, 200, b"Connection established",
                                           http.Headers(), b"", None, time.time(), time.time())
        response = flow_.response
        if 200 <= response.status_code < 300:
            yield from fire(HttpConnectedHook(flow_))
            self.connected = True
            yield commands.SendData(client, http1.assemble_response_head(response) + (response.raw_content or b""))
        else:
            yield from fire(HttpConnectErrorHook(flow_))
            flow_.live = False
            self.closed = True
            yield commands.SendData(client, http1.assemble_response(response))
            yield commands.CloseConnection(client)

    def _choose_tunnel(self) -> layer.CommandGenerator[None]:
        hello: ClientHello | None = None
        if self.buffer[:1] == b"\x16":
            try:
                hello = parse_client_hello(self.buffer)
            except ValueError:
                pass
            else:
                if hello is None:
                    return  # the ClientHello is still arriving
        if hello is not None and _offers_http1_only(hello):
            child: layer.Layer = _tunnel_layers(self.context, hello, self.contexts)
        else:
            # What mitmproxy's HTTP stream stacks under a CONNECT it answered.
            child = layer.NextLayer(self.context)
        self.child = child
        data, self.buffer = self.buffer, b""
        yield from child.handle_event(events.Start())
        yield from child.handle_event(events.DataReceived(self.context.client, data))


class ReplayTunnel(tunnel.TunnelLayer):
    """The client connection's TLS, with the standard library's ``ssl``; `ReplayHttp` above it."""

    def __init__(self, context: context.Context, hello: ClientHello, contexts: TlsContexts) -> None:
        super().__init__(context, tunnel_connection=context.client, conn=context.client)
        self.hello = hello
        self.contexts = contexts
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls: ssl.SSLObject | None = None
        #: The client's close_notify came: its ConnectionClosed has gone to the child already.
        self.peer_closed = False
        context.client.tls = True
        context.client.sni = hello.sni
        context.client.alpn_offers = hello.alpn_protocols
        self.child_layer = ReplayHttp(context)

    def _flush(self) -> layer.CommandGenerator[None]:
        out = self.outgoing.read()
        if out:
            yield commands.SendData(self.tunnel_connection, out)

    def start_handshake(self) -> layer.CommandGenerator[None]:
        yield from ()

    def receive_handshake_data(self, data: bytes) -> layer.CommandGenerator[tuple[bool, str | None]]:
        if self.tls is None:
            tlsconfig = ctx.master.addons.get("tlsconfig")
            server = self.contexts.get(tlsconfig.get_cert(self.context))
            self.tls = server.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.incoming.write(data)
        try:
            self.tls.do_handshake()
        except ssl.SSLWantReadError:
            yield from self._flush()
            return False, None
        except ssl.SSLError as e:
            yield from self._flush()
            return False, _reason(e)
        conn = self.conn
        conn.timestamp_tls_setup = time.time()
        conn.alpn = (self.tls.selected_alpn_protocol() or "").encode() or None
        cipher = self.tls.cipher()
        conn.cipher = cipher[0] if cipher else None
        conn.tls_version = self.tls.version()  # type: ignore[assignment]  # "TLSv1.3", mitmproxy's names
        yield from self._flush()
        yield from self.receive_data(b"")
        return True, None

    def on_handshake_error(self, err: str) -> layer.CommandGenerator[None]:
        """mitmproxy's ``ClientTLSLayer`` wording, its log line and its ``tls_failed_client``."""
        dest = self.conn.sni or str(self.context.server.address[0] if self.context.server.address else "")
        level = logging.WARNING
        if "unknown ca" in err or "bad certificate" in err or "certificate unknown" in err:
            err = f"The client does not trust the proxy's certificate for {dest} ({err})"
        elif err == "connection closed":
            err = (f"The client disconnected during the handshake. If this happens consistently for {dest}, "
                   f"this may indicate that the client does not trust the proxy's certificate.")
            level = logging.INFO
        else:
            err = f"The client may not trust the proxy's certificate for {dest} ({err})"
        yield commands.Log(f"Client TLS handshake failed. {err}", level=level)
        self.conn.error = err
        yield TlsFailedClientHook(TlsData(self.conn, self.context))
        yield from super().on_handshake_error(err)
        self.event_to_child = self._errored  # type: ignore[method-assign]

    def _errored(self, event: events.Event) -> layer.CommandGenerator[None]:
        yield from ()

    def receive_data(self, data: bytes) -> layer.CommandGenerator[None]:
        assert self.tls is not None
        if data:
            self.incoming.write(data)
        plain = bytearray()
        ended = False
        try:
            while chunk := self.tls.read(65536):
                plain += chunk
            ended = True  # an empty read: the client's close_notify
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLError:  # a broken record
            ended = True
        close = ended and not self.peer_closed
        self.peer_closed = self.peer_closed or ended
        yield from self._flush()  # a key update or a ticket the read produced
        if plain:
            yield from self.event_to_child(events.DataReceived(self.conn, bytes(plain)))
        if close:
            yield from self.event_to_child(events.ConnectionClosed(self.conn))

    def receive_close(self) -> layer.CommandGenerator[None]:
        if not self.peer_closed:
            self.peer_closed = True
            yield from self.event_to_child(events.ConnectionClosed(self.conn))

    def send_data(self, data: bytes) -> layer.CommandGenerator[None]:
        assert self.tls is not None
        try:
            self.tls.write(data)
        except ssl.SSLError:  # the client closed its side: what it would get is dropped
            return
        yield from self._flush()


def _reason(e: ssl.SSLError) -> str:
    """mitmproxy's short form of an OpenSSL error ("tlsv1 alert unknown ca")."""
    reason = getattr(e, "reason", None)
    return reason.lower().replace("_", " ") if isinstance(reason, str) else str(e)


class ReplayHttp(layer.Layer):
    """HTTP/1.1 requests of a replayed tunnel: each through the flow hooks, answered by them."""

    def __init__(self, context: context.Context) -> None:
        super().__init__(context)
        self.buffer = bytearray()
        #: The request whose head is read and whose body is still arriving: (request, where
        #: its body starts in the buffer, where it ends).
        self.pending: tuple[http.Request, int, int] | None = None
        self.handover: layer.Layer | None = None
        self.closed = False

    def _handle_event(self, event: events.Event) -> layer.CommandGenerator[None]:
        if self.handover is not None:
            yield from self.handover.handle_event(event)
        elif isinstance(event, events.DataReceived) and not self.closed:
            self.buffer += event.data
            yield from self._serve()
        elif isinstance(event, events.ConnectionClosed) and not self.closed:
            self.closed = True
            yield commands.CloseConnection(self.context.client)

    def _serve(self) -> layer.CommandGenerator[None]:
        while not self.closed and self.handover is None:
            if self.pending is None:
                # mitmproxy's HTTP/1 server skips blank lines before a request line too.
                while self.buffer[:2] == b"\r\n":
                    del self.buffer[:2]
                end = self.buffer.find(b"\r\n\r\n")
                if end < 0:
                    # A head ended by bare newlines, or longer than we read: mitmproxy's to read.
                    if len(self.buffer) > _MAX_HEAD or b"\n\n" in self.buffer:
                        yield from self._hand_over()
                    return
                try:
                    request = http1.read_request_head(bytes(self.buffer[:end]).split(b"\r\n"))
                    size = http1.expected_http_body_size(request)
                except ValueError:
                    yield from self._hand_over()
                    return
                if not _plain(request) or size is None or size < 0:
                    yield from self._hand_over()
                    return
                # The head is read once; its bytes stay in the buffer until the body is whole.
                self.pending = (request, end + 4, end + 4 + size)
            request, start, stop = self.pending
            if len(self.buffer) < stop:
                return
            body = bytes(self.buffer[start:stop])
            del self.buffer[:stop]
            self.pending = None
            yield from self._answer(request, body)

    def _hand_over(self) -> layer.CommandGenerator[None]:
        """Everything from this request on goes to mitmproxy's own HTTP layer."""
        handover = self.handover = http_layers.HttpLayer(self.context, http_layers.HTTPMode.transparent)
        yield from handover.handle_event(events.Start())
        if self.buffer:
            data, self.buffer = bytes(self.buffer), bytearray()
            yield from handover.handle_event(events.DataReceived(self.context.client, data))

    def _answer(self, request: http.Request, body: bytes) -> layer.CommandGenerator[None]:
        # As mitmproxy's HTTP stream in transparent mode: where the tunnel goes.
        assert self.context.server.address
        request.data.host = self.context.server.address[0]
        request.data.port = self.context.server.address[1]
        request.scheme = "https" if self.context.server.tls else "http"
        request.data.content = body
        request.timestamp_end = time.time()
        flow_ = http.HTTPFlow(self.context.client, self.context.server)
        flow_.request = request
        flow_.live = True
        yield from fire(HttpRequestHeadersHook(flow_))
        if (yield from self._killed(flow_)):
            return
        yield from fire(HttpRequestHook(flow_))
        if (yield from self._killed(flow_)):
            return
        if flow_.response is None:
            # A replaying session answers every call; this is a guard, not a path.
            flow_.response = http.Response.make(
                502, b'{"error": {"message": "flowproof: nothing answered this call"}}',
                {"content-type": "application/json"})
        flow_.response.timestamp_start = time.time()
        yield from fire(HttpResponseHeadersHook(flow_))
        if (yield from self._killed(flow_)):
            return
        flow_.response.timestamp_end = time.time()
        yield from fire(HttpResponseHook(flow_))
        if (yield from self._killed(flow_)):
            return
        flow_.live = False
        response = flow_.response
        yield commands.SendData(self.context.client, http1.assemble_response(response))
        if (http1.connection_close(request.http_version, request.headers)
                or http1.connection_close(response.http_version, response.headers)):
            self.closed = True
            yield commands.CloseConnection(self.context.client)

    def _killed(self, flow_: http.HTTPFlow) -> layer.CommandGenerator[bool]:
        if not (flow_.error and flow_.error.msg == flow.Error.KILLED_MESSAGE):
            return False
        yield from fire(HttpErrorHook(flow_))
        flow_.live = False
        self.closed = True
        yield commands.CloseConnection(self.context.client)
        return True


def _plain(request: http.Request) -> bool:
    """A request `ReplayHttp` answers itself: HTTP/1.1 in origin form, not ``HEAD`` (whose
    answer has no body), no upgrade, no ``Expect``, no chunked body."""
    if request.http_version != "HTTP/1.1" or request.method in ("CONNECT", "HEAD") or not request.path.startswith("/"):
        return False
    if request.authority:
        return False
    return not any(name.lower() in _NOT_PLAIN for name, _value in request.headers.fields)
