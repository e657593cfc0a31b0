"""Tests for load_spec: keys, defaults, steps, volatile rules and every error."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowproof.errors import SpecError
from flowproof.spec import (
    Matcher,
    PromptStep,
    ReplyAssertion,
    ToolCallAssertion,
    default_cassette_path,
    load_spec,
    volatile_refusal,
)
from flowproof.spec.loader import parse_spec

MINIMAL = """\
name: minimal
agent:
  command: python agent.py
steps:
  - prompt: hello
"""

EXAMPLES = Path(__file__).resolve().parents[2] / "example_specs"


def with_steps(steps: str, head: str = "") -> str:
    return f"name: n\nagent:\n  command: a\n{head}steps:\n{steps}"


class TestMinimal:
    def test_defaults(self, load, tmp_path):
        """A minimal spec gets every documented default."""
        spec = load(MINIMAL, "booking.flow.yaml")
        assert spec.name == "minimal"
        assert spec.app == "agent"
        assert spec.agent.command == "python agent.py" and spec.agent.url is None
        assert spec.agent.env == ()
        assert spec.agent.timeout == 120.0
        assert spec.agent.cwd == tmp_path
        assert spec.agent.route == "proxy"
        assert (spec.tools, spec.mcp, spec.volatile, spec.presets) == ((), (), (), ())
        assert spec.strict is False
        assert spec.cassette == tmp_path / "booking.cassette.json"
        assert spec.on_compare is None
        assert spec.path == tmp_path / "booking.flow.yaml"
        assert spec.steps == (PromptStep("hello", spec.steps[0].location),)

    def test_locations_are_one_based(self, load):
        """Locations carry the file as given and 1-based line and column."""
        spec = load(MINIMAL)
        loc = spec.steps[0].location
        assert (loc.line, loc.col) == (5, 5)
        assert loc.path.endswith("t.flow.yaml")

    def test_accepts_str_path(self, write_spec):
        """load_spec takes a str as well as a Path."""
        assert load_spec(str(write_spec(MINIMAL))).name == "minimal"

    @pytest.mark.parametrize(("name", "expected"), [
        ("booking.flow.yaml", "booking.cassette.json"),
        ("booking.flow.yml", "booking.cassette.json"),
        ("plain.yaml", "plain.cassette.json"),
        ("odd", "odd.cassette.json"),
    ])
    def test_default_cassette_name(self, name, expected):
        """The default cassette sits beside the spec, named from its stem without `.flow`."""
        assert default_cassette_path(Path("d") / name) == Path("d") / expected


class TestAgent:
    def test_url_agent(self, load):
        """An agent may be a url instead of a command."""
        spec = load("name: n\nagent:\n  url: http://127.0.0.1:8080/chat\nsteps:\n  - prompt: x\n")
        assert spec.agent.url == "http://127.0.0.1:8080/chat" and spec.agent.command is None

    def test_all_keys(self, load, tmp_path):
        """env values are stringified as written, timeout, cwd and route are read."""
        spec = load("""\
            name: n
            agent:
              command: ./start-agent
              env: {AGENT_MODE: plan, PORT: 8080, DEBUG: true, EMPTY: ""}
              timeout: 2.5
              cwd: sub/dir
              route: base_url
            steps:
              - prompt: x
            """)
        assert spec.agent.env == (("AGENT_MODE", "plan"), ("PORT", "8080"), ("DEBUG", "true"),
                                  ("EMPTY", ""))
        assert spec.agent.timeout == 2.5
        assert spec.agent.cwd == tmp_path / "sub" / "dir"
        assert spec.agent.route == "base_url"

    def test_absolute_cwd(self, load, tmp_path):
        """An absolute cwd is kept."""
        target = tmp_path / "elsewhere"
        spec = load(f"name: n\nagent:\n  command: a\n  cwd: '{target}'\nsteps:\n  - prompt: x\n")
        assert spec.agent.cwd == target

    def test_templated_cwd_waits_for_resolution(self, load):
        """A cwd holding ${VAR} is kept as written until resolve_variables."""
        spec = load("name: n\nagent:\n  command: a\n  cwd: ${WORK}/x\nsteps:\n  - prompt: x\n")
        assert spec.agent.cwd == Path("${WORK}/x")

    def test_both_command_and_url(self, problems):
        """command and url together are an error."""
        found = problems("name: n\nagent:\n  command: a\n  url: http://x\nsteps:\n  - prompt: x\n")
        assert found == [
            "4:3: `agent` has both `command` and `url` — keep one: `command` starts a process, "
            "`url` reaches a running service"
        ]

    def test_neither_command_nor_url(self, problems):
        """An agent with neither command nor url is an error."""
        assert "`agent` needs `command` or `url`" in problems(
            "name: n\nagent:\n  env: {A: b}\nsteps:\n  - prompt: x\n")[0]

    def test_bad_url(self, problems):
        """A url that is not http(s) is an error."""
        assert "must be an http(s) URL" in problems(
            "name: n\nagent:\n  url: ftp://x\nsteps:\n  - prompt: x\n")[0]

    @pytest.mark.parametrize("value", ["0", "-1", "soon", "true", "[1]", ".nan"])
    def test_bad_timeout(self, problems, value):
        """A timeout that is not a positive number is an error."""
        assert "`agent.timeout` must be a positive number of seconds" in problems(
            f"name: n\nagent:\n  command: a\n  timeout: {value}\nsteps:\n  - prompt: x\n")[0]

    def test_bad_route(self, problems):
        """An unknown route gets a did-you-mean."""
        found = problems(
            "name: n\nagent:\n  command: a\n  route: base-url\nsteps:\n  - prompt: x\n")
        assert found == [
            "4:10: unknown route `base-url` — did you mean `base_url`?"
        ]

    def test_env_null_value(self, problems):
        """An env entry with no value is an error that shows the empty form."""
        found = problems("name: n\nagent:\n  command: a\n  env:\n    A:\nsteps:\n  - prompt: x\n")
        assert found == [
            '5:5: `agent.env.A` has no value — write `A: ""` for an empty value'
        ]

    def test_env_not_mapping(self, problems):
        """env must be a mapping."""
        assert "`agent.env` must be a mapping" in problems(
            "name: n\nagent:\n  command: a\n  env: [A]\nsteps:\n  - prompt: x\n")[0]

    def test_env_nested_value(self, problems):
        """An env value that is a list is an error."""
        assert "`agent.env.A` must be text" in problems(
            "name: n\nagent:\n  command: a\n  env: {A: [1]}\nsteps:\n  - prompt: x\n")[0]

    def test_unknown_agent_key(self, problems):
        """An unknown agent key gets a did-you-mean."""
        assert problems("name: n\nagent:\n  command: a\n  comand: b\nsteps:\n  - prompt: x\n") == [
            "4:3: unknown key `comand` in `agent` — did you mean `command`?"
        ]

    def test_agent_not_mapping(self, problems):
        """agent must be a mapping."""
        assert "`agent` must be a mapping" in problems(
            "name: n\nagent: python x.py\nsteps:\n  - prompt: x\n")[0]


class TestTopLevel:
    def test_unknown_key(self, problems):
        """An unknown top-level key gets a did-you-mean, with exact text."""
        assert problems(MINIMAL + "stict: true\n") == [
            "6:1: unknown key `stict` in the spec — did you mean `strict`?"
        ]

    def test_unknown_key_without_close_match(self, problems):
        """With nothing close, the valid keys are listed."""
        assert "expected one of: `name`, `app`" in problems(MINIMAL + "zzzzzz: 1\n")[0]

    def test_missing_name_agent_steps(self, problems):
        """Every missing required key is reported at once."""
        found = problems("app: agent\n")
        assert [p.split(" — ")[0] for p in found] == [
            "1:1: the spec has no `name`",
            "1:1: the spec has no `agent`",
            "1:1: the spec has no `steps`",
        ]

    def test_app_other_than_agent(self, problems):
        """Only `app: agent` exists."""
        assert "unsupported app `web`" in problems(MINIMAL + "app: web\n")[0]

    def test_app_agent_explicit(self, load):
        """`app: agent` is accepted."""
        assert load(MINIMAL + "app: agent\n").app == "agent"

    def test_strict(self, load):
        """strict: true is read."""
        assert load(MINIMAL + "strict: true\n").strict is True

    def test_transport_http_is_read_and_anything_else_refused(self, load, problems):
        """`transport: http` keeps the agent off WebSockets; the default (absent) records what it speaks."""
        assert load(MINIMAL).transport is None
        assert load(MINIMAL + "transport: http\n").transport == "http"
        [problem] = problems(MINIMAL + "transport: websocket\n")
        assert "unknown transport `websocket`" in problem and "transport: http" in problem

    def test_strict_not_bool(self, problems):
        """strict must be a boolean."""
        assert "`strict` must be true or false, found `maybe`" in problems(
            MINIMAL + "strict: maybe\n")[0]

    def test_cassette_relative_to_spec(self, load, tmp_path):
        """A relative cassette path is resolved against the spec's directory."""
        assert load(MINIMAL + "cassette: c/x.json\n").cassette == tmp_path / "c" / "x.json"

    def test_on_compare(self, load):
        """on_compare takes a module:function string."""
        assert load(MINIMAL + "on_compare: my.checks:on_drift\n").on_compare == "my.checks:on_drift"

    def test_on_compare_bad(self, problems):
        """on_compare without a colon is an error."""
        assert "`on_compare` must name a callable as `module:function`" in problems(
            MINIMAL + "on_compare: checks.on_drift\n")[0]

    def test_duplicate_key(self, problems):
        """A key given twice is an error."""
        assert problems(MINIMAL + "name: again\n") == [
            "6:1: `name` appears twice in the spec — keep only one"
        ]

    def test_empty_name(self, problems):
        """An empty name is an error."""
        assert "`name` is empty" in problems(MINIMAL.replace("name: minimal", "name:"))[0]

    def test_numeric_name_is_text(self, load):
        """A scalar name is read as the text written."""
        assert load(MINIMAL.replace("name: minimal", "name: 2024")).name == "2024"

    def test_top_level_not_mapping(self, problems):
        """A spec that is a list is an error."""
        assert problems("- a\n- b\n") == [
            "1:1: the spec must be a mapping, found a list — write it as `key: value` lines"
        ]


