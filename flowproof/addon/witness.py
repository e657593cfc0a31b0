"""The wire as witness, in the proxy: every host the agent tried to reach, and every secret it sent.

A thin adapter over `flowproof.witness`. In every mode (so an offline replay
proves it too):

- ``http_connect``: the target of each ``CONNECT`` (reached even when the
  client then refuses the proxy's certificate) is an ``egress`` event;
- ``requestheaders``: the host of each request, plain HTTP or inside a
  tunnel, is one too (once per host and port);
- ``request``: the request's URL, headers and body are scanned for the spec's
  ``assert_no_secret_leak`` values, to any host, and each find is a
  ``secret_leak`` event naming where it went, never the value.

It reads and never changes a flow, and it is the first child of the root
addon, before the MCP boundary and the mode's concern, so a flow another
addon answers is still seen. Egress is classified before the upstream
mapping rewrites a request's host: what counts is where the agent meant to go.
"""

from __future__ import annotations

from collections.abc import Sequence

from mitmproxy import http

from flowproof.addon.shared import Shared, content_of, log, pretty_host
from flowproof.log_events import EgressEvent, SecretLeakEvent
from flowproof.mcp import McpRoute
from flowproof.wire import detect, is_model_host
from flowproof.witness import EgressHost, Role, find_leaks

__all__ = ["Witness"]


def _host_key(host: str) -> str:
    """A host as egress counts it: case and a trailing dot do not make another host."""
    return host.lower().rstrip(".")


class Witness:
    """Egress and secret leaks of one flow's traffic, written to its event log."""

    def __init__(self, shared: Shared, routes: Sequence[McpRoute] = ()) -> None:
        self.shared = shared
        self.routes = tuple(routes)
        self.seen: set[tuple[str, int]] = set()

    def _role(self, host: str, port: int) -> Role:
        if any(route.host == host and route.port == port for route in self.routes):
            return "mcp"
        if is_model_host(host, self.shared.config.extra_hosts):
            return "model"
        return "other"

    def idle(self, hook: str, flow: http.HTTPFlow) -> bool:
        """True when ``hook`` would do nothing for ``flow`` (a warm proxy then skips it,
        `flowproof.addon.warm.Session.idle`): a host already seen, no secret to look for."""
        req = flow.request
        if hook == "http_connect":
            return (_host_key(req.host), req.port) in self.seen
        if hook == "requestheaders":
            return req.method.upper() == "CONNECT" or (_host_key(pretty_host(req)), req.port) in self.seen
        if hook == "request":
            return not self.shared.config.secrets
        return False

    def _reached(self, host: str, port: int, via: str) -> None:
        host = _host_key(host)
        if not host or (host, port) in self.seen:
            return
        self.seen.add((host, port))
        self.shared.events.write(EgressEvent(EgressHost(host, port, self._role(host, port), via)))
        log.debug("egress", host=host, port=port, via=via)

    def http_connect(self, flow: http.HTTPFlow) -> None:
        self._reached(flow.request.host, flow.request.port, "connect")

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        req = flow.request
        if req.method.upper() == "CONNECT":
            return  # http_connect has it
        self._reached(pretty_host(req), req.port, "http")

    def request(self, flow: http.HTTPFlow) -> None:
        secrets = self.shared.config.secrets
        if not secrets:
            return
        req = flow.request
        try:
            path = req.path.split("?", 1)[0]
            model_call = detect(req.method, req.pretty_host, path, self.shared.config.extra_hosts) is not None
            leaks = find_leaks(secrets, method=req.method, url=req.pretty_url,
                               headers=req.headers.items(multi=True), body=content_of(req),
                               model_call=model_call)
        except Exception as e:  # noqa: BLE001 — see Shared.hook_failed: a scan that broke fails the run
            self.shared.hook_failed(flow, "secret scan", e)
            return
        for leak in leaks:
            self.shared.events.write(SecretLeakEvent(leak))
            log.warning("secret_leak", host=leak.host, where=leak.where, path=leak.path)
