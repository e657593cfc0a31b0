"""``mitmdump -s`` script for the plain-mitmproxy peers of benchmarks/run.py.

- ``--set bench_upstream=http://127.0.0.1:PORT`` sends api.openai.com's calls to
  the fake model server, the way flowproof's ``--upstream`` does (scheme, host,
  port; the Host header follows).
- ``--set bench_tap=true`` streams every response body through a tap that
  keeps a copy of each chunk: a pass-through stream tap, what a recorder must
  at least do, and the peer flowproof's record-mode time to first chunk is
  measured against.

- ``--set bench_canned=FLOWS`` answers every request with the first response
  saved in the mitmproxy flow file FLOWS, matching nothing and reaching no
  upstream: the least any replaying addon inside mitmproxy can cost per call
  (the proxy's own TLS, HTTP parsing and response writing), so the floor of a
  proxy-route replay.
- ``--set bench_lean=true`` with it drops, once mitmdump runs, the default addons
  a proxy ``flowproof-run`` started drops (`flowproof.addon.lean`): the floor of
  flowproof's own proxy route, with the same addon chain.
- ``--set bench_tunnel=true`` with it takes each ``CONNECT`` tunnel to
  api.openai.com out of mitmproxy's TLS and HTTP layers once mitmproxy has
  answered the ``CONNECT``: the `next_layer` hook installs `CannedTunnel`, one
  layer that does the TLS (the standard library's ``ssl`` over memory buffers,
  the leaf from mitmproxy's own certificate store) and reads each request
  itself, and writes the canned answer back. So: what a replay costs inside
  mitmdump when only the connection and the ``CONNECT`` are mitmproxy's.
- ``--set bench_connect=true`` with it answers the ``CONNECT`` too, in the layer
  `CannedConnect` that the first `next_layer` decision installs, and then
  serves the tunnel as `CannedTunnel` does: what is left is mitmproxy's accept
  and connection handler alone (no HTTP layer, no ``http_connect`` hook, one
  `next_layer` decision).
- ``--set bench_tls=true`` with it takes only the tunnel's client TLS out of
  mitmproxy, into flowproof's own (`flowproof.addon.tunnel.ReplayTunnel`),
  with mitmproxy's HTTP layer above it: what the TLS layer alone costs.

Not loaded for ``--server-replay``: that peer never reaches an upstream.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from cryptography import x509
from mitmproxy import ctx, http, io
from mitmproxy.addonmanager import Loader
from mitmproxy.net.http import http1
from mitmproxy.proxy import commands, events, layer
from mitmproxy.proxy.layers.http import HttpLayer, HTTPMode
from mitmproxy.proxy.layers.tls import ServerTLSLayer, parse_client_hello

from flowproof.addon.tunnel import ReplayTunnel, TlsContexts


class BenchPeer:
    def __init__(self) -> None:
        self.canned: http.Response | None = None

    def load(self, loader: Loader) -> None:
        loader.add_option("bench_upstream", str, "", "http://host:port that api.openai.com goes to")
        loader.add_option("bench_tap", bool, False, "stream response bodies through a copying tap")
        loader.add_option("bench_canned", str, "", "a flow file whose first response answers every request")
        loader.add_option("bench_lean", bool, False, "drop the addons a runner's proxy drops")
        loader.add_option("bench_tunnel", bool, False, "serve api.openai.com tunnels in one layer of our own")
        loader.add_option("bench_tls", bool, False, "take api.openai.com tunnels' TLS only, HTTP stays mitmproxy's")
        loader.add_option("bench_connect", bool, False, "answer the CONNECT too, then serve the tunnel as bench_tunnel")
        self.tunnel_tls = TlsContexts()
        self.answer = b""

    def running(self) -> None:
        if ctx.options.bench_lean:
            from flowproof.addon.lean import drop_unused

            drop_unused(ctx.master.addons)

    def configure(self, updated: set[str]) -> None:
        if "bench_canned" in updated and ctx.options.bench_canned:
            with open(ctx.options.bench_canned, "rb") as f:
                for saved in io.FlowReader(f).stream():
                    if isinstance(saved, http.HTTPFlow) and saved.response is not None:
                        self.canned = saved.response
                        break
            if self.canned is not None:
                answer = self.canned.copy()
                answer.headers.pop("transfer-encoding", None)
                answer.headers["content-length"] = str(len(answer.raw_content or b""))
                self.answer = http1.assemble_response(answer)

    def next_layer(self, nextlayer: layer.NextLayer) -> None:
        # Scripts run ahead of mitmproxy's own NextLayer addon, which leaves a layer set here alone.
        if (ctx.options.bench_connect and self.answer and nextlayer.layer is None
                and len(nextlayer.context.layers) == 1 and nextlayer.data_client().startswith(b"CONNECT ")):
            # The benchmark's agent only ever tunnels to api.openai.com.
            nextlayer.layer = CannedConnect(nextlayer.context, self.tls_context("api.openai.com"), self.answer)
            return
        host = nextlayer.context.server.address
        wanted = ctx.options.bench_tunnel or ctx.options.bench_tls
        if (not wanted or not self.answer or nextlayer.layer is not None or host is None
                or host[0] != "api.openai.com" or len(nextlayer.context.layers) < 2):
            return
        hello = nextlayer.data_client()
        if hello[:1] != b"\x16":  # not a TLS handshake record (the tunnel's ClientHello)
            return
        if ctx.options.bench_tls:
            # flowproof's own tunnel TLS (`flowproof.addon.tunnel`), with mitmproxy's HTTP layer above it.
            client_hello = parse_client_hello(hello)
            if client_hello is None:
                return
            server_tls = ServerTLSLayer(nextlayer.context)
            tunnel = ReplayTunnel(nextlayer.context, client_hello, self.tunnel_tls)
            tunnel.child_layer = HttpLayer(nextlayer.context, HTTPMode.transparent)
            server_tls.child_layer = tunnel
            nextlayer.layer = server_tls
        else:
            nextlayer.layer = CannedTunnel(nextlayer.context, self.tls_context(host[0]), self.answer)

    def tls_context(self, host: str) -> ssl.SSLContext:
        store = ctx.master.addons.get("tlsconfig").certstore
        return self.tunnel_tls.get(store.get_cert(host, [x509.DNSName(host)]))

    def request(self, flow: http.HTTPFlow) -> None:
        if self.canned is not None:
            flow.response = self.canned.copy()
            return
        target = ctx.options.bench_upstream
        if target and flow.request.pretty_host == "api.openai.com":
            parts = urlsplit(target)
            flow.request.scheme = parts.scheme
            flow.request.host = parts.hostname or "127.0.0.1"
            flow.request.port = parts.port or 80

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if ctx.options.bench_tap and flow.response is not None:
            flow.response.stream = _tap([])


class CannedTunnel(layer.Layer):
    """A tunnel's TLS and HTTP/1.1 in one layer: every request is answered with ``answer``."""

    def __init__(self, context: Any, tls: ssl.SSLContext, answer: bytes) -> None:
        super().__init__(context)
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = tls.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.handshaken = False
        self.buffer = b""
        self.answer = answer

    def _handle_event(self, event: events.Event) -> layer.CommandGenerator[None]:
        client = self.context.client
        if isinstance(event, events.DataReceived) and event.connection is client:
            self.incoming.write(event.data)
            try:
                if not self.handshaken:
                    self.tls.do_handshake()
                    self.handshaken = True
                while chunk := self.tls.read(65536):
                    self.buffer += chunk
            except ssl.SSLWantReadError:
                pass
            except (ssl.SSLError, ssl.SSLZeroReturnError):
                yield commands.CloseConnection(client)
                return
            while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
                size = _content_length(self.buffer[:end])
                if len(self.buffer) < end + 4 + size:
                    break
                self.buffer = self.buffer[end + 4 + size:]
                self.tls.write(self.answer)
            out = self.outgoing.read()
            if out:
                yield commands.SendData(client, out)
        elif isinstance(event, events.ConnectionClosed) and event.connection is client:
            yield commands.CloseConnection(client)


class CannedConnect(CannedTunnel):
    """`CannedTunnel` that answers the tunnel's ``CONNECT`` itself first."""

    def __init__(self, context: Any, tls: ssl.SSLContext, answer: bytes) -> None:
        super().__init__(context, tls, answer)
        self.head: bytes | None = b""

    def _handle_event(self, event: events.Event) -> layer.CommandGenerator[None]:
        client = self.context.client
        if self.head is not None and isinstance(event, events.DataReceived) and event.connection is client:
            self.head += event.data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            rest, self.head = self.head[end + 4:], None
            yield commands.SendData(client, b"HTTP/1.1 200 Connection established\r\n\r\n")
            if not rest:
                return
            event = events.DataReceived(client, rest)
        yield from super()._handle_event(event)


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def _tap(kept: list[bytes]) -> Callable[[bytes], bytes]:
    def feed(chunk: bytes) -> bytes:
        kept.append(chunk)
        return chunk

    return feed


addons = [BenchPeer()]
