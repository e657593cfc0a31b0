"""JUnit XML: one testsuite, one testcase per flow (a failing one also lists each finding),
plus one per compare result, so CI shows which turn drifted.

Pure: `FlowResult` values in, XML text out (`flowproof.report.files.write_junit` writes it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from xml.etree import ElementTree as ET

from flowproof.errors import EXIT_ASSERTION, EXIT_DIVERGENCE, EXIT_DRIFT
from flowproof.redact import redact_text
from flowproof.report.compare import junit_cases
from flowproof.report.findings import Finding, findings
from flowproof.report.text import flow_report, guard_warnings, tail, verdict_name, witness_lines
from flowproof.verdict import FlowResult

__all__ = ["junit_xml"]

#: Characters XML 1.0 forbids everywhere (even escaped): C0 controls but tab, LF, CR;
#: lone surrogates; U+FFFE/U+FFFF. Agent output is full of them (ANSI colour codes).
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
#: Finding matchers that are where clauses (`flowproof.assertions.MISMATCH_KINDS`).
_CLAUSE_MATCHERS = ("equals", "contains", "matches", "exists", "is absent")


def _xml_safe(text: str) -> str:
    r"""``text`` with every character XML 1.0 cannot carry shown as ``\xNN`` / ``\uNNNN``."""
    return _XML_INVALID.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
        text,
    )


def _finding_summary(finding: Finding) -> str:
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


def _mask_tree(root: ET.Element, secrets: tuple[str, ...]) -> None:
    """Every text, tail and attribute value of the tree masked, whichever part wrote it."""
    for node in root.iter():
        if node.text:
            node.text = redact_text(node.text, secrets)
        if node.tail:
            node.tail = redact_text(node.tail, secrets)
        for name, value in node.attrib.items():
            node.attrib[name] = redact_text(value, secrets)


def junit_xml(results: Sequence[FlowResult], *, secrets: Iterable[str] = ()) -> str:
    """JUnit XML: one testsuite, one testcase per flow, plus one per compare result; every
    value of ``secrets`` masked in every text and attribute (`flowproof.redact.redact_text`)."""
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
            node = ET.SubElement(case, kind, message=verdict_name(r.exit_code), type=f"exit-{r.exit_code}")
            node.text = flow_report(r)
            # Then each finding as its own failure: a one-line message, and the finding as
            # JSON for tools that read more than the first failure.
            for finding in findings(r):
                extra = ET.SubElement(
                    case, kind, message=_finding_summary(finding), type=f"flowproof.{finding['kind']}"
                )
                extra.text = json.dumps(finding, ensure_ascii=False, indent=2, default=str)
        seen = "".join(line.strip() + "\n" for line in witness_lines(r))
        out = "".join(f"warning: {w}\n" for w in warnings) + seen + (
            tail(r.agent_stdout, 200) if r.agent_stdout else "")
        if out:
            ET.SubElement(case, "system-out").text = out
        if r.agent_stderr:
            ET.SubElement(case, "system-err").text = tail(r.agent_stderr, 200)
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
    _mask_tree(suite, tuple(secrets))
    ET.indent(suite)
    # ElementTree escapes markup (<, &, quotes; `]]>` is harmless outside CDATA) but writes
    # control characters raw, which no XML parser accepts: they are made visible instead.
    body = _xml_safe(ET.tostring(suite, encoding="unicode"))
    return '<?xml version="1.0" encoding="utf-8"?>\n' + body + "\n"
