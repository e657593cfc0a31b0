"""Guard evidence: what an ``assert_no_tool_call`` step actually proves about a run.

A guard that passes says the tool was not called. How much that means depends
on the recording (docs/mcp.md, "Guard evidence"):

- offered: the tool was in the tool list of at least one recorded model request;
- asked: the model asked for it (an attempt), matching the step's where clauses;
- called: the call crossed the boundary the flow observes for it — a ``tools/call``
  at the MCP boundary for a tool the agent reaches over MCP, else the model's
  request itself (flowproof sees no further than the model boundary for those).

A guard that passes with no attempt shows compliance (the model chose not to
ask), not enforcement (code refused): `GuardEvidence.warning` says so.

Pure: reads a spec and a trajectory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flowproof.assertions import check_clause, describe_assertion
from flowproof.mcp import mcp_tool_of
from flowproof.spec.types import FlowSpec, ToolCallAssertion
from flowproof.trajectory import MCP, MODEL, Trajectory
from flowproof.turns import ToolCall

__all__ = ["COMPLIANCE_WARNING", "GuardEvidence", "guard_evidence"]

COMPLIANCE_WARNING = "this flow shows compliance, not enforcement"


@dataclass(frozen=True, slots=True)
class GuardEvidence:
    """The evidence behind one ``assert_no_tool_call`` step."""

    assertion: str
    tool: str
    boundary: str
    offered: bool
    asked: int
    called: int
    location: str

    @property
    def passed(self) -> bool:
        return self.called == 0

    @property
    def warning(self) -> str | None:
        """Set when the guard passes but the recording holds no attempt to refuse."""
        if not self.passed or self.asked:
            return None
        why = "the model never asked for it" if self.offered else "it was never even offered to the model"
        return (
            f"{COMPLIANCE_WARNING}: assert_no_tool_call {self.assertion} passes, but {why} "
            "in this recording, so nothing was refused — record an adversarial turn where the "
            "model asks for it (docs/mcp.md)"
        )

    def summary(self) -> str:
        """One line: ``export_to_endpoint: offered yes, asked 1, called 0 (mcp boundary)``."""
        return (
            f"{self.assertion}: offered {'yes' if self.offered else 'no'}, asked {self.asked}, "
            f"called {self.called} ({self.boundary} boundary)"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "assertion": self.assertion,
            "tool": self.tool,
            "boundary": self.boundary,
            "offered": self.offered,
            "asked": self.asked,
            "called": self.called,
            "passed": self.passed,
            "warning": self.warning,
            "location": self.location,
        }


def guard_evidence(spec: FlowSpec, trajectory: Trajectory) -> list[GuardEvidence]:
    """The evidence for every ``assert_no_tool_call`` step of ``spec``, in spec order."""
    servers = {server.name for server in spec.mcp}
    offered = {
        mcp_tool_of(name, servers, trajectory.mcp_tools) or name
        for turn in trajectory.turns
        for name in turn.request.tools
    }
    out = []
    for step in spec.steps:
        if not isinstance(step, ToolCallAssertion) or not step.negated:
            continue
        boundary = MCP if step.tool in trajectory.mcp_tools else MODEL
        out.append(
            GuardEvidence(
                assertion=describe_assertion(step),
                tool=step.tool,
                boundary=boundary,
                offered=step.tool in offered,
                asked=_count(step, trajectory.requested),
                called=_count(step, trajectory.tool_calls),
                location=str(step.location),
            )
        )
    return out


def _count(step: ToolCallAssertion, calls: Sequence[ToolCall]) -> int:
    # The same rule as the assertion: a call whose arguments are not JSON cannot be ruled out.
    return sum(
        1
        for call in calls
        if call.name == step.tool
        and (not call.is_json or all(check_clause(c, call).passed for c in step.clauses))
    )
