"""Handing the agent its stdio stand-ins (flowproof.runner.mcp_stdio)."""

from __future__ import annotations

import json
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from flowproof.errors import FlowproofError
from flowproof.mcp.stdio import STANDIN_HOST
from flowproof.options import Mode
from flowproof.runner.mcp_stdio import CONFIG_VARIABLE, STANDIN_SCRIPT, check_agent, write_standins
from flowproof.spec import load_spec, resolve_variables

SPEC = """\
name: n
agent:
  command: a
mcp:
  - name: notes
    command: python "notes server.py" --db ${DB}
    tools:
      - name: delete_note
        result: { ok: false }
  - name: remote
    url: http://127.0.0.1:9/mcp
    tools:
      - name: other
steps:
  - prompt: x
"""


def spec(tmp_path: Path):
    path = tmp_path / "f.flow.yaml"
    path.write_text(SPEC, encoding="utf-8")
    return resolve_variables(load_spec(path), {"DB": "/data/notes.db"})


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_each_stdio_entry_gets_a_launcher_and_the_config_names_them_all(tmp_path: Path) -> None:
    folder = tmp_path / "mcp"
    variables = write_standins(spec(tmp_path), folder, "http://127.0.0.1:4321", Mode.RECORD)
    assert set(variables) == {CONFIG_VARIABLE, "FLOWPROOF_MCP_NOTES"}  # the url entry gets none
    launcher = Path(variables["FLOWPROOF_MCP_NOTES"])
    config = json.loads(Path(variables[CONFIG_VARIABLE]).read_text(encoding="utf-8"))
    assert config == {"mcpServers": {"notes": {"command": str(launcher), "args": []}}}
    assert mode_of(folder) == 0o700 and mode_of(launcher) == 0o700
    assert mode_of(Path(variables[CONFIG_VARIABLE])) == 0o600
    words = shlex.split(launcher.read_text(encoding="utf-8").splitlines()[1])
    assert words[:4] == ["exec", sys.executable, "-I", str(STANDIN_SCRIPT)] and words[-1] == "$@"
    session = Path(words[4])
    assert mode_of(session) == 0o600
    assert json.loads(session.read_text(encoding="utf-8")) == {
        "server": "notes", "proxy": "http://127.0.0.1:4321", "relay_host": STANDIN_HOST,
        "command": ["python", "notes server.py", "--db", "/data/notes.db"],
    }


def test_replay_starts_no_server(tmp_path: Path) -> None:
    variables = write_standins(spec(tmp_path), tmp_path / "mcp", "http://127.0.0.1:4321", Mode.REPLAY)
    words = shlex.split(Path(variables["FLOWPROOF_MCP_NOTES"]).read_text(encoding="utf-8").splitlines()[1])
    assert "command" not in json.loads(Path(words[4]).read_text(encoding="utf-8"))


def test_a_spec_without_stdio_entries_gets_nothing(tmp_path: Path) -> None:
    path = tmp_path / "g.flow.yaml"
    path.write_text("name: n\nagent:\n  command: a\nsteps:\n  - prompt: x\n", encoding="utf-8")
    assert write_standins(load_spec(path), tmp_path / "mcp", "http://127.0.0.1:1", Mode.RECORD) == {}
    assert not (tmp_path / "mcp").exists()


def test_the_launcher_runs_the_stand_in(tmp_path: Path) -> None:
    """Executed as an MCP client executes a server command: no arguments, an empty environment.
    Here the proxy is down, which the stand-in says on stderr (the agent shows it)."""
    variables = write_standins(spec(tmp_path), tmp_path / "mcp", "http://127.0.0.1:9", Mode.REPLAY)
    done = subprocess.run([variables["FLOWPROOF_MCP_NOTES"]], env={}, capture_output=True, timeout=30,
                          stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 1
    assert b"flowproof mcp stand-in `notes`: the flowproof proxy at 127.0.0.1:9 is unreachable" in done.stderr


def test_a_url_agent_cannot_be_handed_a_stand_in(tmp_path: Path) -> None:
    path = tmp_path / "u.flow.yaml"
    path.write_text(SPEC.replace("  command: a\n", "  url: http://127.0.0.1:8080/\n"), encoding="utf-8")
    with pytest.raises(FlowproofError, match=r"u.flow.yaml:5:5: mcp server `notes` is a stdio server"):
        check_agent(load_spec(path))
    check_agent(spec(tmp_path))  # a command agent: fine
