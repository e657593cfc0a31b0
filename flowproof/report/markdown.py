"""The Markdown report (``flowproof-run --markdown PATH``): a run as GitHub-flavoured Markdown,
short enough for a CI job's summary page (``$GITHUB_STEP_SUMMARY``, a merge-request note).

Built from the ``--json`` document (`flowproof.report.json_report.render_json_doc`), masked
there as every report is, like the HTML page: one summary line, one table row per flow,
then per failing flow its headline and its first bad turn (`flowproof.report.html.first_bad_turn`,
the findings the page's side-by-side diff shows) as a ``diff`` block.

Everything shown comes from model text, tool arguments, agent output and spec names: text
outside code blocks is escaped (markup, HTML, table pipes, line breaks), and a code block's
fence is longer than any run of backticks inside it, so nothing it holds can end it. GitHub
refuses a step summary over 1 MiB: values are cut to a few thousand characters and the whole
report to `MAX_BYTES`, each cut saying so.

Pure: `FlowResult` values in, text out (`flowproof.report.files.write_markdown` writes it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from flowproof.redact import redact_text
from flowproof.report.html import first_bad_turn
from flowproof.report.json_report import render_json_doc
from flowproof.verdict import FlowResult

__all__ = ["MAX_BYTES", "markdown_report"]

#: The report's size at most, in UTF-8 bytes: a quarter of GitHub's 1 MiB per step summary.
MAX_BYTES = 256 * 1024
#: One side of a diff, or a message, at most (characters, then lines): the HTML page has all.
_VALUE_CHARS = 4000
_VALUE_LINES = 60
#: Differing fields shown per flow.
_FIELDS = 10

_PASS, _FAIL = "✓", "✗"
#: Controls but tab and line feed, DEL, C1, bidirectional overrides, lone surrogates: shown as
#: escapes (`flowproof.printable` makes the same choice for a terminal).
_INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]")
#: Characters that start Markdown or HTML inline syntax; a backslash makes each literal.
_INLINE = re.compile(r"([\\`*_\[\]<>!|~&])")
#: What makes a line a heading, a list item, a quote or a rule when it starts the line.
_LINE_START = re.compile(r"^([-+#=>]|\d+[.)])")


def _visible(text: str) -> str:
    return _INVISIBLE.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
        text.replace("\r\n", "\n"),
    )


def inline(value: Any) -> str:
    """``value`` as Markdown text on one line: every character that could start markup is
    escaped (a ``|`` cannot end a table cell), and line breaks are spaces."""
    text = _INLINE.sub(r"\\\1", " ".join(_visible(str(value)).split()))
    return _LINE_START.sub(lambda m: m.group()[:-1] + "\\" + m.group()[-1], text)


def _cut(text: str) -> str:
    """``text`` cut to `_VALUE_LINES` lines and `_VALUE_CHARS` characters, saying so."""
    lines = text.splitlines()
    kept = "\n".join(lines[:_VALUE_LINES])
    if len(kept) > _VALUE_CHARS:
        kept = kept[:_VALUE_CHARS]
    if len(kept) < len(text.rstrip("\n")):
        kept += f"\n… cut: {len(text) - len(kept)} more characters (the HTML report has all of it)"
    return kept


def _block(text: str, info: str = "") -> str:
    """A fenced code block holding ``text`` as it is (nothing inside can close it)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"


def _shown(value: Any) -> str:
    """A finding's value as a diff shows it: text bare, anything else as JSON."""
    if value is None:
        return "(none)"
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _diff(findings: Sequence[Mapping[str, Any]]) -> str:
    """The first bad turn as a ``diff`` block: per differing field, the recorded value as
    ``-`` lines and the replayed (or live) one as ``+`` lines."""
    other = "live" if findings[0].get("kind") == "drift" else "replayed"
    parts = []
    for finding in [f for f in findings if f.get("path")][:_FIELDS]:
        parts.append(f"@@ {finding['path']} @@")
        parts.extend(f"- {line}" for line in _cut(_shown(finding.get("recorded"))).splitlines() or [""])
        parts.extend(f"+ {line}" for line in _cut(_shown(finding.get(other))).splitlines() or [""])
    more = sum(1 for f in findings if f.get("path")) - _FIELDS
    if more > 0:
        parts.append(f"… and {more} more differing field(s)")
    return _block(_visible("\n".join(parts)), "diff")


def _headline(flow: Mapping[str, Any]) -> str:
    """What failed, in one line: the first finding's words, else the error's."""
    found = flow.get("findings") or ()
    first = found[0] if found else {}
    if first.get("kind") == "assertion":
        text = f"{first.get('detail') or ''}: {first.get('message') or ''}"
    else:
        text = str(first.get("message") or flow.get("error") or flow.get("verdict") or "")
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[0] if lines else str(flow.get("verdict", ""))


