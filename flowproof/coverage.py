"""Mock coverage: the spec's ``tools:`` and ``mcp:`` entries that never fired in a run.

A mock that never fires is a spec that says less than it seems to: the flow
no longer reaches the tool, or the tool was renamed. An entry *fired* when:

- a ``tools:`` entry with ``result:``: a request carried a result for the tool,
  so flowproof substituted it; without ``result:`` (a declaration): the model
  asked for the tool;
- an ``mcp:`` tool with ``result:``: flowproof answered a ``tools/call`` for it;
  without (a declaration): a ``tools/call`` for it crossed the boundary.

Every report lists the mocks that never fired; ``--strict-mocks`` (or
``strict_mocks: true``) makes them fail the run.

Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flowproof.outcome import AssertionResult, Mismatch
from flowproof.spec.types import FlowSpec, Location
from flowproof.trajectory import BoundaryCall, Trajectory

__all__ = ["UnusedMock", "strict_mocks_result", "unused_mocks"]


@dataclass(frozen=True, slots=True)
class UnusedMock:
    """A spec entry that never fired: its tool, its ``mcp:`` server (None for ``tools:``), and
    whether it has a ``result:``."""

    name: str
    server: str | None
    has_result: bool
    location: Location

    def describe(self) -> str:
        where = f"mcp: {self.server}" if self.server else "tools:"
        if self.server:
            why = "flowproof never answered a call to it" if self.has_result else "no call to it crossed the boundary"
        else:
            why = "no request carried its result" if self.has_result else "the model never asked for it"
        return f"{self.name} ({where}, {self.location}): {why}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "server": self.server, "has_result": self.has_result,
                "location": str(self.location), "text": self.describe()}


def unused_mocks(spec: FlowSpec, trajectory: Trajectory) -> tuple[UnusedMock, ...]:
    """Every ``tools:`` and ``mcp:`` entry of ``spec`` that never fired in ``trajectory``."""
    results = {r.name for t in trajectory.turns for r in t.request.tool_results if r.name}
    asked = {c.name for c in trajectory.requested}
    boundary = [c for c in trajectory.tool_calls if isinstance(c, BoundaryCall)]
    unused: list[UnusedMock] = []
    for tool in spec.tools:
        fired = tool.name in results if tool.has_result else tool.name in asked
        if not fired:
            unused.append(UnusedMock(tool.name, None, tool.has_result, tool.location))
    for server in spec.mcp:
        for tool in server.tools:
            fired = any(c.name == tool.name and (c.answered or not tool.has_result) for c in boundary)
            if not fired:
                unused.append(UnusedMock(tool.name, server.name, tool.has_result, tool.location))
    return tuple(unused)


def strict_mocks_result(spec: FlowSpec, trajectory: Trajectory) -> AssertionResult:
    """The check ``--strict-mocks`` / ``strict_mocks: true`` adds: every mock fired."""
    unused = unused_mocks(spec, trajectory)
    if not unused:
        return AssertionResult(None, True, "strict mocks: every tools: and mcp: mock fired", spec.location)
    lines = ["strict mocks: every tools: and mcp: mock must fire, but these never did:"]
    lines.extend(f"  - {u.describe()}" for u in unused)
    why = tuple(Mismatch("unused mock", expected=u.name, actual=None, tool=u.name) for u in unused)
    return AssertionResult(None, False, "\n".join(lines), spec.location, why)