class TestTools:
    HEAD = """\
        tools:
          - name: search_flights
            result: { flights: [ { id: KQ311, dest: NBO } ] }
          - name: create_booking
          - name: cancel
            result:
        """

    def test_results_and_declarations(self, load):
        """result: is plain data; no result is a declaration; a null result is present."""
        spec = load(with_steps("  - prompt: x\n", self.HEAD.replace("        ", "")))
        search, create, cancel = spec.tools
        assert (search.name, search.has_result) == ("search_flights", True)
        assert search.result == {"flights": [{"id": "KQ311", "dest": "NBO"}]}
        assert (create.has_result, create.result) == (False, None)
        assert (cancel.has_result, cancel.result) == (True, None)
        assert spec.tool_results == {"search_flights": search.result, "cancel": None}

    def test_result_scalars(self, load):
        """Result scalars keep YAML types; timestamps stay text."""
        spec = load(with_steps("  - prompt: x\n", "tools:\n  - name: t\n    result: "
                               "{i: 1, f: 1.5, b: false, n: null, d: 2024-01-02, s: '7'}\n"))
        assert spec.tools[0].result == {"i": 1, "f": 1.5, "b": False, "n": None,
                                        "d": "2024-01-02", "s": "7"}

    def test_recursive_alias(self, problems):
        """A self-referencing alias in a result is an error, not a hang."""
        assert "a YAML alias refers to itself" in problems(
            with_steps("  - prompt: x\n", "tools:\n  - name: t\n    result: &a [*a]\n"))[0]

    def test_unknown_tag(self, problems):
        """A custom YAML tag in a result is an error."""
        assert "unsupported YAML tag `!thing`" in problems(
            with_steps("  - prompt: x\n", "tools:\n  - name: t\n    result: !thing x\n"))[0]

    def test_string_entry(self, problems):
        """A bare string tool entry suggests the mapping form."""
        assert problems(with_steps("  - prompt: x\n", "tools:\n  - search\n")) == [
            "5:5: a `tools` entry must be a mapping, found `search` — write `- name: search`"
        ]

    def test_missing_name(self, problems):
        """A tool without a name is an error."""
        assert "has no `name`" in problems(
            with_steps("  - prompt: x\n", "tools:\n  - result: 1\n"))[0]

    def test_unknown_tool_key(self, problems):
        """An unknown tool key gets a did-you-mean."""
        assert "did you mean `result`?" in problems(
            with_steps("  - prompt: x\n", "tools:\n  - name: t\n    results: 1\n"))[0]

    def test_duplicate_tool(self, problems):
        """A tool declared twice is an error."""
        assert "tool `t` is declared twice" in problems(
            with_steps("  - prompt: x\n", "tools:\n  - name: t\n  - name: t\n"))[0]

    def test_tool_name_with_space(self, problems):
        """A tool name with whitespace is an error."""
        assert "contains whitespace" in problems(
            with_steps("  - prompt: x\n", "tools:\n  - name: two words\n"))[0]

    def test_null_tools_is_empty(self, load):
        """`tools:` with nothing is an empty list."""
        assert load(with_steps("  - prompt: x\n", "tools:\n")).tools == ()

    def test_undeclared_tool(self, problems):
        """Asserting an undeclared tool is an error with a did-you-mean, at the tool's column."""
        assert problems(with_steps("  - prompt: x\n  - assert_tool_call: serch\n",
                                   "tools:\n  - name: search\n")) == [
            "8:23: `serch` is not a declared tool — did you mean `search`? (declare it under "
            "`tools:` or `mcp:`; an entry without `result:` only declares it)"
        ]

    def test_undeclared_allowed_without_tools(self, load):
        """Without tools: any tool may be asserted."""
        spec = load(with_steps("  - prompt: x\n  - assert_no_tool_call: anything\n"))
        assert spec.steps[1].tool == "anything"

    def test_mcp_tools_count_as_declared(self, load):
        """MCP tools declare their names for assertions."""
        spec = load(with_steps(
            "  - prompt: x\n  - assert_no_tool_call: export\n",
            "mcp:\n  - name: s\n    url: http://127.0.0.1:9/mcp\n    tools:\n"
            "      - name: export\n        result: {ok: false}\n"))
        assert spec.mcp[0].tools[0].result == {"ok": False}
        assert spec.mcp[0].url == "http://127.0.0.1:9/mcp"


