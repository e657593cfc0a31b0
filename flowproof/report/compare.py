"""The compare section of every report: text lines, JSON data, JUnit cases.

A compare run is judged per live call (`flowproof.compare`); this module lays the
results out: a count, one row per result, the request-side notes, and the first
drift in full (a later drift may follow from it, so it is counted, not explained).

Pure: `CompareResult` values in, text and data out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a replay's report imports this module and never has a compare result
    from flowproof.compare import CompareResult
    from flowproof.turns import FinishReason

__all__ = ["first_drift", "junit_cases", "report_json", "report_lines"]


def first_drift(results: Sequence[CompareResult]) -> CompareResult | None:
    """The first unequal result in the order given (live completion order, missing last)."""
    return next((r for r in results if not r.equal), None)


def report_lines(results: Sequence[CompareResult]) -> list[str]:
    """The compare section of a text report.

    A count line, one line per result (turn, thread, equal, finish reason, text
    status), every request-side note, the first drift in full and the later
    drifts counted: a later drift may follow from the first, so it is not
    explained as if it stood alone.
    """
    drifts = [r for r in results if not r.equal]
    kinds = {k: sum(1 for r in drifts if r.kind == k) for k in ("paired", "extra", "missing")}
    head = f"compare: {len(results)} result(s), {len(results) - len(drifts)} equal, {len(drifts)} drifted"
    if drifts:
        head += f" ({kinds['paired']} changed, {kinds['extra']} extra, {kinds['missing']} missing)"
    lines = [head]
    lines += [f"  {_row(r)}" for r in results]
    for context in (r.context for r in results if r.context is not None):
        lines += ["  " + line for line in context.lines()]
    first = first_drift(results)
    if first is not None:
        lines.append("first drift:")
        lines += ["  " + line for line in first.render().splitlines()]
        later = len(drifts) - 1
        if later:
            lines.append(
                f"{later} later drift(s), listed above and not detailed: they may follow from"
                " the first; fix it and compare again"
            )
    return lines


def report_json(results: Sequence[CompareResult]) -> dict[str, Any]:
    """The compare section of a JSON report: the structured results, not prose."""
    first = first_drift(results)
    return {
        "equal": first is None,
        "results": [r.to_json() for r in results],
        "first_drift": results.index(first) if first is not None else None,
        "drifts": sum(1 for r in results if not r.equal),
    }


def junit_cases(results: Sequence[CompareResult]) -> list[dict[str, Any]]:
    """One JUnit-ready testcase per result: ``name``, ``passed``, and for drift ``message``/``text``."""
    cases: list[dict[str, Any]] = []
    for r in results:
        case: dict[str, Any] = {"name": f"{r.place()} [{r.kind}]", "passed": r.equal}
        if not r.equal:
            case["message"] = r.render().splitlines()[0]
            case["text"] = r.render()
        cases.append(case)
    return cases


def _row(r: CompareResult) -> str:
    """One result as a report line: where, thread, depth, equal, finish reason, text status."""
    where = f"turn {r.turn}" if r.turn is not None else f"live call {r.live_call}"
    equal = "equal true" if r.equal else f"equal false ({r.kind})"
    fr = r.finish_reason
    if fr.recorded is not None and fr.live is not None and not fr.equal:
        finish = f"recorded {fr.recorded.value}, live {fr.live.value}"
    elif fr.recorded is None:
        finish = f"live {_value(fr.live)}"
    elif fr.live is None:
        finish = f"recorded {fr.recorded.value}"
    else:
        finish = fr.live.value
    return (
        f"{where} | thread {r.thread} | depth {r.depth} | {equal}"
        f" | finish reason {finish} | text {r.text.status or '-'}"
    )


def _value(reason: FinishReason | None) -> str | None:
    return reason.value if reason is not None else None
