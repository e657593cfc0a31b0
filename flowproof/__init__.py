"""flowproof: test LLM agents at the model boundary.

The public Python API. The runner, the addon and the pytest plugin import what
they need from here or from their own adapter modules; everything not listed in
``__all__`` is internal and may change.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing's constant, without importing typing (mypy reads the name)
if TYPE_CHECKING:
    from typing import Any

    from flowproof.assertions import AssertionResult, evaluate
    from flowproof.cassette import Cassette, RecordedTurn, load_cassette, save_cassette
    from flowproof.compare import CompareResult, compare_responses
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
    from flowproof.spec import FlowSpec, load_spec, resolve_variables
    from flowproof.trajectory import Trajectory, build_trajectory
    from flowproof.turns import FinishReason, RequestView, ResponseView, ToolCall, ToolResult, Turn

#: The API loads on first use (PEP 562), so importing one core module (say
#: `flowproof.normalize`, which runs this file first) does not load the YAML spec loader,
#: the cassette reader and the compare engine with it. The proxy imports this file too:
#: the assertion helpers (`flowproof.expect`, which loads the assertion engine) were
#: half of its import time before they became lazy (docs/hotpath.md). The turn types too:
#: `flowproof-run` imports this file before it starts the proxy, and their six dataclasses
#: were a tenth of what it imported first, and the error types (their dataclasses, typing
#: and pathlib) twice that: it now imports only `flowproof.runner.spawn` before the spawn.
_LAZY = {
    "AgentError": "flowproof.errors",
    "CassetteError": "flowproof.errors",
    "CassetteNotFoundError": "flowproof.errors",
    "FlowFailure": "flowproof.errors",
    "FlowproofError": "flowproof.errors",
    "ProxyError": "flowproof.errors",
    "SpecError": "flowproof.errors",
    "WireError": "flowproof.errors",
    "FinishReason": "flowproof.turns",
    "RequestView": "flowproof.turns",
    "ResponseView": "flowproof.turns",
    "ToolCall": "flowproof.turns",
    "ToolResult": "flowproof.turns",
    "Turn": "flowproof.turns",
    "assert_no_tool_call": "flowproof.expect",
    "assert_reply": "flowproof.expect",
    "assert_tool_call": "flowproof.expect",
    "cassette_trajectory": "flowproof.expect",
    "AssertionResult": "flowproof.assertions",
    "evaluate": "flowproof.assertions",
    "Cassette": "flowproof.cassette",
    "RecordedTurn": "flowproof.cassette",
    "load_cassette": "flowproof.cassette",
    "save_cassette": "flowproof.cassette",
    "CompareResult": "flowproof.compare",
    "compare_responses": "flowproof.compare",
    "FlowSpec": "flowproof.spec",
    "load_spec": "flowproof.spec",
    "resolve_variables": "flowproof.spec",
    "Trajectory": "flowproof.trajectory",
    "build_trajectory": "flowproof.trajectory",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"

__all__ = [
    "AgentError",
    "AssertionResult",
    "Cassette",
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