class TestMcp:
    def test_mcp_problems(self, problems):
        """Missing url and missing tools are reported; a tool without result is a declaration."""
        found = problems(with_steps("  - prompt: x\n", """\
mcp:
  - name: a
  - name: b
    url: http://x
    tools:
      - name: t
"""))
        assert [p.split(" — ")[0] for p in found] == [
            "5:5: an `mcp` entry has no `url` and no `command`",
            "5:5: an `mcp` entry has no `tools`",
        ]

    def test_a_stdio_server_has_a_command(self, load):
        """`command:` instead of `url:`: a server the agent launches and talks to over stdio."""
        spec = load(with_steps(
            "  - prompt: x\n  - assert_no_tool_call: delete\n",
            "mcp:\n  - name: notes\n    command: python 'notes server.py' --db ${DB}\n    tools:\n"
            "      - name: delete\n        result: {ok: false}\n"))
        [server] = spec.mcp
        assert (server.url, server.command) == (None, "python 'notes server.py' --db ${DB}")

    def test_stdio_command_problems(self, problems):
        """Both url and command, an unclosed quote, an empty command, two names sharing a variable."""
        found = problems(with_steps("  - prompt: x\n", """\
mcp:
  - name: a
    url: http://x
    command: srv
    tools: [{name: t1}]
  - name: b
    command: srv 'unclosed
    tools: [{name: t2}]
  - name: c
    command: "  "
    tools: [{name: t3}]
  - name: notes-db
    command: srv
    tools: [{name: t4}]
  - name: notes.db
    command: srv
    tools: [{name: t5}]
"""))
        assert [p.split(" — ")[0] for p in found] == [
            "7:5: an `mcp` entry has both a `url` and a `command`",
            "10:14: the mcp server `command` cannot be split into words (No closing quotation)",
            "13:14: the mcp server `command` is empty",
            "18:5: mcp servers `notes-db` and `notes.db` would share the variable FLOWPROOF_MCP_NOTES_DB",
        ]

    def test_mcp_tool_without_result_is_a_declaration(self, load):
        """An mcp tool with no result passes through to the server but can be asserted on."""
        spec = load(with_steps(
            "  - prompt: x\n  - assert_tool_call: list_rows\n",
            "mcp:\n  - name: s\n    url: http://127.0.0.1:9/mcp\n    tools:\n      - name: list_rows\n",
        ))
        assert spec.mcp[0].tools[0].has_result is False

    def test_duplicate_server(self, problems):
        """Two servers with one name is an error."""
        text = with_steps("  - prompt: x\n", "mcp:\n" + (
            "  - name: a\n    url: http://x\n    tools: [{name: t, result: 1}]\n") + (
            "  - name: a\n    url: http://y\n    tools: [{name: u, result: 1}]\n"))
        assert "mcp server `a` is listed twice" in problems(text)[0]

    def test_bad_mcp_url(self, problems):
        """An mcp url must be http(s) unless it holds a variable."""
        text = with_steps("  - prompt: x\n",
                          "mcp:\n  - name: a\n    url: nope\n    tools: [{name: t, result: 1}]\n")
        assert "must be an http(s) URL" in problems(text)[0]


