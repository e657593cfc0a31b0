"""The ``tools/call`` requests that crossed the MCP boundary, read back from the event log."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["McpCall", "calls_from_events", "mcp_tool_of"]

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


def calls_from_events(events: Sequence[Mapping[str, Any]]) -> list[McpCall]:
    """The `McpCall` of every ``mcp_call`` event of an event log, placed by the ``turn`` events before it."""
    out: list[McpCall] = []
    turns = 0
    for event in events:
        kind = event.get("event")
        if kind == "turn":
            turn = event.get("turn")
            # An abandoned call is no model turn of the trajectory (docs/cassette.md).
            if not (isinstance(turn, dict) and turn.get("abandoned")):
                turns += 1
        elif kind == "mcp_call" and isinstance(event.get("name"), str):
            out.append(
                McpCall(
                    server=str(event.get("server", "")),
                    name=event["name"],
                    arguments_raw=str(event.get("arguments", "{}")),
                    answered=bool(event.get("answered")),
                    after_turns=turns,
                )
            )
    return out


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
