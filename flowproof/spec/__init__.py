"""The flow-spec language: load a ``*.flow.yaml`` file into plain frozen data.

Pure: it reads the spec file it is given and nothing else. ``load_spec`` checks
everything it can and raises one `SpecError` listing every problem as
``file:line:col: what is wrong — what to do``; ``resolve_variables`` fills in
``${VAR}`` references when the flow runs. The language is documented in
docs/spec.md.
"""

from __future__ import annotations

from flowproof.spec.clauses import parse_reply_line, parse_tool_line
from flowproof.spec.loader import default_cassette_path, load_spec, parse_spec, volatile_refusal
from flowproof.spec.paths import format_path, resolve_path, split_path
from flowproof.spec.types import (
    AgentSpec,
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
    VolatileRule,
)
from flowproof.spec.variables import find_variables, resolve_variables, unresolved_problems

__all__ = [
    "AgentSpec",
    "Clause",
    "FlowSpec",
    "Location",
    "Matcher",
    "McpServer",
    "PromptStep",
    "ReplyAssertion",
    "Step",
    "ToolCallAssertion",
    "ToolMock",
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
