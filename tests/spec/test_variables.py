"""Tests for ${VAR} references: finding, resolving, escaping and unset variables."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowproof.errors import SpecError
from flowproof.spec import find_variables, resolve_variables
from flowproof.spec.variables import (
    HANDLES,
    VariableSyntaxError,
    _substitute,
    check_variables,
    has_variables,
    resolve_handles,
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


HANDLED = """\
name: n
agent:
  command: my-agent --proxy ${flowproof.proxy_url} --home ${HOME_DIR}
  route: base_url
  env:
    MY_LLM_URL: ${flowproof.base_url.openai}
    CLAUDE_URL: ${flowproof.base_url.anthropic}/v1
    TRUST: ${flowproof.ca_bundle}
    LITERAL: $${flowproof.proxy_url} and ${NOTE}
    PLAIN: ${NOTE}
steps:
  - prompt: hi
"""

HANDLE_VALUES = {
    "flowproof.proxy_url": "http://127.0.0.1:4000",
    "flowproof.ca_bundle": "/ca/bundle.pem",
    "flowproof.ca_cert": "/ca/ca.pem",
    "flowproof.base_url.openai": "http://127.0.0.1:4001/v1",
    "flowproof.base_url.anthropic": "http://127.0.0.1:4002",
}


class TestHandles:
    def test_handles_are_references_where_allowed(self):
        assert check_variables("${flowproof.proxy_url} ${A}", handles=True) == ["flowproof.proxy_url", "A"]

    def test_resolve_variables_leaves_handles_for_the_runner(self, load):
        """${VAR}s are filled at load; handles stay (nothing is 'not set'); neither counts as a
        variable of the environment."""
        spec = load(HANDLED)
        resolved = resolve_variables(spec, {"HOME_DIR": "/h", "NOTE": "n1"})
        assert resolved.agent.command == "my-agent --proxy ${flowproof.proxy_url} --home /h"
        assert dict(resolved.agent.env)["MY_LLM_URL"] == "${flowproof.base_url.openai}"
        assert find_variables(spec) == {"HOME_DIR", "NOTE"}

    def test_resolve_handles_fills_command_and_env_once(self, load):
        """The runner's second pass: handles get this run's values, a $${ escape stays literal,
        and a variable whose value holds `${` is not read again."""
        spec = load(HANDLED)
        environ = {"HOME_DIR": "/h", "NOTE": "${flowproof.proxy_url}"}
        agent = resolve_handles(spec.agent, resolve_variables(spec, environ).agent, environ, HANDLE_VALUES)
        assert agent.command == "my-agent --proxy http://127.0.0.1:4000 --home /h"
        assert dict(agent.env) == {
            "MY_LLM_URL": "http://127.0.0.1:4001/v1",
            "CLAUDE_URL": "http://127.0.0.1:4002/v1",
            "TRUST": "/ca/bundle.pem",
            "LITERAL": "${flowproof.proxy_url} and ${flowproof.proxy_url}",
            "PLAIN": "${flowproof.proxy_url}",
        }

    def test_a_handle_without_a_value_is_an_error(self, load):
        spec = load(HANDLED)
        environ = {"HOME_DIR": "/h", "NOTE": ""}
        with pytest.raises(SpecError, match=r"flowproof.base_url.openai.*has no value"):
            resolve_handles(spec.agent, resolve_variables(spec, environ).agent, environ,
                            {k: v for k, v in HANDLE_VALUES.items() if "openai" not in k})

    def test_every_handle_is_documented(self):
        """docs/spec.md lists each handle the runner fills in."""
        doc = (Path(__file__).resolve().parents[2] / "docs" / "spec.md").read_text(encoding="utf-8")
        for name in HANDLES:
            assert f"${{{name}}}" in doc, name

    @pytest.mark.parametrize(("text", "where", "expected"), [
        ("  - prompt: Book with ${flowproof.proxy_url}\n", "7:23",
         "`${flowproof.proxy_url}` is known only once the proxy is up, so it works in `agent.env` values "
         "and `agent.command` only"),
        ("  - assert_tool_call: book where url equals ${flowproof.proxy_url}\n", "7:",
         "`${flowproof.proxy_url}` is known only once the proxy is up"),
    ])
    def test_a_handle_elsewhere_is_refused_at_its_column(self, problems, text, where, expected):
        spec = "name: n\nagent:\n  command: a\ntools:\n  - name: book\nsteps:\n" + text
        (problem,) = problems(spec)
        assert problem.startswith(where) and expected in problem

    def test_an_unknown_handle_says_what_was_meant(self, problems):
        (problem,) = problems("name: n\nagent:\n  command: a\n  env:\n    U: ${flowproof.proxyurl}\n"
                              "steps:\n  - prompt: hi\n")
        assert problem.startswith("5:8: unknown handle `${flowproof.proxyurl}`")
        assert "did you mean `${flowproof.proxy_url}`?" in problem

    def test_a_base_url_handle_needs_the_base_url_route(self, problems):
        (problem,) = problems("name: n\nagent:\n  command: a\n  env:\n    U: ${flowproof.base_url.openai}\n"
                              "steps:\n  - prompt: hi\n")
        assert problem.startswith("5:8: `${flowproof.base_url.openai}` is a base-URL listener")
        assert problem.endswith("add `route: base_url` under `agent:`")
