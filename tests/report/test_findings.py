"""Tests for flowproof.report.findings: divergences, missing calls, drift and failed steps as data."""

from __future__ import annotations

from typing import Any

from flowproof.assertions import Mismatch
from flowproof.cassette import turn_from_json
from flowproof.compare import compare_responses, missing_result
from flowproof.divergence import ABSENT, Divergence, FieldChange
from flowproof.errors import EXIT_AGENT, EXIT_ASSERTION, EXIT_DIVERGENCE, EXIT_DRIFT
from flowproof.report.findings import FINDING_KINDS, findings
from flowproof.run_record import McpMiss, MissingCalls, ReplayMiss
from flowproof.verdict import StepResult
from flowproof.views import turn_views

from ..runner.helpers import chat_turn
from .helpers import result as flow

KEYS = {"kind", "detail", "turn", "thread", "path", "recorded", "replayed", "live", "hint", "location",
        "matcher", "expected", "actual", "tool", "call", "message"}


def divergence(**kw: Any) -> ReplayMiss:
    fields = (
        FieldChange("messages.2.tool_calls.0.function.arguments", "{}", "{}", inner="flight.id"),
        FieldChange("model", "gpt-4o", ABSENT),
    )
    base: dict[str, Any] = dict(
        kind="unmatched", request_number=2, closest_index=1, fields=fields, hint="add a volatile rule"
    )
    base.update(kw)
    return ReplayMiss("1", Divergence(**base))


def response(text: str | None = None, call: tuple[str, dict] | None = None) -> Any:
    view = turn_views(turn_from_json(chat_turn(0, text=text, call=call), "c.json")).response
    assert view is not None
    return view


class TestFindings:
    def test_a_divergence_is_one_finding_per_field(self) -> None:
        """Each differing field is a finding with its path, both sides (absent is null) and the hint."""
        fields = (
            FieldChange("messages.1.content", "KQ311", "KQ999", inner="flight.id"),
            FieldChange("model", "gpt-4o", ABSENT),
        )
        out = findings(flow(EXIT_DIVERGENCE, divergences=(divergence(fields=fields),)))
        assert [f["path"] for f in out] == ["messages.1.content → flight.id", "model"]
        first = out[0]
        assert (first["kind"], first["detail"], first["turn"]) == ("divergence", "unmatched", 1)
        assert (first["recorded"], first["replayed"], first["live"]) == ("KQ311", "KQ999", None)
        assert out[1]["replayed"] is None and first["hint"] == "add a volatile rule"
        assert all(set(f) == KEYS for f in out)
        # The message is the report, with the command that records the flow's cassette again.
        assert first["message"].startswith("request 2 matches no recorded turn; closest is turn 1")
        assert first["message"].endswith("re-record the cassette: flowproof-run booking.flow.yaml --record")

    def test_an_mcp_miss_is_one_finding_with_its_text(self) -> None:
        out = findings(flow(EXIT_DIVERGENCE, divergences=(McpMiss("2", "no recorded exchange"),)))
        assert [(f["kind"], f["detail"], f["message"]) for f in out] == [("divergence", None, "no recorded exchange")]

    def test_a_divergence_hides_its_cascade_of_missing_calls(self) -> None:
        """Turns left unconsumed after a divergence are not findings of their own (the verdict
        leaves them out of the result)."""
        out = findings(flow(EXIT_DIVERGENCE, divergences=(divergence(fields=()),)))
        assert [(f["kind"], f["path"]) for f in out] == [("divergence", None)]

    def test_missing_calls(self) -> None:
        """Replay: each recorded turn never requested is a `missing` finding naming the turn."""
        out = findings(flow(EXIT_DIVERGENCE, missing=MissingCalls((2, 3))))
        assert [(f["kind"], f["turn"]) for f in out] == [("missing", 2), ("missing", 3)]

    def test_drift_names_what_differs(self) -> None:
        """Compare: a changed tool call is a drift at `tool_calls` with the recorded and live calls."""
        compared = compare_responses(
            response(call=("create_booking", {"flight": {"id": "KQ311"}})),
            response(call=("create_booking", {"flight": {"id": "KQ999"}})),
            turn=1,
            thread=0,
        )
        out = findings(flow(EXIT_DRIFT, mode="compare", compare=(compared,)))
        assert [(f["kind"], f["turn"], f["thread"]) for f in out] == [("drift", 1, 0)]
        assert any(f["path"] and "KQ311" in str(f["recorded"]) and "KQ999" in str(f["live"]) for f in out)
        assert all(f["replayed"] is None for f in out)

    def test_equal_and_unpaired_compare_results(self) -> None:
        """Equal results are no finding; a missing one is a drift finding naming its kind and reason."""
        said = response(text="Done.")
        equal = compare_responses(said, said, turn=0, thread=0)
        missing = missing_result(said, turn=3, thread=1, depth=6, reason="never reached")
        out = findings(flow(EXIT_DRIFT, mode="compare", compare=(equal, missing)))
        assert [(f["kind"], f["detail"], f["turn"], f["thread"], f["message"]) for f in out] == [
            ("drift", "missing", 3, 1, "never reached")
        ]

    def test_a_pass_has_no_findings(self) -> None:
        assert findings(flow(steps=(StepResult(True, "ok", None, "a"),))) == []

    def test_failed_steps_and_the_error(self) -> None:
        """A failed step is an `assertion` finding with its location; an error alone is an `error`."""
        steps = [
            StepResult(True, "ok", None, "a"),
            StepResult(False, "expected x", "f.yaml:9:5", "assert_tool_call: x"),
        ]
        out = findings(flow(EXIT_ASSERTION, steps=tuple(steps)))
        assert [(f["kind"], f["location"], f["detail"], f["message"]) for f in out] == [
            ("assertion", "f.yaml:9:5", "assert_tool_call: x", "expected x")
        ]
        assert [f["kind"] for f in findings(flow(EXIT_AGENT, error="agent crashed"))] == ["error"]
        assert set(FINDING_KINDS) == {"divergence", "missing", "drift", "assertion", "error"}

    def test_a_failed_step_is_one_finding_per_mismatch(self) -> None:
        """A failed step's mismatches become its findings' path, matcher, expected, actual,
        tool and call; each keeps the step's message, location and source."""
        why = (
            Mismatch("equals", "flight.id", "KQ999", "KQ311", "create_booking", 2),
            Mismatch("is absent", "coupon", None, "X1", "create_booking", 2),
        )
        step = StepResult(False, "expected create_booking where …", "f.yaml:9:5", "create_booking where …", why)
        out = findings(flow(EXIT_ASSERTION, steps=(step,)))
        assert [(f["path"], f["matcher"], f["expected"], f["actual"], f["tool"], f["call"]) for f in out] == [
            ("flight.id", "equals", "KQ999", "KQ311", "create_booking", 2),
            ("coupon", "is absent", None, "X1", "create_booking", 2),
        ]
        assert all(f["kind"] == "assertion" and f["location"] == "f.yaml:9:5" and set(f) == KEYS for f in out)
        assert {f["message"] for f in out} == {"expected create_booking where …"}
