"""The ``tools/call`` requests that crossed the MCP boundary (the run record places them:
`flowproof.run_record`), and the MCP tool a model-side tool name stands for."""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

__all__ = ["McpCall", "mcp_tool_of"]

_NOT_IN_TOOL_NAMES = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True, slots=True)
class McpCall:
    """A ``tools/call`` that crossed the MCP boundary (answered by flowproof or forwarded).

    ``after_turns`` is how many model turns had completed when it crossed: it
    places the call in the trajectory between the model's turns.
    """

    server: str
    name: str
    arguments_raw: str
    answered: bool
    after_turns: int

    def to_json(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "name": self.name,
            "arguments": self.arguments_raw,
            "answered": self.answered,
            "after_turns": self.after_turns,
        }


def mcp_tool_of(name: str, servers: Collection[str], tools: Collection[str]) -> str | None:
    """The MCP tool a model-side tool name stands for, or None when it is none of ``tools``.

    Agents offer an MCP tool to the model under a name of their own: Claude Code and
    codex as ``mcp__<server>__<tool>``, goose as ``<server>__<tool>`` (the server's
    name with any character a tool name may not hold read as ``_``). flowproof names
    the tool by its MCP name at both boundaries, so a guard on ``export`` counts the
    model asking for ``mcp__exports__export`` as the attempt it is.

    >>> mcp_tool_of("mcp__exports__export", ["exports"], ["export"])
    'export'
    >>> mcp_tool_of("mcp__other__export", ["exports"], ["export"]) is None
    True
    """
    if name in tools:
        return name
    for server in servers:
        prefix = _NOT_IN_TOOL_NAMES.sub("_", server) + "__"
        for form in ("mcp__" + prefix, prefix):
            if name.startswith(form) and name[len(form):] in tools:
                return name[len(form):]
    return None
