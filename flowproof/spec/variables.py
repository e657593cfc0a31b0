"""``${VAR}`` references in a flow spec, resolved when the flow runs.

``load_spec`` keeps references as written (and checks their syntax);
``resolve_variables`` replaces them from an environment mapping. ``$${`` is the
escape for a literal ``${``. A reference is ``${NAME}`` with NAME matching
``[A-Za-z_][A-Za-z0-9_]*``; any other ``${`` is a spec error.

Resolved places: prompts, ``where`` clause values (``matches`` patterns are
recompiled), reply texts, the agent's command, url, env values and cwd, MCP
urls and commands, and every string leaf of a tool ``result:``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from flowproof.errors import SpecError, SpecProblem
from flowproof.spec.patterns import compile_bounded
from flowproof.spec.types import (
    Clause,
    FlowSpec,
    Location,
    Matcher,
    McpServer,
    PromptStep,
    ReplyAssertion,
    Step,
    ToolCallAssertion,
    ToolMock,
)

__all__ = [
    "VariableSyntaxError",
    "check_variables",
    "find_variables",
    "has_variables",
    "resolve_variables",
    "unresolved_problems",
]

# Alternation order matters: the escape must win over a reference at the same spot.
_TOKEN = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$\{")


class VariableSyntaxError(ValueError):
    """A ``${`` that is not a well-formed reference; ``offset`` is its index in the text.

    Internal to the spec package (not in flowproof/errors.py): the loader and the clause
    parser catch it and turn it into a `SpecProblem` with the file position; no user sees it.
    """

    def __init__(self, text: str, offset: int) -> None:
        self.offset = offset
        snippet = text[offset : offset + 12]
        super().__init__(f"malformed variable reference `{snippet}`")


def check_variables(text: str) -> list[str]:
    """Return the variable names referenced in ``text``, in order.

    Raises VariableSyntaxError for a ``${`` that is neither ``${NAME}`` nor the
    ``$${`` escape.
    """
    names: list[str] = []
    for match in _TOKEN.finditer(text):
        token = match.group(0)
        if token == "$${":
            continue
        if match.group(1) is None:
            raise VariableSyntaxError(text, match.start())
        names.append(match.group(1))
    return names


def has_variables(text: str) -> bool:
    """True when ``text`` holds a ``${NAME}`` reference (escapes do not count)."""
    try:
        return bool(check_variables(text))
    except VariableSyntaxError:
        return True


def _substitute(text: str, environ: Mapping[str, str], missing: list[str]) -> str:
    def repl(match: re.Match[str]) -> str:
        if match.group(0) == "$${":
            return "${"
        name = match.group(1)
        if name is None:
            # load_spec refuses these; a hand-built spec keeps them literally.
            return match.group(0)
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
                self.names.update(check_variables(value))
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
        return step

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
