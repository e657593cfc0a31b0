"""Hand the agent flowproof's stdio stand-ins (docs/mcp.md, "MCP over stdio").

An ``mcp:`` entry with a ``command:`` is a server the agent launches itself, so
there is no address to redirect: the agent's MCP config must launch flowproof's
stand-in (`flowproof.runner.mcp_standin`) instead. Per flow the runner writes,
into the flow's private scratch folder:

- one launcher per entry, an executable that takes no arguments (any it is given
  go on to the real server), named by ``$FLOWPROOF_MCP_<NAME>`` in the agent's
  environment (`flowproof.mcp.stdio.standin_variable`);
- ``$FLOWPROOF_MCP_CONFIG``, an MCP config naming every launcher in the
  ``{"mcpServers": {NAME: {"command": …, "args": []}}}`` shape that Claude Code's
  ``--mcp-config`` (and most MCP clients) read;
- a session file per entry, read by its launcher: the proxy to relay to and, at
  record and compare, the real server's command. Replay starts no server.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

from flowproof.errors import FlowproofError
from flowproof.mcp.stdio import STANDIN_HOST, standin_variable
from flowproof.options import Mode
from flowproof.spec.types import FlowSpec

__all__ = ["CONFIG_VARIABLE", "STANDIN_SCRIPT", "check_agent", "write_standins"]

#: The variable naming the MCP config that lists every stand-in of the flow.
CONFIG_VARIABLE = "FLOWPROOF_MCP_CONFIG"
#: The stand-in, run as a script: it needs nothing but the standard library.
STANDIN_SCRIPT = Path(__file__).resolve().with_name("mcp_standin.py")


def _private(path: Path, text: str, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def check_agent(spec: FlowSpec) -> None:
    """A stdio entry needs an agent flowproof starts: a ``url:`` agent was given its MCP config
    before the run, so it cannot name this run's stand-in."""
    server = next((s for s in spec.mcp if s.command is not None), None)
    if server is not None and spec.agent.url:
        raise FlowproofError(
            f"{server.location}: mcp server `{server.name}` is a stdio server (`command:`), which "
            "needs an agent flowproof starts (`agent.command`): a running `url:` agent cannot be "
            "handed this run's stand-in — start the agent from the spec, or give the server a `url:`"
        )


def write_standins(spec: FlowSpec, folder: Path, proxy_url: str, mode: Mode) -> dict[str, str]:
    """Write the stand-ins of ``spec``'s stdio entries (resolved) into ``folder``; return the
    variables the agent's environment gets (none when the spec has no stdio entry)."""
    servers = [s for s in spec.mcp if s.command is not None]
    if not servers:
        return {}
    folder.mkdir(mode=0o700, exist_ok=True)
    variables: dict[str, str] = {}
    config: dict[str, dict[str, object]] = {}
    for number, server in enumerate(servers):
        assert server.command is not None
        session: dict[str, object] = {"server": server.name, "proxy": proxy_url, "relay_host": STANDIN_HOST}
        if mode is not Mode.REPLAY:
            session["command"] = shlex.split(server.command)
        session_file = folder / f"session-{number}.json"
        _private(session_file, json.dumps(session), 0o600)
        launcher = folder / f"mcp-server-{number}"
        _private(launcher, "#!/bin/sh\n" + " ".join([
            "exec", shlex.quote(sys.executable), "-I", shlex.quote(str(STANDIN_SCRIPT)),
            shlex.quote(str(session_file)), '"$@"',
        ]) + "\n", 0o700)
        variables[standin_variable(server.name)] = str(launcher)
        config[server.name] = {"command": str(launcher), "args": []}
    config_file = folder / "mcp-config.json"
    _private(config_file, json.dumps({"mcpServers": config}, indent=2) + "\n", 0o600)
    variables[CONFIG_VARIABLE] = str(config_file)
    return variables
