"""Tests for flowproof.guard: offered / asked / called evidence for assert_no_tool_call steps."""

from __future__ import annotations

from pathlib import Path

from flowproof.guard import COMPLIANCE_WARNING, guard_evidence
from flowproof.mcp import McpCall
from flowproof.spec import load_spec
from flowproof.trajectory import build_trajectory
from flowproof.turns import FinishReason, RequestView, ResponseView, ToolCall, Turn

SPEC = """\
name: guard
app: agent
agent:
  command: python agent.py
mcp:
  - name: exports
    url: http://127.0.0.1:9/mcp
    tools:
      - name: export_to_endpoint
        result: { ok: false }
steps:
  - prompt: export it
  - assert_no_tool_call: export_to_endpoint
"""


def turn(index: int, tools: tuple[str, ...], *calls: ToolCall) -> Turn:
    request = RequestView("openai-chat", "m", "sys", tools, ("user",), (), False, 10)
    finish = FinishReason.TOOL_CALLS if calls else FinishReason.STOP
    return Turn(index, request, ResponseView("" if calls else "done", calls, finish))


def evidence(tmp_path: Path, turns: list[Turn], mcp_calls: list[McpCall]):
    path = tmp_path / "g.flow.yaml"
    path.write_text(SPEC)
    spec = load_spec(path)
    mcp_tools = {t.name for s in spec.mcp for t in s.tools}
    [ev] = guard_evidence(spec, build_trajectory(turns, mcp_calls, mcp_tools, {s.name for s in spec.mcp}))
    return ev


def test_a_tool_the_agent_names_mcp_server_tool_keeps_its_evidence(tmp_path: Path) -> None:
    """Claude Code and codex offer the tool as mcp__exports__export_to_endpoint, and their own
    permission check refuses it: offered, asked, not called — enforcement, no warning."""
    qualified = "mcp__exports__export_to_endpoint"
    ev = evidence(tmp_path, [turn(0, (qualified,), ToolCall(qualified, "{}")), turn(1, (qualified,))], [])
    assert (ev.offered, ev.asked, ev.called, ev.passed) == (True, 1, 0, True)
    assert ev.warning is None


def test_enforced_guard_has_an_attempt_and_no_warning(tmp_path: Path) -> None:
    """Offered, asked, refused in code: the guard passes and proves enforcement."""
    ev = evidence(tmp_path, [turn(0, ("export_to_endpoint",), ToolCall("export_to_endpoint", "{}")),
                             turn(1, ("export_to_endpoint",))], [])
    assert (ev.offered, ev.asked, ev.called, ev.passed, ev.boundary) == (True, 1, 0, True, "mcp")
    assert ev.warning is None
    assert ev.summary() == "export_to_endpoint: offered yes, asked 1, called 0 (mcp boundary)"


def test_agent_that_called_over_mcp_is_caught(tmp_path: Path) -> None:
    """The agent sent the tools/call (flowproof answered it): called, the guard fails."""
    ev = evidence(tmp_path, [turn(0, ("export_to_endpoint",), ToolCall("export_to_endpoint", "{}")),
                             turn(1, ("export_to_endpoint",))],
                  [McpCall("exports", "export_to_endpoint", "{}", True, 1)])
    assert (ev.asked, ev.called, ev.passed) == (1, 1, False)
    assert ev.warning is None


def test_passing_guard_without_an_attempt_warns(tmp_path: Path) -> None:
    """No attempt in the recording: compliance, not enforcement, said plainly."""
    ev = evidence(tmp_path, [turn(0, ("export_to_endpoint",))], [])
    assert ev.passed and ev.asked == 0
    assert ev.warning is not None and ev.warning.startswith(COMPLIANCE_WARNING)
    assert "never asked" in ev.warning
    unoffered = evidence(tmp_path, [turn(0, ())], [])
    assert unoffered.warning is not None and "never even offered" in unoffered.warning
    assert unoffered.to_json()["offered"] is False


def test_failing_guard_message_names_the_mcp_boundary(tmp_path: Path) -> None:
    """The assertion's message says the offending call crossed the MCP boundary."""
    from flowproof.assertions import evaluate

    path = tmp_path / "g.flow.yaml"
    path.write_text(SPEC)
    spec = load_spec(path)
    trajectory = build_trajectory([turn(0, ("export_to_endpoint",), ToolCall("export_to_endpoint", "{}"))],
                                  [McpCall("exports", "export_to_endpoint", '{"rows": 1}', True, 1)],
                                  {"export_to_endpoint"})
    [result] = evaluate(spec, trajectory)
    assert not result.passed
    assert 'but export_to_endpoint (call 1 of 1, over MCP) was made with {"rows": 1}' in result.message
