"""Reports: human text, JSON, JUnit XML; the heal diff between two cassettes; a readable cassette.

Human text ends with one line that says what to do next.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from flowproof.errors import (
    EXIT_AGENT,
    EXIT_ASSERTION,
    EXIT_DIVERGENCE,
    EXIT_DRIFT,
    EXIT_OK,
    EXIT_USAGE,
)
from flowproof.model import ToolCall, Turn
from flowproof.runner.flow import FlowResult

PASS, FAIL = "✓", "✗"
#: Agent output shown in a failing report (the tail: errors come last).
_OUTPUT_LINES = 20

_VERDICT = {
    EXIT_OK: "passed",
    EXIT_ASSERTION: "assertion failed",
    EXIT_USAGE: "usage or spec error",
    EXIT_DIVERGENCE: "replay divergence",
    EXIT_DRIFT: "compare drift",
    EXIT_AGENT: "agent failed",
}


#: Characters XML 1.0 forbids everywhere (even escaped): C0 controls but tab, LF, CR;
#: lone surrogates; U+FFFE/U+FFFF. Agent output is full of them (ANSI colour codes).
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _verdict_name(code: int) -> str:
    if code >= 128:
        return "interrupted"
    return _VERDICT.get(code, "failed")


def _utf8_safe(text: str) -> str:
    """``text`` with lone surrogates (a non-UTF-8 file name, a broken escape in a model
    response) replaced, so it can be written as UTF-8."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _xml_safe(text: str) -> str:
    r"""``text`` with every character XML 1.0 cannot carry shown as ``\xNN`` / ``\uNNNN``."""
    return _XML_INVALID.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
        text,
    )


def worst_exit(results: Sequence[FlowResult]) -> int:
    """The exit code of a run of several flows: the worst (highest) one."""
    return max((r.exit_code for r in results), default=EXIT_OK)


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line if line else line for line in text.splitlines())


