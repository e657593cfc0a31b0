"""The JSON Schema shipped for flow-spec files agrees with the spec loader.

The schema is what editors read (through the ``yaml-language-server`` modeline),
the loader is what flowproof runs. A schema that rejects a spec the loader
accepts would put red squiggles under a working file; one that is missing a key
the loader accepts would make completion lie. So every case here is checked
against both.
"""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from flowproof.errors import SpecError
from flowproof.normalize import PRESETS
from flowproof.spec import loader
from flowproof.spec.loader import parse_spec
from flowproof.spec.steps import SCOPE_KEYS

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_PATH = ROOT / "flowproof" / "schemas" / "flow-spec.schema.json"
EXAMPLE_SPECS = sorted((ROOT / "example_specs").glob("*.flow.yaml"))
MODELINE = re.compile(r"^#\s*yaml-language-server:\s*\$schema=(\S+)\s*$", re.MULTILINE)

BASE = """\
name: books a flight
agent:
  command: python agent.py
tools:
  - name: search_flights
    result: { flights: [ { id: KQ311 } ] }
  - name: create_booking
steps:
  - prompt: Book me a flight
  - assert_tool_call: search_flights
"""


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def schema_errors(validator: jsonschema.Draft7Validator, text: str) -> list[str]:
    data = yaml.safe_load(text)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(data)]


def loader_accepts(text: str, tmp_path: Path) -> bool:
    try:
        parse_spec(text, tmp_path / "case.flow.yaml")
    except SpecError:
        return False
    return True


class TestExamples:
    def test_there_are_examples(self) -> None:
        """The glob below finds the shipped examples (an empty glob would pass vacuously)."""
        assert len(EXAMPLE_SPECS) >= 3

    @pytest.mark.parametrize("spec", EXAMPLE_SPECS, ids=lambda p: p.name)
    def test_every_example_validates(self, validator: jsonschema.Draft7Validator, spec: Path) -> None:
        text = spec.read_text(encoding="utf-8")
        assert schema_errors(validator, text) == []
        assert loader_accepts(text, spec.parent)

    def test_modelines_point_at_the_shipped_schema(self) -> None:
        """An example's ``yaml-language-server`` modeline resolves to the schema in the package."""
        found = 0
        for spec in EXAMPLE_SPECS:
            for target in MODELINE.findall(spec.read_text(encoding="utf-8")):
                found += 1
                assert (spec.parent / target).resolve() == SCHEMA_PATH, spec.name
        assert found >= 2


