"""The MCP boundary end to end: the official `mcp` SDK (client and server, Streamable HTTP),
the runner, the proxy and the fake model server, all real processes.

The example MCP server's `export_to_endpoint` writes a marker file if it ever runs:
a declared tool must leave no marker at record, replay or compare.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flowproof.testing import FakeModelServer

from .conftest import Flowproof, InProcessFlowproof, kill_group, upstream_args

SCRIPT = "plan_mode_guard.json"


@pytest.fixture
def flowproof(in_process_flowproof: InProcessFlowproof) -> InProcessFlowproof:
    """What these tests check is the MCP boundary, not the runner's process: each run is the
    command line in this process, on the worker's kept proxies."""
    return in_process_flowproof

#: The plan-mode agent in write mode, asserting that it DID export: the export is answered by flowproof.
WRITE_SPEC = """\
name: write mode exports through flowproof's answer
app: agent
agent:
  command: python plan_agent.py
  env:
    AGENT_MODE: write
mcp:
  - name: exports
    url: ${EXPORT_MCP_URL}
    tools:
      - name: export_to_endpoint
        result: { ok: false }
      - name: list_rows
steps:
  - prompt: Generate 100 rows and export them now.
  - assert_tool_call: list_rows where limit equals 5
  - assert_tool_call: export_to_endpoint where rows equals 100
  - assert: reply contains plan mode
"""


