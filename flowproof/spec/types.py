"""The parsed flow spec: plain frozen data, produced by ``flowproof.spec.load_spec``.

Every node keeps its `Location` so an error found later (an unset ``${VAR}`` at
run time, an assertion that fails) can still point at ``file:line:col``.
Strings may still contain ``${VAR}`` references until ``resolve_variables`` runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowproof.spec.patterns import BoundedPattern

if TYPE_CHECKING:  # flowproof.options imports this module: the enum is only named here
    from flowproof.options import Route


@dataclass(frozen=True, slots=True)
class Location:
    """Where a node sits in its spec file (1-based line and column)."""

    path: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}"


class Matcher(StrEnum):
    """The ``where`` clause matchers. ``is`` parses to EQUALS, ``is missing`` to ABSENT."""

    EQUALS = "equals"
    CONTAINS = "contains"
    MATCHES = "matches"
    EXISTS = "exists"
    ABSENT = "is absent"


@dataclass(frozen=True, slots=True)
class Clause:
    """``where <path> <matcher> [<value>]``.

    ``segments`` is the dotted path split on dots (``passengers.0.name`` ->
    ``("passengers", "0", "name")``); a digit segment indexes a list, or is a
    key of a mapping. ``value`` is None for EXISTS and ABSENT. ``pattern`` is the
    time-bounded compiled regex for MATCHES (None until resolution when the value holds ``${VAR}``).
    """

    path: str
    segments: tuple[str, ...]
    matcher: Matcher
    value: str | None
    pattern: BoundedPattern | None
    location: Location


@dataclass(frozen=True, slots=True)
class PromptStep:
    text: str
    location: Location


@dataclass(frozen=True, slots=True)
class ToolCallAssertion:
    """``assert_tool_call`` (``negated=False``) or ``assert_no_tool_call`` (``negated=True``)."""

    tool: str
    clauses: tuple[Clause, ...]
    negated: bool
    source: str
    location: Location


@dataclass(frozen=True, slots=True)
class ReplyAssertion:
    """``assert: reply contains <text>`` (``reply is <text>`` is an alias: substring, not equality)."""

    text: str
    source: str
    location: Location


Step = PromptStep | ToolCallAssertion | ReplyAssertion


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """How to start or reach the agent under test. Exactly one of ``command`` / ``url`` is set."""

    command: str | None
    url: str | None
    env: tuple[tuple[str, str], ...]
    timeout: float
    cwd: Path | None
    route: Route
    location: Location


@dataclass(frozen=True, slots=True)
class ToolMock:
    """A ``tools:`` entry. ``has_result`` is False for a declaration-only entry."""

    name: str
    result: Any
    has_result: bool
    location: Location


@dataclass(frozen=True, slots=True)
class McpServer:
    """An ``mcp:`` entry: its listed tools are answered at the MCP boundary.

    Exactly one of ``url`` (a Streamable HTTP server) and ``command`` (a server the
    agent launches and talks to over stdio; docs/mcp.md) is set.
    """

    name: str
    url: str | None
    tools: tuple[ToolMock, ...]
    location: Location
    command: str | None = None


@dataclass(frozen=True, slots=True)
class VolatileRule:
    """A declared volatile span: a body path, plus an optional regex for the span inside a string.

    Matched spans are replaced by ``«volatile:<name>»`` before hashing.
    """

    name: str
    path: str
    segments: tuple[str, ...]
    pattern: re.Pattern[str] | None
    location: Location


@dataclass(frozen=True, slots=True)
class FlowSpec:
    """A whole flow spec file."""

    path: Path
    name: str
    app: str
    agent: AgentSpec
    tools: tuple[ToolMock, ...]
    mcp: tuple[McpServer, ...]
    strict: bool
    cassette: Path
    volatile: tuple[VolatileRule, ...]
    presets: tuple[str, ...]
    steps: tuple[Step, ...]
    #: "module:function" to receive each compare result instead of failing on drift.
    on_compare: str | None = None
    location: Location = field(compare=False, default=Location("", 1, 1))
    #: The flow tests error handling: a recording whose turns hold an HTTP error status is kept.
    allow_error_turns: bool = False

    @property
    def prompts(self) -> tuple[PromptStep, ...]:
        return tuple(s for s in self.steps if isinstance(s, PromptStep))

    @property
    def tool_results(self) -> dict[str, Any]:
        """The mocked results by tool name (``tools:`` entries that have a ``result:``)."""
        return {t.name: t.result for t in self.tools if t.has_result}
