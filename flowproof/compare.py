"""Recorded vs live: the verdict on each live call (`flowproof.report.compare` lays a run out).

Compare is a read plus a report (docs/compare.md). Equal means the same tool-call
trajectory (names and arguments as canonical JSON with sorted keys, in order),
the same unified finish reason (the provider's raw reason churns and is not
compared), and text no worse than ``normalized`` (equal after trim, whitespace
collapse, lowercase). No similarity scores: every verdict is a fact a reviewer
can check, and every difference is named as ``path: recorded X, live Y``.

Which recorded turn a live call is judged against is `flowproof.pairing`'s job;
this module judges a pair, and says so for a live call with no recorded
counterpart (``extra``) or a recorded turn no live call reached (``missing``).
Nothing here touches a cassette.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from flowproof.divergence import ABSENT, diff_fields, format_pair
from flowproof.turns import FinishReason, ResponseView, ToolCall

__all__ = [
    "CompareResult",
    "Difference",
    "FinishReasonComparison",
    "RequestContext",
    "ResultKind",
    "TextComparison",
    "TextStatus",
    "classify_text",
    "compare_responses",
    "extra_result",
    "missing_result",
    "record_on_span",
]

TextStatus = Literal["exact", "normalized", "different"]
#: ``paired``: a live call judged against its recorded turn; ``extra``: a live call with no
#: recorded counterpart; ``missing``: a recorded turn no live call reached.
ResultKind = Literal["paired", "extra", "missing"]

# Excerpts of unpaired responses: enough to recognise the prose, short enough to read.
_EXCERPT = 120


@dataclass(frozen=True, slots=True)
class TextComparison:
    """The text class: ``exact``, ``normalized`` or ``different``.

    ``normalized`` means equal after trim, whitespace collapse and lowercase. An
    unpaired result has no class: ``status`` is None and the absent side is None.
    """

    status: TextStatus | None
    recorded: str | None
    live: str | None


@dataclass(frozen=True, slots=True)
class FinishReasonComparison:
    """The unified finish reasons of both sides (raw provider reasons are deliberately absent).

    A side is None when the result is unpaired.
    """

    recorded: FinishReason | None
    live: FinishReason | None

    @property
    def equal(self) -> bool:
        """True when both turns exist and ended the same way."""
        return self.recorded is not None and self.recorded == self.live


@dataclass(frozen=True, slots=True)
class Difference:
    """One field that differs: ``path: recorded X, live Y``.

    ``path`` is dotted over the response as flowproof reads it: ``tool_calls.0.name``,
    ``tool_calls.0.arguments.flight.id`` (arguments are parsed JSON, so a
    reordered key is never a difference), ``finish_reason``, ``text``. A side
    where the field does not exist holds `flowproof.divergence.ABSENT`.
    """

    path: str
    recorded: Any = ABSENT
    live: Any = ABSENT

    def render(self) -> str:
        """``path: recorded X, live Y``, long values cut around their first difference."""
        # format_pair shows an ABSENT side as "(absent)".
        rec, live = format_pair(self.recorded, self.live)
        return f"{self.path}: recorded {rec}, live {live}"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; an absent side is left out."""
        out: dict[str, Any] = {"path": self.path}
        if self.recorded is not ABSENT:
            out["recorded"] = self.recorded
        if self.live is not ABSENT:
            out["live"] = self.live
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Difference:
        """The inverse of `to_json`."""
        return cls(str(obj["path"]), obj.get("recorded", ABSENT), obj.get("live", ABSENT))


