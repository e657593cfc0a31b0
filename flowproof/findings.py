"""What went wrong in a flow, as data: one finding per fact a CI tool may want to read.

The text report explains a divergence, a drift or a failed assertion in prose;
``--json`` and ``--junit`` also carry each as a finding (the JSON Schema is
``flowproof/schemas/report.schema.json``):

    {"kind": "divergence", "turn": 1, "thread": null,
     "path": "messages.2.content → flight.id", "recorded": "KQ311", "replayed": "KQ999",
     "live": null, "hint": "...", "message": "..."}

    {"kind": "assertion", "detail": "create_booking where flight.id equals KQ999",
     "path": "flight.id", "matcher": "equals", "expected": "KQ999", "actual": "KQ311",
     "tool": "create_booking", "call": 2, "location": "booking.flow.yaml:9:5", ...}

``kind`` is ``divergence`` (replay: a request matched nothing; ``detail`` says
``unmatched``/``extra``), ``missing`` (replay: a recorded call never made),
``drift`` (compare: a live response differs, a live request matched nothing, or
a recorded call was never made — ``detail`` ``missing``),
``assertion`` (a failed step: ``matcher``, ``expected``, ``actual``, ``tool``,
``call`` and ``path`` from its `flowproof.assertions.Mismatch`) or ``error`` (the
run could not be judged). A divergence with several differing fields is one
finding per field, a failed step one per mismatch (a where clause, a forbidden
call). Fields a kind does not have are null. Pure: built from the typed events
and the steps.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from flowproof.events import DivergenceEvent, DoneEvent, DriftEvent, Event
from flowproof.options import Mode
from flowproof.verdict import StepResult

__all__ = ["FINDING_KINDS", "Finding", "findings"]

#: Every ``kind`` a finding can have (the schema lists the same).
FINDING_KINDS = ("divergence", "missing", "drift", "assertion", "error")

Finding = dict[str, Any]


def findings(
    events: Sequence[Event],
    steps: Iterable[StepResult],
    *,
    mode: str,
    error: str | None = None,
    compare: Sequence[Mapping[str, Any]] = (),
) -> list[Finding]:
    """Every finding of one flow, in report order: divergences, missing calls, drift,
    failed steps, then the error that stopped the run (when it is not one of those).

    ``compare`` holds the run's compare results (`CompareResult.to_json()`): when given,
    they are the drift (each differing one: a finding per difference, or one naming its
    kind); otherwise drift is read from the ``drift`` events.
    """
    out: list[Finding] = []
    for event in events:
        if isinstance(event, DivergenceEvent):
            out.extend(_from_divergence("divergence", event.divergence, event.text, "replayed"))
    if mode == Mode.COMPARE and compare:
        for result in compare:
            if result.get("equal") is False:
                out.extend(_from_compare_result(result))
    elif mode == Mode.COMPARE:
        for event in events:
            if isinstance(event, DriftEvent):
                out.extend(_from_drift(event))
    if (mode == Mode.REPLAY or (mode == Mode.COMPARE and not compare)) and not any(
        f["kind"] == "divergence" for f in out
    ):
        # Unconsumed turns after a divergence are its cascade: the report leaves them out too.
        # In compare, fewer live calls than recorded is drift (compare never writes).
        done = next((e for e in reversed(events) if isinstance(e, DoneEvent)), None)
        for index in done.unconsumed if done is not None else ():
            out.append(
                _finding(
                    "missing" if mode == Mode.REPLAY else "drift",
                    detail="missing",
                    turn=index,
                    message=f"recorded turn {index} was never requested",
                )
            )
    for step in steps:
        if not step.passed:
            base = {"message": step.message, "location": step.location, "detail": step.source}
            # One finding per mismatch, as a divergence is one per differing field.
            out.extend(_finding("assertion", **base, **m.to_json()) for m in step.mismatches)
            if not step.mismatches:
                out.append(_finding("assertion", **base))
    if error and not out:
        out.append(_finding("error", message=error))
    return out


def _finding(kind: str, **fields: Any) -> Finding:
    finding: Finding = {
        "kind": kind,
        "detail": None,
        "turn": None,
        "thread": None,
        "path": None,
        "recorded": None,
        "replayed": None,
        "live": None,
        "hint": None,
        "location": None,
        "matcher": None,
        "expected": None,
        "actual": None,
        "tool": None,
        "call": None,
        "message": "",
    }
    finding.update(fields)
    return finding


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _from_divergence(
    kind: str, divergence: Mapping[str, Any] | None, text: str, other_side: str
) -> list[Finding]:
    """A `Divergence.to_json()`: one finding per differing field (an absent side is null),
    or one finding without a path when only the envelope or nothing could be compared."""
    data = dict(divergence or {})
    base = {
        "detail": data.get("kind"),
        "turn": _int_or_none(data.get("closest_index")),
        "thread": _int_or_none(data.get("thread")),
        "hint": data.get("hint"),
        "message": text,
    }
    fields = [f for f in data.get("fields") or () if isinstance(f, Mapping)]
    if not fields:
        return [_finding(kind, **base)]
    out = []
    for field in fields:
        path = str(field.get("path", ""))
        if field.get("inner"):
            path = f"{path} → {field['inner']}"
        out.append(
            _finding(
                kind,
                **base,
                path=path,
                recorded=field.get("recorded"),
                **{other_side: field.get("replayed", field.get("live"))},
            )
        )
    return out


def _from_drift(event: DriftEvent) -> list[Finding]:
    """A drift event: the compare result's differing parts, or (a live request that matched
    no recorded turn) its divergence."""
    if event.result is None:
        return _from_divergence("drift", event.divergence, event.text, "live")
    return _from_compare_result(event.result, event.text)


def _from_compare_result(data: Mapping[str, Any], text: str | None = None) -> list[Finding]:
    """A differing compare result: one finding per listed difference, else per differing
    part (tool calls, finish reason, text), else one naming its kind (extra, missing)."""
    result = dict(data)
    kind = result.get("kind")
    base = {
        "detail": kind if isinstance(kind, str) else None,
        "turn": _int_or_none(result.get("turn_index", result.get("turn"))),
        "thread": _int_or_none(result.get("thread")),
        "message": text or str(result.get("reason") or f"{kind or 'a'} compare result differs"),
    }
    if kind in ("extra", "missing"):
        # Nothing to set side by side: the place itself is the drift.
        return [_finding("drift", **base)]
    out = []
    # A result that lists its differences path by path is used as it is.
    listed = result.get("differences")
    if isinstance(listed, list) and listed:
        for item in listed:
            if isinstance(item, Mapping):
                out.append(
                    _finding(
                        "drift",
                        **base,
                        path=str(item.get("path", "")),
                        recorded=item.get("recorded"),
                        live=item.get("live"),
                    )
                )
        return out
    for part in ("tool_calls", "finish_reason", "text"):
        section = result.get(part)
        if not isinstance(section, Mapping):
            continue
        differs = section.get("status") == "different" if part == "text" else section.get("equal") is False
        if differs:
            out.append(
                _finding(
                    "drift",
                    **base,
                    path=part,
                    recorded=section.get("recorded"),
                    live=section.get("live"),
                )
            )
    return out or [_finding("drift", **base)]
