"""Load a ``*.flow.yaml`` file into a `FlowSpec`, with ``file:line:col`` for every problem.

The YAML is composed into nodes (not constructed into plain data) so that every
key and value keeps its position; the walker below checks each node and records
*all* the problems it can find before raising one `SpecError`. Only ``tools``
and ``mcp`` ``result:`` values are turned into plain data (JSON-like: dict,
list, str, int, float, bool, None; YAML timestamps stay the text written).

``load_spec`` reads the file and nothing else: ``${VAR}`` references are kept
(syntax-checked) for ``resolve_variables`` to fill in at run time.
"""

from __future__ import annotations

import math
import re
import shlex
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from flowproof.errors import SpecError, SpecProblem
from flowproof.files import UnreadableFileError, read_regular_file
from flowproof.mcp.stdio import standin_variable
from flowproof.normalize import PRESETS
from flowproof.options import Route
from flowproof.spec.clauses import compile_pattern, parse_reply_line, parse_tool_line, suggest
from flowproof.spec.paths import split_path
from flowproof.spec.types import (
    AgentSpec,
    FlowSpec,
    Location,
    McpServer,
    PromptStep,
    ReplyAssertion,
    Step,
    ToolCallAssertion,
    ToolMock,
    VolatileRule,
)
from flowproof.spec.variables import VariableSyntaxError, check_variables, has_variables
from flowproof.wire.providers import conversation_vocabulary

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_ALIASES",
    "MAX_EXPANDED_CHARS",
    "MAX_EXPANDED_NODES",
    "MAX_SPEC_BYTES",
    "default_cassette_path",
    "load_spec",
    "parse_spec",
    "volatile_refusal",
]

DEFAULT_TIMEOUT = 120.0
#: A spec is a page of prose and a few tool results; anything bigger is refused before it is
#: parsed (parsing tens of megabytes of YAML takes minutes in pure Python).
MAX_SPEC_BYTES = 1024 * 1024
#: YAML aliases are shared nodes that the walker expands: nested anchors ("an alias bomb")
#: turn a few lines into billions of values. Both the number of aliases and what the
#: document expands to are bounded, and checked before anything is expanded.
MAX_ALIASES = 200
MAX_EXPANDED_NODES = 100_000
MAX_EXPANDED_CHARS = 8 * 1024 * 1024

_TAG = "tag:yaml.org,2002:"
_NULL, _BOOL, _INT, _FLOAT, _STR = (_TAG + t for t in ("null", "bool", "int", "float", "str"))
_TIMESTAMP = _TAG + "timestamp"

_TOP_KEYS = ("name", "app", "agent", "tools", "mcp", "strict", "cassette", "volatile",
             "on_compare", "steps", "allow_error_turns")
_AGENT_KEYS = ("command", "url", "env", "timeout", "cwd", "route")
_TOOL_KEYS = ("name", "result")
_MCP_KEYS = ("name", "url", "command", "tools")
_RULE_KEYS = ("name", "path", "pattern")
_STEP_KEYS = ("prompt", "assert_tool_call", "assert_no_tool_call", "assert")
_ROUTES = tuple(r.value for r in Route)

_RULE_NAME = re.compile(r"[a-z0-9_-]+")
_CALLABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")
_URL = re.compile(r"https?://\S+")

# Volatile-rule refusals (docs/volatile.md): body roots that carry the conversation, and keys
# below them that carry content rather than metadata, for every provider (wire/providers.py).
_VOCABULARY = conversation_vocabulary()
_CONVERSATION_ROOTS = _VOCABULARY.message_roots
_SYSTEM_ROOTS = _VOCABULARY.system_roots
_TOOL_ROOTS = _VOCABULARY.tool_roots
_MODEL_ROOTS = _VOCABULARY.model_roots
_CONTENT_KEYS = _VOCABULARY.content_keys
_REFUSAL_REASON = "it would hide exactly the edit replay exists to catch"


def volatile_refusal(segments: tuple[str, ...], has_pattern: bool) -> str | None:
    """Why a volatile rule on ``segments`` is refused, or None when it is allowed.

    Never allowed: the tool list and the model, pattern or not. Without a pattern
    (the whole value is blanked), also refused: any path that covers a whole
    message or a whole system prompt — the conversation/system root, an element of
    it, or a path made only of indices, ``*`` and content-bearing keys below it
    (``messages.0.content.0.text``). A metadata field inside a message
    (``input.3.id``, ``messages.0.content.0.cache_control``) is fine.
    """
    root = segments[0]
    if root in _TOOL_ROOTS:
        return "the tool list"
    if root in _MODEL_ROOTS:
        return "the model"
    if has_pattern:
        return None
    if root in _CONVERSATION_ROOTS or root in _SYSTEM_ROOTS:
        below = segments[1:]
        if all(s == "*" or s.isdigit() or s in _CONTENT_KEYS for s in below):
            return "a whole system prompt" if root in _SYSTEM_ROOTS else "a whole message"
    return None


