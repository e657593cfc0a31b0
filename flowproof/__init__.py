"""flowproof: test LLM agents at the model boundary.

The public Python API. The runner, the addon and the pytest plugin import what
they need from here or from their own adapter modules; everything not listed in
``__all__`` is internal and may change.
"""

from __future__ import annotations

from flowproof.assertions import AssertionResult, evaluate
from flowproof.cassette import Cassette, RecordedTurn, load_cassette, save_cassette
from flowproof.compare import CassetteDriftError, CompareResult, compare_responses
from flowproof.errors import (
    AgentError,
    CassetteError,
    CassetteNotFoundError,
    FlowFailure,
    FlowproofError,
    ProxyError,
    SpecError,
    WireError,
)
from flowproof.expect import (
    assert_no_tool_call,
    assert_reply,
    assert_tool_call,
    cassette_trajectory,
)
from flowproof.model import FinishReason, RequestView, ResponseView, ToolCall, ToolResult, Turn
from flowproof.spec import FlowSpec, load_spec, resolve_variables
from flowproof.trajectory import Trajectory, build_trajectory

__version__ = "0.1.0"

__all__ = [
    "AgentError",
    "AssertionResult",
    "Cassette",
    "CassetteDriftError",
    "CassetteError",
    "CassetteNotFoundError",
    "CompareResult",
    "FinishReason",
    "FlowFailure",
    "FlowSpec",
    "FlowproofError",
    "ProxyError",
    "RecordedTurn",
    "RequestView",
    "ResponseView",
    "SpecError",
    "ToolCall",
    "ToolResult",
    "Trajectory",
    "Turn",
    "WireError",
    "__version__",
    "assert_no_tool_call",
    "assert_reply",
    "assert_tool_call",
    "build_trajectory",
    "cassette_trajectory",
    "compare_responses",
    "evaluate",
    "load_cassette",
    "load_spec",
    "resolve_variables",
    "save_cassette",
]
