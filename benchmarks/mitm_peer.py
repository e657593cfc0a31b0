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

Not loaded for ``--server-replay``: that peer never reaches an upstream.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from mitmproxy import ctx, http, io
from mitmproxy.addonmanager import Loader


class BenchPeer:
    def __init__(self) -> None:
        self.canned: http.Response | None = None

    def load(self, loader: Loader) -> None:
        loader.add_option("bench_upstream", str, "", "http://host:port that api.openai.com goes to")
        loader.add_option("bench_tap", bool, False, "stream response bodies through a copying tap")
        loader.add_option("bench_canned", str, "", "a flow file whose first response answers every request")
        loader.add_option("bench_lean", bool, False, "drop the addons a runner's proxy drops")

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


def _tap(kept: list[bytes]) -> Callable[[bytes], bytes]:
    def feed(chunk: bytes) -> bytes:
        kept.append(chunk)
        return chunk

    return feed


addons = [BenchPeer()]
