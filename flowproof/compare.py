"""Recorded vs live: how a live model response differs from the recorded one.

Compare is a read plus a report (docs/design.md#compare-is-read-only). Equal means the same
tool-call trajectory (names and canonical JSON arguments, in order), the same
unified finish reason (the provider's raw reason churns and is not compared), and
text no worse than ``normalized`` (equal after trim, whitespace collapse,
lowercase). No similarity scores: every verdict is a fact a reviewer can check.
Nothing here touches a cassette.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from flowproof.errors import EXIT_DRIFT, FlowFailure
from flowproof.model import FinishReason, ResponseView

__all__ = [
    "CassetteDriftError",
    "CompareResult",
    "FinishReasonComparison",
    "TextComparison",
    "classify_text",
    "compare_responses",
    "record_on_span",
    "report_comparison",
]

TextStatus = Literal["exact", "normalized", "different"]

# Excerpts in render(): enough to recognise the prose, short enough to read.
_EXCERPT = 120


@dataclass(frozen=True, slots=True)
class TextComparison:
    """The text class: ``exact``, ``normalized`` or ``different``.

    ``normalized`` means equal after trim, whitespace collapse and lowercase.
    """

    status: TextStatus
    recorded: str
    live: str


@dataclass(frozen=True, slots=True)
class FinishReasonComparison:
    """The unified finish reasons of both sides (raw provider reasons are deliberately absent)."""

    recorded: FinishReason
    live: FinishReason

    @property
    def equal(self) -> bool:
        """True when both turns ended the same way."""
        return self.recorded == self.live


@dataclass(frozen=True, slots=True)
class CompareResult:
    """The verdict on one live response against its recorded turn.

    ``recorded_tool_calls``/``live_tool_calls`` are ``(name, canonical JSON arguments)`` pairs.
    """

    equal: bool
    turn_index: int
    tool_calls_equal: bool
    recorded_tool_calls: tuple[tuple[str, str], ...]
    live_tool_calls: tuple[tuple[str, str], ...]
    finish_reason: FinishReasonComparison
    text: TextComparison

    def render(self) -> str:
        """Readable lines naming what diverged: a tool call, the finish reason, the text."""
        if self.equal:
            return (
                f"turn {self.turn_index}: the live response matches the recording"
                f" (text: {self.text.status})"
            )
        lines = [f"turn {self.turn_index}: the live response drifted from the recording"]
        if not self.tool_calls_equal:
            lines.append("  tool calls differ:")
            rec, live = self.recorded_tool_calls, self.live_tool_calls
            for i in range(max(len(rec), len(live))):
                r = rec[i] if i < len(rec) else None
                lv = live[i] if i < len(live) else None
                if r == lv:
                    continue
                shown_r, shown_lv = _show_calls(r, lv)
                lines.append(f"    call {i + 1}: recorded {shown_r}, live {shown_lv}")
        if not self.finish_reason.equal:
            lines.append(
                f"  finish reason: recorded {self.finish_reason.recorded.value},"
                f" live {self.finish_reason.live.value}"
            )
        if self.text.status == "different":
            rec_text, live_text = _excerpts(self.text.recorded, self.text.live)
            lines.append("  text differs:")
            lines.append(f"    recorded: {json.dumps(rec_text, ensure_ascii=False)}")
            lines.append(f"    live:     {json.dumps(live_text, ensure_ascii=False)}")
        else:
            lines.append(f"  text: {self.text.status}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict for reports and the event log; ``text.status`` is always present."""
        return {
            "equal": self.equal,
            "turn_index": self.turn_index,
            "tool_calls": {
                "equal": self.tool_calls_equal,
                "recorded": [{"name": n, "arguments": a} for n, a in self.recorded_tool_calls],
                "live": [{"name": n, "arguments": a} for n, a in self.live_tool_calls],
            },
            "finish_reason": {
                "equal": self.finish_reason.equal,
                "recorded": self.finish_reason.recorded.value,
                "live": self.finish_reason.live.value,
            },
            "text": {
                "status": self.text.status,
                "recorded": self.text.recorded,
                "live": self.text.live,
            },
        }