class McpServer:
    """The example MCP server in a subprocess; `marker` exists once its export tool ran."""

    def __init__(self, examples: Path, marker: Path, *options: str) -> None:
        self.marker = marker
        self.process = subprocess.Popen(
            [sys.executable, str(examples / "plan_mode_mcp_server.py"), "--port", "0", "--marker", str(marker),
             *options],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        assert self.url.startswith("http://127.0.0.1:"), self.process.stderr.read() if self.process.stderr else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                kill_group(self.process.pid)
                self.process.wait(timeout=5)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()  # left to the garbage collector, each is a ResourceWarning


@pytest.fixture
def mcp_server(examples: Path, tmp_path: Path) -> Iterator[Callable[[], McpServer]]:
    servers: list[McpServer] = []

    def start(*options: str) -> McpServer:
        server = McpServer(examples, tmp_path / "export-ran.marker", *options)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def run(flowproof: Flowproof, spec: Path, *args: str, **env: str) -> tuple[int, dict[str, Any], str]:
    ran = flowproof.run(spec, "--json", *args, cwd=spec.parent, timeout=90, **env)
    try:
        report = ran.report()["flows"][0]
    except (ValueError, KeyError, IndexError):
        pytest.fail(f"no JSON report (exit {ran.code}):\n{ran.output}")
    return ran.code, report, ran.output


def model(fake_model: Callable[..., FakeModelServer], examples: Path) -> FakeModelServer:
    return fake_model(examples / "fake_model" / SCRIPT)


@pytest.mark.parametrize("client_mode", ["auto", "legacy"])
def test_declared_tool_never_reaches_the_server_at_record_replay_or_compare(
    client_mode: str, examples: Path, flowproof: Flowproof, fake_model: Any, mcp_server: Any
) -> None:
    """The agent calls export_to_endpoint over MCP in every mode; flowproof answers, the server never runs it.

    Both protocol generations of the SDK: `auto` (server/discover, no initialize) and
    `legacy` (initialize handshake, Mcp-Session-Id, SSE answers).
    """
    spec = examples / "write_mode.flow.yaml"
    spec.write_text(WRITE_SPEC, encoding="utf-8")
    server = mcp_server()
    fake = model(fake_model, examples)
    code, flow, output = run(flowproof, spec, "--record", *upstream_args(fake),
                             EXPORT_MCP_URL=server.url, MCP_CLIENT_MODE=client_mode, **_keys())
    assert code == 0, output
    assert flow["tool_calls"] == ["list_rows (mcp)", "export_to_endpoint (mcp)"]
    assert not server.marker.exists()
    # The model was told flowproof's answer, not the server's.
    told = [m for m in fake.requests[2].json["messages"] if m["role"] == "tool"]
    assert json.loads(told[-1]["content"]) == {"ok": False}
    cassette = json.loads((examples / "write_mode.cassette.json").read_text())
    methods = [e["request"]["body"].get("method") for e in cassette["mcp"] if isinstance(e["request"]["body"], dict)]
    assert "tools/call" in methods  # list_rows passed through and was recorded
    assert ("initialize" in methods) == (client_mode == "legacy")
    assert all(e["request"]["body"].get("params", {}).get("name") != "export_to_endpoint"
               for e in cassette["mcp"] if isinstance(e["request"]["body"], dict))

    # Replay with the server stopped and no url set: list_rows comes from the cassette.
    server.stop()
    code, flow, output = run(flowproof, spec, MCP_CLIENT_MODE=client_mode)
    assert code == 0, output
    assert flow["tool_calls"] == ["list_rows (mcp)", "export_to_endpoint (mcp)"]
    assert not server.marker.exists()

    # Compare talks to a live server (a new port) and a live model: still answered here.
    live = mcp_server()
    fake = model(fake_model, examples)
    code, flow, output = run(flowproof, spec, "--compare", *upstream_args(fake),
                             EXPORT_MCP_URL=live.url, MCP_CLIENT_MODE=client_mode, **_keys())
    assert code == 0, output
    assert not live.marker.exists()


def _keys() -> dict[str, str]:
    return {"OPENAI_API_KEY": "sk-e2e-fake-model"}


def test_agent_that_enforces_in_code_passes_the_guard_with_an_attempt(
    examples: Path, flowproof: Flowproof, fake_model: Any, mcp_server: Any
) -> None:
    """The bundled guard flow: the model asked for the export, the agent's code refused it."""
    server = mcp_server()
    code, flow, output = run(flowproof, examples / "plan_mode_guard.flow.yaml", "--record",
                             *upstream_args(model(fake_model, examples)), EXPORT_MCP_URL=server.url, **_keys())
    assert code == 0, output
    [guard] = flow["guards"]
    assert (guard["offered"], guard["asked"], guard["called"], guard["boundary"]) == (True, 1, 0, "mcp")
    assert flow["warnings"] == []
    assert not server.marker.exists()


def test_agent_that_only_prompts_is_caught(
    examples: Path, flowproof: Flowproof, fake_model: Any, mcp_server: Any
) -> None:
    """Prompt-only plan mode: the agent sends the tools/call; flowproof answers it, and the guard fails."""
    cassette = examples / "plan_mode_guard.cassette.json"
    before = cassette.read_bytes()
    server = mcp_server()
    code, flow, output = run(flowproof, examples / "plan_mode_guard.flow.yaml", "--record",
                             *upstream_args(model(fake_model, examples)), EXPORT_MCP_URL=server.url,
                             AGENT_ENFORCEMENT="prompt", **_keys())
    assert code == 1, output
    failed = [s for s in flow["steps"] if not s["passed"]]
    assert [s["source"] for s in failed] == ["no call to export_to_endpoint"]
    assert "but export_to_endpoint (call 2 of 2, over MCP) was made" in failed[0]["message"]
    assert flow["guards"][0]["called"] == 1
    assert not server.marker.exists()  # answered by flowproof even though the guard failed
    assert cassette.read_bytes() == before


def test_guard_without_an_attempt_warns_in_every_report(
    examples: Path, flowproof: Flowproof, fake_model: Any, mcp_server: Any, tmp_path: Path
) -> None:
    """A model that never asks: the guard passes, and the reports say it shows compliance only."""
    from flowproof.testing import Reply

    server = mcp_server()
    fake = fake_model([Reply.text("Plan mode is read-only, so I will not export.")])
    spec = examples / "plan_mode_guard.flow.yaml"
    junit = tmp_path / "junit.xml"
    code, flow, output = run(flowproof, spec, "--record", "--junit", str(junit), *upstream_args(fake),
                             EXPORT_MCP_URL=server.url, **_keys())
    assert code == 1, output  # assert_tool_call: list_rows fails: the model never listed rows
    assert flow["guards"][0]["asked"] == 0
    [warning] = flow["warnings"]
    assert warning.startswith("this flow shows compliance, not enforcement")
    assert "flowproof.warning" in junit.read_text()
    text = flowproof.run(spec, "--record", *upstream_args(fake_model([Reply.text("no")])), cwd=spec.parent,
                         EXPORT_MCP_URL=server.url, **_keys())
    assert "warning: this flow shows compliance, not enforcement" in text.stdout


def test_unreachable_mcp_server_at_record_names_the_entry(examples: Path, flowproof: Flowproof) -> None:
    ran = flowproof.run(examples / "plan_mode_guard.flow.yaml", "--record", cwd=examples,
                        EXPORT_MCP_URL="http://127.0.0.1:9/mcp", **_keys())
    assert ran.code != 0
    assert "the mcp server `exports` at http://127.0.0.1:9/mcp (from ${EXPORT_MCP_URL}) is not reachable" in ran.output
    assert "Traceback" not in ran.output


TOKEN = "tok-e2e-s3cret"

#: An agent that carries on when its MCP server refuses it, as Claude Code does with a server
#: that fails to connect: the model is asked anyway, and the agent exits 0.
TOLERANT_AGENT = """\
import asyncio, os, sys
import openai
from mcp import Client

async def main() -> None:
    try:
        async with Client(os.environ["EXPORT_MCP_URL"]) as mcp:
            tools = [t.name for t in (await mcp.list_tools()).tools]
    except Exception as e:  # noqa: BLE001
        tools = []
        print(f"MCP server unavailable: {type(e).__name__}", file=sys.stderr)
    reply = await openai.AsyncOpenAI().chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": f"{sys.argv[1]} tools: {tools}"}])
    print(reply.choices[0].message.content)

asyncio.run(main())
"""

TOLERANT_SPEC = """\
name: an agent that lists its MCP tools
agent:
  command: python tolerant_agent.py {prompt}
mcp:
  - name: exports
    url: ${EXPORT_MCP_URL}
    tools:
      - name: list_rows
steps:
  - prompt: List your tools.
  - assert: reply contains tools
"""


def test_a_query_string_token_reaches_the_server_and_nothing_else(
    examples: Path, flowproof: Flowproof, fake_model: Any, mcp_server: Any
) -> None:
    """A server that authenticates by `?token=`: the agent's requests carry it through the proxy,
    so the record works; neither the cassette nor any report holds the token (issue 19 item 8)."""
    server = mcp_server("--token", TOKEN)
    spec = examples / "write_mode.flow.yaml"
    spec.write_text(WRITE_SPEC, encoding="utf-8")
    code, flow, output = run(flowproof, spec, "--record", *upstream_args(model(fake_model, examples)),
                             EXPORT_MCP_URL=f"{server.url}?token={TOKEN}", **_keys())
    assert code == 0, output
    assert flow["tool_calls"] == ["list_rows (mcp)", "export_to_endpoint (mcp)"]
    cassette = (examples / "write_mode.cassette.json").read_text(encoding="utf-8")
    assert {e["response"]["status"] for e in json.loads(cassette)["mcp"]} <= {200, 202}
    assert TOKEN not in cassette and TOKEN not in output and TOKEN not in json.dumps(flow)
    assert not server.marker.exists()


def test_a_record_the_mcp_server_refused_entirely_is_not_kept(
    examples: Path, flowproof: Flowproof, fake_model: Any, mcp_server: Any
) -> None:
    """The wrong token: every MCP request gets a 401, the agent carries on, the model answers.
    The record fails naming the server instead of pinning the 401s; the old cassette stays."""
    from flowproof.testing import Reply

    (examples / "tolerant_agent.py").write_text(TOLERANT_AGENT, encoding="utf-8")
    spec = examples / "tolerant.flow.yaml"
    spec.write_text(TOLERANT_SPEC, encoding="utf-8")
    cassette = examples / "tolerant.cassette.json"
    before = (examples / "plan_mode_guard.cassette.json").read_bytes()  # an old recording, kept as it is
    cassette.write_bytes(before)
    server = mcp_server("--token", TOKEN)
    fake = fake_model([Reply.text("I have no tools.")])
    code, flow, output = run(flowproof, spec, "--record", *upstream_args(fake),
                             EXPORT_MCP_URL=f"{server.url}?token=wrong", **_keys())
    assert code == 5, output
    assert "mcp server `exports` refused every request of the recording" in flow["error"]
    assert "HTTP 401" in flow["error"]
    assert "MCP server unavailable" in flow["agent"]["stderr"]  # the agent did carry on
    assert cassette.read_bytes() == before
