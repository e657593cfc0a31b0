"""The least a TLS-intercepting proxy written in Python costs: a peer for benchmarks/replay_peers.py.

Not mitmproxy, and not a product: about as little as an HTTPS proxy can do and
still sit where flowproof's proxy route sits. It answers an agent's ``CONNECT``,
takes the tunnel's TLS with a leaf certificate for the host signed by the same CA
(mitmproxy's certificate store in ``--confdir``: the same RSA key, so the same
signing cost per handshake), reads each HTTP/1.1 request (head, then a
``Content-Length`` body) and writes back the first response saved in the mitmproxy
flow file ``--flows``, head and body in one write, keeping the connection open.
It matches nothing, logs nothing, checks nothing: asyncio streams and the
standard library's ``ssl`` on one event loop.

So its CPU per call is the floor of any replay on the proxy route in Python:
the connection, the handshake and the bytes, with no proxy framework around them.

    python benchmarks/tls_floor_peer.py --confdir DIR --flows FILE

It prints ``listening at 127.0.0.1:PORT`` (what benchmarks/run.py's `Mitmdump`
waits for) and runs until SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import ssl
import sys
from pathlib import Path

from cryptography import x509
from mitmproxy import certs, http, io

from flowproof.addon.tunnel import TlsContexts


def canned_bytes(flows: Path) -> bytes:
    """The first saved response of ``flows`` as HTTP/1.1 bytes, framed by ``Content-Length``."""
    with open(flows, "rb") as f:
        for saved in io.FlowReader(f).stream():
            if isinstance(saved, http.HTTPFlow) and saved.response is not None:
                response = saved.response
                break
        else:
            raise SystemExit(f"tls_floor_peer: no response in {flows}")
    body = response.raw_content or b""
    head = [f"HTTP/1.1 {response.status_code} {response.reason}".encode()]
    for name, value in response.headers.fields:
        if name.lower() not in (b"content-length", b"transfer-encoding", b"connection"):
            head.append(name + b": " + value)
    head.append(b"content-length: " + str(len(body)).encode())
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def server_context(confdir: Path, host: str) -> ssl.SSLContext:
    """A server context with the leaf mitmproxy's certificate store would make for ``host``,
    built as flowproof's own replayed tunnel builds it (`flowproof.addon.tunnel.TlsContexts`)."""
    store = certs.CertStore.from_store(confdir, "mitmproxy", 2048)
    return TlsContexts().get(store.get_cert(host, [x509.DNSName(host)]))


def content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


async def serve(confdir: Path, flows: Path, host: str) -> None:
    answer = canned_bytes(flows)
    tls = server_context(confdir, host)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            connect = await reader.readuntil(b"\r\n\r\n")
            if not connect.startswith(b"CONNECT "):
                return
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await writer.start_tls(tls)
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                await reader.readexactly(content_length(head))
                writer.write(answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    print(f"listening at 127.0.0.1:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--confdir", type=Path, required=True)
    parser.add_argument("--flows", type=Path, required=True)
    parser.add_argument("--host", default="api.openai.com")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.confdir, args.flows, args.host))
    return 0


if __name__ == "__main__":
    sys.exit(main())