def _place(findings: Sequence[Mapping[str, Any]]) -> str:
    first = findings[0]
    where = [f"recorded turn {first['turn']}"] if first.get("turn") is not None else []
    if first.get("thread") is not None:
        where.append(f"thread {first['thread']}")
    return f"first bad turn: {first.get('kind')}" + (f" at {', '.join(where)}" if where else "")


def _failing(flow: Mapping[str, Any]) -> str:
    """A failing flow: its name and verdict, the headline, the first bad turn, what to do."""
    parts = [
        f"#### {_FAIL} {inline(flow.get('name', ''))} — {inline(flow.get('verdict', ''))}",
        "",
        f"{inline(flow.get('spec', ''))}: {inline(_headline(flow))}",
    ]
    bad = first_bad_turn(flow)
    if any(f.get("path") for f in bad):
        parts += ["", f"{inline(_place(bad))}:", "", _diff(bad)]
    else:
        # No field to set side by side (an assertion, a call added, an agent failure): the
        # report's own words for it.
        words = str((bad[0] if bad else {}).get("message") or "")
        if not words:
            failed = [s for s in flow.get("steps") or () if not s.get("passed")]
            words = str(failed[0].get("message") or "") if failed else str(flow.get("error") or "")
        # A one-line error is the headline already.
        if words.strip() and words.strip() != _headline(flow).strip():
            parts += ["", _block(_visible(_cut(words)))]
    if flow.get("next"):
        parts += ["", f"*{inline(flow['next'])}*"]
    return "\n".join(parts)


def _row(flow: Mapping[str, Any]) -> str:
    mark = _PASS if flow.get("passed") else _FAIL
    seconds = flow.get("duration_seconds")
    time = f"{seconds:.1f}s" if isinstance(seconds, int | float) else ""
    name, spec = str(flow.get("name", "")), str(flow.get("spec", ""))
    # A spec that did not load is named by its file: said once.
    label = inline(spec) if spec.endswith(f"/{name}") or spec == name else f"{inline(name)}<br>{inline(spec)}"
    cells = [
        label,
        f"{mark} {inline(flow.get('verdict', ''))}",
        str(flow.get("turns", 0)),
        str(len(flow.get("tool_calls") or ())),
        time,
    ]
    return "| " + " | ".join(cells) + " |"


def _summary(doc: Mapping[str, Any]) -> str:
    flows = doc.get("flows") or ()
    modes = ", ".join(dict.fromkeys(str(f.get("mode", "")) for f in flows)) or "none"
    mark = _PASS if not doc.get("failed") else _FAIL
    return (f"{mark} **{len(flows)} flow(s): {doc.get('passed', 0)} passed, {doc.get('failed', 0)} failed** "
            f"· mode {inline(modes)} · exit code {doc.get('exit_code', 0)}")


def markdown_report(
    results: Sequence[FlowResult], *, secrets: Iterable[str] = (), max_bytes: int = MAX_BYTES
) -> str:
    """The run as GitHub-flavoured Markdown, at most ``max_bytes`` UTF-8 bytes; every value of
    ``secrets`` masked (`flowproof.redact`, as every report masks them)."""
    secrets = tuple(secrets)
    doc = render_json_doc(results, secrets=secrets)
    flows = list(doc["flows"])
    head = ["### flowproof", "", _summary(doc)]
    if not flows:
        return "\n".join([*head, "", "No flow ran."]) + "\n"
    table = ["", "| flow | result | turns | tool calls | time |", "| --- | --- | ---: | ---: | ---: |"]
    sections = [_failing(f) for f in flows if not f.get("passed")]
    # What the budget cannot hold is left out from the end, and the report says how much.
    budget = max_bytes - 200
    used = _size("\n".join(head + table))
    rows: list[str] = []
    for flow in flows:
        row = _row(flow)
        if used + _size(row) > budget // 2:
            rows.append(f"| … {len(flows) - len(rows)} more flow(s) not listed (the report's size limit) "
                        "| | | | |")
            break
        rows.append(row)
        used += _size(row) + 1
    body = [*head, *table, *rows]
    shown = 0
    for section in sections:
        if used + _size(section) > budget:
            break
        body += ["", section]
        used += _size(section) + 2
        shown += 1
    if shown < len(sections):
        body += ["", f"*{len(sections) - shown} more failing flow(s) not shown here (the report's size "
                 "limit): the HTML report and --json have every one.*"]
    # Masked again as a whole: the parts were masked as data, this holds for any text added.
    return redact_text("\n".join(body), secrets) + "\n"


def _size(text: str) -> int:
    return len(text.encode("utf-8", "replace"))