class TestSteps:
    def test_every_step_kind(self, load):
        """All four step kinds parse into their types."""
        spec = load(with_steps("""\
  - prompt: Book me a flight
  - assert_tool_call: book where flight.id equals KQ311
  - assert_no_tool_call: refund where status is approved
  - assert: reply contains booked
  - assert: reply is B-1042
"""))
        prompt, call, no_call, reply, reply_is = spec.steps
        assert prompt == PromptStep("Book me a flight", prompt.location)
        assert isinstance(call, ToolCallAssertion) and not call.negated
        assert call.source == "book where flight.id equals KQ311"
        assert isinstance(no_call, ToolCallAssertion) and no_call.negated
        assert no_call.clauses[0].matcher is Matcher.EQUALS
        assert isinstance(reply, ReplyAssertion) and reply.text == "booked"
        assert isinstance(reply_is, ReplyAssertion) and reply_is.text == "B-1042"
        assert spec.prompts == (prompt,)

    def test_clause_column_in_file(self, load):
        """Clause locations point into the file line."""
        spec = load(with_steps(
            "  - prompt: x\n  - assert_tool_call: book where flight.id exists\n"))
        loc = spec.steps[1].clauses[0].location
        assert (loc.line, loc.col) == (6, 34)

    def test_quoted_line_columns(self, problems):
        """Columns inside a quoted scalar skip the quote."""
        assert problems(with_steps("  - prompt: x\n  - assert_tool_call: 'book where a equal 1'\n")
                        )[0].startswith("6:37: unknown matcher `equal`")

    def test_block_scalar_uses_node_start(self, problems):
        """A folded multi-line line reports at the scalar's start."""
        found = problems(with_steps("  - prompt: x\n  - assert_tool_call: >\n      book where\n"
                                    "      a equal 1\n"))
        assert found[0].startswith("6:23: unknown matcher `equal`")

    def test_unknown_step(self, problems):
        """An unknown step key gets a did-you-mean."""
        assert problems(with_steps("  - prompt: x\n  - assert_tool_calls: t\n")) == [
            "6:5: unknown step `assert_tool_calls` — did you mean `assert_tool_call`?"
        ]

    def test_two_keys_in_one_step(self, problems):
        """A step with two keys is an error at the second key."""
        assert problems(with_steps("  - prompt: x\n    assert: reply contains y\n")) == [
            "6:5: a step has one key, found `prompt` and `assert` — "
            "start each step on its own `- ` line"
        ]

    def test_scalar_step(self, problems):
        """A step that is plain text is an error."""
        assert problems(with_steps("  - prompt hi\n")) == [
            "5:5: a step must be `<kind>: <text>`, found `prompt hi` — "
            "e.g. `- prompt: …` or `- assert_tool_call: <tool>`"
        ]

    def test_no_prompt(self, problems):
        """A flow without a prompt step is an error."""
        assert problems(with_steps("  - assert: reply contains x\n")) == [
            "4:1: the flow has no `prompt` step — "
            "add `- prompt: <what the user says to the agent>`"
        ]

    def test_empty_steps(self, problems):
        """An empty steps list is an error."""
        assert "`steps` is empty" in problems(with_steps("  []\n"))[0]

    def test_null_steps(self, problems):
        """`steps:` with nothing is an error."""
        assert "`steps` is empty" in problems("name: n\nagent:\n  command: a\nsteps:\n")[0]

    def test_empty_prompt(self, problems):
        """An empty prompt is an error."""
        assert "`prompt` is empty" in problems(with_steps("  - prompt: ''\n"))[0]

    def test_bad_reply(self, problems):
        """A reply line that does not start with `reply` is an error."""
        assert "`assert:` checks the reply" in problems(
            with_steps("  - prompt: x\n  - assert: output contains y\n"))[0]

    def test_prompt_with_malformed_variable(self, problems):
        """A malformed ${ in a prompt is an error at its column."""
        assert problems(with_steps("  - prompt: hi ${ there\n"))[0].startswith(
            "5:16: malformed variable reference")

    def test_problems_sorted_and_collected(self, problems):
        """Every problem in the file is reported, in file order."""
        found = problems(with_steps(
            "  - prompt: x\n  - assert_tool_call: a where b equal 1\n  - asert: x\n",
            "strict: 3\n"))
        assert [int(p.split(":")[0]) for p in found] == [4, 7, 8]


