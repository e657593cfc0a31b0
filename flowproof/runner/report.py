"""Reports: human text, JSON, JUnit XML, and a readable cassette. Rendering only.

The verdict comes from `flowproof.verdict`, the heal diff from `flowproof.heal`;
this module turns them into text. Human text ends with one line that says what
to do next.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from flowproof.cassette import Cassette
from flowproof.compare import junit_cases, report_json, report_lines
from flowproof.errors import (
    EXIT_AGENT,
    EXIT_ASSERTION,
    EXIT_DIVERGENCE,
    EXIT_DRIFT,
    EXIT_OK,
    EXIT_USAGE,
    FlowproofError,
)
from flowproof.findings import findings
from flowproof.heal import readable_turns, short_text
from flowproof.options import Mode
from flowproof.printable import printable
from flowproof.runner.flow import FlowResult
from flowproof.trajectory import Trajectory, build_trajectory
from flowproof.witness import SecretLeak

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
        if result.mode == Mode.RECORD:
            if result.heal_diff is None:
                # A first-ever record: there was no cassette, so there is no heal diff to review.
                return (f"A new cassette: read it (flowproof show {result.cassette}) and commit it "
                        "with the spec.")
            return f"Review the heal diff above and commit {result.cassette}."
        return "Nothing to do."
    if code == EXIT_DIVERGENCE:
        return (
            "If the change is intended, re-record with: "
            f"{result.record_command} — then review the heal diff; otherwise fix the agent."
        )
    if code == EXIT_DRIFT:
        return (
            "The live run differs from the recording: inspect the first drift, then re-record with "
            f"{result.record_command} if the new behaviour is right (compare never writes)."
        )
    if code == EXIT_ASSERTION:
        if result.mode == Mode.RECORD:
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
    if result.compare:
        lines.append(_indent("\n".join(report_lines(result.compare)), "  "))
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
    lines.extend(witness_lines(result))
    for note in result.notes:
        lines.append(f"  note: {note}")
    for guard in result.guards:
        lines.append(f"  guard evidence: {_guard_line(guard)}")
    for warning in guard_warnings(result):
        lines.append(f"  warning: {warning}")
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
    # Recorded text and agent output go to a terminal: shown, never obeyed (`printable`).
    return printable("\n".join(lines))


def witness_lines(result: FlowResult) -> list[str]:
    """What every report says whatever was asserted: the hosts the agent reached, where a
    declared secret went (masked), the mocks that never fired, and the sub-agent tree."""
    lines: list[str] = []
    if result.egress:
        hosts = ", ".join(_host_label(e) for e in result.egress)
        lines.append(f"  hosts contacted: {hosts}")
    for leak in result.secret_leaks:
        lines.append(f"  secret leak: {SecretLeak.from_json(leak).describe()}")
    for mock in result.unused_mocks:
        lines.append(f"  unused mock: {mock.get('text')}")
    if result.agent_tree:
        lines.append("  sub-agents:")
        lines.extend(f"    {line}" for line in result.agent_tree)
    return lines


def _host_label(egress: dict[str, Any]) -> str:
    role = egress.get("role")
    kind = f" ({role})" if role in ("model", "mcp") else ""
    return f"{egress.get('host')}:{egress.get('port')}{kind}"


def summary_table(results: Sequence[FlowResult]) -> str:
    """One row per flow, in run order: mark, verdict, mode, seconds, spec path, name."""
    rows = [
        (
            f"{PASS if r.passed else FAIL} {_verdict_name(r.exit_code)}",
            r.mode,
            f"{r.duration:.1f}s",
            str(r.spec_path),
            r.name,
        )
        for r in results
    ]
    header = ("  verdict", "mode", "time", "spec", "flow")
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header) - 1)]

    def line(row: tuple[str, ...]) -> str:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])]
        return "  ".join([*cells, row[-1]]).rstrip()

    return "\n".join([line(header), *(line(row) for row in rows)])


def _guard_line(guard: dict[str, Any]) -> str:
    offered = "yes" if guard.get("offered") else "no"
    return (
        f"{guard.get('assertion')}: offered {offered}, asked {guard.get('asked')}, "
        f"called {guard.get('called')} ({guard.get('boundary')} boundary)"
    )


def guard_warnings(result: FlowResult) -> list[str]:
    """The guard evidence warnings of a flow (a passing guard with no recorded attempt)."""
    return [str(g["warning"]) for g in result.guards if g.get("warning")]


def render_text(results: Sequence[FlowResult], *, verbose: bool = False) -> str:
    """Every flow, a summary (a table when there are several flows), and the line that says
    what to do."""
    blocks = [render_flow(r, verbose=verbose) for r in results]
    if len(results) > 1:
        blocks.append(summary_table(results))
    passed = sum(1 for r in results if r.passed)
    failed = [r for r in results if not r.passed]
    summary = f"{passed} of {len(results)} flow(s) passed"
    if not failed:
        recorded = [r for r in results if r.mode == Mode.RECORD]
        if len(results) == 1:
            last = next_step(results[0])
        elif not recorded:
            last = "Nothing to do."
        elif all(r.heal_diff is None for r in recorded):
            last = "New cassettes: read them (flowproof show CASSETTE) and commit them with their specs."
        else:
            last = "Review the heal diffs above and commit the cassettes."
    else:
        worst = max(failed, key=lambda r: r.exit_code)
        last = next_step(worst)
    return printable("\n\n".join(blocks) + f"\n\n{summary}.\n{last}")


def flow_findings(result: FlowResult) -> list[dict[str, Any]]:
    """The flow's divergences, missing calls, drift, failed steps and error as data
    (`flowproof.findings`); empty for a pass."""
    if result.passed:
        return []
    return findings(
        result.events,
        result.steps,
        mode=result.mode,
        error=result.error,
        compare=[c.to_json() for c in result.compare],
    )


#: Finding matchers that are where clauses (`flowproof.assertions.MISMATCH_KINDS`).
_CLAUSE_MATCHERS = ("equals", "contains", "matches", "exists", "is absent")


def _finding_summary(finding: dict[str, Any]) -> str:
    """A finding in one line, for a JUnit failure message."""
    where = [f"turn {finding['turn']}"] if finding["turn"] is not None else []
    if finding["thread"] is not None:
        where.append(f"thread {finding['thread']}")
    if finding["path"]:
        where.append(str(finding["path"]))
    if finding.get("call") is not None:
        where.insert(0, f"call {finding['call']} ({finding['tool']})")
    head = f"{finding['kind']}" + (f" at {', '.join(where)}" if where else "")
    if finding.get("matcher") in _CLAUSE_MATCHERS:
        # A failed where clause: the expectation and what the call held, in one line.
        expected = "" if finding["expected"] is None else " " + json.dumps(finding["expected"], ensure_ascii=False)
        return (f"{head}: expected {finding['matcher']}{expected}, "
                f"actual {json.dumps(finding['actual'], ensure_ascii=False, default=str)[:200]}")
    first = (finding["message"] or "").splitlines()[:1]
    return f"{head}: {first[0]}" if first else head


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
            {"passed": s.passed, "source": s.source, "message": s.message, "location": s.location,
             "scope": s.scope}
            for s in result.steps
        ],
        "findings": flow_findings(result),
        "divergences": list(result.divergences),
        "drifts": list(result.drifts),
        "compare": report_json(result.compare) if result.mode == Mode.COMPARE else None,
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
        "guards": list(result.guards),
        "warnings": guard_warnings(result),
        "egress": list(result.egress),
        "secret_leaks": list(result.secret_leaks),
        "unused_mocks": list(result.unused_mocks),
        "subagents": list(result.subagents),
        "usage": result.usage,
        "proxy_startup_seconds": result.startup_seconds,
        "duration_seconds": round(result.duration, 3),
        "next": next_step(result),
    }


def render_json_doc(results: Sequence[FlowResult]) -> dict[str, Any]:
    """The whole run as the data `render_json` prints (the HTML report reads it too)."""
    return {
        "exit_code": worst_exit(results),
        "passed": sum(1 for r in results if r.passed),
        "failed": sum(1 for r in results if not r.passed),
        "flows": [result_json(r) for r in results],
    }


def render_json(results: Sequence[FlowResult]) -> str:
    """The whole run as one JSON document."""
    doc = render_json_doc(results)
    # Valid JSON whatever the flows carried: a lone surrogate would make the text unencodable.
    return _utf8_safe(json.dumps(doc, indent=2, ensure_ascii=False))


def junit_xml(results: Sequence[FlowResult]) -> str:
    """JUnit XML: one testsuite, one testcase per flow, plus one per compare result."""
    failing = (EXIT_ASSERTION, EXIT_DIVERGENCE, EXIT_DRIFT)
    per_result = [c for r in results for c in junit_cases(r.compare)]
    failures = sum(1 for r in results if r.exit_code in failing)
    failures += sum(1 for c in per_result if not c["passed"])
    errors = sum(1 for r in results if not r.passed and r.exit_code not in failing)
    suite = ET.Element(
        "testsuite",
        name="flowproof",
        tests=str(len(results) + len(per_result)),
        failures=str(failures),
        errors=str(errors),
        time=f"{sum(r.duration for r in results):.3f}",
    )
    suite_warnings: list[str] = []
    for r in results:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=str(r.spec_path),
            name=f"{r.name} [{r.mode}]",
            time=f"{r.duration:.3f}",
        )
        warnings = guard_warnings(r)
        # JUnit has no warning element: a suite property per warning, and the text in
        # system-out (a testcase may not hold properties in the schema CI systems read).
        suite_warnings.extend(f"{r.spec_path}: {w}" for w in warnings)
        if not r.passed:
            kind = "failure" if r.exit_code in failing else "error"
            node = ET.SubElement(case, kind, message=_verdict_name(r.exit_code), type=f"exit-{r.exit_code}")
            node.text = render_flow(r) + "\n" + next_step(r)
            # Then each finding as its own failure: a one-line message, and the finding as
            # JSON for tools that read more than the first failure.
            for finding in flow_findings(r):
                extra = ET.SubElement(
                    case, kind, message=_finding_summary(finding), type=f"flowproof.{finding['kind']}"
                )
                extra.text = json.dumps(finding, ensure_ascii=False, indent=2, default=str)
        seen = "".join(line.strip() + "\n" for line in witness_lines(r))
        out = "".join(f"warning: {w}\n" for w in warnings) + seen + (
            _tail(r.agent_stdout, 200) if r.agent_stdout else "")
        if out:
            ET.SubElement(case, "system-out").text = out
        if r.agent_stderr:
            ET.SubElement(case, "system-err").text = _tail(r.agent_stderr, 200)
        # Compare: one testcase per result, so CI shows which turn drifted.
        for entry in junit_cases(r.compare):
            sub = ET.SubElement(
                suite, "testcase", classname=str(r.spec_path), name=f"{r.name} [compare] {entry['name']}"
            )
            if not entry["passed"]:
                ET.SubElement(sub, "failure", message=entry["message"], type="drift").text = entry["text"]
    if suite_warnings:
        props = ET.Element("properties")
        for warning in suite_warnings:
            ET.SubElement(props, "property", name="flowproof.warning", value=warning)
        suite.insert(0, props)
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


def cassette_threads(trajectory: Trajectory) -> dict[int, int]:
    """Turn index -> thread number, threads numbered by their first turn (as compare
    numbers them); a turn no codec reads has no thread."""
    threads = sorted(trajectory.threads, key=lambda t: t.first_index)
    return {turn.index: number for number, thread in enumerate(threads) for turn in thread.turns}


def show_cassette(
    cassette: Cassette,
    path: Path | str = "",
    *,
    thread: int | None = None,
    turn: int | None = None,
) -> str:
    """A cassette as a readable conversation: per turn the provider, model, thread, roles,
    the newest user text, tool calls with arguments and the reply text. ``thread`` and
    ``turn`` keep only that thread's turns, or that one turn (`FlowproofError` naming
    what exists when there is none)."""
    header = f"{path}: " if path else ""
    lines = [f"{header}{len(cassette.turns)} turn(s), route {cassette.route}, format {cassette.format}"]
    trajectory = build_trajectory([v for _rt, v, _e in readable_turns(cassette) if v is not None])
    numbers = cassette_threads(trajectory)
    agents = trajectory.agents
    if agents.subagents and turn is None and thread is None:
        lines.extend(agents.lines())
    where = f"{path} " if path else "the cassette "
    if turn is not None and turn not in {rt.index for rt in cassette.turns}:
        indexes = ", ".join(str(rt.index) for rt in cassette.turns) or "none"
        raise FlowproofError(f"{where}has no turn {turn} — its turns are: {indexes}")
    if thread is not None and thread not in numbers.values():
        known = ", ".join(str(n) for n in sorted(set(numbers.values()))) or "none"
        raise FlowproofError(f"{where}has no thread {thread} — its threads are: {known}")
    shown = [
        item
        for item in readable_turns(cassette)
        if (turn is None or item[0].index == turn)
        and (thread is None or numbers.get(item[0].index) == thread)
    ]
    if thread is not None:
        lines.append(f"thread {thread}: turn(s) {', '.join(str(rt.index) for rt, _v, _e in shown)}")
    for rt, view, err in shown:
        req = rt.request
        lines.append("")
        status = f"status {rt.response.status}" if rt.response is not None else "no response"
        abandoned = " — abandoned by the client" if rt.abandoned else ""
        lines.append(f"turn {rt.index} — {rt.provider} — {req.method} {req.url} — {status}{abandoned}")
        if view is None:
            lines.append(f"  (cannot be read: {err})")
            continue
        lines.append(f"  model: {view.request.model or '?'}")
        lines.append(f"  thread: {numbers.get(rt.index, '?')}")
        agent = agents.label_of(rt.index)
        if agent is not None:
            lines.append(f"  sub-agent: {agent}")
        lines.append(f"  roles: {' '.join(view.request.roles) or '-'}")
        if view.request.tools:
            lines.append(f"  tools offered: {', '.join(view.request.tools)}")
        if view.request.system:
            lines.append(f"  system: {short_text(view.request.system, 120)}")
        if view.request.prompt:
            lines.append(f"  user: {short_text(view.request.prompt, 300)}")
        for result in view.request.tool_results:
            lines.append(f"  tool result ({result.name or result.call_id}): {short_text(result.content, 200)}")
        response = view.response
        if response is None:
            continue
        for call in response.tool_calls:
            lines.append(f"  → tool call {call.name} {call.canonical_arguments()}")
        if response.text:
            lines.append("  assistant:")
            lines.append(_indent(response.text.rstrip()))
        lines.append(f"  finish: {response.finish_reason}")
    # A recorded reply's escape sequences (a title, OSC 52, cursor movement) are shown, not obeyed.
    return printable("\n".join(lines))
