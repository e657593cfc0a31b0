"""Which real MCP server a request is addressed to: an ``mcp:`` entry's name and url."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["McpRoute", "parse_route"]

_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


@dataclass(frozen=True, slots=True)
class McpRoute:
    """A real MCP server flowproof stands in front of: an ``mcp:`` entry's name and resolved url."""

    name: str
    scheme: str
    host: str
    port: int
    path: str

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}{self.path}"

    def matches(self, scheme: str, host: str, port: int, path: str) -> bool:
        """True when a request to scheme://host:port/path is addressed to this server."""
        same_host = host.lower() == self.host or (host.lower() in _LOOPBACK and self.host in _LOOPBACK)
        return (
            scheme == self.scheme
            and same_host
            and port == self.port
            and self.relative_path(path) is not None
        )

    def relative_path(self, path: str) -> str | None:
        """The request path below the server's url path (query dropped), or None when outside it.

        The key compares this, not the whole path: the url itself comes from the
        spec's variable, which may name another path at replay than at record.
        """
        bare = path.split("?", 1)[0]
        base = self.path.rstrip("/")
        if base and bare != base and not bare.startswith(base + "/"):
            return None
        return bare[len(base):]


def parse_route(value: str) -> McpRoute:
    """Parse ``NAME=URL`` (the addon's ``flowproof_mcp`` option); ValueError says what is wrong.

    >>> parse_route("exports=http://127.0.0.1:9000/mcp").port
    9000
    """
    name, sep, url = value.partition("=")
    name, url = name.strip(), url.strip()
    if not sep or not name or not url:
        raise ValueError(f"expected NAME=URL, e.g. exports=http://127.0.0.1:9000/mcp, not {value!r}")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"the MCP url {url!r} must be an http(s) URL with a host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as e:
        raise ValueError(f"the MCP url {url!r} has an invalid port ({e})") from None
    return McpRoute(name, parts.scheme, parts.hostname.lower(), port, parts.path or "/")