class TestVolatile:
    def test_presets_and_rules(self, load):
        """Preset names and rules parse; patterns compile."""
        spec = load(MINIMAL + """\
volatile:
  - claude-code
  - name: session_id
    path: metadata.user_id
    pattern: '"session_id":"[0-9a-f-]{36}"'
  - name: item-ids
    path: input.*.id
""")
        assert spec.presets == ("claude-code",)
        session, items = spec.volatile
        assert session.segments == ("metadata", "user_id")
        assert session.pattern is not None
        assert session.pattern.search('"session_id":"' + "a" * 36 + '"')
        assert (items.path, items.segments, items.pattern) == (
            "input.*.id", ("input", "*", "id"), None)

    def test_unknown_preset(self, problems):
        """An unknown preset gets a did-you-mean."""
        assert problems(MINIMAL + "volatile:\n  - codx\n") == [
            "7:5: unknown volatile preset `codx` — did you mean `codex`?"
        ]

    def test_every_documented_preset_is_accepted(self):
        """The presets of the three measured agents load (their names come from flowproof.normalize)."""
        for name in ("claude-code", "codex", "openai-agents"):
            assert parse_spec(MINIMAL + f"volatile:\n  - {name}\n", "f.flow.yaml").presets == (name,)

    @pytest.mark.parametrize("path", [
        "messages", "messages.0", "messages.*", "messages.0.content", "messages.0.content.0.text",
        "input", "input.3", "input.*.content", "system", "system.0", "system.0.text",
        "instructions", "contents", "contents.0", "contents.0.parts", "systemInstruction",
        "systemInstruction.parts.0.text",
    ])
    def test_refused_without_pattern(self, problems, path):
        """A pattern-less rule over a whole message or system prompt is refused with the reason."""
        found = problems(MINIMAL + f"volatile:\n  - name: r\n    path: {path}\n")
        assert len(found) == 1
        assert "it would hide exactly the edit replay exists to catch" in found[0]
        assert re.search(r"would cover a whole (message|system prompt)", found[0])

    def test_refusal_message(self, problems):
        """The refusal message is pinned."""
        assert problems(MINIMAL + "volatile:\n  - name: r\n    path: system.0.text\n") == [
            "8:11: volatile rule `r` on `system.0.text` would cover a whole system prompt: it "
            "would hide exactly the edit replay exists to catch — add `pattern:` matching only "
            "the span that changes, or point `path` at the field that holds it"
        ]

    @pytest.mark.parametrize("path", ["messages.0.content", "system.0.text", "instructions",
                                      "input.*.content.0.text"])
    def test_allowed_with_pattern(self, load, path):
        """A pattern narrows a rule to a span, so message and system paths are allowed."""
        spec = load(MINIMAL + f"volatile:\n  - name: r\n    path: {path}\n"
                    "    pattern: cch=[0-9a-f]+\n")
        assert spec.volatile[0].path == path

    @pytest.mark.parametrize("path", ["tools", "tools.*.description", "model", "functions.0"])
    @pytest.mark.parametrize("pattern", ["", "    pattern: x\n"])
    def test_tools_and_model_always_refused(self, problems, path, pattern):
        """The tool list and the model are refused with or without a pattern."""
        found = problems(MINIMAL + f"volatile:\n  - name: r\n    path: {path}\n{pattern}")
        assert re.search(r"would cover (the tool list|the model)", found[0])

    @pytest.mark.parametrize("path", ["metadata.user_id", "input.3.id", "prompt_cache_key",
                                      "messages.0.content.0.cache_control", "client_metadata"])
    def test_metadata_allowed_without_pattern(self, load, path):
        """Metadata fields may be covered whole."""
        spec = load(MINIMAL + f"volatile:\n  - name: r\n    path: {path}\n")
        assert spec.volatile[0].path == path

    def test_refusal_function(self):
        """volatile_refusal names what a path would cover."""
        assert volatile_refusal(("messages", "0"), False) == "a whole message"
        assert volatile_refusal(("messages", "0"), True) is None
        assert volatile_refusal(("tools",), True) == "the tool list"
        assert volatile_refusal(("metadata", "user_id"), False) is None

    @pytest.mark.parametrize(("entry", "message"), [
        ("  - name: Bad\n    path: a\n", "volatile rule name `Bad` is not allowed"),
        ("  - path: a\n", "a `volatile` rule has no `name`"),
        ("  - name: r\n", "a `volatile` rule has no `path`"),
        ("  - name: r\n    path: a..b\n", "has an empty segment"),
        ("  - name: r\n    path: '*.a'\n", "starts with `*`"),
        ("  - name: r\n    path: a\n    pattern: '[x'\n", "bad regular expression `[x`"),
        ("  - name: r\n    path: a\n    pattern: 'x*'\n", "matches the empty string"),
        ("  - name: r\n    path: a\n    patern: x\n", "did you mean `pattern`?"),
        ("  - name: r\n    path: a\n  - name: r\n    path: b\n", "is declared twice"),
        ("  - [a]\n", "must be a mapping"),
    ])
    def test_rule_errors(self, problems, entry, message):
        """Each malformed rule is reported."""
        assert message in problems(MINIMAL + "volatile:\n" + entry)[0]

    def test_bracket_index_path_is_refused(self, problems):
        """A bracket-indexed path is an error instead of a key that slips past the refusals."""
        assert problems(MINIMAL + "volatile:\n  - name: r\n    path: messages[0].content\n") == [
            (
                "8:11: the path `messages[0].content` indexes a list with brackets; write "
                "`messages.0.content` — write a dotted body path such as `metadata.user_id` "
                "(`*` = every list element)"
            )
        ]


