"""flowproof.scaffold: what a first spec says, from an agent's command and imports."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from flowproof.errors import SpecError
from flowproof.scaffold import first_spec, node_sdks, python_sdks, spec_name
from flowproof.spec import load_spec


class TestImports:
    @pytest.mark.parametrize(("source", "families"), [
        ("import openai\n", ["openai"]),
        ("from openai import OpenAI\nimport anthropic\n", ["openai", "anthropic"]),
        ("from agents import Agent, Runner\n", ["openai"]),
        ("from google import genai\n", ["gemini"]),
        ("import google.generativeai as genai\n", ["gemini"]),
        ("def f():\n    import anthropic.types\n", ["anthropic"]),
        ("import openai_helpers\nimport requests\n", []),
        ("from . import openai\n", []),  # a module of the agent's own package
        ("this is not python(\n", []),
    ])
    def test_python(self, source: str, families: list[str]) -> None:
        assert [s.family for s in python_sdks(source)] == families

    def test_python_names_the_host_and_key(self) -> None:
        (sdk,) = python_sdks("import anthropic\n")
        assert (sdk.module, sdk.host, sdk.key_var) == ("anthropic", "api.anthropic.com", "ANTHROPIC_API_KEY")

    @pytest.mark.parametrize(("source", "families"), [
        ('import OpenAI from "openai";\n', ["openai"]),
        ("const Anthropic = require('@anthropic-ai/sdk');\n", ["anthropic"]),
        ('import { GoogleGenAI } from "@google/genai"\n', ["gemini"]),
        ('const m = await import("openai/resources");\n', ["openai"]),
        ('import x from "openai-edge"\n', []),
    ])
    def test_node(self, source: str, families: list[str]) -> None:
        assert [s.family for s in node_sdks(source)] == families


@pytest.mark.parametrize(("stem", "name"), [
    ("booking_agent", "Booking agent"), ("refund-guard", "Refund guard"), ("agent", "Agent"), ("__", "My agent"),
])
def test_spec_name(stem: str, name: str) -> None:
    assert spec_name(stem) == name


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "a.flow.yaml"
    path.write_text(text, encoding="utf-8")
    return path


class TestFirstSpec:
    def test_it_loads_and_says_what_to_run(self, tmp_path: Path) -> None:
        sdks = python_sdks("import openai\n")
        text = first_spec(name="Booking agent", command="python booking_agent.py", spec_file="booking_agent.flow.yaml",
                          schema="../flowproof/schemas/flow-spec.schema.json", sdks=sdks, agent_file="booking_agent.py")
        assert text.startswith("# yaml-language-server: $schema=../flowproof/schemas/flow-spec.schema.json\n")
        assert "#   OPENAI_API_KEY=... flowproof-run booking_agent.flow.yaml --record" in text
        spec = load_spec(write(tmp_path, text))
        assert (spec.name, spec.agent.command) == ("Booking agent", "python booking_agent.py")
        assert spec.agent.route == "proxy"
        assert [p.text for p in spec.prompts] == ["Replace this with what a user asks the agent"]

    def test_a_node_sdk_agent_gets_the_base_url_route(self, tmp_path: Path) -> None:
        text = first_spec(name="n", command="node agent.mjs", spec_file="agent.flow.yaml", schema="s.json",
                          sdks=node_sdks('import OpenAI from "openai"'), route_base_url=True)
        assert load_spec(write(tmp_path, text)).agent.route == "base_url"

    @given(st.text(min_size=1, max_size=30).filter(lambda s: s.strip() and "\0" not in s),
           st.text(min_size=1, max_size=30).filter(lambda s: s.strip() and "\0" not in s))
    def test_any_name_and_prompt_read_back_as_written(self, name: str, prompt: str) -> None:
        """Whatever the user passes as --name and --prompt is quoted so the spec reads it back."""
        text = first_spec(name=name, command="python a.py", spec_file="a.flow.yaml", schema="s.json", prompt=prompt)
        data = yaml.safe_load(text)
        assert data["name"] == name and data["steps"][0]["prompt"] == prompt

    def test_an_unparsable_result_would_be_caught(self, tmp_path: Path) -> None:
        """The loader is the judge: a first spec with an edited-in mistake fails to load."""
        text = first_spec(name="n", command="python a.py", spec_file="a.flow.yaml", schema="s.json")
        with pytest.raises(SpecError):
            load_spec(write(tmp_path, text.replace("steps:", "stepz:")))