def _tail(text: str, lines: int = _OUTPUT_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def next_step(result: FlowResult) -> str:
    """The one line that says what to do about ``result``."""
    code, spec = result.exit_code, str(result.spec_path)
    if code == EXIT_OK:
        if result.mode == "record":
            return f"Review the cassette diff and commit {result.cassette}."
        return "Nothing to do."
    if code == EXIT_DIVERGENCE:
        return (
            "If the change is intended, re-record with: "
            f"{result.record_command} — then review the heal diff; otherwise fix the agent."
        )
    if code == EXIT_DRIFT:
        return (
            "The live model no longer matches the recording: inspect the drift, then re-record with "
            f"{result.record_command} if the new behaviour is right (compare never writes)."
        )
    if code == EXIT_ASSERTION:
        if result.mode == "record":
            kept = f" (the recording is in {result.rejected})" if result.rejected else ""
            return f"Nothing was recorded{kept}: fix the agent or the spec, then record again."
        return f"Fix the agent (or the spec at the ✗ lines), then run: flowproof-run {spec}"
    if code == EXIT_AGENT:
        if result.failure == "timeout":
            return ("The agent ran out of time: if it is just slow, raise `agent.timeout` in the "
                    "spec or pass --timeout; if it hangs, run with -v to see its output.")
        if result.failure == "upstream":
            return ("The upstream model failed, not the agent: check the upstream (--upstream, the "
                    "provider's status, rate limits), then run again.")
        if result.failure == "crash":
            return "The agent crashed: fix it using its output above, then run again."
        return "Fix the agent start-up (see the error and its output above), then run again."
    if code >= 128:
        return "flowproof-run was interrupted: nothing was recorded or checked; run it again."
    return "Fix the problem above, then run again."


def render_flow(result: FlowResult, *, verbose: bool = False) -> str:
    """One flow as readable text."""
    mark = PASS if result.passed else FAIL
    lines = [f"{mark} {result.name} [{result.mode}] — {_verdict_name(result.exit_code)}"]
    lines.append(f"  spec: {result.spec_path}")
    if result.cassette is not None:
        lines.append(f"  cassette: {result.cassette}")
    if result.error:
        lines.append(_indent(result.error, "  "))
    for text in result.divergences:
        lines.append("  replay divergence:")
        lines.append(_indent(text))
    for text in result.drifts:
        lines.append("  compare drift:")
        lines.append(_indent(text))
    if result.missing:
        lines.append(_indent(result.missing, "  "))
    for text in result.errors:
        if text != result.error:
            lines.append(f"  proxy error: {text}")
    for step in result.steps:
        where = f" ({step.location})" if step.location and (verbose or not step.passed) else ""
        lines.append(f"  {PASS if step.passed else FAIL} {step.source}{where}")
        if not step.passed or verbose:
            lines.append(_indent(step.message))
    if verbose or not result.passed:
        if result.steps or result.turns:
            calls = ", ".join(result.tool_calls) or "none"
            lines.append(f"  trajectory: {result.turns} model call(s); tool calls: {calls}")
            if result.reply is not None:
                lines.append(f"  reply: {result.reply[:300]!r}")
    for note in result.notes:
        lines.append(f"  note: {note}")
    if result.heal_diff is not None:
        lines.append("  heal diff (old cassette -> new recording):")
        lines.append(_indent(result.heal_diff or "no change"))
    if result.rejected is not None:
        lines.append(f"  rejected recording kept for inspection: {result.rejected}")
    show_output = (verbose or result.exit_code == EXIT_AGENT) and (result.agent_stdout or result.agent_stderr)
    if show_output:
        if result.agent_stdout.strip():
            lines.append("  agent stdout (last lines):")
            lines.append(_indent(_tail(result.agent_stdout)))
        if result.agent_stderr.strip():
            lines.append("  agent stderr (last lines):")
            lines.append(_indent(_tail(result.agent_stderr)))
    if verbose and result.startup_seconds is not None:
        lines.append(f"  proxy ready in {result.startup_seconds:.2f}s; flow took {result.duration:.2f}s")
    return "\n".join(lines)


def render_text(results: Sequence[FlowResult], *, verbose: bool = False) -> str:
    """Every flow, a summary line, and the line that says what to do."""
    blocks = [render_flow(r, verbose=verbose) for r in results]
    passed = sum(1 for r in results if r.passed)
    failed = [r for r in results if not r.passed]
    summary = f"{passed} of {len(results)} flow(s) passed"
    if not failed:
        last = next_step(results[0]) if len(results) == 1 else (
            "Nothing to do." if results and results[0].mode != "record"
            else "Review the cassette diffs and commit them."
        )
    else:
        worst = max(failed, key=lambda r: r.exit_code)
        last = next_step(worst)
    return "\n\n".join(blocks) + f"\n\n{summary}.\n{last}"


def result_json(result: FlowResult) -> dict[str, Any]:
    """A flow as machine-readable JSON."""
    return {
        "spec": str(result.spec_path),
        "name": result.name,
        "mode": result.mode,
        "passed": result.passed,
        "exit_code": result.exit_code,
        "verdict": _verdict_name(result.exit_code),
        "cassette": str(result.cassette) if result.cassette else None,
        "error": result.error,
        "steps": [
            {"passed": s.passed, "source": s.source, "message": s.message, "location": s.location}
            for s in result.steps
        ],
        "divergences": list(result.divergences),
        "drifts": list(result.drifts),
        "missing": result.missing,
        "proxy_errors": list(result.errors),
        "reply": result.reply,
        "tool_calls": list(result.tool_calls),
        "turns": result.turns,
        "heal_diff": result.heal_diff,
        "rejected": str(result.rejected) if result.rejected else None,
        "agent": {
            "returncode": result.agent_returncode,
            "stdout": _tail(result.agent_stdout, 200),
            "stderr": _tail(result.agent_stderr, 200),
        },
        "notes": list(result.notes),
        "proxy_startup_seconds": result.startup_seconds,
        "duration_seconds": round(result.duration, 3),
        "next": next_step(result),
    }


def render_json(results: Sequence[FlowResult]) -> str:
    """The whole run as one JSON document."""
    doc = {
        "exit_code": worst_exit(results),
        "passed": sum(1 for r in results if r.passed),
        "failed": sum(1 for r in results if not r.passed),
        "flows": [result_json(r) for r in results],
    }
    # Valid JSON whatever the flows carried: a lone surrogate would make the text unencodable.
    return _utf8_safe(json.dumps(doc, indent=2, ensure_ascii=False))


def junit_xml(results: Sequence[FlowResult]) -> str:
    """JUnit XML: one testsuite, one testcase per flow."""
    failing = (EXIT_ASSERTION, EXIT_DIVERGENCE, EXIT_DRIFT)
    failures = sum(1 for r in results if r.exit_code in failing)
    errors = sum(1 for r in results if not r.passed and r.exit_code not in failing)
    suite = ET.Element(
        "testsuite",
        name="flowproof",
        tests=str(len(results)),
        failures=str(failures),
        errors=str(errors),
        time=f"{sum(r.duration for r in results):.3f}",
    )
    for r in results:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=str(r.spec_path),
            name=f"{r.name} [{r.mode}]",
            time=f"{r.duration:.3f}",
        )
        if not r.passed:
            kind = "failure" if r.exit_code in failing else "error"
            node = ET.SubElement(case, kind, message=_verdict_name(r.exit_code), type=f"exit-{r.exit_code}")
            node.text = render_flow(r) + "\n" + next_step(r)
        if r.agent_stdout:
            ET.SubElement(case, "system-out").text = _tail(r.agent_stdout, 200)
        if r.agent_stderr:
            ET.SubElement(case, "system-err").text = _tail(r.agent_stderr, 200)
    ET.indent(suite)
    # ElementTree escapes markup (<, &, quotes; `]]>` is harmless outside CDATA) but writes
    # control characters raw, which no XML parser accepts: they are made visible instead.
    body = _xml_safe(ET.tostring(suite, encoding="unicode"))
    return '<?xml version="1.0" encoding="utf-8"?>\n' + body + "\n"


