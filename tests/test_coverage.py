"""Mock coverage: which tools:/mcp: entries never fired, and strict mocks."""

from __future__ import annotations

from flowproof.coverage import strict_mocks_result, unused_mocks
from flowproof.mcp import McpCall
from flowproof.trajectory import build_trajectory

from .agent_runs import claude_code_run, spec_of

HEAD = """tools:
  - name: Grep
    result: {files: [bookings.txt]}
  - name: Agent
  - name: search_hotels
    result: []
mcp:
  - name: exports
    url: http://127.0.0.1:9/mcp
    tools:
      - name: export
        result: {ok: true}
      - name: archive
"""


def test_unused_mocks() -> None:
    spec = spec_of("", HEAD)
    traj = build_trajectory(claude_code_run(), [McpCall("exports", "archive", "{}", False, after_turns=1)])
    unused = unused_mocks(spec, traj)
    # Grep's result was carried back (substituted), Agent was asked for, archive crossed the boundary.
    assert [(u.name, u.server) for u in unused] == [("search_hotels", None), ("export", "exports")]
    assert unused[0].describe().startswith("search_hotels (tools:, t.flow.yaml:")
    assert unused[0].describe().endswith("no request carried its result")
    assert unused[1].describe().endswith("flowproof never answered a call to it")


def test_strict_mocks_result() -> None:
    spec = spec_of("", HEAD)
    result = strict_mocks_result(spec, build_trajectory(claude_code_run()))
    assert not result.passed and result.step is None
    assert [m.tool for m in result.mismatches] == ["search_hotels", "export", "archive"]
    assert strict_mocks_result(spec_of(""), build_trajectory([])).passed
