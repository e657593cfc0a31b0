"""The ``--json`` report: the whole run as one JSON document.

A contract (scripts and CI jobs read it): its JSON Schema is
``flowproof/schemas/report.schema.json``. Pure: `FlowResult` values in, data out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from flowproof.options import Mode
from flowproof.redact import redact_data
from flowproof.report.compare import report_json
from flowproof.report.findings import findings
from flowproof.report.text import guard_warnings, next_step, tail, verdict_name, worst_exit
from flowproof.verdict import FlowResult

__all__ = ["render_json", "render_json_doc", "result_json"]


def _utf8_safe(text: str) -> str:
    """``text`` with lone surrogates (a non-UTF-8 file name, a broken escape in a model
    response) replaced, so it can be written as UTF-8."""
    return text.encode("utf-8", "replace").decode("utf-8")


def result_json(result: FlowResult) -> dict[str, Any]:
    """A flow as machine-readable JSON."""
    return {
        "spec": str(result.spec_path),
        "name": result.name,
        "mode": result.mode,
        "passed": result.passed,
        "exit_code": result.exit_code,
        "verdict": verdict_name(result.exit_code),
        "cassette": str(result.cassette) if result.cassette else None,
        "error": result.error,
        "steps": [
            {"passed": s.passed, "source": s.source, "message": s.message, "location": s.location,
             "scope": s.scope}
            for s in result.steps
        ],
        "findings": findings(result),
        "divergences": list(result.divergence_texts()),
        "drifts": list(result.drifts),
        "compare": report_json(result.compare) if result.mode == Mode.COMPARE else None,
        "missing": result.missing_text(),
        "proxy_errors": list(result.errors),
        "reply": result.reply,
        "tool_calls": list(result.tool_calls),
        "turns": result.turns,
        "heal_diff": result.heal_diff,
        "rejected": str(result.rejected) if result.rejected else None,
        "agent": {
            "returncode": result.agent_returncode,
            "stdout": tail(result.agent_stdout, 200),
            "stderr": tail(result.agent_stderr, 200),
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


def render_json_doc(results: Sequence[FlowResult], *, secrets: Iterable[str] = ()) -> dict[str, Any]:
    """The whole run as the data `render_json` prints (the HTML report reads it too), every
    value of ``secrets`` masked (`flowproof.redact.redact_data`, as log lines mask them)."""
    doc = {
        "exit_code": worst_exit(results),
        "passed": sum(1 for r in results if r.passed),
        "failed": sum(1 for r in results if not r.passed),
        "flows": [result_json(r) for r in results],
    }
    masked: dict[str, Any] = redact_data(doc, secrets)
    return masked


def render_json(results: Sequence[FlowResult], *, secrets: Iterable[str] = ()) -> str:
    """The whole run as one JSON document, every value of ``secrets`` masked."""
    doc = render_json_doc(results, secrets=secrets)
    # Valid JSON whatever the flows carried: a lone surrogate would make the text unencodable.
    return _utf8_safe(json.dumps(doc, indent=2, ensure_ascii=False))
