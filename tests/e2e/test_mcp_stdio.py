"""MCP over stdio end to end: the plan-mode agent launches its MCP server from an MCP config, as
real agents do, and flowproof's stand-in stands in for it — the official `mcp` SDK on both
sides (its stdio client in the agent, its stdio server), the runner, the proxy, the fake model.

The server writes a marker file if its export tool ever runs, and a log line when it starts and
each time list_rows runs: the declared export never runs, list_rows runs at record (forwarded)
and is replayed with no server process at all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flowproof.testing import FakeModelServer

from .conftest import Flowproof, InProcessFlowproof, upstream_args


@pytest.fixture
def flowproof(in_process_flowproof: InProcessFlowproof) -> InProcessFlowproof:
    """These tests are about what a flow does, not the runner's process: each run is the
    command line in this process, on the worker's kept proxies (tests/e2e/conftest.py)."""
    return in_process_flowproof


SPEC = """\
name: write mode over stdio
agent:
  command: python plan_agent.py --mcp-config "$FLOWPROOF_MCP_CONFIG"
  env:
    AGENT_MODE: {agent_mode}
mcp:
  - name: exports
    command: python plan_mode_mcp_server.py --stdio --marker export-ran.marker --log server.log
    tools:
      - name: export_to_endpoint
        result: {{ ok: false }}
      - name: list_rows
steps:
  - prompt: Generate 100 rows and export them now.
  - assert_tool_call: list_rows where limit equals 5
  - {export_step}
  - assert: reply contains plan mode
"""


def write_spec(examples: Path, agent_mode: str = "write") -> Path:
    export = ("assert_tool_call: export_to_endpoint where rows equals 100" if agent_mode == "write"
              else "assert_no_tool_call: export_to_endpoint")
    spec = examples / f"stdio_{agent_mode}.flow.yaml"
    spec.write_text(SPEC.format(agent_mode=agent_mode, export_step=export), encoding="utf-8")
    return spec


