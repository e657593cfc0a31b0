"""The MCP server of the plan-mode guard example, on the official ``mcp`` SDK (Streamable HTTP).

Two tools: ``list_rows`` reads (and is answered by this server), and
``export_to_endpoint`` writes. The write tool is declared under ``mcp:`` in
``plan_mode_guard.flow.yaml``, so flowproof answers it and this server never
runs it; if it ever did, it would leave proof behind: it writes a marker file
(``--marker PATH``, default ``export-ran.marker`` in the working directory).

    python example_specs/plan_mode_mcp_server.py [--port N] [--marker PATH] [--token T]
    python example_specs/plan_mode_mcp_server.py --stdio [--marker PATH]

It prints its URL (``http://127.0.0.1:PORT/mcp``) on the first line of stdout
once it accepts connections; ``--port 0`` (the default) picks a free port.
``--token T`` makes it a server that authenticates by query string, as some
hosted MCP servers do: a request without ``?token=T`` gets HTTP 401.
``--stdio`` serves the same tools over stdin/stdout instead, as the local
servers of an agent's MCP config do. ``--log PATH`` appends a line to PATH when
the server starts and each time ``list_rows`` runs: the proof that a tool did
(or did not) run for real.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

ROWS = [{"id": i, "region": "EU" if i % 2 else "US", "amount": 10 * i} for i in range(1, 6)]


def build_server(marker: Path, log: Path | None = None) -> MCPServer:
    server = MCPServer("exports")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def list_rows(limit: int = 5) -> dict[str, Any]:
        """Read up to `limit` rows of the sales table (read-only)."""
        if log is not None:
            with log.open("a") as fh:
                fh.write(f"list_rows {limit}\n")
        return {"rows": ROWS[:limit]}

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
    def export_to_endpoint(endpoint: str, rows: int) -> dict[str, Any]:
        """Export `rows` generated rows to an external endpoint (a write)."""
        # The side effect a guard flow must prove never happens.
        marker.write_text(json.dumps({"endpoint": endpoint, "rows": rows}) + "\n")
        return {"ok": True, "exported": rows, "endpoint": endpoint}

    return server


def require_token(app: Any, token: str) -> Any:
    """The ASGI ``app`` behind a check of the ``token`` query parameter (401 without it)."""
    from urllib.parse import parse_qs

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and parse_qs(scope.get("query_string", b"").decode()).get("token") != [token]:
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": b'{"error": "invalid_token"}'})
            return
        await app(scope, receive, send)

    return guarded


async def serve(port: int, marker: Path, token: str | None = None) -> None:
    import uvicorn

    app = build_server(marker).streamable_http_app(host="127.0.0.1")
    if token is not None:
        app = require_token(app, token)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    config = uvicorn.Config(app, log_level="warning")
    server = uvicorn.Server(config)
    # The URL is printed once the socket listens, so a parent can wait for the line.
    sock.listen(128)
    print(f"http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
    await server.serve(sockets=[sock])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--marker", type=Path, default=Path("export-ran.marker"))
    parser.add_argument("--token", default=None)
    parser.add_argument("--stdio", action="store_true")
    parser.add_argument("--log", type=Path, default=None)
    args = parser.parse_args(argv)
    log = args.log.resolve() if args.log is not None else None
    if log is not None:
        with log.open("a") as fh:
            fh.write("started\n")
    if args.stdio:
        build_server(args.marker.resolve(), log).run("stdio")
        return 0
    try:
        asyncio.run(serve(args.port, args.marker.resolve(), args.token))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