class CassetteDriftError(FlowFailure):
    """A live response drifted from its recording and no compare handler was registered."""

    def __init__(self, result: CompareResult) -> None:
        self.result = result
        super().__init__(result.render(), exit_code=EXIT_DRIFT)


def classify_text(recorded: str, live: str) -> TextComparison:
    """Classify two texts: exact, normalized (trim, collapse, lowercase) or different."""
    if recorded == live:
        status: TextStatus = "exact"
    elif _normalize_text(recorded) == _normalize_text(live):
        status = "normalized"
    else:
        status = "different"
    return TextComparison(status, recorded, live)


def compare_responses(recorded: ResponseView, live: ResponseView, turn_index: int) -> CompareResult:
    """Compare a live response with the recorded one for turn ``turn_index``; pure, never writes."""
    rec_calls = tuple((c.name, c.canonical_arguments()) for c in recorded.tool_calls)
    live_calls = tuple((c.name, c.canonical_arguments()) for c in live.tool_calls)
    finish = FinishReasonComparison(recorded.finish_reason, live.finish_reason)
    text = classify_text(recorded.text, live.text)
    tool_calls_equal = rec_calls == live_calls
    return CompareResult(
        equal=tool_calls_equal and finish.equal and text.status != "different",
        turn_index=turn_index,
        tool_calls_equal=tool_calls_equal,
        recorded_tool_calls=rec_calls,
        live_tool_calls=live_calls,
        finish_reason=finish,
        text=text,
    )


def record_on_span(result: CompareResult) -> None:
    """Set ``flowproof.compare_equal``/``compare_text_status`` on the current OpenTelemetry span.

    A no-op when ``opentelemetry`` is not installed or no span is recording.
    """
    try:
        # Lazy: OpenTelemetry is an optional extra and most runs never need it.
        from opentelemetry import trace
    except ImportError:
        return
    span = trace.get_current_span()
    if not span.is_recording():
        return
    span.set_attribute("flowproof.compare_equal", result.equal)
    span.set_attribute("flowproof.compare_text_status", result.text.status)


def report_comparison(
    result: CompareResult, handler: Callable[[CompareResult], object] | None = None
) -> None:
    """Hand ``result`` to ``handler``, or raise `CassetteDriftError` when it is not equal.

    Mirrors the seed's ``reportComparison``: the span attribute first, then the
    handler if one is registered (it receives equal results too), else drift fails.
    """
    record_on_span(result)
    if handler is not None:
        handler(result)
        return
    if not result.equal:
        raise CassetteDriftError(result)


def _normalize_text(text: str) -> str:
    # str.split() with no argument trims and collapses every run of whitespace at once.
    return " ".join(text.split()).lower()


def _show_calls(recorded: tuple[str, str] | None, live: tuple[str, str] | None) -> tuple[str, str]:
    """Both calls for display; long arguments are cut around where they first differ."""
    rec_args, live_args = _excerpts(recorded[1] if recorded else "", live[1] if live else "")
    return (
        f"{recorded[0]} {rec_args}" if recorded else "(no call)",
        f"{live[0]} {live_args}" if live else "(no call)",
    )


def _excerpts(a: str, b: str) -> tuple[str, str]:
    """Cut two long texts to the same window around their first difference.

    Cutting each from its start would show two identical excerpts whenever the
    texts only differ past the cut, which hides the very drift being reported.
    """
    if len(a) <= _EXCERPT and len(b) <= _EXCERPT:
        return a, b
    # Equal texts (the calls differ by name only) are shown from their start.
    same = min(len(a), len(b)) if a != b else 0
    at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), same)
    start = max(0, at - _EXCERPT // 3)

    def cut(text: str) -> str:
        end = start + _EXCERPT
        return ("…" if start > 0 else "") + text[start:end] + ("…" if end < len(text) else "")

    return cut(a), cut(b)