# Each case breaks BASE in one way; both the schema and the loader must refuse it.
BROKEN = {
    "unknown top-level key": BASE + "stepz: []\n",
    "no agent": BASE.replace("agent:\n  command: python agent.py\n", ""),
    "no name": BASE.replace("name: books a flight\n", ""),
    "empty name": BASE.replace("name: books a flight", 'name: ""'),
    "app other than agent": BASE + "app: service\n",
    "agent with command and url": BASE.replace(
        "  command: python agent.py\n", "  command: python agent.py\n  url: http://127.0.0.1:8080/\n"
    ),
    "agent with neither command nor url": BASE.replace(
        "  command: python agent.py\n", "  timeout: 30\n"
    ),
    "unknown agent key": BASE.replace("  command: python agent.py\n", "  command: x\n  shell: bash\n"),
    "agent url not http": BASE.replace("  command: python agent.py\n", "  url: ftp://host/x\n"),
    "unknown route": BASE.replace("  command: python agent.py\n", "  command: x\n  route: tunnel\n"),
    "zero timeout": BASE.replace("  command: python agent.py\n", "  command: x\n  timeout: 0\n"),
    "timeout as text": BASE.replace("  command: python agent.py\n", "  command: x\n  timeout: soon\n"),
    "env as a list": BASE.replace("  command: python agent.py\n", "  command: x\n  env: [A]\n"),
    "env value missing": BASE.replace("  command: python agent.py\n", "  command: x\n  env:\n    A:\n"),
    "tool entry as bare text": BASE.replace("  - name: create_booking\n", "  - create_booking\n"),
    "tool name with a space": BASE.replace("name: create_booking", "name: create booking"),
    "unknown tool key": BASE.replace("  - name: create_booking\n", "  - name: create_booking\n    mock: 1\n"),
    "strict as quoted text": BASE + 'strict: "true"\n',
    "mcp entry without tools": BASE + "mcp:\n  - name: exports\n    url: http://127.0.0.1:9000/mcp\n",
    "mcp entry with empty tools": BASE
    + "mcp:\n  - name: exports\n    url: http://127.0.0.1:9000/mcp\n    tools: []\n",
    "mcp url not http": BASE
    + "mcp:\n  - name: e\n    url: file:///x\n    tools:\n      - name: export\n        result: 1\n",
    "mcp entry with url and command": BASE
    + "mcp:\n  - name: e\n    url: http://x/\n    command: srv\n    tools:\n      - name: export\n",
    "mcp entry with neither url nor command": BASE + "mcp:\n  - name: e\n    tools:\n      - name: export\n",
    "mcp command empty": BASE + "mcp:\n  - name: e\n    command: ' '\n    tools:\n      - name: export\n",
    "unknown volatile preset": BASE + "volatile:\n  - claude\n",
    "volatile rule name with capitals": BASE + "volatile:\n  - name: Session\n    path: metadata.id\n",
    "volatile rule without path": BASE + "volatile:\n  - name: session\n",
    "volatile path starting with *": BASE + "volatile:\n  - name: s\n    path: '*.id'\n",
    "volatile path with an empty segment": BASE + "volatile:\n  - name: s\n    path: metadata..id\n",
    "unknown volatile rule key": BASE + "volatile:\n  - name: s\n    path: a\n    regex: x\n",
    "on_compare without a function": BASE + "on_compare: my_checks\n",
    "empty steps": BASE.split("steps:")[0] + "steps: []\n",
    "no prompt step": BASE.replace("  - prompt: Book me a flight\n", ""),
    "step with two keys": BASE.replace(
        "  - prompt: Book me a flight\n", "  - prompt: Book me a flight\n    assert: reply contains x\n"
    ),
    "unknown step": BASE + "  - assert_tool: search_flights\n",
    "assert on something other than the reply": BASE + "  - assert: output contains booked\n",
    "reply assertion without text": BASE + "  - assert: reply contains\n",
    "tool line starting with where": BASE + "  - assert_tool_call: where x equals 1\n",
    "tool line with a misspelt where": BASE + "  - assert_tool_call: create_booking whre x equals 1\n",
    "step as bare text": BASE + "  - search_flights\n",
    "bare word other than assert_no_egress": BASE + "  - assert_subagent\n",
    "budget with no number": BASE + "  - assert: tokens at most\n",
    "budget with an unknown bound": BASE + "  - assert: model calls below 3\n",
    "cache assertion misspelt": BASE + "  - assert: cache prefix stabel\n",
    "egress without except": BASE + "  - assert_no_egress: api.example.com\n",
    "parallel with one call": BASE + "  - assert_parallel_tool_calls: [search_flights]\n",
    "in without steps": BASE + "  - in: subagent Explore\n",
    "in with an unknown scope": BASE + "  - in: agent Explore\n    steps:\n      - assert: reply contains x\n",
    "in with prompt zero": BASE + "  - in: prompt 0\n    steps:\n      - assert: reply contains x\n",
    "in with an extra key": BASE
    + "  - in: subagent Explore\n    steps:\n      - assert: reply contains x\n    note: x\n",
    "price without output": BASE + "pricing:\n  gpt-4o-mini: {input: 0.15}\n",
    "negative price": BASE + "pricing:\n  gpt-4o-mini: {input: -1, output: 1}\n",
    "strict_mocks as text": BASE + 'strict_mocks: "yes"\n',
}

# Valid in ways an over-strict schema could get wrong; both must accept each.
VALID = {
    "the base": BASE,
    "numbers and booleans as text": BASE.replace(
        "  command: python agent.py\n",
        "  command: python agent.py\n  env:\n    PORT: 8080\n    DEBUG: true\n    EMPTY: ''\n",
    ),
    "url agent with a variable": BASE.replace("  command: python agent.py\n", "  url: ${AGENT_URL}\n"),
    "every agent key": BASE.replace(
        "  command: python agent.py\n",
        "  command: python agent.py {prompt}\n  timeout: 2.5\n  cwd: app\n  route: base_url\n",
    ),
    "null tools and a null result": BASE.replace(
        "tools:\n  - name: search_flights\n    result: { flights: [ { id: KQ311 } ] }\n  - name: create_booking\n",
        "tools:\n",
    ).replace("  - assert_tool_call: search_flights\n", ""),
    "result null counts as a result": BASE.replace(
        "  - name: create_booking\n", "  - name: create_booking\n    result: null\n"
    ),
    "mcp tool without result (a declaration)": BASE
    + "mcp:\n  - name: exports\n    url: http://127.0.0.1:9000/mcp\n    tools:\n      - name: export\n",
    "allow_error_turns": BASE + "allow_error_turns: true\n",
    "mcp stdio server": BASE
    + "mcp:\n  - name: notes\n    command: python notes.py --db ${DB}\n    tools:\n      - name: export\n",
    "mcp with a variable url": BASE
    + "mcp:\n  - name: exports\n    url: ${EXPORT_MCP_URL}\n    tools:\n      - name: export\n        result: { ok: false }\n",  # noqa: E501
    "presets and rules": BASE
    + "volatile:\n  - claude-code\n  - codex\n  - name: run_date\n    path: messages.*.content\n"
    "    pattern: '\\d{4}-\\d{2}-\\d{2}'\n  - name: item_ids\n    path: input.*.id\n",
    "strict, cassette, on_compare": BASE
    + "strict: true\ncassette: cassettes/booking.json\non_compare: my_checks.drift:on_drift\n",
    "the new steps": BASE
    + "  - assert_subagent: Explore\n"
    "  - in: subagent Explore\n    steps:\n      - assert_tool_call: search_flights where q contains KQ\n"
    "      - assert: reply contains KQ311\n"
    '  - in: "subagent Explore #2"\n    steps:\n      - assert: reply contains KQ\n'
    "  - assert_parallel_tool_calls: search_flights, create_booking where x equals 1\n"
    "  - assert_parallel_tool_calls:\n      - search_flights\n      - create_booking\n"
    "  - assert_no_egress\n"
    "  - assert_no_egress:\n"
    "  - assert_no_egress: except api.example.com, *.example.org\n"
    "  - assert_no_secret_leak: ${CUSTOMER_TOKEN}\n"
    "  - assert: model calls at most 6\n"
    "  - assert: tokens at most 20000\n"
    "  - assert: output tokens at least 1\n"
    "  - assert: cost at most 0.05\n"
    "  - assert: cache prefix stable\n"
    "  - prompt: Actually, cancel that booking\n"
    "  - in: prompt 2\n    steps:\n      - assert_no_tool_call: create_booking\n"
    "pricing:\n  gpt-4o-mini: { input: 0.15, output: 0.60 }\n  claude-x: {input: 3, output: 15, cache_read: 0.3,"
    " cache_write: 3.75}\nstrict_mocks: true\n",
    "every step kind": BASE
    + "  - assert_tool_call: create_booking where flight.id equals KQ311 and passengers.0.name contains Casey\n"
    "  - assert_no_tool_call: create_booking where status is approved\n"
    "  - assert_tool_call: create_booking where coupon is absent\n"
    "  - assert: reply is booked\n"
    "  - prompt: And a hotel?\n",
}