class TestFileAndYamlErrors:
    def test_missing_file(self, tmp_path):
        """A missing file is a SpecError at 1:1."""
        path = tmp_path / "nope.flow.yaml"
        with pytest.raises(SpecError) as info:
            load_spec(path)
        assert str(info.value) == f"{path}:1:1: the spec file does not exist — check the path"

    def test_directory(self, tmp_path):
        """A directory is a SpecError."""
        with pytest.raises(SpecError, match="is a directory"):
            load_spec(tmp_path)

    def test_not_utf8(self, tmp_path):
        """Bytes that are not UTF-8 are a SpecError."""
        path = tmp_path / "x.flow.yaml"
        path.write_bytes(b"name: \xff\n")
        with pytest.raises(SpecError, match="not UTF-8"):
            load_spec(path)

    def test_yaml_syntax_error_position(self, problems):
        """A YAML syntax error carries the mark's line and column."""
        found = problems("name: n\nagent:\n  command: [a\nsteps: x\n")
        assert len(found) == 1 and found[0].startswith("4:")
        assert "invalid YAML" in found[0]

    def test_yaml_tab_error(self, problems):
        """A tab where YAML forbids it is a SpecError with a position."""
        assert problems("name: n\n\tagent: x\n")[0].startswith("2:1: invalid YAML")

    def test_reader_error_position(self, problems):
        """A character YAML refuses is reported at its line and column."""
        assert problems("name: n\nagent: a\x07b\n")[0].startswith("2:9: invalid YAML")

    def test_empty_file(self, problems):
        """An empty file is an error."""
        assert problems("") == [
            "1:1: the spec is empty — start with `name:`, `agent:` and `steps:`"]

    def test_two_documents(self, problems):
        """Two YAML documents are an error."""
        assert "invalid YAML" in problems(MINIMAL + "---\nname: b\n")[0]

    def test_deep_nesting(self, problems):
        """Absurdly deep nesting is a SpecError, not a RecursionError."""
        assert problems("name: " + "[" * 5000 + "]" * 5000 + "\n")


