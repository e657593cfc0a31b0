"""The flow-spec language: load a ``*.flow.yaml`` file into plain frozen data.

Pure: it reads the spec file it is given and nothing else. ``load_spec`` checks
everything it can and raises one `SpecError` listing every problem as
``file:line:col: what is wrong — what to do``; ``resolve_variables`` fills in
``${VAR}`` references when the flow runs. The language is documented in
docs/spec.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from flowproof.spec.clauses import parse_reply_line, parse_tool_line
from flowproof.spec.paths import format_path, resolve_path, split_path
from flowproof.spec.types import (
    AgentSpec,
    BudgetAssertion,
    CachePrefixAssertion,
    Clause,
    EgressAssertion,
    FlowSpec,
    Location,
    Matcher,
    McpServer,
    Metric,
    ParallelCallsAssertion,
    Price,
    PromptScope,
    PromptStep,
    ReplyAssertion,
    ScopeStep,
    SecretLeakAssertion,
    Step,
    SubagentAssertion,
    SubagentScope,
    ToolCallAssertion,
    ToolMock,
    ToolPattern,
    VolatileRule,
)
from flowproof.spec.variables import find_variables, resolve_variables, unresolved_problems

__all__ = [
    "AgentSpec",
    "BudgetAssertion",
    "CachePrefixAssertion",
    "Clause",
    "EgressAssertion",
    "FlowSpec",
    "Location",
    "Matcher",
    "McpServer",
    "Metric",
    "ParallelCallsAssertion",
    "Price",
    "PromptScope",
    "PromptStep",
    "ReplyAssertion",
    "ScopeStep",
    "SecretLeakAssertion",
    "Step",
    "SubagentAssertion",
    "SubagentScope",
    "ToolCallAssertion",
    "ToolMock",
    "ToolPattern",
    "VolatileRule",
    "default_cassette_path",
    "find_variables",
    "format_path",
    "load_spec",
    "parse_reply_line",
    "parse_spec",
    "parse_tool_line",
    "resolve_path",
    "resolve_variables",
    "split_path",
    "unresolved_problems",
    "volatile_refusal",
]


#: Names served from `flowproof.spec.loader` on first use: the loader pulls in PyYAML, and a
#: module that needs only the spec's types (normalize, the addon's hooks) should not pay for it.
_LOADER_NAMES = ("default_cassette_path", "load_spec", "parse_spec", "volatile_refusal")

if TYPE_CHECKING:
    from flowproof.spec.loader import default_cassette_path, load_spec, parse_spec, volatile_refusal


def __getattr__(name: str) -> Any:
    if name in _LOADER_NAMES:
        return getattr(importlib.import_module("flowproof.spec.loader"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
