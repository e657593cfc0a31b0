"""The real coding agents, Claude Code and codex, recorded and replayed through flowproof.

Both come from npm at the versions pinned in tests/e2e/real_agents/package.json
(./dev installs them; the fixture below does too) and run offline: every model
call goes to the scripted fake model server through ``--upstream``, and the
agents' side traffic goes to a fake server too (answered 404) so that no request
ever leaves the machine. The agents' real tools run: Claude Code's Bash tool and
codex's shell both execute ``echo``.

Each flow gets a fresh HOME and is replayed from another directory than the one
it was recorded in, so the volatile presets (docs/volatile.md) and portable paths
are what makes the replay match. docs/agents.md explains every setting used here.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from flowproof.testing import FakeModelServer, Reply

from .conftest import FLOWPROOF_RUN, Flowproof, Ran, fingerprint, write_spec

pytestmark = [pytest.mark.real_agent, pytest.mark.timeout(600)]

REAL_AGENTS = Path(__file__).resolve().parent / "real_agents"
NODE_BIN = REAL_AGENTS / "node_modules" / ".bin"
#: The pinned versions; a run of another version is a different agent (other request shapes).
VERSIONS = {"claude": "2.1.197 (Claude Code)", "codex": "codex-cli 0.171.0"}
#: Hosts codex talks to besides the model API (model list, plugins, telemetry). Mapped to a
#: fake server so a run never reaches them, answers fast (404 is not retried) and stays offline.
CODEX_SIDE_HOSTS = ("chatgpt.com", "ab.chatgpt.com", "api.github.com", "github.com")
#: Seconds one flowproof-run may take; record and replay take 3-15 s on a loaded 2-CPU box.
RUN_TIMEOUT = 240.0

TOOL_MARKER = "flowproof-tool-ran"
TITLE_SYSTEM = "Generate a concise, sentence-case title"


@pytest.fixture(scope="session")
def real_agents() -> dict[str, Path]:
    """The claude and codex executables from tests/e2e/real_agents, installed if missing."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        message = "node and npm are not installed on this machine: the real-agent tests need them"
        if os.environ.get("CI") or os.environ.get("FLOWPROOF_REQUIRE_NODE") == "1":
            pytest.fail(message)  # CI machines have Node: a skip there would hide a broken setup
        pytest.skip(message)
    executables = {name: NODE_BIN / name for name in VERSIONS}
    if not all(path.exists() for path in executables.values()):
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--no-package-lock", "--silent"],
            cwd=REAL_AGENTS, capture_output=True, timeout=600, check=False,
        )
        assert done.returncode == 0, f"npm install failed:\n{done.stdout.decode()}{done.stderr.decode()}"
    for name, path in executables.items():
        version = subprocess.run(
            [str(path), "--version"], capture_output=True, timeout=60, check=False,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
        assert version.stdout.decode().strip() == VERSIONS[name], (
            f"{path} is not the pinned version: {version.stdout.decode()}{version.stderr.decode()}"
        )
    return executables


@pytest.fixture
def fake_servers() -> Iterator[list[FakeModelServer]]:
    """Fake servers started by a test; every one is stopped after it."""
    servers: list[FakeModelServer] = []
    yield servers
    for server in servers:
        server.stop()


def start(servers: list[FakeModelServer], replies: Sequence[Reply] = ()) -> FakeModelServer:
    server = FakeModelServer(list(replies))
    server.start()
    servers.append(server)
    return server


@dataclass
class Place:
    """Where one run happens: a fresh HOME and a project folder holding the spec."""

    home: Path
    project: Path

    @classmethod
    def fresh(cls, root: Path, *project: str) -> Place:
        home = root / "home"
        folder = root.joinpath(*project)
        home.mkdir(parents=True)
        folder.mkdir(parents=True)
        return cls(home, folder)


def run(flowproof: Flowproof, place: Place, spec: Path, *args: str, keys: bool = False, **env: str) -> Ran:
    """flowproof-run from ``place.project`` with ``place.home`` as HOME (agent and proxy alike)."""
    return flowproof.run(
        spec.name, *args, cwd=place.project, keys=keys, timeout=RUN_TIMEOUT, HOME=str(place.home), **env
    )


def copy_flow(spec: Path, to: Path) -> Path:
    """The spec and its cassette copied into ``to``; returns the copied spec."""
    cassette = spec.with_name(spec.name.replace(".flow.yaml", ".cassette.json"))
    shutil.copy(spec, to)
    shutil.copy(cassette, to)
    return to / spec.name


def cassette_of(spec: Path) -> Path:
    return spec.with_name(spec.name.replace(".flow.yaml", ".cassette.json"))


def body_text(turn: dict[str, Any]) -> str:
    return json.dumps(turn["request"]["body"], ensure_ascii=False)


# --- Claude Code ----------------------------------------------------------------------------

CLAUDE_APPENDED = "Answer in plain English and quote the command output."
CLAUDE_REPLY = f"The command printed {TOOL_MARKER}."


def claude_spec(folder: Path, claude: Path, appended: str = CLAUDE_APPENDED) -> Path:
    command = " ".join([
        shlex.quote(str(claude)), "-p", "{prompt}",
        "--allowedTools", shlex.quote("Bash(echo:*)"),
        "--append-system-prompt", shlex.quote(appended),
    ])
    return write_spec(folder / "claude.flow.yaml", "\n".join([
        "name: Claude Code runs echo through its Bash tool",
        "agent:",
        f"  command: {json.dumps(command)}",
        # Not CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1: it also drops the title call this
        # flow checks (docs/agents.md).
        "  timeout: 180",
        "volatile:",
        "  - claude-code",
        "steps:",
        f"  - prompt: Run echo {TOOL_MARKER} via Bash please.",
        f"  - assert_tool_call: Bash where command equals echo {TOOL_MARKER}",
        f"  - assert: reply contains {TOOL_MARKER}",
    ]) + "\n")


def claude_script() -> tuple[list[Reply], dict[str, list[Reply]]]:
    """The main loop (a Bash call, then the answer) and the session-title lane."""
    main = [
        Reply.tool_call("Bash", {"command": f"echo {TOOL_MARKER}", "description": "Print the marker"}),
        Reply.text(CLAUDE_REPLY),
    ]
    return main, {TITLE_SYSTEM: [Reply.text('{"title": "Run echo via Bash"}')]}


@dataclass(frozen=True)
class Recorded:
    spec: Path
    cassette: bytes


@pytest.fixture(scope="module")
def claude_recording(
    real_agents: dict[str, Path], flowproof: Flowproof, tmp_path_factory: pytest.TempPathFactory
) -> Recorded:
    """Claude Code recorded once against the fake model, in its own folder with a fresh HOME."""
    place = Place.fresh(tmp_path_factory.mktemp("claude-record"), "work", "project")
    spec = claude_spec(place.project, real_agents["claude"])
    main, lanes = claude_script()
    server = FakeModelServer(main, lanes=lanes)
    with server:
        recorded = run(
            flowproof, place, spec, "--record", "--upstream", f"api.anthropic.com={server.url}",
            keys=True,
        )
        assert recorded.code == 0, recorded.output
        # The title call and the two main turns; the title lane was used by the title call.
        assert len(server.model_requests) == 3, [r.path for r in server.requests]
        assert server.remaining == 0
    return Recorded(spec, cassette_of(spec).read_bytes())


class TestClaudeCode:
    def test_record_holds_the_tool_run_and_no_per_run_value(self, claude_recording: Recorded) -> None:
        """The recording has the title call and both main turns; the real Bash output; only declared holes."""
        cassette = json.loads(claude_recording.cassette)
        turns = cassette["turns"]
        assert cassette["route"] == "proxy"
        titles = [t for t in turns if TITLE_SYSTEM in body_text(t)]
        assert len(titles) == 1 and titles[0]["request"]["body"]["model"].startswith("claude-haiku")
        # The second main turn carries what the real Bash tool printed.
        last = turns[-1]["request"]["body"]["messages"][-1]["content"][0]
        assert (last["type"], last["content"]) == ("tool_result", TOOL_MARKER)
        text = claude_recording.cassette.decode()
        for hole in ("user_id", "cch", "project_dir", "current_date"):
            assert f"«volatile:{hole}»" in text, hole
        assert "«home»/.claude/projects/«volatile:project_dir»/memory/" in text
        assert str(claude_recording.spec.parent) not in text
        assert "device_id" not in text and "sk-ant-e2e-fake-model" not in text
        assert CLAUDE_APPENDED in text

    def test_replays_twice_with_a_fresh_home_from_another_directory(
        self, claude_recording: Recorded, flowproof: Flowproof, tmp_path: Path
    ) -> None:
        """Two replays, each with a new HOME and from a folder the recording never saw, pass offline."""
        for attempt in ("first", "second"):
            place = Place.fresh(tmp_path / attempt, "elsewhere", attempt, "checkout")
            spec = copy_flow(claude_recording.spec, place.project)
            replayed = run(flowproof, place, spec, "--json")
            assert replayed.code == 0, replayed.output
            flow = replayed.report()["flows"][0]
            assert (flow["turns"], flow["tool_calls"], flow["reply"]) == (3, ["Bash"], CLAUDE_REPLY)
            # The agent really ran echo again: its tool output went into the replayed request.
            assert cassette_of(spec).read_bytes() == claude_recording.cassette

    @pytest.mark.parametrize("title_position", ["first", "last"])
    def test_the_concurrent_title_call_matches_in_either_order(
        self, claude_recording: Recorded, flowproof: Flowproof, tmp_path: Path, title_position: str
    ) -> None:
        """The title call runs beside the main loop; replay matches it wherever the cassette has it."""
        place = Place.fresh(tmp_path, "project")
        spec = copy_flow(claude_recording.spec, place.project)
        document = json.loads(claude_recording.cassette)
        titles = [t for t in document["turns"] if TITLE_SYSTEM in body_text(t)]
        main = [t for t in document["turns"] if TITLE_SYSTEM not in body_text(t)]
        ordered = titles + main if title_position == "first" else main + titles
        for position, turn in enumerate(ordered):
            turn["index"] = position
        document["turns"] = ordered
        cassette_of(spec).write_text(json.dumps(document, ensure_ascii=False, indent=2), encoding="utf-8")

        replayed = run(flowproof, place, spec, "--json")
        assert replayed.code == 0, replayed.output
        flow = replayed.report()["flows"][0]
        assert (flow["turns"], flow["reply"]) == (3, CLAUDE_REPLY)
        assert not flow["missing"] and not flow["divergences"]

    def test_a_title_call_still_in_flight_at_exit_does_not_fail_the_record(
        self, real_agents: dict[str, Path], flowproof: Flowproof, tmp_path: Path
    ) -> None:
        """The title answer takes 5 s, the main loop far less: the agent exits with it in flight."""
        place = Place.fresh(tmp_path / "record", "project")
        spec = claude_spec(place.project, real_agents["claude"])
        main, _ = claude_script()
        slow_title = {TITLE_SYSTEM: [Reply.text('{"title": "Run echo via Bash"}', first_chunk_delay=5.0)]}
        with FakeModelServer(main, lanes=slow_title) as server:
            recorded = run(
                flowproof, place, spec, "--record", "--upstream", f"api.anthropic.com={server.url}",
                keys=True,
            )
        assert recorded.code == 0, recorded.output
        turns = json.loads(cassette_of(spec).read_text(encoding="utf-8"))["turns"]
        # The title call is kept as what it was: abandoned, with what reached Claude Code.
        assert [t.get("abandoned", False) for t in turns if TITLE_SYSTEM in body_text(t)] == [True]
        assert not any(t.get("abandoned") for t in turns if TITLE_SYSTEM not in body_text(t))
        replay_place = Place.fresh(tmp_path / "replay", "project")
        replayed = run(flowproof, replay_place, copy_flow(spec, replay_place.project), "--json")
        assert replayed.code == 0, replayed.output
        assert replayed.report()["flows"][0]["reply"] == CLAUDE_REPLY

    def test_one_word_of_the_appended_system_prompt_edited_diverges(
        self, claude_recording: Recorded, flowproof: Flowproof, tmp_path: Path
    ) -> None:
        """--append-system-prompt 'plain' -> 'simple': exit 3, the report names both words, nothing written."""
        place = Place.fresh(tmp_path, "project")
        spec = copy_flow(claude_recording.spec, place.project)
        spec.write_text(spec.read_text().replace("in plain English", "in simple English"))
        before = fingerprint(cassette_of(spec))

        replayed = run(flowproof, place, spec)
        assert replayed.code == 3, replayed.output
        assert "replay divergence" in replayed.output
        changed = [line for line in replayed.output.splitlines() if "recorded" in line and "replayed" in line]
        assert any("plain" in line and "simple" in line for line in changed), replayed.output
        assert fingerprint(cassette_of(spec)) == before


# --- Claude Code with a sub-agent ----------------------------------------------------------

FINDER_AGENT = """\
---
name: finder
description: Finds booking codes in the repository.
tools: Grep, Glob, Read
---
You are the finder. Search the repository for what you are asked and report it in one sentence.
"""
SPAWN_PROMPT = "Search the repository for the booking code (it starts with KQ) and report it."
FINDER_ANSWER = "Found KQ311 in data/bookings.txt."
PARENT_ANSWER = "The booking code is KQ311."


def finder_project(folder: Path, claude: Path) -> Path:
    """A project with a custom sub-agent (.claude/agents/finder.md), a data file it finds, and a
    flow that asserts the sub-agent ran, what it did and what it answered."""
    (folder / ".claude" / "agents").mkdir(parents=True)
    (folder / ".claude" / "agents" / "finder.md").write_text(FINDER_AGENT)
    (folder / "data").mkdir()
    (folder / "data" / "bookings.txt").write_text("KQ311 Nairobi\n")
    command = " ".join([shlex.quote(str(claude)), "-p", "{prompt}", "--allowedTools", shlex.quote("Bash(echo:*)")])
    return write_spec(folder / "finder.flow.yaml", "\n".join([
        "name: Claude Code hands the search to its finder sub-agent",
        "agent:",
        f"  command: {json.dumps(command)}",
        "  timeout: 180",
        "volatile:",
        "  - claude-code",
        "steps:",
        "  - prompt: Find the booking code in the repo and tell me.",
        "  - assert_subagent: finder",
        "  - in: subagent finder",
        "    steps:",
        "      - assert_tool_call: Grep where pattern contains KQ",
        "      - assert: reply contains KQ311",
        "  - assert: reply contains KQ311",
    ]) + "\n")


def finder_script() -> tuple[list[Reply], dict[str, list[Reply]]]:
    """The parent spawns finder through the Agent tool and then answers; finder's own calls are
    a lane of their own (its system prompt), and so is the session title."""
    main = [
        Reply.tool_call("Agent", {"description": "Find the booking code", "prompt": SPAWN_PROMPT,
                                  "subagent_type": "finder"}),
        Reply.text(PARENT_ANSWER),
    ]
    lanes = {
        TITLE_SYSTEM: [Reply.text('{"title": "Find the booking code"}')],
        "You are the finder": [Reply.tool_call("Grep", {"pattern": "KQ", "path": "data"}), Reply.text(FINDER_ANSWER)],
    }
    return main, lanes


def copy_project(spec: Path, to: Path) -> Path:
    """The whole project (the sub-agent's definition and its data too) copied into ``to``."""
    shutil.copytree(spec.parent, to, dirs_exist_ok=True)
    return to / spec.name


@pytest.fixture(scope="module")
def finder_recording(
    real_agents: dict[str, Path], flowproof: Flowproof, tmp_path_factory: pytest.TempPathFactory
) -> Recorded:
    place = Place.fresh(tmp_path_factory.mktemp("finder-record"), "work", "project")
    spec = finder_project(place.project, real_agents["claude"])
    main, lanes = finder_script()
    with FakeModelServer(main, lanes=lanes) as server:
        recorded = run(flowproof, place, spec, "--record", "--json", "--upstream",
                       f"api.anthropic.com={server.url}", keys=True)
        assert recorded.code == 0, recorded.output
        # The title, the parent's two turns and the sub-agent's two: every scripted reply was used.
        assert server.remaining == 0 and len(server.model_requests) == 5
    return Recorded(spec, cassette_of(spec).read_bytes())


class TestClaudeCodeSubagent:
    def test_the_recording_links_the_sub_agent_three_ways(self, finder_recording: Recorded) -> None:
        """Spawn (the Agent call), thread (its first user message ends with the spawn prompt), result."""
        turns = json.loads(finder_recording.cassette)["turns"]
        children = [t for t in turns if "You are the finder" in body_text(t)]
        assert len(children) == 2
        first = children[0]["request"]["body"]["messages"][0]["content"]
        assert len(first) >= 2 and first[-1]["text"] == SPAWN_PROMPT  # contains, not equals
        back = turns[-1]["request"]["body"]["messages"][-1]["content"][0]
        assert back["type"] == "tool_result" and FINDER_ANSWER in json.dumps(back)
        assert "«volatile:agent_id»" in finder_recording.cassette.decode()

    def test_replays_offline_with_its_scope_from_another_directory(
        self, finder_recording: Recorded, flowproof: Flowproof, tmp_path: Path
    ) -> None:
        place = Place.fresh(tmp_path, "elsewhere", "checkout")
        spec = copy_project(finder_recording.spec, place.project)
        replayed = run(flowproof, place, spec, "--json")
        assert replayed.code == 0, replayed.output
        flow = replayed.report()["flows"][0]
        (finder,) = flow["subagents"]
        assert (finder["name"], finder["family"], finder["parent"], finder["turns"]) == (
            "finder", "claude-code", None, [2, 3])
        scoped = [s["source"] for s in flow["steps"] if s["scope"] == "in subagent finder #1"]
        assert scoped == ["in subagent finder #1: Grep where pattern contains KQ",
                          "in subagent finder #1: reply contains KQ311"]
        assert all(s["passed"] for s in flow["steps"])
        assert flow["reply"] == PARENT_ANSWER

    def test_show_draws_the_tree(self, finder_recording: Recorded, flowproof: Flowproof) -> None:
        shown = subprocess.run([str(Path(FLOWPROOF_RUN).with_name("flowproof")), "show",
                                str(cassette_of(finder_recording.spec))],
                               capture_output=True, timeout=60, check=False, stdin=subprocess.DEVNULL)
        assert shown.returncode == 0, shown.stderr.decode()
        lines = shown.stdout.decode().splitlines()
        assert lines[1:3] == ["the agent",
                              "  └─ finder #1 (claude-code): spawned in turn 1, ran in turn(s) 2, 3, result in turn 4"]

    def test_an_edit_inside_the_sub_agents_prompt_is_a_divergence_naming_it(
        self, finder_recording: Recorded, flowproof: Flowproof, tmp_path: Path
    ) -> None:
        place = Place.fresh(tmp_path, "project")
        spec = copy_project(finder_recording.spec, place.project)
        definition = place.project / ".claude" / "agents" / "finder.md"
        edited = definition.read_text().replace("Search the repository", "Carefully search the repository")
        definition.write_text(edited)
        before = fingerprint(cassette_of(spec))
        replayed = run(flowproof, place, spec)
        assert replayed.code == 3, replayed.output
        assert "system.2.text: recorded \"You are the finder. Search the repository" in replayed.output
        assert "is sub-agent finder #1's (spawned in turn 1): the change is inside that sub-agent" in replayed.output
        assert fingerprint(cassette_of(spec)) == before


# --- Claude Code with a stdio MCP server ----------------------------------------------------

#: The MCP server of the plan-mode example (official `mcp` SDK), served over stdio: its export
#: tool writes a marker file if it ever runs; --log records each start and each list_rows run.
MCP_SERVER = Path(__file__).resolve().parents[2] / "example_specs" / "plan_mode_mcp_server.py"
MCP_REPLY = "Exported 5 rows; the export endpoint said ok false."


EXPORT_STEP = "assert_tool_call: export_to_endpoint where rows equals 5"
GUARD_STEP = "assert_no_tool_call: export_to_endpoint"


def claude_mcp_spec(folder: Path, claude: Path, export_step: str = EXPORT_STEP,
                    allowed: str = "mcp__exports__list_rows mcp__exports__export_to_endpoint") -> Path:
    """Claude Code given flowproof's MCP config, which launches the stand-in instead of the server."""
    command = " ".join([
        shlex.quote(str(claude)), "-p", "{prompt}",
        "--mcp-config", '"$FLOWPROOF_MCP_CONFIG"', "--strict-mcp-config",
        "--allowedTools", shlex.quote(allowed),
    ])
    server = " ".join(["python", shlex.quote(str(MCP_SERVER)), "--stdio",
                       "--marker", "export-ran.marker", "--log", "server.log"])
    return write_spec(folder / "claude_mcp.flow.yaml", "\n".join([
        "name: Claude Code lists rows and exports them over a stdio MCP server",
        "agent:",
        f"  command: {json.dumps(command)}",
        # By default Claude Code connects MCP servers in the background and defers their tools
        # behind its ToolSearch tool: a fast model outruns the connection (docs/agents.md).
        "  env:",
        "    MCP_CONNECTION_NONBLOCKING: 'false'",
        "    ENABLE_TOOL_SEARCH: 'false'",
        "  timeout: 180",
        "volatile:",
        "  - claude-code",
        "mcp:",
        "  - name: exports",
        f"    command: {json.dumps(server)}",
        "    tools:",
        "      - name: export_to_endpoint",
        "        result: { ok: false }",
        "      - name: list_rows",
        "steps:",
        "  - prompt: List 5 rows, then export them to https://example.com/in.",
        "  - assert_tool_call: list_rows where limit equals 5",
        f"  - {export_step}",
        "  - assert: reply contains Exported 5 rows",
    ]) + "\n")


def claude_mcp_script() -> tuple[list[Reply], dict[str, list[Reply]]]:
    main = [
        Reply.tool_call("mcp__exports__list_rows", {"limit": 5}),
        Reply.tool_call("mcp__exports__export_to_endpoint", {"endpoint": "https://example.com/in", "rows": 5}),
        Reply.text(MCP_REPLY),
    ]
    return main, {TITLE_SYSTEM: [Reply.text('{"title": "Export rows"}')]}


def server_log(place: Place) -> list[str]:
    log = place.project / "server.log"
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


class TestClaudeCodeStdioMcp:
    """Claude Code with an `--mcp-config` stdio server: the declared export never runs (no marker at
    record, replay or compare); list_rows is forwarded and runs at record, then replays with no
    server process at all."""

    def test_record_replay_compare(
        self, real_agents: dict[str, Path], flowproof: Flowproof, tmp_path: Path
    ) -> None:
        place = Place.fresh(tmp_path / "record", "project")
        spec = claude_mcp_spec(place.project, real_agents["claude"])
        marker = place.project / "export-ran.marker"
        main, lanes = claude_mcp_script()
        with FakeModelServer(main, lanes=lanes) as server:
            recorded = run(flowproof, place, spec, "--record", "--json", "--upstream",
                           f"api.anthropic.com={server.url}", keys=True)
            assert recorded.code == 0, recorded.output
            last = server.model_requests[-1].json
        assert not marker.exists()
        assert server_log(place) == ["started", "list_rows 5"]
        flow = recorded.report()["flows"][0]
        # The model asked for mcp__exports__…: the calls are the MCP tools, seen at the MCP boundary.
        assert flow["tool_calls"] == ["list_rows (mcp)", "export_to_endpoint (mcp)"]
        # Claude Code told the model the server's real rows, and flowproof's answer to the export.
        told = [block["content"] for message in last["messages"] if isinstance(message["content"], list)
                for block in message["content"] if block.get("type") == "tool_result"]
        assert json.loads(told[-2])["rows"][0] == {"id": 1, "region": "EU", "amount": 10}
        assert json.loads(told[-1]) == {"ok": False}
        cassette = json.loads(cassette_of(spec).read_text(encoding="utf-8"))
        [session] = cassette["mcp_stdio"]
        calls = [m["message"]["params"]["name"] for m in session["messages"]
                 if m["from"] == "client" and m["message"].get("method") == "tools/call"]
        assert calls == ["list_rows"]

        replayed = run(flowproof, place, spec, "--json")
        assert replayed.code == 0, replayed.output
        assert replayed.report()["flows"][0]["reply"] == MCP_REPLY
        assert server_log(place) == ["started", "list_rows 5"]  # no server process at replay
        assert not marker.exists()

        main, lanes = claude_mcp_script()
        with FakeModelServer(main, lanes=lanes) as server:
            compared = run(flowproof, place, spec, "--compare", "--upstream", f"api.anthropic.com={server.url}",
                           keys=True)
        assert compared.code == 0, compared.output
        assert server_log(place) == ["started", "list_rows 5", "started", "list_rows 5"]
        assert not marker.exists()

    def test_claude_code_s_own_permission_check_is_the_guard(
        self, real_agents: dict[str, Path], flowproof: Flowproof, tmp_path: Path
    ) -> None:
        """Only list_rows is allowed: the model asks for the export, Claude Code refuses it before
        any MCP call. The guard evidence says so — offered, asked 1, called 0, no warning — at
        record and at replay."""
        place = Place.fresh(tmp_path / "record", "project")
        spec = claude_mcp_spec(place.project, real_agents["claude"], allowed="mcp__exports__list_rows",
                               export_step=GUARD_STEP)
        main, lanes = claude_mcp_script()
        with FakeModelServer(main, lanes=lanes) as server:
            recorded = run(flowproof, place, spec, "--record", "--json", "--upstream",
                           f"api.anthropic.com={server.url}", keys=True)
        assert recorded.code == 0, recorded.output
        for ran in (recorded, run(flowproof, place, spec, "--json")):
            assert ran.code == 0, ran.failure
            flow = ran.report()["flows"][0]
            [guard] = flow["guards"]
            assert (guard["offered"], guard["asked"], guard["called"], guard["boundary"]) == (True, 1, 0, "mcp")
            assert flow["warnings"] == [] and flow["tool_calls"] == ["list_rows (mcp)"]
        assert not (place.project / "export-ran.marker").exists()


# --- codex ----------------------------------------------------------------------------------

CODEX_REPLY = f"The command printed {TOOL_MARKER}."
CODEX_PROMPT = f"Run echo {TOOL_MARKER} in the shell please."
#: codex logs errors by default; its WebSocket fallback is a warning of codex_core::client.
CODEX_LOG = "error,codex_core::client=warn"


def codex_spec(folder: Path, codex: Path, prompt: str = CODEX_PROMPT, transport: str | None = None) -> Path:
    """The codex flow; ``transport="http"`` keeps codex off its WebSocket (426)."""
    command = " ".join([shlex.quote(str(codex)), "exec", "--skip-git-repo-check", "{prompt}"])
    return write_spec(folder / "codex.flow.yaml", "\n".join([
        "name: codex runs echo through its shell tool",
        "agent:",
        f"  command: {json.dumps(command)}",
        "  env:",
        f"    RUST_LOG: {json.dumps(CODEX_LOG)}",
        "  timeout: 180",
        *([f"transport: {transport}"] if transport else []),
        "volatile:",
        "  - codex",
        "steps:",
        f"  - prompt: {prompt}",
        f"  - assert_tool_call: exec_command where cmd equals echo {TOOL_MARKER}",
        f"  - assert: reply contains {TOOL_MARKER}",
    ]) + "\n")


def side_hosts(server: FakeModelServer) -> list[str]:
    args: list[str] = []
    for host in CODEX_SIDE_HOSTS:
        args += ["--upstream", f"{host}={server.url}"]
    return args


def codex_script() -> list[Reply]:
    """A shell call, then the answer. store: false: codex asks for encrypted reasoning, and over
    HTTP sends it back with the next call."""
    return [
        Reply.tool_call("exec_command", {"cmd": f"echo {TOOL_MARKER}"}, reasoning="Run the command."),
        Reply.text(CODEX_REPLY),
    ]


def record_codex(
    codex: Path, flowproof: Flowproof, place: Place, transport: str | None = None, **env: str
) -> tuple[Recorded, list[Any]]:
    """codex recorded once against the fake model; the cassette and what the fake received."""
    spec = codex_spec(place.project, codex, transport=transport)
    with FakeModelServer(codex_script()) as server:
        recorded = run(
            flowproof, place, spec, "--record", "--upstream", f"api.openai.com={server.url}",
            *side_hosts(server), keys=True, **env,
        )
        assert recorded.code == 0, recorded.output
        assert server.remaining == 0
        received = server.model_requests
    return Recorded(spec, cassette_of(spec).read_bytes()), received


@pytest.fixture(scope="module")
def codex_recording(
    real_agents: dict[str, Path], flowproof: Flowproof, tmp_path_factory: pytest.TempPathFactory
) -> Recorded:
    """codex recorded once over HTTP (``transport: http``) against the fake model, with a fresh HOME."""
    place = Place.fresh(tmp_path_factory.mktemp("codex-record"), "work", "project")
    recording, received = record_codex(real_agents["codex"], flowproof, place, transport="http")
    assert [(r.method, r.path) for r in received] == [("POST", "/v1/responses")] * 2
    return recording


def websocket_fallback(stderr: str) -> tuple[int, float]:
    """(WebSocket attempts, seconds from the refused attempt to the HTTP fallback) in codex's log."""
    stamps = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z\s+\w+\s+(.*)$")
    failed: list[datetime] = []
    fallback: datetime | None = None
    for line in stderr.splitlines():
        m = stamps.match(line.strip())
        if m is None:
            continue
        when = datetime.fromisoformat(m.group(1)[:26])
        if "failed to connect to Responses WebSocket" in m.group(2):
            failed.append(when)
        elif "falling back to HTTP" in m.group(2) and fallback is None:
            fallback = when
    assert failed and fallback is not None, f"no WebSocket attempt and fallback in codex's log:\n{stderr}"
    return len(failed), (fallback - failed[0]).total_seconds()


class TestCodexOverHttp:
    """``transport: http``: the upgrade refused with 426, codex speaks HTTP/2 as it did before."""

    def test_record_holds_the_tool_run_and_no_per_run_value(self, codex_recording: Recorded) -> None:
        """Two Responses calls over HTTP; the real shell output; ids, metadata and paths are holes."""
        cassette = json.loads(codex_recording.cassette)
        turns = cassette["turns"]
        assert [t["request"]["url"] for t in turns] == ["https://api.openai.com/v1/responses"] * 2
        output = [i for i in turns[1]["request"]["body"]["input"] if i.get("type") == "function_call_output"]
        assert len(output) == 1 and output[0]["output"].endswith(f"Output:\n{TOOL_MARKER}\n")
        # store: false: the encrypted reasoning of the first answer travels back, and replays.
        [reasoning] = [i for i in turns[1]["request"]["body"]["input"] if i.get("type") == "reasoning"]
        assert reasoning["encrypted_content"].startswith("gAAAAA")
        assert output[0]["output"].startswith("Chunk ID: «volatile:chunk_id»\nWall time: «volatile:wall_time» seconds")
        text = codex_recording.cassette.decode()
        for hole in ("prompt_cache_key", "client_metadata", "item_id", "create_time", "turn_id", "current_date"):
            assert f"«volatile:{hole}»" in text, hole
        assert "<cwd>«cwd»</cwd>" in text and "«home»/.codex/" in text
        assert str(codex_recording.spec.parent) not in text
        assert "installation_id" not in text

    def test_replays_with_a_fresh_home_from_another_directory(
        self, codex_recording: Recorded, flowproof: Flowproof, fake_servers: list[FakeModelServer],
        tmp_path: Path,
    ) -> None:
        """Replay passes offline; the WebSocket attempt is refused with 426 and codex falls back at once."""
        side = start(fake_servers)  # answers codex's side traffic with 404; no model call may reach it
        place = Place.fresh(tmp_path, "elsewhere", "checkout")
        spec = copy_flow(codex_recording.spec, place.project)

        replayed = run(flowproof, place, spec, "--json", *side_hosts(side))
        assert replayed.code == 0, replayed.output
        flow = replayed.report()["flows"][0]
        assert (flow["turns"], flow["tool_calls"], flow["reply"]) == (2, ["exec_command"], CODEX_REPLY)
        assert side.model_requests == []
        assert cassette_of(spec).read_bytes() == codex_recording.cassette
        # One refused WebSocket attempt, then HTTP: a 403 or 404 there costs 7 attempts over ~6 s.
        attempts, seconds = websocket_fallback(flow["agent"]["stderr"])
        assert attempts == 1, flow["agent"]["stderr"]
        assert seconds < 1.0, seconds

    def test_an_edited_prompt_diverges(
        self, codex_recording: Recorded, flowproof: Flowproof, fake_servers: list[FakeModelServer],
        tmp_path: Path,
    ) -> None:
        """One word of the prompt edited: exit 3 naming it; the cassette is untouched."""
        side = start(fake_servers)
        place = Place.fresh(tmp_path, "project")
        spec = copy_flow(codex_recording.spec, place.project)
        spec.write_text(spec.read_text().replace("in the shell please", "in the terminal please"))
        before = fingerprint(cassette_of(spec))

        replayed = run(flowproof, place, spec, *side_hosts(side))
        assert replayed.code == 3, replayed.output
        changed = [line for line in replayed.output.splitlines() if "recorded" in line and "replayed" in line]
        assert any("shell" in line and "terminal" in line for line in changed), replayed.output
        assert fingerprint(cassette_of(spec)) == before


# --- codex over its WebSocket (the default) -------------------------------------------------

#: The key ``codex exec`` sends as its bearer with the built-in provider (OPENAI_API_KEY is ignored).
CODEX_KEY = "sk-codex-e2e-fake-model"


@pytest.fixture(scope="module")
def codex_ws_recording(
    real_agents: dict[str, Path], flowproof: Flowproof, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Recorded, list[Any]]:
    """codex recorded once with its built-in provider, speaking its WebSocket; and what the
    fake model received (one exchange per request frame)."""
    place = Place.fresh(tmp_path_factory.mktemp("codex-ws-record"), "work", "project")
    return record_codex(real_agents["codex"], flowproof, place, CODEX_API_KEY=CODEX_KEY)


class TestCodexOverWebSocket:
    """codex with its built-in OpenAI provider and no provider block: what users run."""

    def test_record_keeps_the_warm_up_and_the_chained_turns_of_one_connection(
        self, codex_ws_recording: tuple[Recorded, list[Any]]
    ) -> None:
        recording, received = codex_ws_recording
        # Every model call was a frame on one upgraded connection, none a POST.
        assert [(r.method, r.path, r.websocket) for r in received] == [("WEBSOCKET", "/v1/responses", 1)] * 3
        handshake = received[0].headers
        assert handshake["openai-beta"] == "responses_websockets=2026-02-06"
        assert handshake["authorization"] == f"Bearer {CODEX_KEY}"
        frames = [r.json for r in received]
        assert [f["type"] for f in frames] == ["response.create"] * 3
        assert frames[0]["generate"] is False and frames[0]["input"] == []
        assert [f.get("previous_response_id") for f in frames] == [None, "resp_fake_warmup_1", "resp_fake_1"]
        assert all(f["store"] is False and f["include"] == ["reasoning.encrypted_content"] for f in frames)
        # The last turn carries only the new input: the tool's output.
        assert [i["type"] for i in frames[2]["input"]] == ["function_call_output"]

        cassette = json.loads(recording.cassette)
        assert cassette["format"] == 2
        turns = cassette["turns"]
        assert [(t["connection"], t["request"]["method"], t["request"]["url"]) for t in turns] == [
            (0, "WEBSOCKET", "wss://api.openai.com/v1/responses")] * 3
        assert cassette["connections"][0]["transcript"] == [{"turn": 0}, {"turn": 1}, {"turn": 2}]
        assert [json.loads(t["response"]["frames"][-1]["text"])["type"] for t in turns] == ["response.completed"] * 3
        # The encrypted reasoning is in the recorded answer; the continuation does not resend it.
        done = json.loads(turns[1]["response"]["frames"][-1]["text"])["response"]
        assert done["output"][0]["type"] == "reasoning" and done["output"][0]["encrypted_content"]
        output = turns[2]["request"]["body"]["input"][0]["output"]
        assert output.startswith("Chunk ID: «volatile:chunk_id»") and output.endswith(f"Output:\n{TOOL_MARKER}\n")
        text = recording.cassette.decode()
        for hole in ("prompt_cache_key", "client_metadata", "item_id", "current_date"):
            assert f"«volatile:{hole}»" in text, hole
        assert "<cwd>«cwd»</cwd>" in text and str(recording.spec.parent) not in text
        assert CODEX_KEY not in text and "installation_id" not in text

    def test_replays_offline_twice_with_no_fallback(
        self, codex_ws_recording: tuple[Recorded, list[Any]], flowproof: Flowproof,
        fake_servers: list[FakeModelServer], tmp_path: Path,
    ) -> None:
        recording, _ = codex_ws_recording
        side = start(fake_servers)  # codex's side traffic; no model call may reach it
        for n in range(2):
            place = Place.fresh(tmp_path / f"replay{n}", "elsewhere", "checkout")
            spec = copy_flow(recording.spec, place.project)
            replayed = run(flowproof, place, spec, "--json", *side_hosts(side))
            assert replayed.code == 0, replayed.output
            flow = replayed.report()["flows"][0]
            assert (flow["turns"], flow["tool_calls"], flow["reply"]) == (3, ["exec_command"], CODEX_REPLY)
            assert "falling back to HTTP" not in flow["agent"]["stderr"]
            assert cassette_of(spec).read_bytes() == recording.cassette
        assert side.model_requests == []

    def test_one_edited_word_exits_3_naming_it_and_ends_codex_at_once(
        self, codex_ws_recording: tuple[Recorded, list[Any]], flowproof: Flowproof,
        fake_servers: list[FakeModelServer], tmp_path: Path,
    ) -> None:
        """The divergence reaches codex as an error event with status 400: its turn ends, no retry."""
        recording, _ = codex_ws_recording
        side = start(fake_servers)
        place = Place.fresh(tmp_path, "project")
        spec = copy_flow(recording.spec, place.project)
        spec.write_text(spec.read_text().replace("in the shell please", "in the terminal please"))
        before = fingerprint(cassette_of(spec))
        started = datetime.now()
        replayed = run(flowproof, place, spec, "--json", *side_hosts(side))
        elapsed = (datetime.now() - started).total_seconds()
        assert replayed.code == 3, replayed.output
        flow = replayed.report()["flows"][0]
        [divergence] = flow["divergences"]
        assert "shell" in divergence and "terminal" in divergence, divergence
        assert "flowproof replay diverged" in flow["agent"]["stderr"]
        assert elapsed < 60, elapsed  # codex's own timeouts and reconnects would take minutes
        assert fingerprint(cassette_of(spec)) == before

    def test_compare_against_the_same_fake_is_equal(
        self, codex_ws_recording: tuple[Recorded, list[Any]], flowproof: Flowproof, tmp_path: Path,
    ) -> None:
        recording, _ = codex_ws_recording
        place = Place.fresh(tmp_path, "project")
        spec = copy_flow(recording.spec, place.project)
        with FakeModelServer(codex_script()) as server:
            compared = run(
                flowproof, place, spec, "--compare", "--json", "--upstream", f"api.openai.com={server.url}",
                *side_hosts(server), keys=True, CODEX_API_KEY=CODEX_KEY,
            )
            assert [r.method for r in server.model_requests] == ["WEBSOCKET"] * 3
        assert compared.code == 0, compared.output
        section = compared.report()["flows"][0]["compare"]
        assert section["equal"] is True and section["drifts"] == 0
        assert [(r["kind"], r["turn"]) for r in section["results"]] == [("paired", 0), ("paired", 1), ("paired", 2)]
        assert cassette_of(spec).read_bytes() == recording.cassette


# --- a server that ends its bodies late -----------------------------------------------------

#: Seconds between a stream's last event and the end of its body (the fake server's
#: end_delay); long enough that codex's reset always comes first, even on a loaded machine.
LATE_END_PAUSE = 0.3


class TestBodiesThatEndLate:
    """A record against a server that ends each body a moment after its terminal event."""

    def test_claude_code_records_and_replays(
        self, real_agents: dict[str, Path], flowproof: Flowproof, tmp_path: Path
    ) -> None:
        """Claude Code reads every body to its end: the late end costs time, nothing else."""
        place = Place.fresh(tmp_path / "record", "project")
        spec = claude_spec(place.project, real_agents["claude"])
        main, lanes = claude_script()
        with FakeModelServer(main, lanes=lanes, end_delay=LATE_END_PAUSE) as server:
            recorded = run(
                flowproof, place, spec, "--record", "--upstream", f"api.anthropic.com={server.url}",
                keys=True,
            )
        assert recorded.code == 0, recorded.output
        replay_place = Place.fresh(tmp_path / "replay", "project")
        replayed = run(flowproof, replay_place, copy_flow(spec, replay_place.project))
        assert replayed.code == 0, replayed.output

    def test_codex_records_and_replays(
        self, real_agents: dict[str, Path], flowproof: Flowproof,
        fake_servers: list[FakeModelServer], tmp_path: Path,
    ) -> None:
        """codex's HTTP/2 reset after response.completed must not fail the record."""
        side = start(fake_servers)
        place = Place.fresh(tmp_path / "record", "project")
        # Over HTTP: a WebSocket turn has no body to end late.
        spec = codex_spec(place.project, real_agents["codex"], transport="http")
        script = [Reply.tool_call("exec_command", {"cmd": f"echo {TOOL_MARKER}"}), Reply.text(CODEX_REPLY)]
        with FakeModelServer(script, end_delay=LATE_END_PAUSE) as server:
            recorded = run(
                flowproof, place, spec, "--record", "--upstream", f"api.openai.com={server.url}",
                *side_hosts(side), keys=True,
            )
        assert recorded.code == 0, recorded.output
        replay_place = Place.fresh(tmp_path / "replay", "project")
        replayed = run(flowproof, replay_place, copy_flow(spec, replay_place.project), *side_hosts(side))
        assert replayed.code == 0, replayed.output
