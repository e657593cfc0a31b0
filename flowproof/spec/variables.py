"""``${VAR}`` references in a flow spec, resolved when the flow runs.

``load_spec`` keeps references as written (and checks their syntax);
``resolve_variables`` replaces them from an environment mapping. ``$${`` is the
escape for a literal ``${``. A reference is ``${NAME}`` with NAME matching
``[A-Za-z_][A-Za-z0-9_]*``; any other ``${`` is a spec error.

Resolved places: prompts, ``where`` clause values (``matches`` patterns are
recompiled, also in ``assert_parallel_tool_calls`` and inside ``in:``), reply
texts, ``assert_no_secret_leak`` values (which must then be at least
`MIN_SECRET_LENGTH` characters), the agent's command, url, env values and cwd,
MCP urls and commands, and every string leaf of a tool ``result:``.

A *handle* is ``${flowproof.NAME}`` (`HANDLES`): a value only the runner knows once
the proxy is up — its URL, the CA bundle, a base-URL listener — for an agent that
reads its own variables (``agent.env: {MY_LLM_URL: ${flowproof.base_url.openai}}``).
Handles are allowed in ``agent.env`` values and ``agent.command`` only;
`resolve_variables` leaves them in place and `resolve_handles` fills them in.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from flowproof.errors import SpecError, SpecProblem
from flowproof.spec.patterns import compile_bounded
from flowproof.spec.types import (
    AgentSpec,
    Clause,
    FlowSpec,
    Location,
    Matcher,
    McpServer,
    ParallelCallsAssertion,
    PromptStep,
    ReplyAssertion,
    ScopeStep,
    SecretLeakAssertion,
    Step,
    ToolCallAssertion,
    ToolMock,
)
from flowproof.wire.providers import base_url_families

__all__ = [
    "BASE_URL_HANDLE",
    "HANDLES",
    "MIN_SECRET_LENGTH",
    "VariableSyntaxError",
    "check_variables",
    "find_variables",
    "handle_names",
    "has_variables",
    "resolve_handles",
    "resolve_variables",
    "unresolved_problems",
]

#: A secret shorter than this would be found in ordinary text ("1", "true"): refused.
MIN_SECRET_LENGTH = 8

# Alternation order matters: the escape must win over a reference at the same spot.
_TOKEN = re.compile(r"\$\$\{|\$\{(flowproof(?:\.[A-Za-z0-9_]+)+|[A-Za-z_][A-Za-z0-9_]*)\}|\$\{")

_HANDLE_PREFIX = "flowproof."
#: The prefix of the base-URL handles; they need the reverse listeners of `agent.route: base_url`.
BASE_URL_HANDLE = "flowproof.base_url."
#: Every handle and what it becomes (docs/spec.md, "Variables").
HANDLES: dict[str, str] = {
    "flowproof.proxy_url": "the proxy's URL (what HTTPS_PROXY is set to)",
    "flowproof.ca_bundle": "the CA bundle file: the system roots plus flowproof's CA",
    "flowproof.ca_cert": "flowproof's CA certificate alone",
    **{f"{BASE_URL_HANDLE}{family}": f"the base URL of the {host} listener (agent.route: base_url)"
       for family, host, _suffix in base_url_families()},
}
_HANDLE_PLACES = "`agent.env` values and `agent.command`"


class VariableSyntaxError(ValueError):
    """A ``${`` that is not a well-formed reference, or a handle that is unknown or where no
    handle may be; ``offset`` is its index in the text, ``hint`` what to write instead.

    Internal to the spec package (not in flowproof/errors.py): the loader and the clause
    parser catch it and turn it into a `SpecProblem` with the file position; no user sees it.
    """

    def __init__(self, text: str, offset: int, message: str | None = None, hint: str | None = None) -> None:
        self.offset = offset
        snippet = text[offset : offset + 12]
        self.hint = hint or "write ${NAME} (letters, digits, underscore), or $${ for a literal ${"
        super().__init__(message or f"malformed variable reference `{snippet}`")


def check_variables(text: str, *, handles: bool = False) -> list[str]:
    """Return the variable names referenced in ``text``, in order (handles included).

    Raises VariableSyntaxError for a ``${`` that is neither ``${NAME}``, a known handle nor
    the ``$${`` escape, and for any handle unless ``handles`` (the places that take them).
    """
    names: list[str] = []
    for match in _TOKEN.finditer(text):
        token = match.group(0)
        if token == "$${":
            continue
        name = match.group(1)
        if name is None:
            raise VariableSyntaxError(text, match.start())
        if name.startswith(_HANDLE_PREFIX):
            _check_handle(text, match.start(), name, handles)
        names.append(name)
    return names


def _check_handle(text: str, offset: int, name: str, allowed: bool) -> None:
    if name not in HANDLES:
        close = difflib.get_close_matches(name, HANDLES, n=1)
        known = ", ".join(f"${{{h}}}" for h in HANDLES)
        raise VariableSyntaxError(
            text, offset, f"unknown handle `${{{name}}}`",
            (f"did you mean `${{{close[0]}}}`? " if close else "") + f"the handles are {known}",
        )
    if not allowed:
        raise VariableSyntaxError(
            text, offset,
            f"`${{{name}}}` is known only once the proxy is up, so it works in {_HANDLE_PLACES} only",
            f"pass it to the agent there, or write $${{{name}}} for the literal text",
        )


def handle_names(text: str) -> list[str]:
    """The handles ``text`` references (``flowproof.proxy_url`` …), in order."""
    try:
        return [n for n in check_variables(text, handles=True) if n.startswith(_HANDLE_PREFIX)]
    except VariableSyntaxError:
        return []


def has_variables(text: str) -> bool:
    """True when ``text`` holds a ``${NAME}`` reference (escapes do not count)."""
    try:
        return bool(check_variables(text))
    except VariableSyntaxError:
        return True


def _substitute(text: str, environ: Mapping[str, str], missing: list[str],
                handles: Mapping[str, str] | None = None) -> str:
    """``text`` with its variables from ``environ`` and its handles from ``handles`` (None:
    handles stay as written, for the runner's second pass)."""

    def repl(match: re.Match[str]) -> str:
        if match.group(0) == "$${":
            return "${"
        name = match.group(1)
        if name is None:
            # load_spec refuses these; a hand-built spec keeps them literally.
            return match.group(0)
        if name.startswith(_HANDLE_PREFIX):
            # Filled in by `resolve_handles` once the proxy is up, from the spec as written.
            return handles[name] if handles is not None and name in handles else match.group(0)
        if name not in environ:
            missing.append(name)
            return match.group(0)
        return environ[name]

    return _TOKEN.sub(repl, text)


class _Resolver:
    """Walks a FlowSpec once, either substituting or collecting names."""

    def __init__(self, environ: Mapping[str, str] | None) -> None:
        self.environ = environ
        self.names: set[str] = set()
        self.problems: list[SpecProblem] = []

    def text(self, value: str, location: Location) -> str:
        if self.environ is None:
            try:
                self.names.update(n for n in check_variables(value, handles=True)
                                  if not n.startswith(_HANDLE_PREFIX))
            except VariableSyntaxError:
                pass
            return value
        missing: list[str] = []
        result = _substitute(value, self.environ, missing)
        for name in dict.fromkeys(missing):
            self.problems.append(
                SpecProblem(
                    location.path,
                    location.line,
                    location.col,
                    f"${{{name}}} is not set",
                    f"export {name} before running the flow, or write $${{{name}}} "
                    f"for a literal ${{{name}}}",
                )
            )
        return result

    def data(self, value: Any, location: Location) -> Any:
        if isinstance(value, str):
            return self.text(value, location)
        if isinstance(value, dict):
            return {k: self.data(v, location) for k, v in value.items()}
        if isinstance(value, list):
            return [self.data(v, location) for v in value]
        return value

    def tool(self, tool: ToolMock) -> ToolMock:
        if not tool.has_result:
            return tool
        return replace(tool, result=self.data(tool.result, tool.location))

    def clause(self, clause: Clause) -> Clause:
        if clause.value is None:
            return clause
        value = self.text(clause.value, clause.location)
        pattern = clause.pattern
        if clause.matcher is Matcher.MATCHES and self.environ is not None:
            try:
                pattern = compile_bounded(value)
            except ValueError as e:
                loc = clause.location
                self.problems.append(
                    SpecProblem(
                        loc.path,
                        loc.line,
                        loc.col,
                        f"after ${{VAR}} resolution, {e}",
                        "fix the pattern or the variable's value",
                    )
                )
        return replace(clause, value=value, pattern=pattern)

    def step(self, step: Step) -> Step:
        if isinstance(step, PromptStep):
            return replace(step, text=self.text(step.text, step.location))
        if isinstance(step, ReplyAssertion):
            return replace(step, text=self.text(step.text, step.location))
        if isinstance(step, ToolCallAssertion):
            return replace(step, clauses=tuple(self.clause(c) for c in step.clauses))
        if isinstance(step, ParallelCallsAssertion):
            calls = tuple(replace(c, clauses=tuple(self.clause(k) for k in c.clauses)) for c in step.calls)
            return replace(step, calls=calls)
        if isinstance(step, ScopeStep):
            return replace(step, steps=tuple(self.step(s) for s in step.steps))
        if isinstance(step, SecretLeakAssertion):
            return self.secret(step)
        return step

    def secret(self, step: SecretLeakAssertion) -> SecretLeakAssertion:
        before = len(self.problems)
        value = self.text(step.value, step.location)
        if self.environ is not None and len(self.problems) == before and len(value) < MIN_SECRET_LENGTH:
            loc = step.location
            # The length only: the value itself is never shown.
            self.problems.append(SpecProblem(
                loc.path, loc.line, loc.col,
                f"{step.label} is {len(value)} characters long; a secret shorter than "
                f"{MIN_SECRET_LENGTH} would be found in ordinary text",
                "check the variable's value: assert_no_secret_leak takes the secret itself"))
        return replace(step, value=value)

    def spec(self, spec: FlowSpec) -> FlowSpec:
        agent = spec.agent
        loc = agent.location
        command = self.text(agent.command, loc) if agent.command is not None else None
        url = self.text(agent.url, loc) if agent.url is not None else None
        env = tuple((k, self.text(v, loc)) for k, v in agent.env)
        cwd = agent.cwd
        if cwd is not None and "${" in str(cwd):
            resolved = Path(self.text(str(cwd), loc))
            cwd = resolved if resolved.is_absolute() else spec.path.parent / resolved
        agent = replace(agent, command=command, url=url, env=env, cwd=cwd)
        mcp = tuple(
            McpServer(
                name=server.name,
                url=self.text(server.url, server.location) if server.url is not None else None,
                command=self.text(server.command, server.location) if server.command is not None else None,
                tools=tuple(self.tool(t) for t in server.tools),
                location=server.location,
            )
            for server in spec.mcp
        )
        return replace(
            spec,
            agent=agent,
            tools=tuple(self.tool(t) for t in spec.tools),
            mcp=mcp,
            steps=tuple(self.step(s) for s in spec.steps),
        )


def resolve_variables(spec: FlowSpec, environ: Mapping[str, str]) -> FlowSpec:
    """Return a copy of ``spec`` with every ``${NAME}`` replaced from ``environ``.

    Raises SpecError listing every unset variable at its node's location, and any
    ``matches`` pattern that no longer compiles once resolved.
    """
    resolver = _Resolver(environ)
    resolved = resolver.spec(spec)
    if resolver.problems:
        raise SpecError(resolver.problems)
    return resolved


def unresolved_problems(spec: FlowSpec, environ: Mapping[str, str]) -> tuple[SpecProblem, ...]:
    """What `resolve_variables` would refuse under ``environ`` (unset variables, patterns
    that break once resolved), without raising: ``flowproof check`` prints these as
    warnings so that it and ``flowproof-run`` agree on every ``${VAR}``."""
    resolver = _Resolver(environ)
    resolver.spec(spec)
    return tuple(resolver.problems)


def find_variables(spec: FlowSpec) -> set[str]:
    """The names of every ``${NAME}`` the spec references (in the places resolved)."""
    resolver = _Resolver(None)
    resolver.spec(spec)
    return resolver.names


def resolve_handles(
    written: AgentSpec, resolved: AgentSpec, environ: Mapping[str, str], handles: Mapping[str, str]
) -> AgentSpec:
    """``resolved`` (the agent after `resolve_variables`) with every handle filled in.

    Each ``agent.command`` or ``agent.env`` value that holds a handle is resolved again from
    the text as ``written`` in the spec, with ``environ`` and the ``handles`` values at once,
    so a ``$${`` escape or a variable's value is never read twice. Raises SpecError naming a
    handle this run has no value for.
    """
    loc = written.location
    problems: list[SpecProblem] = []

    def fill(text: str) -> str:
        used = handle_names(text)
        for name in dict.fromkeys(n for n in used if n not in handles):
            problems.append(SpecProblem(
                loc.path, loc.line, loc.col, f"`${{{name}}}` has no value in this run",
                "a base-URL handle needs `route: base_url` under `agent:`",
            ))
        missing: list[str] = []
        return _substitute(text, environ, missing, handles)

    command = resolved.command
    if written.command is not None and handle_names(written.command):
        command = fill(written.command)
    env = tuple(
        (name, fill(raw) if handle_names(raw) else value)
        for (name, raw), (_, value) in zip(written.env, resolved.env, strict=True)
    )
    if problems:
        raise SpecError(problems)
    return replace(resolved, command=command, env=env)