def default_cassette_path(spec_path: Path) -> Path:
    """``booking.flow.yaml`` -> ``booking.cassette.json`` beside it."""
    name = spec_path.name
    for suffix in (".yaml", ".yml"):
        name = name.removesuffix(suffix)
    name = name.removesuffix(".flow") or "flow"
    return spec_path.parent / f"{name}.cassette.json"


def _preset_names() -> tuple[str, ...]:
    return tuple(sorted(PRESETS))


def _kind(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    if node.tag == _NULL:
        return "nothing"
    value = node.value if len(node.value) <= 40 else node.value[:37] + "..."
    return f"`{value}`"


class _Walker:
    """Turns the composed node tree into a FlowSpec, collecting problems as it goes."""

    def __init__(self, display: str, spec_path: Path) -> None:
        self.display = display
        self.spec_path = spec_path
        self.spec_dir = spec_path.parent
        self.problems: list[SpecProblem] = []
        self.saw_prompt = False
        self._constructor = yaml.constructor.SafeConstructor()

    # -- problems and locations ------------------------------------------------

    def loc(self, node: Node, offset: int = 0) -> Location:
        mark = node.start_mark
        return Location(self.display, mark.line + 1, mark.column + 1 + offset)

    def problem(self, node: Node, message: str, hint: str = "", offset: int = 0) -> None:
        loc = self.loc(node, offset)
        self.problems.append(SpecProblem(loc.path, loc.line, loc.col, message, hint))

    def absorb(self, error: SpecError) -> None:
        self.problems.extend(error.problems)

    def text_origin(self, node: ScalarNode) -> tuple[Location, bool]:
        """Where a scalar's text starts, and whether columns inside it can be trusted."""
        span = node.end_mark.index - node.start_mark.index
        if node.style is None and span == len(node.value):
            return self.loc(node), True
        if node.style in ("'", '"') and span == len(node.value) + 2:
            return self.loc(node, 1), True
        return self.loc(node), False

    # -- scalars -----------------------------------------------------------------

    def mapping(self, node: Node, what: str) -> dict[str, tuple[ScalarNode, Node]] | None:
        """A mapping node's entries by key text; reports non-text and duplicate keys."""
        if not isinstance(node, MappingNode):
            self.problem(node, f"{what} must be a mapping, found {_kind(node)}",
                         "write it as `key: value` lines")
            return None
        entries: dict[str, tuple[ScalarNode, Node]] = {}
        for key, value in node.value:
            if not isinstance(key, ScalarNode) or key.tag == _TAG + "merge":
                self.problem(key, f"a key in {what} must be plain text",
                             "write `key: value`; merge keys (<<) are not supported")
                continue
            if key.value in entries:
                self.problem(key, f"`{key.value}` appears twice in {what}", "keep only one")
                continue
            entries[key.value] = (key, value)
        return entries

    def check_keys(self, entries: dict[str, tuple[ScalarNode, Node]], allowed: tuple[str, ...],
                   what: str) -> None:
        for name, (key, _) in entries.items():
            if name not in allowed:
                self.problem(key, f"unknown key `{name}` in {what}", suggest(name, allowed))

    def sequence(self, node: Node, what: str) -> list[Node] | None:
        if isinstance(node, ScalarNode) and node.tag == _NULL:
            return []
        if not isinstance(node, SequenceNode):
            self.problem(node, f"{what} must be a list, found {_kind(node)}",
                         "write one `- ` entry per line")
            return None
        return list(node.value)

    def text(self, node: Node, what: str, *, allow_empty: bool = False) -> str | None:
        """A scalar as the text written (``8080`` -> ``"8080"``); None after reporting."""
        if not isinstance(node, ScalarNode):
            self.problem(node, f"{what} must be text, found {_kind(node)}",
                         "quote it if it should be a single string")
            return None
        if node.tag == _NULL:
            self.problem(node, f"{what} is empty", "give it a value")
            return None
        if not allow_empty and not node.value.strip():
            self.problem(node, f"{what} is empty", "give it a value")
            return None
        return str(node.value)

    def template(self, node: Node, what: str) -> str | None:
        """Text that ``resolve_variables`` will fill in: its ``${`` syntax is checked now."""
        value = self.text(node, what)
        if value is not None and not self.check_variable_syntax(node, value):
            return None
        return value

    def check_variable_syntax(self, node: Node, value: str) -> bool:
        try:
            check_variables(value)
        except VariableSyntaxError as e:
            offset = 0
            if isinstance(node, ScalarNode):
                origin, exact = self.text_origin(node)
                if exact:
                    offset = origin.col - self.loc(node).col + e.offset
            self.problem(node, str(e),
                         "write ${NAME} (letters, digits, underscore), or $${ for a literal ${",
                         offset)
            return False
        return True

    def boolean(self, node: Node, what: str) -> bool | None:
        if isinstance(node, ScalarNode) and node.tag == _BOOL:
            return bool(self._constructor.construct_yaml_bool(node))
        self.problem(node, f"{what} must be true or false, found {_kind(node)}")
        return None

    def number(self, node: Node, what: str) -> float | None:
        if isinstance(node, ScalarNode) and node.tag in (_INT, _FLOAT):
            try:
                if node.tag == _INT:
                    value = float(self._constructor.construct_yaml_int(node))
                else:
                    value = float(self._constructor.construct_yaml_float(node))
            except (ValueError, OverflowError):
                value = math.nan
            if math.isfinite(value) and value > 0:
                return value
        self.problem(node, f"{what} must be a positive number of seconds, found {_kind(node)}")
        return None

    def data(self, node: Node, stack: tuple[int, ...] = ()) -> Any:
        """A ``result:`` value as plain JSON-like data (None after reporting a problem)."""
        if id(node) in stack:
            raise _Unusable(node, "a YAML alias refers to itself", "results must be finite data")
        stack = (*stack, id(node))
        if isinstance(node, ScalarNode):
            try:
                if node.tag == _NULL:
                    return None
                if node.tag == _BOOL:
                    return bool(self._constructor.construct_yaml_bool(node))
                if node.tag == _INT:
                    return int(self._constructor.construct_yaml_int(node))
                if node.tag == _FLOAT:
                    return float(self._constructor.construct_yaml_float(node))
            except (ValueError, OverflowError):
                return node.value
            if node.tag in (_STR, _TIMESTAMP):
                # A timestamp stays the text written: results are sent as JSON.
                if not self.check_variable_syntax(node, node.value):
                    raise _Unusable(node, "", "")
                return node.value
            raise _Unusable(node, f"unsupported YAML tag `{node.tag}` in a result",
                            "results are JSON-like: mappings, lists, text, numbers, booleans, null")
        if isinstance(node, SequenceNode):
            return [self.data(item, stack) for item in node.value]
        if isinstance(node, MappingNode):
            out: dict[str, Any] = {}
            for key, value in node.value:
                if not isinstance(key, ScalarNode) or key.tag == _TAG + "merge":
                    raise _Unusable(key, "a key in a result must be plain text",
                                    "merge keys (<<) and complex keys are not supported")
                out[key.value] = self.data(value, stack)
            return out
        raise _Unusable(node, "unsupported YAML node in a result", "")  # pragma: no cover

    def result(self, node: Node) -> Any:
        try:
            return self.data(node)
        except _Unusable as e:
            if e.message:
                self.problem(e.node, e.message, e.hint)
            return None

    # -- sections ----------------------------------------------------------------

    def spec(self, root: Node) -> FlowSpec | None:
        entries = self.mapping(root, "the spec")
        if entries is None:
            return None
        self.check_keys(entries, _TOP_KEYS, "the spec")

        name: str | None = None
        if "name" in entries:
            name = self.text(entries["name"][1], "`name`")
        else:
            self.problem(root, "the spec has no `name`", "add `name: <what this flow checks>`")

        app = "agent"
        if "app" in entries:
            value = self.text(entries["app"][1], "`app`")
            if value is not None and value != "agent":
                self.problem(entries["app"][1], f"unsupported app `{value}`",
                             "only `app: agent` exists; remove the key or write `app: agent`")

        agent: AgentSpec | None = None
        if "agent" in entries:
            agent = self.agent(entries["agent"][0], entries["agent"][1])
        else:
            self.problem(root, "the spec has no `agent`",
                         "add `agent:` with `command: <how to start it>` or `url: <where it runs>`")

        tools = self.tools(entries["tools"][1]) if "tools" in entries else ()
        mcp = self.mcp(entries["mcp"][1]) if "mcp" in entries else ()
        self.check_duplicate_tools(tools, mcp)

        strict = False
        if "strict" in entries:
            strict = bool(self.boolean(entries["strict"][1], "`strict`"))
        allow_error_turns = False
        if "allow_error_turns" in entries:
            allow_error_turns = bool(self.boolean(entries["allow_error_turns"][1],
                                                  "`allow_error_turns`"))

        cassette = default_cassette_path(self.spec_path)
        if "cassette" in entries:
            value = self.text(entries["cassette"][1], "`cassette`")
            if value is not None and value.endswith((".recording.json", ".rejected.json")):
                # Those are a run's unfinished or refused recordings, never a cassette.
                self.problem(entries["cassette"][1],
                             f"`cassette` names `{value}`, a staging or rejected recording",
                             "name a `*.cassette.json` file")
            elif value is not None:
                cassette = self.spec_dir / value

        volatile: tuple[VolatileRule, ...] = ()
        presets: tuple[str, ...] = ()
        if "volatile" in entries:
            volatile, presets = self.volatile(entries["volatile"][1])

        on_compare: str | None = None
        if "on_compare" in entries:
            node = entries["on_compare"][1]
            on_compare = self.text(node, "`on_compare`")
            if on_compare is not None and not _CALLABLE.fullmatch(on_compare):
                self.problem(node, f"`on_compare` must name a callable as `module:function`, "
                             f"found `{on_compare}`", "e.g. `on_compare: my_checks:on_drift`")
                on_compare = None

        steps: tuple[Step, ...] = ()
        if "steps" in entries:
            declared = {t.name for t in tools} | {t.name for s in mcp for t in s.tools}
            steps = self.steps(entries["steps"][0], entries["steps"][1], declared)
        else:
            self.problem(root, "the spec has no `steps`",
                         "add `steps:` with a `- prompt: …` and the assertions to check")

        if self.problems or name is None or agent is None:
            return None
        return FlowSpec(
            path=self.spec_path,
            name=name,
            app=app,
            agent=agent,
            tools=tools,
            mcp=mcp,
            strict=strict,
            cassette=cassette,
            volatile=volatile,
            presets=presets,
            steps=steps,
            on_compare=on_compare,
            location=self.loc(root),
            allow_error_turns=allow_error_turns,
        )

    def agent(self, key: Node, node: Node) -> AgentSpec | None:
        entries = self.mapping(node, "`agent`")
        if entries is None:
            return None
        self.check_keys(entries, _AGENT_KEYS, "`agent`")
        command = url = None
        if "command" in entries:
            command = self.template(entries["command"][1], "`agent.command`")
        if "url" in entries:
            url_node = entries["url"][1]
            url = self.template(url_node, "`agent.url`")
            if url is not None and not has_variables(url) and not _URL.fullmatch(url):
                self.problem(url_node, f"`agent.url` must be an http(s) URL, found `{url}`",
                             "e.g. `url: http://127.0.0.1:8080/chat`")
        if "command" in entries and "url" in entries:
            self.problem(entries["url"][0], "`agent` has both `command` and `url`",
                         "keep one: `command` starts a process, `url` reaches a running service")
        elif "command" not in entries and "url" not in entries:
            self.problem(key, "`agent` needs `command` or `url`",
                         "add `command: <how to start the agent>` or `url: <where it listens>`")

        env: list[tuple[str, str]] = []
        if "env" in entries:
            env_entries = self.mapping(entries["env"][1], "`agent.env`")
            for name, (env_key, value_node) in (env_entries or {}).items():
                if not name or "=" in name or "\0" in name:
                    self.problem(env_key, f"`{name}` is not a valid environment variable name",
                                 "use letters, digits and underscores")
                    continue
                if isinstance(value_node, ScalarNode) and value_node.tag == _NULL:
                    self.problem(env_key, f"`agent.env.{name}` has no value",
                                 f'write `{name}: ""` for an empty value')
                    continue
                value = self.text(value_node, f"`agent.env.{name}`", allow_empty=True)
                if value is not None and self.check_variable_syntax(value_node, value):
                    env.append((name, value))

        timeout = DEFAULT_TIMEOUT
        if "timeout" in entries:
            timeout = self.number(entries["timeout"][1], "`agent.timeout`") or DEFAULT_TIMEOUT

        cwd: Path | None = self.spec_dir
        if "cwd" in entries:
            value = self.template(entries["cwd"][1], "`agent.cwd`")
            if value is not None:
                # A templated cwd is joined to the spec dir after resolution, not before.
                cwd = Path(value) if has_variables(value) else self.spec_dir / value

        route = Route.PROXY
        if "route" in entries:
            route_node = entries["route"][1]
            value = self.text(route_node, "`agent.route`")
            if value is not None and value not in _ROUTES:
                self.problem(route_node, f"unknown route `{value}`", suggest(value, _ROUTES))
            elif value is not None:
                route = Route(value)

        if command is None and url is None:
            return None
        return AgentSpec(
            command=command,
            url=url,
            env=tuple(env),
            timeout=timeout,
            cwd=cwd,
            route=route,
            location=self.loc(key),
        )

    def tool_entries(self, node: Node, what: str, *, need_result: bool) -> tuple[ToolMock, ...]:
        items = self.sequence(node, what)
        tools: list[ToolMock] = []
        for item in items or []:
            if isinstance(item, ScalarNode) and item.tag != _NULL:
                self.problem(item, f"a {what} entry must be a mapping, found `{item.value}`",
                             f"write `- name: {item.value}`")
                continue
            entries = self.mapping(item, f"a {what} entry")
            if entries is None:
                continue
            self.check_keys(entries, _TOOL_KEYS, f"a {what} entry")
            if "name" not in entries:
                self.problem(item, f"a {what} entry has no `name`", "add `name: <tool name>`")
                continue
            name_node = entries["name"][1]
            name = self.text(name_node, "the tool `name`")
            if name is None:
                continue
            if any(c.isspace() for c in name):
                self.problem(name_node, f"tool name `{name}` contains whitespace",
                             "use the tool's exact name as the model sees it")
                continue
            has_result = "result" in entries
            if need_result and not has_result:
                self.problem(item, f"mcp tool `{name}` has no `result`",
                             "flowproof answers mcp tools in place of the server: add `result:`")
                continue
            result = self.result(entries["result"][1]) if has_result else None
            tools.append(ToolMock(name=name, result=result, has_result=has_result,
                                  location=self.loc(item)))
        return tuple(tools)

    def tools(self, node: Node) -> tuple[ToolMock, ...]:
        return self.tool_entries(node, "`tools`", need_result=False)

    def mcp(self, node: Node) -> tuple[McpServer, ...]:
        servers: list[McpServer] = []
        seen: set[str] = set()
        for item in self.sequence(node, "`mcp`") or []:
            entries = self.mapping(item, "an `mcp` entry")
            if entries is None:
                continue
            self.check_keys(entries, _MCP_KEYS, "an `mcp` entry")
            name = url = command = None
            if "name" in entries:
                name = self.text(entries["name"][1], "the mcp server `name`")
                if name is not None and name in seen:
                    self.problem(entries["name"][1], f"mcp server `{name}` is listed twice",
                                 "give each server its own name")
                    name = None
                elif name is not None:
                    seen.add(name)
            else:
                self.problem(item, "an `mcp` entry has no `name`", "add `name: <server name>`")
            if "url" in entries and "command" in entries:
                self.problem(entries["command"][0], "an `mcp` entry has both a `url` and a `command`",
                             "keep `url:` for a server the agent reaches over HTTP, `command:` for one "
                             "it launches (stdio)")
            elif "url" in entries:
                url_node = entries["url"][1]
                url = self.template(url_node, "the mcp server `url`")
                if url is not None and not has_variables(url) and not _URL.fullmatch(url):
                    self.problem(url_node, f"the mcp server `url` must be an http(s) URL, "
                                 f"found `{url}`", "e.g. `url: http://127.0.0.1:9000/mcp`")
                    url = None
            elif "command" in entries:
                command = self.mcp_command(entries["command"][1])
            else:
                self.problem(item, "an `mcp` entry has no `url` and no `command`",
                             "add `url: <the server's URL>` for an HTTP server, or `command: <how to "
                             "start it>` for a stdio server (${VAR} allowed in both)")
            tools: tuple[ToolMock, ...] = ()
            if "tools" in entries:
                # Without `result:` an mcp tool is a declaration only: it passes through (docs/mcp.md).
                tools = self.tool_entries(entries["tools"][1], "`mcp.tools`", need_result=False)
                if not tools and not entries["tools"][1].value:
                    self.problem(entries["tools"][1], "an `mcp` entry lists no tools",
                                 "list the tools flowproof should answer")
            else:
                self.problem(item, "an `mcp` entry has no `tools`",
                             "list the tools flowproof should answer, each with `result:`")
            if name is not None and (url is not None or command is not None):
                servers.append(McpServer(name=name, url=url, tools=tools, location=self.loc(item),
                                         command=command))
        self.check_standin_variables(servers)
        return tuple(servers)

    def mcp_command(self, node: Node) -> str | None:
        """A stdio server's command: split like a shell splits words (quotes), run without one."""
        command = self.template(node, "the mcp server `command`")
        if command is None:
            return None
        try:
            words = shlex.split(command)
        except ValueError as e:
            self.problem(node, f"the mcp server `command` cannot be split into words ({e})",
                         "close the quote, or escape it with a backslash")
            return None
        if not words:
            self.problem(node, "the mcp server `command` is empty", "write the command that starts the server")
            return None
        return command

    def check_standin_variables(self, servers: list[McpServer]) -> None:
        # The agent finds each stdio stand-in by a variable derived from the entry's name.
        seen: dict[str, str] = {}
        for server in servers:
            if server.command is None:
                continue
            variable = standin_variable(server.name)
            if variable in seen:
                loc = server.location
                self.problems.append(SpecProblem(
                    loc.path, loc.line, loc.col,
                    f"mcp servers `{seen[variable]}` and `{server.name}` would share the variable {variable}",
                    "rename one (letters and digits decide the variable; other characters become `_`)"))
            seen[variable] = server.name

    def check_duplicate_tools(self, tools: tuple[ToolMock, ...],
                              mcp: tuple[McpServer, ...]) -> None:
        seen: set[str] = set()
        for tool in (*tools, *(t for s in mcp for t in s.tools)):
            if tool.name in seen:
                loc = tool.location
                self.problems.append(SpecProblem(
                    loc.path, loc.line, loc.col, f"tool `{tool.name}` is declared twice",
                    "keep one entry (a tool is either a `tools:` mock or an `mcp:` tool)"))
            seen.add(tool.name)

    def volatile(self, node: Node) -> tuple[tuple[VolatileRule, ...], tuple[str, ...]]:
        rules: list[VolatileRule] = []
        presets: list[str] = []
        known = _preset_names()
        names: set[str] = set()
        for item in self.sequence(node, "`volatile`") or []:
            if isinstance(item, ScalarNode) and item.tag != _NULL:
                if item.value not in known:
                    self.problem(item, f"unknown volatile preset `{item.value}`",
                                 suggest(item.value, known))
                elif item.value in presets:
                    self.problem(item, f"volatile preset `{item.value}` is listed twice",
                                 "keep one")
                else:
                    presets.append(item.value)
                continue
            entries = self.mapping(item, "a `volatile` entry")
            if entries is None:
                continue
            rule = self.volatile_rule(item, entries, names)
            if rule is not None:
                rules.append(rule)
        return tuple(rules), tuple(presets)

    def volatile_rule(self, item: Node, entries: dict[str, tuple[ScalarNode, Node]],
                      names: set[str]) -> VolatileRule | None:
        self.check_keys(entries, _RULE_KEYS, "a `volatile` rule")
        ok = True
        name = path = None
        if "name" in entries:
            name_node = entries["name"][1]
            name = self.text(name_node, "the volatile rule `name`")
            if name is not None and not _RULE_NAME.fullmatch(name):
                self.problem(name_node, f"volatile rule name `{name}` is not allowed",
                             "use lowercase letters, digits, `_` and `-` (it becomes "
                             "«volatile:<name>» in the cassette)")
                ok = False
            elif name is not None and name in names:
                self.problem(name_node, f"volatile rule `{name}` is declared twice",
                             "give each rule its own name")
                ok = False
            elif name is not None:
                names.add(name)
        else:
            self.problem(item, "a `volatile` rule has no `name`", "add `name: <placeholder name>`")
        segments: tuple[str, ...] = ()
        if "path" in entries:
            path_node = entries["path"][1]
            path = self.text(path_node, "the volatile rule `path`")
            if path is not None:
                try:
                    segments = split_path(path)
                except ValueError as e:
                    self.problem(path_node, str(e), "write a dotted body path such as "
                                 "`metadata.user_id` (`*` = every list element)")
                    path = None
                else:
                    if segments[0] == "*":
                        self.problem(path_node, f"volatile path `{path}` starts with `*`",
                                     "the body is an object: start with one of its keys")
                        path = None
        else:
            self.problem(item, "a `volatile` rule has no `path`",
                         "add `path: <dotted body path>`, e.g. `metadata.user_id`")
        pattern: re.Pattern[str] | None = None
        if "pattern" in entries:
            pattern_node = entries["pattern"][1]
            text = self.text(pattern_node, "the volatile rule `pattern`")
            if text is None:
                ok = False
            else:
                try:
                    pattern = compile_pattern(text)
                except ValueError as e:
                    self.problem(pattern_node, str(e), "fix the pattern (Python `re` syntax)")
                    ok = False
                else:
                    if pattern.search("") is not None:
                        self.problem(pattern_node, f"volatile pattern `{text}` matches the "
                                     "empty string", "make it match at least one character")
                        ok = False
        if path is not None and segments:
            refused = volatile_refusal(segments, "pattern" in entries)
            if refused is not None:
                with_pattern = " even with a pattern" if "pattern" in entries else ""
                never = refused in ("the tool list", "the model")
                hint = ("remove the rule" if with_pattern or never
                        else "add `pattern:` matching only the span that changes, or point "
                             "`path` at the field that holds it")
                self.problem(entries["path"][1],
                             f"volatile rule `{name or '?'}` on `{path}` would cover {refused}"
                             f"{with_pattern}: {_REFUSAL_REASON}", hint)
                ok = False
        if not ok or name is None or path is None:
            return None
        return VolatileRule(name=name, path=path, segments=segments, pattern=pattern,
                            location=self.loc(item))

    def steps(self, key: Node, node: Node, declared: set[str]) -> tuple[Step, ...]:
        items = self.sequence(node, "`steps`")
        if items is None:
            return ()
        if not items:
            self.problem(node if isinstance(node, SequenceNode) else key,
                         "`steps` is empty", "add a `- prompt: …` step and its assertions")
            return ()
        steps: list[Step] = []
        failed = False
        for item in items:
            step = self.step(item, declared)
            if step is not None:
                steps.append(step)
            failed = failed or step is None
        # A step that failed to parse may have been meant as the prompt: say only that.
        if not self.saw_prompt and not failed:
            self.problem(key, "the flow has no `prompt` step",
                         "add `- prompt: <what the user says to the agent>`")
        return tuple(steps)

    def step(self, item: Node, declared: set[str]) -> Step | None:
        if isinstance(item, ScalarNode):
            self.problem(item, f"a step must be `<kind>: <text>`, found {_kind(item)}",
                         "e.g. `- prompt: …` or `- assert_tool_call: <tool>`")
            return None
        entries = self.mapping(item, "a step")
        if entries is None:
            return None
        if not entries:
            self.problem(item, "a step is empty", "e.g. `- prompt: …`")
            return None
        (kind, (key, value)), *others = entries.items()
        for other, (other_key, _) in others:
            self.problem(other_key, f"a step has one key, found `{kind}` and `{other}`",
                         "start each step on its own `- ` line")
        if kind not in _STEP_KEYS:
            self.problem(key, f"unknown step `{kind}`", suggest(kind, _STEP_KEYS))
            return None
        if kind == "prompt":
            self.saw_prompt = True
            text = self.template(value, "`prompt`")
            return None if text is None else PromptStep(text=text, location=self.loc(key))
        line = self.text(value, f"`{kind}`")
        if line is None:
            return None
        assert isinstance(value, ScalarNode)
        origin, exact = self.text_origin(value)
        if kind == "assert":
            try:
                reply = parse_reply_line(line, origin, offsets=exact)
            except SpecError as e:
                self.absorb(e)
                return None
            return ReplyAssertion(text=reply, source=line, location=self.loc(key))
        try:
            tool, clauses = parse_tool_line(line, origin, keyword=kind, offsets=exact)
        except SpecError as e:
            self.absorb(e)
            return None
        if declared and tool not in declared:
            self.problem(value, f"`{tool}` is not a declared tool",
                         suggest(tool, sorted(declared)) + " (declare it under `tools:` or "
                         "`mcp:`; an entry without `result:` only declares it)",
                         origin.col - self.loc(value).col)
            return None
        return ToolCallAssertion(tool=tool, clauses=clauses, negated=kind == "assert_no_tool_call",
                                 source=line, location=self.loc(key))


class _Unusable(Exception):
    """Internal: a result value that cannot become plain data (reported at ``node``)."""

    def __init__(self, node: Node, message: str, hint: str) -> None:
        super().__init__(message)
        self.node = node
        self.message = message
        self.hint = hint


def _yaml_problem(display: str, text: str, error: yaml.YAMLError) -> SpecProblem:
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    if mark is not None:
        line, col = mark.line + 1, mark.column + 1
    else:
        # A ReaderError (a character YAML forbids) carries only a character position.
        position = getattr(error, "position", 0) or 0
        line = text.count("\n", 0, position) + 1
        col = position - (text.rfind("\n", 0, position) + 1) + 1
    if isinstance(error, yaml.MarkedYAMLError):
        message = error.problem or error.context or "invalid YAML"
        if error.context and error.problem:
            message = f"{error.problem} ({error.context})"
    else:
        message = str(error).splitlines()[0]
    return SpecProblem(display, line, col, f"invalid YAML: {message}",
                       "fix the YAML syntax here (a `:` or `- ` inside text needs quotes)")


class _CountingLoader(yaml.SafeLoader):
    """A SafeLoader that remembers every alias it composes (where, and which node)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.aliases: list[tuple[yaml.Mark, Node]] = []

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            node = super().compose_node(parent, index)
            if node is not None:
                self.aliases.append((event.start_mark, node))
                if len(self.aliases) > MAX_ALIASES:
                    raise _TooManyAliases(event.start_mark)
            return node
        return super().compose_node(parent, index)


class _TooManyAliases(Exception):
    def __init__(self, mark: yaml.Mark) -> None:
        super().__init__("too many aliases")
        self.mark = mark


def _expanded_size(root: Node) -> dict[int, tuple[int, int]]:
    """(nodes, characters) each node expands to once aliases are followed, by node id.

    Memoized on node identity, so it costs the size of the document as written, not as
    expanded. Cycles (an alias inside its own anchor) count as one node here; the
    walker reports them.
    """
    sizes: dict[int, tuple[int, int]] = {}
    visiting: set[int] = set()

    def size(node: Node) -> tuple[int, int]:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in visiting:
            return 1, 0
        visiting.add(key)
        nodes, chars = 1, 0
        if isinstance(node, ScalarNode):
            chars = len(node.value)
        else:
            children: list[Node] = []
            if isinstance(node, SequenceNode):
                children = list(node.value)
            elif isinstance(node, MappingNode):
                children = [n for pair in node.value for n in pair]
            for child in children:
                n, c = size(child)
                nodes, chars = nodes + n, chars + c
        visiting.discard(key)
        sizes[key] = (nodes, chars)
        return nodes, chars

    size(root)
    return sizes


def _check_expansion(display: str, root: Node, aliases: list[tuple[yaml.Mark, Node]]) -> None:
    if not aliases:
        return
    sizes = _expanded_size(root)
    nodes, chars = sizes[id(root)]
    if nodes <= MAX_EXPANDED_NODES and chars <= MAX_EXPANDED_CHARS:
        return
    # Blame the alias that copies the most.
    mark, _ = max(aliases, key=lambda a: sizes.get(id(a[1]), (0, 0)))
    what = (f"{nodes:,} values" if nodes > MAX_EXPANDED_NODES
            else f"{chars:,} characters of text")
    raise SpecError([SpecProblem(
        display, mark.line + 1, mark.column + 1,
        f"YAML aliases expand the spec to {what}, over the limit of "
        f"{MAX_EXPANDED_NODES:,} values and {MAX_EXPANDED_CHARS:,} characters "
        "(nested anchors multiply: an alias bomb)",
        "write the data out, or use fewer nested aliases")])


def parse_spec(text: str, path: Path | str) -> FlowSpec:
    """Parse spec text as if read from ``path`` (used for messages and relative paths).

    Refuses, before parsing, text over `MAX_SPEC_BYTES`; and before anything is
    expanded, more than `MAX_ALIASES` aliases or aliases that expand past
    `MAX_EXPANDED_NODES` values or `MAX_EXPANDED_CHARS` characters.
    """
    display = str(path)
    spec_path = Path(path).absolute()
    if len(text) > MAX_SPEC_BYTES:
        raise _too_big(display, len(text))
    loader: _CountingLoader | None = None
    try:
        # Inside the try: the reader checks the characters as soon as it is built.
        loader = _CountingLoader(text)
        root = loader.get_single_node()
        if root is not None:
            _check_expansion(display, root, loader.aliases)
    except _TooManyAliases as e:
        raise SpecError([SpecProblem(
            display, e.mark.line + 1, e.mark.column + 1,
            f"the spec uses more than {MAX_ALIASES} YAML aliases",
            "write the data out instead of referring to anchors")]) from None
    except yaml.YAMLError as e:
        raise SpecError([_yaml_problem(display, text, e)]) from None
    except RecursionError:
        raise SpecError([SpecProblem(display, 1, 1, "the YAML nests too deeply",
                                     "flatten the document")]) from None
    finally:
        if loader is not None:
            loader.dispose()
    if root is None:
        raise SpecError([SpecProblem(display, 1, 1, "the spec is empty",
                                     "start with `name:`, `agent:` and `steps:`")])
    walker = _Walker(display, spec_path)
    try:
        spec = walker.spec(root)
    except RecursionError:
        walker.problem(root, "the YAML nests too deeply", "flatten the document")
        spec = None
    if walker.problems or spec is None:
        # File order reads best; sorted() is stable, so same-spot problems keep their order.
        problems = sorted(walker.problems, key=lambda p: (p.line, p.col))
        raise SpecError(problems or [SpecProblem(display, 1, 1, "the spec is invalid")])
    return spec


def _too_big(display: str, size: int) -> SpecError:
    return SpecError([SpecProblem(
        display, 1, 1,
        f"the spec file is {size:,} bytes, over the {MAX_SPEC_BYTES:,}-byte limit",
        "a spec is prose and small tool results: move large data out of it")])


def load_spec(path: Path | str) -> FlowSpec:
    """Read and validate a flow spec file.

    Raises SpecError carrying every problem found (``file:line:col: what — what
    to do``), including YAML syntax errors and a missing or unreadable file.
    ``${VAR}`` references are kept; call ``resolve_variables`` before running.
    """
    display = str(path)
    try:
        # A huge file is refused from its size, in milliseconds, not parsed for minutes; a FIFO
        # or a device (/dev/zero) is refused before a byte is read (it would hang or never end).
        text = read_regular_file(path, MAX_SPEC_BYTES).decode("utf-8")
        # As a file opened as text reads it (universal newlines): CRLF specs parse as before.
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    except UnreadableFileError as e:
        if e.kind is None:
            raise _too_big(display, e.size or 0) from None
        if e.kind == "a directory":
            raise SpecError([SpecProblem(display, 1, 1, "the spec path is a directory",
                                         "name a *.flow.yaml file")]) from None
        raise SpecError([SpecProblem(display, 1, 1, f"the spec path is {e.kind}, not a regular file",
                                     "name a *.flow.yaml file")]) from None
    except FileNotFoundError:
        raise SpecError([SpecProblem(display, 1, 1, "the spec file does not exist",
                                     "check the path")]) from None
    except UnicodeDecodeError as e:
        raise SpecError([SpecProblem(display, 1, 1,
                                     f"the spec file is not UTF-8 text (byte {e.start})",
                                     "save it as UTF-8")]) from None
    except OSError as e:
        raise SpecError([SpecProblem(display, 1, 1,
                                     f"cannot read the spec file: {e.strerror or e}",
                                     "check that the file exists and is readable")]) from None
    return parse_spec(text, path)
