"""Tests for flowproof.findings: divergences, missing calls, drift and failed steps as data."""

from __future__ import annotations

from typing import Any

from flowproof.assertions import Mismatch
from flowproof.cassette import turn_from_json
from flowproof.compare import compare_responses
from flowproof.divergence import ABSENT, Divergence, FieldChange
from flowproof.events import DivergenceEvent, DoneEvent, DriftEvent
from flowproof.findings import FINDING_KINDS, findings
from flowproof.verdict import StepResult
from flowproof.views import turn_views

from .runner.helpers import chat_turn

KEYS = {"kind", "detail", "turn", "thread", "path", "recorded", "replayed", "live", "hint", "location",
        "matcher", "expected", "actual", "tool", "call", "message"}


def divergence(**kw: Any) -> dict[str, Any]:
    fields = (
        FieldChange("messages.2.tool_calls.0.function.arguments", "{}", "{}", inner="flight.id"),
        FieldChange("model", "gpt-4o", ABSENT),
    )
    base: dict[str, Any] = dict(
        kind="unmatched", request_number=2, closest_index=1, fields=fields, hint="add a volatile rule"
    )
    base.update(kw)
    return Divergence(**base).to_json()


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
        data = divergence(fields=fields)
        out = findings([DivergenceEvent("1", "request 2 matches no recorded turn", data)], [], mode="replay")
        assert [f["path"] for f in out] == ["messages.1.content → flight.id", "model"]
        first = out[0]
        assert (first["kind"], first["detail"], first["turn"]) == ("divergence", "unmatched", 1)
        assert (first["recorded"], first["replayed"], first["live"]) == ("KQ311", "KQ999", None)
        assert out[1]["replayed"] is None and first["hint"] == "add a volatile rule"
        assert all(set(f) == KEYS for f in out)

    def test_a_divergence_hides_its_cascade_of_missing_calls(self) -> None:
        """Turns left unconsumed after a divergence are not findings of their own."""
        events = [DivergenceEvent("1", "t", divergence(fields=())), DoneEvent((2, 3))]
        out = findings(events, [], mode="replay")
        assert [(f["kind"], f["path"]) for f in out] == [("divergence", None)]

    def test_missing_calls(self) -> None:
        """Replay: each recorded turn never requested is a `missing` finding naming the turn."""
        out = findings([DoneEvent((2, 3))], [], mode="replay")
        assert [(f["kind"], f["turn"]) for f in out] == [("missing", 2), ("missing", 3)]

    def test_drift_names_what_differs(self) -> None:
        """Compare: a changed tool call is a drift at `tool_calls` with the recorded and live calls."""
        result = compare_responses(
            response(call=("create_booking", {"flight": {"id": "KQ311"}})),
            response(call=("create_booking", {"flight": {"id": "KQ999"}})),
            turn=1,
            thread=0,
        )
        out = findings([], [], mode="compare", compare=[result.to_json()])
        assert [(f["kind"], f["turn"], f["thread"]) for f in out] == [("drift", 1, 0)]
        assert any(f["path"] and "KQ311" in str(f["recorded"]) and "KQ999" in str(f["live"]) for f in out)
        assert all(f["replayed"] is None for f in out)
        # The same result read from a drift event (no compare results given) says the same.
        assert findings([DriftEvent("1", result.render(), result.to_json())], [], mode="compare") == [
            {**f, "message": result.render()} for f in out
        ]

    def test_equal_and_unpaired_compare_results(self) -> None:
        """Equal results are no finding; a missing one is a drift finding naming its kind and reason."""
        equal = {"kind": "paired", "equal": True, "turn": 0, "thread": 0, "differences": []}
        missing = {
            "kind": "missing",
            "equal": False,
            "turn": 3,
            "thread": 1,
            "differences": [],
            "reason": "never reached",
        }
        out = findings([DoneEvent((3,))], [], mode="compare", compare=[equal, missing])
        assert [(f["kind"], f["detail"], f["turn"], f["thread"], f["message"]) for f in out] == [
            ("drift", "missing", 3, 1, "never reached")
        ]

    def test_drift_listing_its_differences_is_used_as_is(self) -> None:
        """A compare result that lists differences path by path gives one finding each."""
        result = {"turn": 2, "thread": 1, "differences": [{"path": "text", "recorded": "a", "live": "b"}]}
        out = findings([DriftEvent("1", "drift", result)], [], mode="compare")
        assert [(f["turn"], f["thread"], f["path"], f["recorded"], f["live"]) for f in out] == [
            (2, 1, "text", "a", "b")
        ]

    def test_unmatched_live_request_and_fewer_calls_are_drift(self) -> None:
        """Compare: a request matching nothing (its other side is `live`) and a recorded call never
        made are drift findings."""
        events = [DriftEvent("1", "no match", None, divergence()), DoneEvent((4,))]
        out = findings(events, [], mode="compare")
        assert {f["kind"] for f in out} == {"drift"}
        assert (
            out[0]["live"] == "{}"
            and out[0]["replayed"] is None
            and out[-1]["detail"] == "missing"
            and out[-1]["turn"] == 4
        )

    def test_failed_steps_and_the_error(self) -> None:
        """A failed step is an `assertion` finding with its location; an error alone is an `error`."""
        steps = [
            StepResult(True, "ok", None, "a"),
            StepResult(False, "expected x", "f.yaml:9:5", "assert_tool_call: x"),
        ]
        out = findings([], steps, mode="replay")
        assert [(f["kind"], f["location"], f["detail"], f["message"]) for f in out] == [
            ("assertion", "f.yaml:9:5", "assert_tool_call: x", "expected x")
        ]
        assert [f["kind"] for f in findings([], [], mode="replay", error="agent crashed")] == ["error"]
        assert set(FINDING_KINDS) == {"divergence", "missing", "drift", "assertion", "error"}

    def test_a_failed_step_is_one_finding_per_mismatch(self) -> None:
        """A failed step's mismatches become its findings' path, matcher, expected, actual,
        tool and call; each keeps the step's message, location and source."""
        why = (
            Mismatch("equals", "flight.id", "KQ999", "KQ311", "create_booking", 2),
            Mismatch("is absent", "coupon", None, "X1", "create_booking", 2),
        )
        step = StepResult(False, "expected create_booking where …", "f.yaml:9:5", "create_booking where …", why)
        out = findings([], [step], mode="replay")
        assert [(f["path"], f["matcher"], f["expected"], f["actual"], f["tool"], f["call"]) for f in out] == [
            ("flight.id", "equals", "KQ999", "KQ311", "create_booking", 2),
            ("coupon", "is absent", None, "X1", "create_booking", 2),
        ]
        assert all(f["kind"] == "assertion" and f["location"] == "f.yaml:9:5" and set(f) == KEYS for f in out)
        assert {f["message"] for f in out} == {"expected create_booking where …"}