class TestExampleSpecs:
    @pytest.mark.parametrize("name", ["booking.flow.yaml", "plan_mode_guard.flow.yaml"])
    def test_loads(self, name):
        """Each shipped example spec loads without error."""
        spec = load_spec(EXAMPLES / name)
        assert spec.prompts and spec.cassette.name == name.replace(".flow.yaml", ".cassette.json")

    def test_booking_content(self):
        """The booking example has its three tools and assertions."""
        spec = load_spec(EXAMPLES / "booking.flow.yaml")
        assert spec.agent.command == "python booking_agent.py"
        assert spec.tool_results["search_flights"] == {"flights": [{"id": "KQ311", "dest": "NBO"}]}
        calls = [s for s in spec.steps if isinstance(s, ToolCallAssertion)]
        assert [(c.tool, c.clauses[0].value) for c in calls] == [
            ("search_flights", "NBO"), ("create_booking", "KQ311")]

    def test_guard_content(self):
        """The guard example declares the MCP tool and a negated assertion."""
        spec = load_spec(EXAMPLES / "plan_mode_guard.flow.yaml")
        assert spec.mcp[0].url == "${EXPORT_MCP_URL}"
        assert spec.agent.env == (("AGENT_MODE", "plan"),)
        assert spec.steps[-1].negated

    @pytest.mark.parametrize(("name", "old", "new", "where"), [
        ("booking.flow.yaml", "destination contains NBO", "destination contain NBO", "14:56"),
        ("booking.flow.yaml", "flight.id equals KQ311", "flight.id matches [KQ", "15:62"),
        ("booking.flow.yaml", "assert_tool_call: create_booking", "assert_tool_call: create_bookng",
         "15:23"),
        ("plan_mode_guard.flow.yaml", "  env:", "  envv:", "11:3"),
        ("plan_mode_guard.flow.yaml", "${EXPORT_MCP_URL}", "${EXPORT-MCP}", "15:10"),
        ("plan_mode_guard.flow.yaml", "assert_no_tool_call: export_to_endpoint",
         "assert_no_tool_call: export_to_endpont", "24:26"),
    ])
    def test_broken_copy_fails_with_position(self, tmp_path, name, old, new, where):
        """A broken copy of an example fails with a file:line:col message."""
        text = (EXAMPLES / name).read_text(encoding="utf-8")
        assert old in text
        path = tmp_path / name
        path.write_text(text.replace(old, new), encoding="utf-8")
        with pytest.raises(SpecError) as info:
            load_spec(path)
        assert str(info.value).startswith(f"{path}:{where}: ")


