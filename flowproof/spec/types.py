"""The parsed flow spec: plain frozen data, produced by ``flowproof.spec.load_spec``.

Every node keeps its `Location` so an error found later (an unset ``${VAR}`` at
run time, an assertion that fails) can still point at ``file:line:col``.
Strings may still contain ``${VAR}`` references until ``resolve_variables`` runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from flowproof.spec.base import Location as Location  # re-exported: every spec type is named here
from flowproof.spec.base import VolatileRule as VolatileRule
from flowproof.spec.patterns import BoundedPattern

if TYPE_CHECKING:  # flowproof.options imports this module: the enum is only named here
    from flowproof.options import Route


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


@dataclass(frozen=True, slots=True)
class ToolPattern:
    """One tool line inside a step that lists several: a tool name and its ``where`` clauses."""

    tool: str
    clauses: tuple[Clause, ...]
    source: str


@dataclass(frozen=True, slots=True)
class SubagentAssertion:
    """``assert_subagent: NAME``: a spawn call names NAME, its sub-agent ran, and its result
    reached the parent (docs/subagents.md)."""

    name: str
    source: str
    location: Location


@dataclass(frozen=True, slots=True)
class ParallelCallsAssertion:
    """``assert_parallel_tool_calls: a, b where …``: one model turn asked for all of them at once."""

    calls: tuple[ToolPattern, ...]
    source: str
    location: Location


@dataclass(frozen=True, slots=True)
class EgressAssertion:
    """``assert_no_egress`` (``: except HOST, *.DOMAIN``): the agent reached no host but its
    model APIs, its ``mcp:`` servers and the hosts listed (``fnmatch`` patterns, lowercase)."""

    allowed: tuple[str, ...]
    source: str
    location: Location


@dataclass(frozen=True, slots=True)
class SecretLeakAssertion:
    """``assert_no_secret_leak: ${NAME}``: the value is in no request the agent sent, to any host.

    ``value`` is a template until ``resolve_variables`` fills it in; ``label`` is how reports
    name it (the ``${NAME}`` written, or the step's place when the spec holds a literal):
    the value itself is never shown.
    """

    value: str
    label: str
    source: str
    location: Location


class Metric(StrEnum):
    """What a budget assertion counts (``assert: <metric> at most <n>``)."""

    MODEL_CALLS = "model calls"
    TOOL_CALLS = "tool calls"
    TOKENS = "tokens"
    INPUT_TOKENS = "input tokens"
    OUTPUT_TOKENS = "output tokens"
    COST = "cost"


@dataclass(frozen=True, slots=True)
class BudgetAssertion:
    """``assert: model calls at most 6`` (also ``at least``); cost is in USD from ``pricing:``."""

    metric: Metric
    bound: Literal["at most", "at least"]
    limit: float
    source: str
    location: Location


@dataclass(frozen=True, slots=True)
class CachePrefixAssertion:
    """``assert: cache prefix stable``: in each conversation every request starts with the
    previous request's prefix, in the provider's cache order."""

    source: str
    location: Location


@dataclass(frozen=True, slots=True)
class SubagentScope:
    """``in: subagent NAME`` (every sub-agent NAME names), or ``subagent NAME #N`` (the Nth)."""

    name: str
    ordinal: int | None = None


@dataclass(frozen=True, slots=True)
class PromptScope:
    """``in: prompt K``: the calls made while answering the spec's K-th prompt (1-based)."""

    number: int


@dataclass(frozen=True, slots=True)
class ScopeStep:
    """``in: <scope>`` with its own ``steps:``, checked against only the scope's calls."""

    scope: SubagentScope | PromptScope
    steps: tuple[Step, ...]
    source: str
    location: Location


Step = (
    PromptStep
    | ToolCallAssertion
    | ReplyAssertion
    | SubagentAssertion
    | ParallelCallsAssertion
    | EgressAssertion
    | SecretLeakAssertion
    | BudgetAssertion
    | CachePrefixAssertion
    | ScopeStep
)


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
class Price:
    """A ``pricing:`` entry: USD per million tokens for one model name (as requests name it).

    ``cache_read`` and ``cache_write`` default to ``input`` when the spec gives none."""

    model: str
    input: float
    output: float
    cache_read: float | None
    cache_write: float | None
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
    #: USD per million tokens by model name, for ``assert: cost …``.
    pricing: tuple[Price, ...] = ()
    #: A ``tools:`` or ``mcp:`` mock that never fired fails the run.
    strict_mocks: bool = False
    #: Where `strict:` is written: a strict failure points there, not at the top of the file.
    strict_location: Location | None = field(compare=False, default=None)
    #: ``http``: refuse a WebSocket upgrade to a model API (426) so the agent speaks HTTP;
    #: None: record what the agent speaks (docs/spec.md, "transport").
    transport: str | None = None

    @property
    def secrets(self) -> tuple[SecretLeakAssertion, ...]:
        """Every ``assert_no_secret_leak`` step (they are flow-level: never inside ``in:``)."""
        return tuple(s for s in self.steps if isinstance(s, SecretLeakAssertion))

    @property
    def prompts(self) -> tuple[PromptStep, ...]:
        return tuple(s for s in self.steps if isinstance(s, PromptStep))

    @property
    def tool_results(self) -> dict[str, Any]:
        """The mocked results by tool name (``tools:`` entries that have a ``result:``)."""
        return {t.name: t.result for t in self.tools if t.has_result}
