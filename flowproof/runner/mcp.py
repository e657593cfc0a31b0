"""Route an agent's MCP traffic through flowproof (docs/mcp.md, "Routing").

An ``mcp:`` entry's ``url`` names the real server. MCP servers usually listen on
loopback, which ``NO_PROXY`` exempts from the proxy, so the runner opens a
reverse-mode listener of the same proxy for each entry and hands the agent that
endpoint through the variable the url came from (``url: ${EXPORT_MCP_URL}`` sets
``EXPORT_MCP_URL``). The addon also recognises the real url on the explicit
proxy route, which catches a remote https server the agent reaches through
``HTTPS_PROXY``.

At replay no server is dialled, so an unset url variable gets a placeholder
(`REPLAY_PLACEHOLDER_URL`): a cassette replays offline with nothing set.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from flowproof.errors import FlowproofError
from flowproof.mcp import McpRoute, parse_route
from flowproof.options import Mode
from flowproof.spec.types import FlowSpec

__all__ = [
    "REPLAY_PLACEHOLDER_URL",
    "McpListener",
    "agent_variables",
    "check_reachable",
    "plan_listeners",
    "replay_environ",
    "reverse_listeners",
    "url_variables",
]

#: The url an unset ``mcp:`` variable resolves to at replay; never dialled.
REPLAY_PLACEHOLDER_URL = "http://127.0.0.1:9/mcp"

_ONLY_VARIABLE = re.compile(r"\s*\$\{([A-Za-z_][A-Za-z0-9_]*)\}\s*")
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True, slots=True)
class McpListener:
    """One ``mcp:`` entry's route and, when the agent is redirected, its variable and listener port.

    ``credentials`` are the url's ``user:password@`` and ``query`` its query string: the
    agent's url keeps them, so a server that authenticates by either still gets them,
    while the route (the proxy's option, every message, the cassette) never holds them.
    """

    route: McpRoute
    variable: str | None
    port: int | None
    credentials: str = ""
    query: str = ""


def url_variables(spec: FlowSpec) -> dict[str, str | None]:
    """Server name -> the variable its url is (``${VAR}`` alone), or None. Reads an unresolved spec;
    stdio entries (``command:``) have no url and are left out."""
    out: dict[str, str | None] = {}
    for server in spec.mcp:
        if server.url is None:
            continue
        match = _ONLY_VARIABLE.fullmatch(server.url)
        out[server.name] = match.group(1) if match else None
    return out


def replay_environ(spec: FlowSpec, environ: Mapping[str, str], mode: Mode) -> dict[str, str]:
    """``environ`` plus a placeholder for every unset ``mcp:`` url variable, at replay only."""
    env = dict(environ)
    if mode == Mode.REPLAY:
        for variable in url_variables(spec).values():
            if variable is not None and not env.get(variable):
                env[variable] = REPLAY_PLACEHOLDER_URL
    return env


def plan_listeners(raw: FlowSpec, resolved: FlowSpec, free_port: object) -> list[McpListener]:
    """One `McpListener` per ``mcp:`` entry; raises a FlowproofError for a local url the
    agent cannot be redirected from. ``free_port`` is a callable returning a free port."""
    variables = url_variables(raw)
    out = []
    for server in resolved.mcp:
        if server.url is None:
            continue  # a stdio server: the agent reaches it through the stand-in (runner.mcp_stdio)
        try:
            route = parse_route(f"{server.name}={server.url}")
        except ValueError as e:
            raise FlowproofError(f"{server.location}: mcp server `{server.name}`: {e}") from None
        variable = variables.get(server.name)
        if variable is None:
            if route.host in _LOOPBACK:
                raise FlowproofError(
                    f"{server.location}: the url of mcp server `{server.name}` is a fixed local "
                    f"address ({server.url}), which the agent reaches without the proxy — write "
                    "`url: ${SOME_VAR}`, have the agent read SOME_VAR, and flowproof will hand "
                    "it its own endpoint"
                )
            out.append(McpListener(route, None, None))  # a remote url: caught on the proxy route
            continue
        parts = urlsplit(server.url)
        credentials = parts.netloc.rpartition("@")[0]
        out.append(McpListener(route, variable, free_port(), credentials, parts.query))  # type: ignore[operator]
    return out


def reverse_listeners(listeners: Sequence[McpListener]) -> list[str]:
    """The flow's listeners for its redirected entries: one reverse listener each, on its port."""
    return [
        f"reverse:{item.route.scheme}://{item.route.host}:{item.route.port}@{item.port}"
        for item in listeners
        if item.port is not None
    ]


def agent_variables(listeners: Sequence[McpListener]) -> dict[str, str]:
    """What the agent's environment gets: each redirected entry's variable -> its flowproof endpoint,
    with the real url's credentials and query string (the proxy passes both on to the server)."""
    out = {}
    for item in listeners:
        if item.variable is None or item.port is None:
            continue
        userinfo = f"{item.credentials}@" if item.credentials else ""
        query = f"?{item.query}" if item.query else ""
        out[item.variable] = f"http://{userinfo}127.0.0.1:{item.port}{item.route.path}{query}"
    return out


def check_reachable(listeners: Sequence[McpListener], timeout: float = 3.0) -> None:
    """Record and compare talk to the real servers: fail clearly, naming the entry, when one is down."""
    for item in listeners:
        route = item.route
        try:
            with socket.create_connection((route.host, route.port), timeout=timeout):
                pass
        except OSError as e:
            where = f" (from ${{{item.variable}}})" if item.variable else ""
            raise FlowproofError(
                f"the mcp server `{route.name}` at {route.url}{where} is not reachable ({e}) — "
                "start it before recording, or fix its url"
            ) from None
