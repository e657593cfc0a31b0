"""The verdict on one assertion step, as words and as data.

`AssertionResult` is what every evaluator returns (`flowproof.assertions` and
the evaluators of each concern it dispatches to); a failure's `Mismatch` values
say why as data, which ``--json`` and ``--junit`` report as findings. The text
helpers here cut and quote values the same way in every message.

Pure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flowproof.spec.base import Location

if TYPE_CHECKING:  # the parsed spec's other types: the proxy never builds them
    from flowproof.spec.types import Step

__all__ = ["MISMATCH_KINDS", "AssertionResult", "Mismatch", "excerpt", "json_text", "quote", "show"]

# Long values are cut in messages: a reviewer needs the start, not 8000 characters.
_EXCERPT = 160


#: What a `Mismatch` can be about: a where clause's matcher, or the step's own condition.
MISMATCH_KINDS = (
    "equals", "contains", "matches", "exists", "is absent",  # a where clause on the nearest call
    "called",  # assert_tool_call: the tool was never called
    "order",  # assert_tool_call: the matching call came before the previous assertion's
    "json",  # the nearest call's arguments are not JSON, so no where clause can match
    "not called",  # assert_no_tool_call: a call it forbids was made
    "reply contains",  # the reply does not contain the text (or there is no reply)
    "strict",  # strict: true: a call no assert_tool_call lists
    "subagent",  # assert_subagent: a link (spawn, thread, result) is missing
    "parallel",  # assert_parallel_tool_calls: no turn asked for every listed call
    "scope",  # in: the scope matched nothing
    "egress",  # assert_no_egress: a host outside the allowed ones was reached
    "secret leak",  # assert_no_secret_leak: the value went out (where, never the value)
    "budget",  # a budget assertion's count is over (or under) its limit
    "usage",  # a token or cost budget: a turn's response carried no usage
    "price",  # a cost budget: a model the run called has no price (a spec error)
    "cache prefix",  # cache prefix stable: a request broke the previous one's prefix
    "unused mock",  # strict mocks: a tools:/mcp: mock never fired
)


@dataclass(frozen=True, slots=True)
class Mismatch:
    """One reason a step failed, as data; the result's message says the same in words.

    ``matcher`` is one of `MISMATCH_KINDS`. ``path`` is the where clause's path
    (``flight.id``) or None. ``expected`` is the clause's value as the spec wrote it
    (text; None for ``exists``/``is absent``), the tool name for ``called``, the text for
    ``reply contains``. ``actual`` is what the trajectory held: the JSON value at the path
    (None when the path is absent), the tools called in order for ``called``, a call's
    arguments for ``not called``/``strict``/``json``, the reply (None: no reply).
    ``tool`` and ``call`` (1-based, in the trajectory's tool calls) name the call concerned,
    ``turn`` the model turn (its index) when a step is about turns.
    """

    matcher: str
    path: str | None = None
    expected: Any = None
    actual: Any = None
    tool: str | None = None
    call: int | None = None
    #: The model turn concerned (its index), for the steps about turns rather than calls.
    turn: int | None = None

    def to_json(self) -> dict[str, Any]:
        out = {
            "matcher": self.matcher,
            "path": self.path,
            "expected": self.expected,
            "actual": self.actual,
            "tool": self.tool,
            "call": self.call,
        }
        if self.turn is not None:
            out["turn"] = self.turn
        return out


@dataclass(frozen=True, slots=True)
class AssertionResult:
    """The verdict on one spec step (``step`` is None for the flow-level ``strict`` check).

    A failure's ``mismatches`` say why as data (empty for a pass)."""

    step: Step | None
    passed: bool
    message: str
    location: Location | None
    mismatches: tuple[Mismatch, ...] = ()
    #: The ``in:`` scope the step was checked in (``in subagent Explore #1``); "" for the run.
    scope: str = ""
    #: The failure is the spec's, not the agent's (a model with no price): the run exits 2.
    spec_error: bool = False



def json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def show(value: Any) -> str:
    return excerpt(json_text(value))


def quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def excerpt(text: str) -> str:
    if len(text) <= _EXCERPT:
        return text
    return text[: _EXCERPT - 1] + "…"