@dataclass(frozen=True, slots=True)
class RequestContext:
    """The request side of a thread's first live call, set against the recording.

    Context, never verdict: when the agent's first request differs (an edited
    prompt, a new tool), a difference in the responses may be the agent's doing,
    not the model's. ``envelope`` holds the envelope lines (model, tools, roles),
    ``fields`` the request body's differing leaves; ``turn`` is the recorded turn
    the request was set against.
    """

    thread: int
    turn: int
    envelope: tuple[str, ...]
    fields: tuple[Difference, ...]
    note: str = "the agent changed, not only the model"

    def lines(self, limit: int = 12) -> list[str]:
        """The note, then ``- `` bullets: the envelope first, then up to ``limit`` fields."""
        head = f"{self.note}: the first request of thread {self.thread} differs from recorded"
        out = [f"{head} turn {self.turn}"]
        out += [f"- {e}" for e in self.envelope]
        out += [f"- {f.render()}" for f in self.fields[:limit]]
        if len(self.fields) > limit:
            out.append(f"- and {len(self.fields) - limit} more request field changes")
        return out

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return {
            "note": self.note,
            "thread": self.thread,
            "turn": self.turn,
            "envelope": list(self.envelope),
            "fields": [f.to_json() for f in self.fields],
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> RequestContext:
        """The inverse of `to_json`."""
        return cls(
            thread=int(obj["thread"]),
            turn=int(obj["turn"]),
            envelope=tuple(str(e) for e in obj["envelope"]),
            fields=tuple(Difference.from_json(f) for f in obj["fields"]),
            note=str(obj["note"]),
        )


@dataclass(frozen=True, slots=True)
class CompareResult:
    """The verdict on one place in the conversation.

    ``turn`` is the recorded turn's index (None for ``extra``), ``live_call`` the
    live call's index in completion order (None for ``missing``); ``thread``
    numbers the recording's threads by their first turn, and ``depth`` is how many
    messages/items the request carried. ``recorded_tool_calls``/``live_tool_calls``
    are ``(name, canonical JSON arguments)`` pairs. ``differences`` names every
    differing field of a paired result; ``reason`` says why an unpaired one is.
    """

    kind: ResultKind
    equal: bool
    turn: int | None
    live_call: int | None
    thread: int
    depth: int
    tool_calls_equal: bool
    recorded_tool_calls: tuple[tuple[str, str], ...]
    live_tool_calls: tuple[tuple[str, str], ...]
    finish_reason: FinishReasonComparison
    text: TextComparison
    differences: tuple[Difference, ...] = ()
    reason: str | None = None
    context: RequestContext | None = field(default=None)

    def place(self) -> str:
        """Where this result is: ``turn 2 (thread 0, depth 4)``, or the live call for an extra."""
        where = f"thread {self.thread}, depth {self.depth}"
        if self.turn is None:
            return f"live call {self.live_call} ({where})"
        return f"turn {self.turn} ({where})"

    def render(self) -> str:
        """Readable lines: the verdict, then ``- path: recorded X, live Y`` per difference."""
        if self.kind == "extra":
            lines = [f"{self.place()}: extra — {self.reason}"]
            lines += [f"- live: {s}" for s in _summary(self.live_tool_calls, self.text.live)]
            return "\n".join(lines)
        if self.kind == "missing":
            lines = [f"{self.place()}: missing — {self.reason}"]
            lines += [
                f"- recorded: {s}" for s in _summary(self.recorded_tool_calls, self.text.recorded)
            ]
            return "\n".join(lines)
        finish = self.finish_reason
        if self.equal:
            shown = finish.live.value if finish.live else "?"
            return f"{self.place()}: equal (finish reason {shown}, text {self.text.status})"
        lines = [f"{self.place()}: the live response differs from the recording"]
        lines += [f"- {d.render()}" for d in self.differences]
        if self.text.status != "different":
            lines.append(f"- text: {self.text.status}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict for reports, handlers and the event log; ``text.status`` is always there."""
        return {
            "kind": self.kind,
            "equal": self.equal,
            "turn": self.turn,
            "live_call": self.live_call,
            "thread": self.thread,
            "depth": self.depth,
            "tool_calls": {
                "equal": self.tool_calls_equal,
                "recorded": [{"name": n, "arguments": a} for n, a in self.recorded_tool_calls],
                "live": [{"name": n, "arguments": a} for n, a in self.live_tool_calls],
            },
            "finish_reason": {
                "equal": self.finish_reason.equal,
                "recorded": _value(self.finish_reason.recorded),
                "live": _value(self.finish_reason.live),
            },
            "text": {
                "status": self.text.status,
                "recorded": self.text.recorded,
                "live": self.text.live,
            },
            "differences": [d.to_json() for d in self.differences],
            "reason": self.reason,
            "context": self.context.to_json() if self.context else None,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> CompareResult:
        """The inverse of `to_json`: the runner rebuilds results from the proxy's event log.

        Raises KeyError/ValueError/TypeError on a dict `to_json` did not make.
        """
        calls, finish, text = obj["tool_calls"], obj["finish_reason"], obj["text"]
        kind = obj["kind"]
        if kind not in ("paired", "extra", "missing"):
            raise ValueError(f"unknown compare result kind {kind!r}")
        context = obj.get("context")
        return cls(
            kind=kind,
            equal=bool(obj["equal"]),
            turn=obj["turn"],
            live_call=obj["live_call"],
            thread=int(obj["thread"]),
            depth=int(obj["depth"]),
            tool_calls_equal=bool(calls["equal"]),
            recorded_tool_calls=tuple((c["name"], c["arguments"]) for c in calls["recorded"]),
            live_tool_calls=tuple((c["name"], c["arguments"]) for c in calls["live"]),
            finish_reason=FinishReasonComparison(
                _reason(finish["recorded"]), _reason(finish["live"])
            ),
            text=TextComparison(text["status"], text["recorded"], text["live"]),
            differences=tuple(Difference.from_json(d) for d in obj["differences"]),
            reason=obj.get("reason"),
            context=RequestContext.from_json(context) if context else None,
        )


def classify_text(recorded: str, live: str) -> TextComparison:
    """Classify two texts: exact, normalized (trim, collapse, lowercase) or different."""
    if recorded == live:
        status: TextStatus = "exact"
    elif _normalize_text(recorded) == _normalize_text(live):
        status = "normalized"
    else:
        status = "different"
    return TextComparison(status, recorded, live)


def compare_responses(
    recorded: ResponseView,
    live: ResponseView,
    *,
    turn: int,
    live_call: int | None = None,
    thread: int = 0,
    depth: int = 0,
    context: RequestContext | None = None,
) -> CompareResult:
    """Judge a live response against the recorded one for ``turn``; pure, never writes."""
    rec_calls = _calls(recorded.tool_calls)
    live_calls = _calls(live.tool_calls)
    finish = FinishReasonComparison(recorded.finish_reason, live.finish_reason)
    text = classify_text(recorded.text, live.text)
    differences = _tool_call_differences(recorded.tool_calls, live.tool_calls)
    if not finish.equal:
        differences.append(
            Difference("finish_reason", recorded.finish_reason.value, live.finish_reason.value)
        )
    if text.status == "different":
        differences.append(Difference("text", recorded.text, live.text))
    tool_calls_equal = rec_calls == live_calls
    return CompareResult(
        kind="paired",
        equal=tool_calls_equal and finish.equal and text.status != "different",
        turn=turn,
        live_call=live_call,
        thread=thread,
        depth=depth,
        tool_calls_equal=tool_calls_equal,
        recorded_tool_calls=rec_calls,
        live_tool_calls=live_calls,
        finish_reason=finish,
        text=text,
        differences=tuple(differences),
        context=context,
    )


def extra_result(
    live: ResponseView,
    *,
    live_call: int,
    thread: int,
    depth: int,
    reason: str,
    context: RequestContext | None = None,
) -> CompareResult:
    """A live call with no recorded counterpart: drift, never equal."""
    return CompareResult(
        kind="extra",
        equal=False,
        turn=None,
        live_call=live_call,
        thread=thread,
        depth=depth,
        tool_calls_equal=False,
        recorded_tool_calls=(),
        live_tool_calls=_calls(live.tool_calls),
        finish_reason=FinishReasonComparison(None, live.finish_reason),
        text=TextComparison(None, None, live.text),
        reason=reason,
        context=context,
    )


def missing_result(
    recorded: ResponseView, *, turn: int, thread: int, depth: int, reason: str
) -> CompareResult:
    """A recorded turn that no live call reached by the end of the run: drift, never equal."""
    return CompareResult(
        kind="missing",
        equal=False,
        turn=turn,
        live_call=None,
        thread=thread,
        depth=depth,
        tool_calls_equal=False,
        recorded_tool_calls=_calls(recorded.tool_calls),
        live_tool_calls=(),
        finish_reason=FinishReasonComparison(recorded.finish_reason, None),
        text=TextComparison(None, recorded.text, None),
        reason=reason,
    )


def record_on_span(result: CompareResult) -> None:
    """Set ``flowproof.compare_equal``/``compare_text_status`` on the current OpenTelemetry span.

    A no-op when ``opentelemetry`` is not installed or no span is recording. An
    unpaired result has no text class, so only ``compare_equal`` is set for it.
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
    if result.text.status is not None:
        span.set_attribute("flowproof.compare_text_status", result.text.status)


# --------------------------------------------------------------------------- helpers


def _reason(value: str | None) -> FinishReason | None:
    return FinishReason(value) if value is not None else None


def _value(reason: FinishReason | None) -> str | None:
    return reason.value if reason is not None else None


def _normalize_text(text: str) -> str:
    # str.split() with no argument trims and collapses every run of whitespace at once.
    return " ".join(text.split()).lower()


def _calls(calls: Sequence[ToolCall]) -> tuple[tuple[str, str], ...]:
    return tuple((c.name, c.canonical_arguments()) for c in calls)


def _call_value(call: ToolCall) -> dict[str, Any]:
    return {"name": call.name, "arguments": call.arguments if call.is_json else call.arguments_raw}


def _tool_call_differences(
    recorded: Sequence[ToolCall], live: Sequence[ToolCall]
) -> list[Difference]:
    """Per position: a whole call added/removed/renamed, or the argument leaves that moved."""
    out: list[Difference] = []
    for i in range(max(len(recorded), len(live))):
        base = f"tool_calls.{i}"
        if i >= len(live):
            out.append(Difference(base, _call_value(recorded[i]), ABSENT))
        elif i >= len(recorded):
            out.append(Difference(base, ABSENT, _call_value(live[i])))
        elif recorded[i].name != live[i].name:
            # Another tool: its arguments against the old tool's would be noise.
            out.append(Difference(base, _call_value(recorded[i]), _call_value(live[i])))
        elif recorded[i].canonical_arguments() != live[i].canonical_arguments():
            out += _argument_differences(f"{base}.arguments", recorded[i], live[i])
    return out


def _argument_differences(path: str, recorded: ToolCall, live: ToolCall) -> list[Difference]:
    if not (recorded.is_json and live.is_json):
        # Arguments that do not parse: a field-level answer would be half a truth.
        return [Difference(path, recorded.arguments_raw, live.arguments_raw)]
    out = []
    for change in diff_fields(recorded.arguments, live.arguments):
        where = f"{path}.{change.path}" if change.path else path
        if change.inner:
            where += f" → {change.inner}"
        out.append(Difference(where, change.recorded, change.replayed))
    return out


def _summary(calls: tuple[tuple[str, str], ...], text: str | None) -> list[str]:
    out = [f"tool call {name} {args}" for name, args in calls]
    if text:
        shown = text if len(text) <= _EXCERPT else text[:_EXCERPT] + "…"
        out.append(f"text {json.dumps(shown, ensure_ascii=False)}")
    return out or ["no tool call and no text"]
