"""The ``tools/call`` requests that crossed the MCP boundary, read back from the event log."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["McpCall", "calls_from_events"]


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
