"""Tests for ${VAR} references: finding, resolving, escaping and unset variables."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowproof.errors import SpecError
from flowproof.spec import find_variables, resolve_variables
from flowproof.spec.variables import (
    VariableSyntaxError,
    _substitute,
    check_variables,
    has_variables,
)

FULL = """\
name: n
agent:
  command: ${BIN} --fast
  env:
    TOKEN_FILE: ${HOME_DIR}/token
    PLAIN: x
  cwd: ${WORK}/app
mcp:
  - name: m
    url: ${MCP_URL}
    tools:
      - name: export
        result: {ok: false, note: "${NOTE}", nested: [{x: "${NOTE}-2"}], n: 3}
tools:
  - name: book
    result: {id: "${ID}"}
steps:
  - prompt: Book for ${USER_NAME}
  - assert_tool_call: book where flight.id equals ${ID} and seat matches ^${ROW}[A-F]$
  - assert: reply contains ${ID}
"""

ENV = {"BIN": "/bin/agent", "HOME_DIR": "/h", "WORK": "/w", "MCP_URL": "http://127.0.0.1:9/mcp",
       "NOTE": "n1", "ID": "KQ311", "USER_NAME": "Casey", "ROW": "1[0-9]"}


class TestCheckVariables:
    def test_names_in_order(self):
        """References are returned in order, escapes skipped."""
        assert check_variables("${A} $${B} ${C_1}") == ["A", "C_1"]

    @pytest.mark.parametrize("text", ["${", "${}", "${1A}", "${A", "${A-B}", "x ${ y"])
    def test_malformed(self, text):
        """A `${` that is not a reference is a VariableSyntaxError with its offset."""
        with pytest.raises(VariableSyntaxError) as info:
            check_variables(text)
        assert text[info.value.offset:].startswith("${")

    def test_has_variables(self):
        """Only real references count as variables."""
        assert has_variables("a ${B}") and not has_variables("a $${B}") and not has_variables("$x")


class TestResolve:
    def test_every_place_is_resolved(self, load):
        """Prompts, clause values, replies, agent fields, mcp urls and results are resolved."""
        spec = resolve_variables(load(FULL), ENV)
        assert spec.agent.command == "/bin/agent --fast"
        assert spec.agent.env == (("TOKEN_FILE", "/h/token"), ("PLAIN", "x"))
        assert spec.agent.cwd == Path("/w/app")
        assert spec.mcp[0].url == "http://127.0.0.1:9/mcp"
        assert spec.mcp[0].tools[0].result == {"ok": False, "note": "n1", "nested": [{"x": "n1-2"}],
                                               "n": 3}
        assert spec.tool_results == {"book": {"id": "KQ311"}}
        prompt, call, reply = spec.steps
        assert prompt.text == "Book for Casey"
        assert call.clauses[0].value == "KQ311"
        assert call.clauses[1].pattern is not None and call.clauses[1].pattern.search("12C")
        assert reply.text == "KQ311"

    def test_original_untouched(self, load):
        """resolve_variables returns a copy."""
        spec = load(FULL)
        resolve_variables(spec, ENV)
        assert spec.steps[0].text == "Book for ${USER_NAME}"

    def test_relative_templated_cwd(self, load, tmp_path):
        """A templated relative cwd joins the spec dir after resolution."""
        spec = load("name: n\nagent:\n  command: a\n  cwd: ${SUB}/x\nsteps:\n  - prompt: x\n")
        assert resolve_variables(spec, {"SUB": "s"}).agent.cwd == tmp_path / "s" / "x"

    def test_escape(self, load):
        """`$${` resolves to a literal `${` and needs no variable."""
        spec = load("name: n\nagent:\n  command: a\nsteps:\n  - prompt: cost $${PRICE}\n")
        assert find_variables(spec) == set()
        assert resolve_variables(spec, {}).steps[0].text == "cost ${PRICE}"

    def test_unset_variable(self, load):
        """An unset variable is a SpecError at the node, with the pinned message."""
        spec = load("name: n\nagent:\n  command: a\nsteps:\n  - prompt: hi ${WHO}\n")
        with pytest.raises(SpecError) as info:
            resolve_variables(spec, {})
        problem = info.value.problems[0]
        assert (problem.line, problem.col) == (5, 5)
        assert f"{problem.message} — {problem.hint}" == (
            "${WHO} is not set — export WHO before running the flow, or write $${WHO} for a "
            "literal ${WHO}")

    def test_every_unset_variable_reported(self, load):
        """All unset variables are reported at once, each once per node."""
        with pytest.raises(SpecError) as info:
            resolve_variables(load(FULL), {"ID": "x"})
        messages = {p.message for p in info.value.problems}
        assert messages == {"${BIN} is not set", "${HOME_DIR} is not set", "${WORK} is not set",
                            "${MCP_URL} is not set", "${NOTE} is not set",
                            "${USER_NAME} is not set", "${ROW} is not set"}

    def test_resolved_pattern_broken(self, load):
        """A matches pattern broken by its variable's value is a SpecError."""
        spec = load("name: n\nagent:\n  command: a\nsteps:\n  - prompt: x\n"
                    "  - assert_tool_call: t where a matches ${P}\n")
        with pytest.raises(SpecError, match="after \\$\\{VAR\\} resolution, bad regular"):
            resolve_variables(spec, {"P": "[oops"})

    def test_empty_value_is_set(self, load):
        """A variable set to the empty string counts as set."""
        spec = load("name: n\nagent:\n  command: a\nsteps:\n  - prompt: a${E}b\n")
        assert resolve_variables(spec, {"E": ""}).steps[0].text == "ab"

    def test_no_recursive_expansion(self, load):
        """A value containing ${...} is inserted literally, not expanded again."""
        spec = load("name: n\nagent:\n  command: a\nsteps:\n  - prompt: ${A}\n")
        assert resolve_variables(spec, {"A": "${B}"}).steps[0].text == "${B}"

    @given(st.text(alphabet="ab$}{_", max_size=20))
    def test_substitution_matches_the_scan(self, text):
        """Resolving with no environment reports exactly the names the scan finds."""
        try:
            names = check_variables(text)
        except VariableSyntaxError as e:
            assert text[e.offset:].startswith("${")
            return
        missing: list[str] = []
        _substitute(text, {}, missing)
        assert missing == names


class TestFindVariables:
    def test_finds_all(self, load):
        """find_variables lists every referenced name."""
        assert find_variables(load(FULL)) == set(ENV)

    def test_example_guard(self):
        """The guard example needs EXPORT_MCP_URL."""
        from flowproof.spec import load_spec

        path = Path(__file__).resolve().parents[2] / "example_specs" / "plan_mode_guard.flow.yaml"
        assert find_variables(load_spec(path)) == {"EXPORT_MCP_URL"}