class TestAgreesWithTheLoader:
    @pytest.mark.parametrize("text", BROKEN.values(), ids=BROKEN.keys())
    def test_broken_specs_are_refused_by_both(
        self, validator: jsonschema.Draft7Validator, text: str, tmp_path: Path
    ) -> None:
        assert not loader_accepts(text, tmp_path), "the case is not broken for the loader"
        assert schema_errors(validator, text) != []

    @pytest.mark.parametrize("text", VALID.values(), ids=VALID.keys())
    def test_valid_specs_are_accepted_by_both(
        self, validator: jsonschema.Draft7Validator, text: str, tmp_path: Path
    ) -> None:
        assert loader_accepts(text, tmp_path), "the case is not valid for the loader"
        assert schema_errors(validator, text) == []


def _properties(schema: dict[str, Any], definition: str | None = None) -> set[str]:
    node = schema if definition is None else schema["definitions"][definition]
    return set(node["properties"])


class TestCoversTheLoader:
    """A key the loader learns must reach the schema too (these fail until it does)."""

    @pytest.fixture(scope="class")
    def schema(self) -> dict[str, Any]:
        return dict(json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))

    def test_top_level_keys(self, schema: dict[str, Any]) -> None:
        assert _properties(schema) == set(loader._TOP_KEYS)

    def test_agent_keys_and_routes(self, schema: dict[str, Any]) -> None:
        assert _properties(schema, "agent") == set(loader._AGENT_KEYS)
        assert set(schema["definitions"]["agent"]["properties"]["route"]["enum"]) == set(loader._ROUTES)

    def test_tool_mcp_and_volatile_keys(self, schema: dict[str, Any]) -> None:
        assert _properties(schema, "tool") == set(loader._TOOL_KEYS)
        assert _properties(schema, "mcpTool") == set(loader._TOOL_KEYS)
        assert _properties(schema, "mcpServer") == set(loader._MCP_KEYS)
        assert _properties(schema, "volatileRule") == set(loader._RULE_KEYS)

    def test_step_kinds(self, schema: dict[str, Any]) -> None:
        assert _properties(schema, "step") == set(loader._STEP_KEYS) | set(SCOPE_KEYS)

    def test_price_keys(self, schema: dict[str, Any]) -> None:
        assert _properties(schema, "price") == set(loader._PRICE_KEYS)

    def test_presets(self, schema: dict[str, Any]) -> None:
        assert set(schema["definitions"]["volatilePreset"]["enum"]) == set(PRESETS)


class TestShipped:
    def test_package_data_includes_the_schema(self) -> None:
        """pyproject's package-data glob covers the file, so wheels carry it."""
        pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
        globs = pyproject["tool"]["setuptools"]["package-data"]["flowproof"]
        relative = SCHEMA_PATH.relative_to(ROOT / "flowproof").as_posix()
        assert any(fnmatch.fnmatch(relative, g) for g in globs)

    def test_readable_from_the_installed_package(self) -> None:
        text = resources.files("flowproof").joinpath("schemas/flow-spec.schema.json").read_text(
            encoding="utf-8"
        )
        assert json.loads(text)["title"] == "flowproof flow spec"

    def test_referenced_from_the_docs(self) -> None:
        """README and docs/spec.md show the modeline that makes editors use the schema."""
        for doc in ("README.md", "docs/spec.md"):
            text = (ROOT / doc).read_text(encoding="utf-8")
            assert "yaml-language-server: $schema=" in text, doc
            assert "flow-spec.schema.json" in text, doc
