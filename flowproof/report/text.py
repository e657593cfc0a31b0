"""The text report: each flow as readable lines, a summary, and the one line that says what
to do next. Rendering only: the verdict is `flowproof.verdict`'s, the heal diff `flowproof.heal`'s.

Pure: a `FlowResult` in, text out.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from flowproof.advice import one_command, run_again, shown_spec
from flowproof.errors import (
    EXIT_AGENT,
    EXIT_ASSERTION,
    EXIT_DIVERGENCE,
    EXIT_DRIFT,
    EXIT_OK,
    EXIT_USAGE,
)
from flowproof.log_events import ErrorKind
from flowproof.options import Mode
from flowproof.printable import printable
from flowproof.redact import redact_text
from flowproof.report.compare import report_lines
from flowproof.verdict import FlowResult
from flowproof.witness import SecretLeak

__all__ = [
    "FAIL",
    "PASS",
    "TEST_FAILED",
    "flow_report",
    "guard_warnings",
    "indent",
    "interrupted_step",
    "next_step",
    "next_steps",
    "render_flow",
    "render_text",
    "summary_table",
    "tail",
    "verdict_name",
    "witness_lines",
    "worst_exit",
]

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


def verdict_name(code: int) -> str:
    """The verdict of an exit code in words (``replay divergence``)."""
    if code >= 128:
        return "interrupted"
    return _VERDICT.get(code, "failed")


def worst_exit(results: Sequence[FlowResult]) -> int:
    """The exit code of a run of several flows: the worst (highest) one."""
    return max((r.exit_code for r in results), default=EXIT_OK)


def indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line if line else line for line in text.splitlines())


def tail(text: str, lines: int = _OUTPUT_LINES) -> str:
    """The last ``lines`` lines of ``text`` (agent output: errors come last)."""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def next_step(result: FlowResult, *, record_command: str | None = None) -> str:
    """The one line that says what to do about ``result``; ``record_command`` (default: the
    flow's own) is the command it names, which may name other flows too (`next_steps`)."""
    code, command = result.exit_code, record_command or result.record_command
    if code == EXIT_OK:
        if result.mode == Mode.RECORD:
            cassette = shlex.quote(shown_spec(result.cassette, Path.cwd())) if result.cassette else "the cassette"
            if result.heal_diff is None:
                # A first-ever record: there was no cassette, so there is no heal diff to review.
                return f"A new cassette: read it (flowproof show {cassette}) and commit it with the spec."
            return f"Review the heal diff above and commit {cassette}."
        return "Nothing to do."
    if code == EXIT_DIVERGENCE:
        return (
            "If the change is intended, re-record with: "
            f"{command} — then review the heal diff; otherwise fix the agent."
        )
    if code == EXIT_DRIFT:
        return (
            "The live run differs from the recording: inspect the first drift, then re-record with "
            f"{command} if the new behaviour is right (compare never writes)."
        )
    if code == EXIT_ASSERTION:
        if result.mode == Mode.RECORD:
            kept = f" (the recording is in {result.rejected})" if result.rejected else ""
            return f"Nothing was recorded{kept}: fix the agent or the spec, then record again."
        return f"Fix the agent (or the spec at the ✗ lines), then run: {run_again(command)}"
    if code == EXIT_AGENT:
        if result.failure == "timeout":
            return ("The agent ran out of time: if it is just slow, raise `agent.timeout` in the "
                    "spec or pass --timeout; if it hangs, run with -v to see its output.")
        if result.failure == "unreachable":
            return _unreachable_advice(result)
        if result.failure == "upstream":
            return ("The upstream model failed, not the agent: check the upstream (--upstream, the "
                    "provider's status, rate limits), then run again.")
        if result.failure == "crash":
            return "The agent crashed: fix it using its output above, then run again."
        if result.failure == "request":
            kept = f" (the recording is in {result.rejected})" if result.rejected else ""
            return (f"The agent sent a model request flowproof cannot read{kept}: fix how it builds the "
                    "request named above, then run again.")
        return "Fix the agent start-up (see the error and its output above), then run again."
    if code >= 128:
        return "flowproof-run was interrupted: nothing was recorded or checked; run it again."
    return "Fix the problem above, then run again."


def next_steps(results: Sequence[FlowResult]) -> str:
    """What to do about the failing flows of ``results``, worst first: one line per piece of
    advice, its command naming every flow the advice is for (``flowproof-run a b --record``),
    so no failing flow goes unnamed and no command is given twice."""
    failed = sorted((r for r in results if not r.passed), key=lambda r: r.exit_code, reverse=True)
    groups: dict[tuple[Any, ...], list[FlowResult]] = {}
    for r in failed:
        # A rejected recording is each flow's own file: those are never merged.
        groups.setdefault((r.exit_code, r.mode == Mode.RECORD, r.failure, r.rejected), []).append(r)
    lines = {next_step(group[0], record_command=one_command([r.record_command for r in group])): None
             for group in groups.values()}
    return "\n".join(lines)


def interrupted_step(results: Sequence[FlowResult], unfinished: Sequence[Path] = ()) -> str | None:
    """The last lines of a run a signal interrupted after some recordings were kept (a flow
    that passed before the signal replaced its cassette): those cassettes, and the flows that
    recorded nothing; ``unfinished`` are the specs whose flows had no result when the runner
    exited. None when nothing was kept (`next_step` then says so)."""
    recorded = [r for r in results if r.mode == Mode.RECORD]
    kept = [r for r in recorded if r.passed]
    if not kept:
        return None
    lines = ["flowproof-run was interrupted; flows that finished before the signal kept their recordings:"]
    lines += [f"  kept: {r.cassette} (cassette written, recorded by {r.spec_path})" for r in kept]
    lines += [f"  not recorded: {r.spec_path} ({verdict_name(r.exit_code)}; its cassette is unchanged)"
              for r in recorded if not r.passed]
    lines += [f"  not recorded: {spec} (interrupted; its cassette is unchanged)" for spec in unfinished]
    lines.append("Review the kept cassettes (flowproof show CASSETTE), then record the other flows again.")
    return "\n".join(lines)


def _unreachable_advice(result: FlowResult) -> str:
    """What to check when the proxy could not reach a model host: the mapping when one sends the
    host elsewhere, else this machine's way out."""
    error = next((e for e in result.run.errors if e.kind is ErrorKind.UPSTREAM_UNREACHABLE), None)
    address = error.address if error is not None and error.address else "the model host"
    host = error.host if error is not None else None
    if host and not address.startswith(f"{host}:"):
        return (f"The proxy could not reach {address}, where the upstream mapping sends {host}: start the "
                f"server there, or fix the mapping (--upstream {host}=URL or FLOWPROOF_UPSTREAM), then run again.")
    return (f"The proxy could not reach {address}: check this machine's network (DNS, a firewall, a proxy it "
            "needs to go out), or send the host to a reachable server with --upstream HOST=URL (a gateway "
            "or a local model, with the key it expects); then run again.")


#: The verdict a passing session shows when the test around it failed (the fixture).
TEST_FAILED = "the test failed; flowproof found nothing wrong with the model calls"


def render_flow(result: FlowResult, *, verbose: bool = False, test_failed: bool = False) -> str:
    """One flow as readable text; ``test_failed``: the test that drove it failed on its own
    (the fixture), so a flow flowproof passed is not shown as a pass."""
    failed = test_failed and result.passed
    mark = PASS if result.passed and not failed else FAIL
    verdict = TEST_FAILED if failed else verdict_name(result.exit_code)
    lines = [f"{mark} {result.name} [{result.mode}] — {verdict}"]
    lines.append(f"  spec: {result.spec_path}")
    if result.cassette is not None:
        lines.append(f"  cassette: {result.cassette}")
    if result.error:
        lines.append(indent(result.error, "  "))
    # Without the command: the report's last line gives it, once (`next_step`, `next_steps`).
    for text in result.divergence_texts(command=False):
        lines.append("  replay divergence:")
        lines.append(indent(text))
    if result.compare:
        lines.append(indent("\n".join(report_lines(result.compare)), "  "))
    for text in result.drifts:
        lines.append("  compare drift:")
        lines.append(indent(text))
    missing = result.missing_text(command=False)
    if missing:
        lines.append(indent(missing, "  "))
    # An SDK that retries makes the same error several times: it is shown once.
    for text in dict.fromkeys(result.errors):
        if text not in (result.error or ""):
            lines.append(f"  proxy error: {text}")
    for step in result.steps:
        where = f" ({step.location})" if step.location and (verbose or not step.passed) else ""
        lines.append(f"  {PASS if step.passed else FAIL} {step.source}{where}")
        if not step.passed or verbose:
            lines.append(indent(step.message))
    if verbose or failed or not result.passed:
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
        lines.append(indent(result.heal_diff or "no change"))
    if result.rejected is not None:
        lines.append(f"  rejected recording kept for inspection: {result.rejected}")
    show_output = (verbose or result.exit_code == EXIT_AGENT) and (result.agent_stdout or result.agent_stderr)
    if show_output:
        if result.agent_stdout.strip():
            lines.append("  agent stdout (last lines):")
            lines.append(indent(tail(result.agent_stdout)))
        if result.agent_stderr.strip():
            lines.append("  agent stderr (last lines):")
            lines.append(indent(tail(result.agent_stderr)))
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
            f"{PASS if r.passed else FAIL} {verdict_name(r.exit_code)}",
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


def flow_report(
    result: FlowResult, *, secrets: Iterable[str] = (), after: str = "", test_failed: bool = False
) -> str:
    """One flow as a failing pytest item, the session fixture and a JUnit failure show it:
    `render_flow`, ``after`` (what the caller adds), then `next_step`; ``secrets`` masked.
    ``test_failed``: the test around the session failed on its own, so a flow flowproof
    passed reads as the test's failure, not as a pass with nothing to do."""
    last = _test_failed_step(result) if test_failed and result.passed else next_step(result)
    return redact_text(f"{render_flow(result, test_failed=test_failed)}{after}\n{last}", secrets)


def _test_failed_step(result: FlowResult) -> str:
    """What to do when the session passed and its test failed."""
    if result.mode == Mode.RECORD:
        kept = f" (the recording is in {result.rejected})" if result.rejected else ""
        return f"Nothing was recorded{kept}: the test failed; fix the agent or the test, then record again."
    return ("The model calls matched the cassette; the test's own check failed (above): fix the agent or "
            "the test, then run the test again.")


def render_text(
    results: Sequence[FlowResult], *, verbose: bool = False, secrets: Iterable[str] = ()
) -> str:
    """Every flow, a summary (a table when there are several flows), and the line that says
    what to do; every value of ``secrets`` masked (`flowproof.redact.redact_text`, as log
    lines mask them)."""
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
        # After a signal, flows that finished first may have kept their recordings: say which.
        last = (interrupted_step(results) if worst.exit_code >= 128 else None) or next_steps(results)
    return redact_text(printable("\n\n".join(blocks) + f"\n\n{summary}.\n{last}"), secrets)