def run(flowproof: Flowproof, spec: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    ran = flowproof.run(spec, "--json", *args, cwd=spec.parent, timeout=120, OPENAI_API_KEY="sk-e2e-fake-model")
    try:
        return ran.code, ran.report()["flows"][0], ran.output
    except (ValueError, KeyError, IndexError):
        pytest.fail(f"no JSON report (exit {ran.code}):\n{ran.output}")


def model(fake_model: Any, examples: Path) -> FakeModelServer:
    server: FakeModelServer = fake_model(examples / "fake_model" / "plan_mode_guard.json")
    return server


def log_lines(examples: Path) -> list[str]:
    log = examples / "server.log"
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


@pytest.mark.parametrize("client_mode", ["auto", "legacy"])
def test_declared_tool_never_runs_and_a_forwarded_one_replays_without_the_server(
    client_mode: str, examples: Path, flowproof: Flowproof, fake_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Record, replay, compare, for both protocol generations of the SDK's stdio client."""
    monkeypatch.setenv("MCP_CLIENT_MODE", client_mode)
    spec = write_spec(examples)
    marker = examples / "export-ran.marker"
    fake = model(fake_model, examples)
    code, flow, output = run(flowproof, spec, "--record", *upstream_args(fake))
    assert code == 0, output
    assert flow["tool_calls"] == ["list_rows (mcp)", "export_to_endpoint (mcp)"]
    assert not marker.exists()
    assert log_lines(examples) == ["started", "list_rows 5"]  # the forwarded tool ran for real
    # The model was told flowproof's answer to the export, and the server's rows for list_rows.
    told = [m for m in fake.requests[2].json["messages"] if m["role"] == "tool"]
    assert json.loads(told[0]["content"])["rows"][0] == {"id": 1, "region": "EU", "amount": 10}
    assert json.loads(told[1]["content"]) == {"ok": False}
    cassette = json.loads((examples / "stdio_write.cassette.json").read_text(encoding="utf-8"))
    [session] = cassette["mcp_stdio"]
    sent = [m["message"].get("method") for m in session["messages"] if m["from"] == "client"]
    if client_mode == "legacy":
        assert sent[:2] == ["initialize", "notifications/initialized"]  # notifications are kept
    assert "tools/call" in sent and "tools/list" in sent
    names = [m["message"]["params"]["name"] for m in session["messages"]
             if m["from"] == "client" and m["message"].get("method") == "tools/call"]
    assert names == ["list_rows"]  # the declared export never reached the server

    # Replay: no server process (its log stays as it was), list_rows served from the cassette.
    before = (examples / "stdio_write.cassette.json").read_bytes()
    code, flow, output = run(flowproof, spec)
    assert code == 0, output
    assert flow["tool_calls"] == ["list_rows (mcp)", "export_to_endpoint (mcp)"]
    assert log_lines(examples) == ["started", "list_rows 5"]
    assert (examples / "stdio_write.cassette.json").read_bytes() == before
    assert not marker.exists()

    # Compare talks to a live server again; the export is still answered here.
    code, flow, output = run(flowproof, spec, "--compare", *upstream_args(model(fake_model, examples)))
    assert code == 0, output
    assert log_lines(examples) == ["started", "list_rows 5", "started", "list_rows 5"]
    assert not marker.exists()


def test_the_guard_evidence_of_a_stdio_tool(examples: Path, flowproof: Flowproof, fake_model: Any) -> None:
    """Plan mode over stdio: the model asked for the export, the agent's code refused; asked 1, called 0."""
    spec = write_spec(examples, "plan")
    code, flow, output = run(flowproof, spec, "--record", *upstream_args(model(fake_model, examples)))
    assert code == 0, output
    [guard] = flow["guards"]
    assert (guard["offered"], guard["asked"], guard["called"], guard["boundary"]) == (True, 1, 0, "mcp")
    code, flow, output = run(flowproof, spec)
    assert code == 0, output
    assert flow["guards"][0]["called"] == 0


def test_a_replay_whose_mcp_traffic_changed_diverges(examples: Path, flowproof: Flowproof, fake_model: Any) -> None:
    """A recorded list_rows the agent no longer sends the same way is a divergence (exit 3)."""
    spec = write_spec(examples)
    code, _flow, output = run(flowproof, spec, "--record", *upstream_args(model(fake_model, examples)))
    assert code == 0, output
    cassette = examples / "stdio_write.cassette.json"
    doc = json.loads(cassette.read_text(encoding="utf-8"))
    for item in doc["mcp_stdio"][0]["messages"]:
        if item["from"] == "client" and item["message"].get("method") == "tools/call":
            item["message"]["params"]["arguments"]["limit"] = 50
    cassette.write_text(json.dumps(doc), encoding="utf-8")
    code, flow, output = run(flowproof, spec)
    assert code == 3, output
    assert any("stdio server `exports` (tools/call list_rows) matches no recorded one" in d
               for d in flow["divergences"]), flow["divergences"]


def test_a_server_command_that_cannot_start_is_named(examples: Path, flowproof: Flowproof, fake_model: Any) -> None:
    spec = write_spec(examples)
    spec.write_text(spec.read_text().replace("python plan_mode_mcp_server.py", "./no-such-mcp-server"))
    cassette = examples / "stdio_write.cassette.json"
    code, flow, output = run(flowproof, spec, "--record", *upstream_args(model(fake_model, examples)))
    assert code == 5, output
    assert "the stdio MCP server `exports`: could not start `./no-such-mcp-server`" in output
    assert not cassette.exists()


def test_two_stdio_flows_on_one_warm_proxy(examples: Path, flowproof: Flowproof, fake_model: Any) -> None:
    """Each stand-in reaches its own flow's session on the shared proxy: two flows replayed at once."""
    spec = write_spec(examples)
    code, _flow, output = run(flowproof, spec, "--record", *upstream_args(model(fake_model, examples)))
    assert code == 0, output
    twin = examples / "stdio_twin.flow.yaml"
    twin.write_text(spec.read_text().replace("name: write mode over stdio", "name: its twin"), encoding="utf-8")
    (examples / "stdio_twin.cassette.json").write_bytes((examples / "stdio_write.cassette.json").read_bytes())
    ran = flowproof.run(spec, twin, "--json", "-j", "2", cwd=examples, timeout=120)
    assert ran.code == 0, ran.failure
    flows = ran.report()["flows"]
    assert [f["tool_calls"] for f in flows] == [["list_rows (mcp)", "export_to_endpoint (mcp)"]] * 2
    assert log_lines(examples) == ["started", "list_rows 5"]
