"""Load a ``*.flow.yaml`` file into a `FlowSpec`, with ``file:line:col`` for every problem.

The spec schema: which keys a flow spec has and what each means. The YAML is
composed into located nodes by `flowproof.spec.yamlsafe` (which enforces the
size and alias limits), and read by a `flowproof.spec.nodes.NodeWalker`
subclass that checks each node and records *all* the problems it can find
before raising one `SpecError`. Only ``tools`` and ``mcp`` ``result:`` values
are turned into plain data (JSON-like: dict, list, str, int, float, bool, None;
YAML timestamps stay the text written).

``load_spec`` reads the file and nothing else: ``${VAR}`` references are kept
(syntax-checked) for ``resolve_variables`` to fill in at run time.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from yaml.nodes import Node, ScalarNode

from flowproof.errors import SpecError, SpecProblem
from flowproof.mcp.stdio import standin_variable
from flowproof.normalize import PRESETS
from flowproof.options import Route
from flowproof.spec.clauses import compile_pattern, suggest
from flowproof.spec.nodes import NULL
from flowproof.spec.paths import split_path
from flowproof.spec.steps import STEP_KEYS, StepWalker, check_context
from flowproof.spec.types import (
    AgentSpec,
    FlowSpec,
    Location,
    McpServer,
    Price,
    PromptStep,
    Step,
    ToolMock,
    VolatileRule,
)
from flowproof.spec.variables import BASE_URL_HANDLE, handle_names, has_variables
from flowproof.spec.yamlsafe import (
    MAX_ALIASES,
    MAX_EXPANDED_CHARS,
    MAX_EXPANDED_NODES,
    MAX_SPEC_BYTES,
    compose,
    read_limited,
)
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

_TOP_KEYS = ("name", "app", "agent", "tools", "mcp", "strict", "cassette", "volatile",
             "on_compare", "steps", "allow_error_turns", "pricing", "strict_mocks", "transport")
#: `transport:` values: ``http`` refuses a WebSocket upgrade to a model API (426).
_TRANSPORTS = ("http",)
_AGENT_KEYS = ("command", "url", "env", "timeout", "cwd", "route")
_TOOL_KEYS = ("name", "result")
_MCP_KEYS = ("name", "url", "command", "tools")
_RULE_KEYS = ("name", "path", "pattern")
_STEP_KEYS = STEP_KEYS
_PRICE_KEYS = ("input", "output", "cache_read", "cache_write")
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
_PRICING_HINT = ("add `pricing:` with USD per million tokens for each model the agent calls, "
                 "e.g. `pricing: {gpt-4o-mini: {input: 0.15, output: 0.60}}`")


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


class _Walker(StepWalker):
    """Turns the composed node tree into a FlowSpec, collecting problems as it goes."""

    def __init__(self, display: str, spec_path: Path) -> None:
        super().__init__(display)
        self.spec_path = spec_path
        self.spec_dir = spec_path.parent

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
        strict_location: Location | None = None
        if "strict" in entries:
            strict = bool(self.boolean(entries["strict"][1], "`strict`"))
            strict_location = self.loc(entries["strict"][0])
        allow_error_turns = False
        if "allow_error_turns" in entries:
            allow_error_turns = bool(self.boolean(entries["allow_error_turns"][1],
                                                  "`allow_error_turns`"))
        strict_mocks = False
        if "strict_mocks" in entries:
            strict_mocks = bool(self.boolean(entries["strict_mocks"][1], "`strict_mocks`"))
        pricing = self.pricing(entries["pricing"][1]) if "pricing" in entries else ()

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

        transport: str | None = None
        if "transport" in entries:
            node = entries["transport"][1]
            value = self.text(node, "`transport`")
            if value is not None and value not in _TRANSPORTS:
                self.problem(node, f"unknown transport `{value}`",
                             "write `transport: http` to keep the agent off WebSockets (426); "
                             "leave it out to record what the agent speaks")
            elif value is not None:
                transport = value

        steps: tuple[Step, ...] = ()
        if "steps" in entries:
            declared = {t.name for t in tools} | {t.name for s in mcp for t in s.tools}
            steps = self.steps(entries["steps"][0], entries["steps"][1], declared)
            check_context(self, steps, route=agent.route if agent is not None else None,
                          priced=bool(pricing), prompts=sum(isinstance(s, PromptStep) for s in steps),
                          pricing_hint=_PRICING_HINT)
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
            strict_location=strict_location,
            pricing=pricing,
            strict_mocks=strict_mocks,
            transport=transport,
        )

    def agent(self, key: Node, node: Node) -> AgentSpec | None:
        entries = self.mapping(node, "`agent`")
        if entries is None:
            return None
        self.check_keys(entries, _AGENT_KEYS, "`agent`")
        command = url = None
        if "command" in entries:
            command = self.template(entries["command"][1], "`agent.command`", handles=True)
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
        base_url_uses: list[tuple[Node, str]] = []
        if command is not None:
            base_url_uses += [(entries["command"][1], h) for h in handle_names(command)
                              if h.startswith(BASE_URL_HANDLE)]
        if "env" in entries:
            env_entries = self.mapping(entries["env"][1], "`agent.env`")
            for name, (env_key, value_node) in (env_entries or {}).items():
                if not name or "=" in name or "\0" in name:
                    self.problem(env_key, f"`{name}` is not a valid environment variable name",
                                 "use letters, digits and underscores")
                    continue
                if isinstance(value_node, ScalarNode) and value_node.tag == NULL:
                    self.problem(env_key, f"`agent.env.{name}` has no value",
                                 f'write `{name}: ""` for an empty value')
                    continue
                value = self.text(value_node, f"`agent.env.{name}`", allow_empty=True)
                if value is not None and self.check_variable_syntax(value_node, value, handles=True):
                    env.append((name, value))
                    base_url_uses += [(value_node, h) for h in handle_names(value) if h.startswith(BASE_URL_HANDLE)]

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
        if route != Route.BASE_URL:
            # A base-URL handle is the address of a reverse listener, which only that route opens.
            for use_node, handle in base_url_uses:
                self.problem(use_node, f"`${{{handle}}}` is a base-URL listener, which flowproof "
                             "opens for `agent.route: base_url` only",
                             "add `route: base_url` under `agent:`")

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
            if isinstance(item, ScalarNode) and item.tag != NULL:
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
            if isinstance(item, ScalarNode) and item.tag != NULL:
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

    def pricing(self, node: Node) -> tuple[Price, ...]:
        """``pricing:``: model name -> ``{input, output, cache_read?, cache_write?}`` USD per million."""
        entries = self.mapping(node, "`pricing`")
        prices: list[Price] = []
        for model, (key, value) in (entries or {}).items():
            fields = self.mapping(value, f"the price of `{model}`")
            if fields is None:
                continue
            self.check_keys(fields, _PRICE_KEYS, f"the price of `{model}`")
            amounts: dict[str, float | None] = {}
            for field in _PRICE_KEYS:
                if field in fields:
                    amounts[field] = self.amount(fields[field][1], f"`pricing.{model}.{field}`")
                elif field in ("input", "output"):
                    self.problem(key, f"the price of `{model}` has no `{field}`",
                                 f"add `{field}: <USD per million tokens>`")
            if amounts.get("input") is None or amounts.get("output") is None:
                continue
            prices.append(Price(model=model, input=amounts["input"] or 0.0,
                                output=amounts["output"] or 0.0,
                                cache_read=amounts.get("cache_read"),
                                cache_write=amounts.get("cache_write"), location=self.loc(key)))
        return tuple(prices)


def parse_spec(text: str, path: Path | str) -> FlowSpec:
    """Parse spec text as if read from ``path`` (used for messages and relative paths).

    Refuses, before parsing, text over `MAX_SPEC_BYTES`; and before anything is
    expanded, more than `MAX_ALIASES` aliases or aliases that expand past
    `MAX_EXPANDED_NODES` values or `MAX_EXPANDED_CHARS` characters.
    """
    display = str(path)
    spec_path = Path(path).absolute()
    root = compose(text, display)
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


def load_spec(path: Path | str) -> FlowSpec:
    """Read and validate a flow spec file.

    Raises SpecError carrying every problem found (``file:line:col: what — what
    to do``), including YAML syntax errors and a missing or unreadable file.
    ``${VAR}`` references are kept; call ``resolve_variables`` before running.
    """
    return parse_spec(read_limited(path), path)
