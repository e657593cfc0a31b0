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


#: Every name loads its module on first use (PEP 562): importing one submodule, say
#: `flowproof.spec.patterns` for the normalizer, runs this file first, and an eager list
#: here loaded the clause parser, the variables and the provider table with it (0.1-0.2 s of
#: the proxy's start, python -X importtime). The loader pulls in PyYAML besides.
_LAZY = {
    **dict.fromkeys(("parse_reply_line", "parse_tool_line"), "flowproof.spec.clauses"),
    **dict.fromkeys(("format_path", "resolve_path", "split_path"), "flowproof.spec.paths"),
    **dict.fromkeys(("find_variables", "resolve_variables", "unresolved_problems"), "flowproof.spec.variables"),
    **dict.fromkeys(("default_cassette_path", "load_spec", "parse_spec", "volatile_refusal"), "flowproof.spec.loader"),
}

if TYPE_CHECKING:
    from flowproof.spec.clauses import parse_reply_line, parse_tool_line
    from flowproof.spec.loader import default_cassette_path, load_spec, parse_spec, volatile_refusal
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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name) or ("flowproof.spec.types" if name in __all__ else None)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
