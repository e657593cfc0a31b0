"""The heal diff: what changed in behaviour between an old cassette and a new recording.

The one owner of that diff, shown after a re-record (``flowproof-run --record``)
and by ``flowproof diff``. Turns are compared by what they did (tool calls and
arguments, text, finish) and by request envelope (model, tools, roles, system
prompt), not by bytes: the reviewer needs what changed in behaviour.

Pure.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from flowproof.cassette import Cassette, RecordedTurn
from flowproof.errors import FlowproofError
from flowproof.excerpt import first_difference
from flowproof.turns import ToolCall, Turn
from flowproof.views import turn_views

__all__ = ["ReadableTurn", "diff_cassettes", "readable_turns", "short_text"]

#: A recorded turn, its view (None when no codec reads it) and why not.
ReadableTurn = tuple[RecordedTurn, Turn | None, str | None]


def readable_turns(cassette: Cassette) -> list[ReadableTurn]:
    """(recorded turn, view or None, why not) for every turn; a turn no codec reads is still shown."""
    out: list[ReadableTurn] = []
    for rt in cassette.turns:
        try:
            out.append((rt, turn_views(rt), None))
        except FlowproofError as e:
            out.append((rt, None, str(e)))
    return out


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Leaf paths in the spec's dotted syntax (``flight.id``, ``passengers.0.name``)."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, list) and value:
        out = {}
        for i, v in enumerate(value):
            out.update(_flatten(v, f"{prefix}.{i}" if prefix else str(i)))
        return out
    return {prefix: value}


def _show(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _call_diff(old: ToolCall, new: ToolCall) -> list[str]:
    if old.canonical_arguments() == new.canonical_arguments():
        return []
    if not (old.is_json and new.is_json):
        return [f"{new.name} arguments: {old.arguments_raw} -> {new.arguments_raw}"]
    a, b = _flatten(old.arguments), _flatten(new.arguments)
    lines = []
    for path in sorted(set(a) | set(b)):
        label = f"{new.name} {path}" if path else f"{new.name} arguments"
        if path not in a:
            lines.append(f"{label}: added {_show(b[path])}")
        elif path not in b:
            lines.append(f"{label}: removed (was {_show(a[path])})")
        elif a[path] != b[path] or type(a[path]) is not type(b[path]):
            before, after = _show(a[path]), _show(b[path])
            if before == after:
                # "311" -> 311, true -> "true": bare text would print the same twice.
                before, after = (
                    json.dumps(a[path], ensure_ascii=False),
                    json.dumps(b[path], ensure_ascii=False),
                )
            lines.append(f"{label}: {before} -> {after}")
    return lines


def short_text(s: str, limit: int = 200) -> str:
    """``s`` on one line, cut at ``limit`` characters, quoted."""
    s = " ".join(s.split())
    return repr(s if len(s) <= limit else s[:limit] + "…")


def _turn_diff(old: Turn, new: Turn) -> list[str]:
    lines: list[str] = []
    if old.request.model != new.request.model:
        lines.append(f"model: {old.request.model} -> {new.request.model}")
    if old.request.tools != new.request.tools:
        added = [t for t in new.request.tools if t not in old.request.tools]
        removed = [t for t in old.request.tools if t not in new.request.tools]
        if added:
            lines.append(f"tools offered: added {', '.join(added)}")
        if removed:
            lines.append(f"tools offered: removed {', '.join(removed)}")
    if old.request.system != new.request.system:
        lines.append("system prompt changed")
    if old.request.roles != new.request.roles:
        lines.append(
            f"message roles: {' '.join(old.request.roles)} -> {' '.join(new.request.roles)}"
        )
    ocalls = old.response.tool_calls if old.response else ()
    ncalls = new.response.tool_calls if new.response else ()
    for i in range(max(len(ocalls), len(ncalls))):
        if i >= len(ocalls):
            lines.append(f"tool call added: {ncalls[i].name} {ncalls[i].canonical_arguments()}")
        elif i >= len(ncalls):
            lines.append(f"tool call removed: {ocalls[i].name} {ocalls[i].canonical_arguments()}")
        elif ocalls[i].name != ncalls[i].name:
            lines.append(f"tool call {i}: {ocalls[i].name} -> {ncalls[i].name}")
        else:
            lines += _call_diff(ocalls[i], ncalls[i])
    otext = old.response.text if old.response else ""
    ntext = new.response.text if new.response else ""
    if otext != ntext:
        before, after = short_text(otext), short_text(ntext)
        if before == after:
            # The change is in whitespace or past the shown prefix: show where it is.
            at = first_difference(otext, ntext)
            start = max(0, at - 40)
            where = f" (from character {start})" if start else ""
            before, after = repr(otext[start : start + 160]), repr(ntext[start : start + 160])
            lines.append(f"text{where}: {before} -> {after}")
        else:
            lines.append(f"text: {before} -> {after}")
    if old.response and new.response and old.response.finish_reason != new.response.finish_reason:
        lines.append(f"finish: {old.response.finish_reason} -> {new.response.finish_reason}")
    return lines


def diff_cassettes(old: Cassette, new: Cassette) -> str:
    """The heal diff, turn by turn: tool calls added/removed, argument paths that moved,
    text changes, turns added/removed. Empty string when the trajectories are the same.

    Requests are compared by envelope (model, tools, roles, system prompt), not bytes:
    the reviewer needs what changed in behaviour.
    """
    a, b = readable_turns(old), readable_turns(new)
    lines: list[str] = []
    if old.route != new.route:
        lines.append(f"route: {old.route} -> {new.route}")
    # Turns are aligned on what each one did (its tool calls, or a text answer), so one
    # inserted or dropped call reads as that, not as every later turn having changed.
    matcher = difflib.SequenceMatcher(
        a=[_turn_key(e) for e in a], b=[_turn_key(e) for e in b], autojunk=False
    )
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        paired = min(i2 - i1, j2 - j1) if tag in ("equal", "replace") else 0
        for k in range(paired):
            lines += _paired_turn_diff(a[i1 + k], b[j1 + k], i1 + k, j1 + k)
        for i in range(i1 + paired, i2):
            lines.append(f"turn {i}: removed — {_summary(a[i])}")
        for j in range(j1 + paired, j2):
            lines.append(f"turn {j}: added — {_summary(b[j])}")
    return "\n".join(lines)


def _turn_key(entry: ReadableTurn) -> tuple[str, ...]:
    rt, view, _ = entry
    if view is None:
        return ("unreadable", rt.request.body_sha256)
    calls = view.response.tool_calls if view.response else ()
    # Arguments are part of the key so that of two calls to one tool, the unchanged one
    # pairs up; a turn whose arguments moved is still paired, as a replacement.
    return tuple(f"{c.name} {c.canonical_arguments()}" for c in calls) or ("text",)


def _paired_turn_diff(old: ReadableTurn, new: ReadableTurn, i: int, j: int) -> list[str]:
    (ort, ov, oerr), (nrt, nv, nerr) = old, new
    label = f"turn {j}" if i == j else f"turn {j} (was turn {i})"
    if ov is None or nv is None:
        if ort.request.body_sha256 != nrt.request.body_sha256 or ort.response != nrt.response:
            return [f"{label}: changed ({oerr or nerr})"]
        return []
    changes = _turn_diff(ov, nv)
    if ort.provider != nrt.provider:
        changes.insert(0, f"provider: {ort.provider} -> {nrt.provider}")
    if not changes and ort.request.body_sha256 != nrt.request.body_sha256:
        changes.append("request body changed (same model, tools and roles)")
    return [f"{label}: {change}" for change in changes]


def _summary(entry: ReadableTurn) -> str:
    rt, view, err = entry
    if view is None:
        return f"{rt.provider} ({err})"
    calls = view.response.tool_calls if view.response else ()
    if calls:
        return f"{rt.provider}, calls " + ", ".join(
            f"{c.name} {c.canonical_arguments()}" for c in calls
        )
    return f"{rt.provider}, text {short_text(view.response.text if view.response else '')}"
