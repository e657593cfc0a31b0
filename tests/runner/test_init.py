"""`flowproof init`: a first spec beside an agent, through the CLI (flowproof.runner.init)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from flowproof.runner.cli import cli
from flowproof.spec import load_spec

SCHEMA = Path(__file__).resolve().parents[2] / "flowproof" / "schemas" / "flow-spec.schema.json"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder (the working directory) with an agent in a subfolder."""
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "booking_agent.py").write_text("import os\nfrom openai import OpenAI\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def init(*args: str):
    return CliRunner().invoke(cli, ["init", *args], catch_exceptions=False)


def modeline_target(spec: Path) -> Path:
    first = spec.read_text().splitlines()[0]
    assert first.startswith("# yaml-language-server: $schema=")
    return (spec.parent / first.split("=", 1)[1]).resolve()


class TestInit:
    def test_a_python_file_gets_a_spec_beside_it(self, project: Path) -> None:
        """`flowproof init agents/booking_agent.py`: agents/booking_agent.flow.yaml, which loads,
        starts the agent from its own folder, is named after it, and points editors at the schema."""
        res = init("agents/booking_agent.py")
        assert res.exit_code == 0, res.output
        spec_path = project / "agents" / "booking_agent.flow.yaml"
        spec = load_spec(spec_path)
        assert (spec.name, spec.agent.command) == ("Booking agent", "python booking_agent.py")
        assert spec.agent.route == "proxy"
        assert spec.agent.cwd == spec_path.parent
        assert modeline_target(spec_path) == SCHEMA.resolve()
        assert "imports openai (api.openai.com)" in res.output
        assert "OPENAI_API_KEY=... flowproof-run agents/booking_agent.flow.yaml --record" in res.output
        check = CliRunner().invoke(cli, ["check", str(spec_path)])
        assert check.exit_code == 0 and "1 spec OK" in check.output

    def test_a_whole_command_keeps_its_words(self, project: Path) -> None:
        """The words of the command stay; the file in it is made relative to the spec's folder."""
        res = init("--name", "Books flights", "--prompt", "Book me a flight to Nairobi", "--",
                   "python", "-u", "agents/booking_agent.py", "--model", "gpt-4o-mini")
        assert res.exit_code == 0, res.output
        spec = load_spec(project / "agents" / "booking_agent.flow.yaml")
        assert spec.agent.command == "python -u booking_agent.py --model gpt-4o-mini"
        assert spec.name == "Books flights" and spec.prompts[0].text == "Book me a flight to Nairobi"

    def test_one_quoted_command_string(self, project: Path) -> None:
        res = init("python agents/booking_agent.py '{prompt}'")
        assert res.exit_code == 0, res.output
        assert load_spec(project / "agents" / "booking_agent.flow.yaml").agent.command == (
            "python booking_agent.py '{prompt}'")

    def test_a_node_sdk_agent_uses_the_base_url_route(self, project: Path) -> None:
        (project / "agent.mjs").write_text('import OpenAI from "openai";\n')
        res = init("agent.mjs")
        assert res.exit_code == 0, res.output
        spec = load_spec(project / "agent.flow.yaml")
        assert (spec.agent.command, spec.agent.route) == ("node agent.mjs", "base_url")

    def test_a_program_on_path_gets_a_spec_here(self, project: Path) -> None:
        """A command that names no file: the spec goes into the working directory, named after
        the program, and says that no SDK was seen."""
        res = init("my-agent --fast")
        assert res.exit_code == 0, res.output
        spec_path = project / "my-agent.flow.yaml"
        assert load_spec(spec_path).agent.command == "my-agent --fast"
        assert "No model SDK import was found" in spec_path.read_text()

    def test_an_executable_file_runs_as_itself(self, project: Path) -> None:
        script = project / "run-agent"
        script.write_text("#!/bin/sh\n")
        script.chmod(0o755)
        res = init("run-agent")
        assert res.exit_code == 0, res.output
        assert load_spec(project / "run-agent.flow.yaml").agent.command == "./run-agent"

    def test_it_never_overwrites(self, project: Path) -> None:
        """A second init (or any file at the path) is refused, exit 2, the file untouched."""
        target = project / "agents" / "booking_agent.flow.yaml"
        target.write_text("name: mine\n")
        res = init("agents/booking_agent.py")
        assert res.exit_code == 2
        assert "agents/booking_agent.flow.yaml already exists" in res.output and "never overwrites" in res.output
        assert target.read_text() == "name: mine\n"

    def test_output_elsewhere(self, project: Path) -> None:
        (project / "specs").mkdir()
        res = init("-o", "specs/booking.flow.yaml", "agents/booking_agent.py")
        assert res.exit_code == 0, res.output
        spec = load_spec(project / "specs" / "booking.flow.yaml")
        assert spec.agent.command == f"python {os.path.join('..', 'agents', 'booking_agent.py')}"

    def test_no_command_is_a_usage_error(self, project: Path) -> None:
        res = CliRunner().invoke(cli, ["init"])
        assert res.exit_code == 2