def write_junit(results: Sequence[FlowResult], path: Path) -> None:
    """Write `junit_xml` to ``path`` (parent directories are created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(junit_xml(results), encoding="utf-8")


# --------------------------------------------------------------------------- cassettes


def _views(cassette: Any) -> list[tuple[Any, Turn | None, str | None]]:
    """(recorded turn, view or None, why not) for every turn; a turn no codec reads is still shown."""
    from flowproof.cassette import turn_views
    from flowproof.errors import FlowproofError

    out: list[tuple[Any, Turn | None, str | None]] = []
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
                before, after = json.dumps(a[path], ensure_ascii=False), json.dumps(b[path], ensure_ascii=False)
            lines.append(f"{label}: {before} -> {after}")
    return lines


def _text(s: str, limit: int = 200) -> str:
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
        lines.append(f"message roles: {' '.join(old.request.roles)} -> {' '.join(new.request.roles)}")
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
        before, after = _text(otext), _text(ntext)
        if before == after:
            # The change is in whitespace or past the shown prefix: show where it is.
            at = next((k for k, (x, y) in enumerate(zip(otext, ntext)) if x != y), min(len(otext), len(ntext)))
            start = max(0, at - 40)
            where = f" (from character {start})" if start else ""
            before, after = repr(otext[start : start + 160]), repr(ntext[start : start + 160])
            lines.append(f"text{where}: {before} -> {after}")
        else:
            lines.append(f"text: {before} -> {after}")
    if old.response and new.response and old.response.finish_reason != new.response.finish_reason:
        lines.append(f"finish: {old.response.finish_reason} -> {new.response.finish_reason}")
    return lines


def diff_cassettes(old: Any, new: Any) -> str:
    """The heal diff, turn by turn: tool calls added/removed, argument paths that moved,
    text changes, turns added/removed. Empty string when the trajectories are the same.

    Requests are compared by envelope (model, tools, roles, system prompt), not bytes:
    the reviewer needs what changed in behaviour.
    """
    a, b = _views(old), _views(new)
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


def _turn_key(entry: tuple[Any, Turn | None, str | None]) -> tuple[str, ...]:
    rt, view, _ = entry
    if view is None:
        return ("unreadable", rt.request.body_sha256)
    calls = view.response.tool_calls if view.response else ()
    # Arguments are part of the key so that of two calls to one tool, the unchanged one
    # pairs up; a turn whose arguments moved is still paired, as a replacement.
    return tuple(f"{c.name} {c.canonical_arguments()}" for c in calls) or ("text",)


def _paired_turn_diff(
    old: tuple[Any, Turn | None, str | None], new: tuple[Any, Turn | None, str | None], i: int, j: int
) -> list[str]:
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


def _summary(entry: tuple[Any, Turn | None, str | None]) -> str:
    rt, view, err = entry
    if view is None:
        return f"{rt.provider} ({err})"
    calls = view.response.tool_calls if view.response else ()
    if calls:
        return f"{rt.provider}, calls " + ", ".join(f"{c.name} {c.canonical_arguments()}" for c in calls)
    return f"{rt.provider}, text {_text(view.response.text if view.response else '')}"


def show_cassette(cassette: Any, path: Path | str = "") -> str:
    """A cassette as a readable conversation: per turn the provider, model, roles,
    the newest user text, tool calls with arguments and the reply text."""
    header = f"{path}: " if path else ""
    lines = [f"{header}{len(cassette.turns)} turn(s), route {cassette.route}, format {cassette.format}"]
    for rt, view, err in _views(cassette):
        req = rt.request
        lines.append("")
        lines.append(f"turn {rt.index} — {rt.provider} — {req.method} {req.url} — status {rt.response.status}")
        if view is None:
            lines.append(f"  (cannot be read: {err})")
            continue
        lines.append(f"  model: {view.request.model or '?'}")
        lines.append(f"  roles: {' '.join(view.request.roles) or '-'}")
        if view.request.tools:
            lines.append(f"  tools offered: {', '.join(view.request.tools)}")
        if view.request.system:
            lines.append(f"  system: {_text(view.request.system, 120)}")
        if view.request.prompt:
            lines.append(f"  user: {_text(view.request.prompt, 300)}")
        for result in view.request.tool_results:
            lines.append(f"  tool result ({result.name or result.call_id}): {_text(result.content, 200)}")
        response = view.response
        if response is None:
            continue
        for call in response.tool_calls:
            lines.append(f"  → tool call {call.name} {call.canonical_arguments()}")
        if response.text:
            lines.append("  assistant:")
            lines.append(_indent(response.text.rstrip()))
        lines.append(f"  finish: {response.finish_reason}")
    return "\n".join(lines)