def _fuzz_dir(factory):
    return factory.mktemp("fuzz")


YAMLISH = st.lists(st.sampled_from([
    "name: n\n", "agent:\n", "  command: a\n", "  url: http://x\n", "  env: {A: 1}\n",
    "steps:\n", "  - prompt: x\n", "  - assert_tool_call: t where a equals b\n",
    "  - assert: reply contains y\n", "tools:\n", "  - name: t\n", "    result: {a: [1]}\n",
    "volatile:\n", "  - codex\n", "  - name: r\n", "    path: messages.0\n", "    pattern: '['\n",
    "mcp:\n", "  - name: m\n", "    url: ${U}\n", "    tools: [{name: t}]\n", "strict: yes\n",
    "cassette: c.json\n", "- x\n", "  ", "&a [*a]\n", "!!binary x\n", ": :\n", "'\n", "\t", "{",
]) | st.text(max_size=8), max_size=14).map("".join)


class TestFuzz:
    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.text())
    def test_arbitrary_text(self, text):
        """Arbitrary text either loads or raises SpecError with positions."""
        self._check(text)

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(YAMLISH)
    def test_yamlish_text(self, text):
        """YAML-shaped fragments either load or raise SpecError with positions."""
        self._check(text)

    @settings(max_examples=100, deadline=None)
    @given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                        lambda c: st.lists(c, max_size=3) | st.dictionaries(
                            st.sampled_from(["name", "agent", "steps", "tools", "command",
                                             "prompt", "result", "volatile", "path", "x"]),
                            c, max_size=4), max_leaves=12))
    def test_arbitrary_yaml_data(self, data):
        """Any YAML document either loads or raises SpecError."""
        self._check(yaml.safe_dump(data))

    @staticmethod
    def _check(text):
        try:
            spec = parse_spec(text, "fuzz.flow.yaml")
        except SpecError as e:
            assert all(p.line >= 1 and p.col >= 1 and p.message for p in e.problems)
        else:
            assert spec.prompts


class TestFuzzOnDisk:
    @settings(max_examples=50, deadline=None)
    @given(st.binary(max_size=200))
    def test_arbitrary_bytes_file(self, tmp_path_factory, data):
        """Any file content either loads or raises SpecError through load_spec."""
        path = tmp_path_factory.mktemp("fuzz") / "x.flow.yaml"
        path.write_bytes(data)
        try:
            load_spec(path)
        except SpecError as e:
            assert e.problems
