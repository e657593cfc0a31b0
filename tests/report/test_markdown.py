"""Tests for flowproof.report.markdown: the summary a CI job's page shows (``--markdown``)."""

from __future__ import annotations

import re
from pathlib import Path

from flowproof.errors import EXIT_AGENT, EXIT_ASSERTION, EXIT_DIVERGENCE, EXIT_DRIFT, EXIT_OK
from flowproof.report.markdown import MAX_BYTES, inline, markdown_report
from flowproof.verdict import StepResult

from .helpers import compare_run, miss, result
from .test_html import diverged

#: A table cell boundary: a pipe no backslash escapes.
_CELL = re.compile(r"(?<!\\)\|")


def table_rows(text: str) -> list[list[str]]:
    """The cells of every table row of ``text`` (the header and the delimiter row included)."""
    return [_CELL.split(line)[1:-1] for line in text.splitlines() if line.startswith("|")]


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(info string, content) of every fenced block, read as CommonMark closes them: a fence
    ends only at a line of at least as many backticks."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        opening = re.match(r"^(`{3,})(.*)$", lines[i])
        if opening is None:
            i += 1
            continue
        fence, info = opening.groups()
        end = next(j for j in range(i + 1, len(lines)) if re.fullmatch(f"{fence}`*", lines[j]))
        blocks.append((info, "\n".join(lines[i + 1 : end])))
        i = end + 1
    return blocks


class TestSummary:
    def test_one_line_then_one_row_per_flow(self) -> None:
        passed = result(EXIT_OK, turns=3, tool_calls=("search_flights", "create_booking"), duration=1.25)
        failed = result(EXIT_DIVERGENCE, name="Refund", divergences=(miss("messages.1.content", "a", "b"),))
        text = markdown_report([passed, failed])
        assert "**2 flow(s): 1 passed, 1 failed** · mode replay · exit code 3" in text
        header, delimiter, *rows = table_rows(text)
        assert [c.strip() for c in header] == ["flow", "result", "turns", "tool calls", "time"]
        assert len(delimiter) == 5
        assert [c.strip() for c in rows[0]] == ["Booking<br>booking.flow.yaml", "✓ passed", "3", "2", "1.2s"]
        assert rows[1][1].strip() == "✗ replay divergence"

    def test_a_spec_that_did_not_load_is_named_once(self) -> None:
        """Its name is its file name: the cell says it once."""
        text = markdown_report([result(2, spec_path=Path("specs/x.flow.yaml"), name="x.flow.yaml", error="bad")])
        assert table_rows(text)[2][0].strip() == "specs/x.flow.yaml"

    def test_every_mode_of_the_run_is_named(self) -> None:
        text = markdown_report([result(), result(mode="record")])
        assert "· mode replay, record ·" in text

    def test_no_flow(self) -> None:
        text = markdown_report([])
        assert "0 flow(s): 0 passed, 0 failed" in text and "No flow ran." in text

    def test_a_passing_run_has_no_failure_section(self) -> None:
        assert "####" not in markdown_report([result(), result(name="Other")])


class TestFailingFlows:
    def test_a_divergence_is_its_headline_and_a_diff_of_the_first_bad_turn(self) -> None:
        text = markdown_report([diverged()])
        assert "#### ✗ Booking — replay divergence" in text
        assert "booking.flow.yaml: request 3 matches no recorded turn; closest is turn 2" in text
        assert "first bad turn: divergence at recorded turn 2:" in text
        [(info, diff)] = fenced_blocks(text)
        assert info == "diff"
        assert diff.splitlines() == ["@@ messages.5.content → booking @@", "- B-1042", "+ B-2077"]
        assert "re-record with: flowproof-run booking.flow.yaml --record" in text

    def test_compare_drift_is_recorded_against_live(self) -> None:
        text = markdown_report([compare_run()])
        [(info, diff)] = fenced_blocks(text)
        assert info == "diff" and "first bad turn: drift at recorded turn 1" in text
        assert diff.splitlines() == ["@@ tool_calls.0.arguments.flight @@", "- KQ311", "+ KQ999"]

    def test_a_failed_assertion_shows_its_message(self) -> None:
        step = StepResult(False, "expected create_booking\n  nearest call: search_flights", "b.flow.yaml:9:5",
                          "assert_tool_call: create_booking")
        text = markdown_report([result(EXIT_ASSERTION, steps=(step,))])
        assert "booking.flow.yaml: assert\\_tool\\_call: create\\_booking: expected create\\_booking" in text
        [(info, words)] = fenced_blocks(text)
        assert info == "" and "nearest call: search_flights" in words

    def test_a_one_line_error_is_said_once(self) -> None:
        text = markdown_report([result(EXIT_AGENT, error="the agent exited with code 1")])
        assert text.count("the agent exited with code 1") == 1
        assert fenced_blocks(text) == []


class TestEscaping:
    def test_a_pipe_or_a_line_break_in_a_name_keeps_the_table(self) -> None:
        text = markdown_report([result(name="a | b\nc"), result(EXIT_DRIFT, name="x|y", mode="compare",
                                                               error="boom | bang")])
        rows = table_rows(text)
        assert all(len(row) == 5 for row in rows), rows
        assert rows[2][0].startswith(" a \\| b c<br>")

    def test_markup_in_a_name_is_text(self) -> None:
        text = markdown_report([result(EXIT_ASSERTION, name='<img src="http://x.test/p">[click](http://x.test)')])
        assert not re.search(r"(?<!\\)<img", text) and not re.search(r"(?<!\\)\]\(http", text)
        assert '\\<img src="http://x.test/p"\\>\\[click\\](http://x.test)' in text

    def test_a_value_cannot_end_its_code_block(self) -> None:
        hostile = "```\n# not a heading\n````"
        text = markdown_report([result(EXIT_DIVERGENCE, divergences=(miss("messages.1.content", "ok", hostile),))])
        [(info, diff)] = fenced_blocks(text)
        assert info == "diff"
        assert "+ ```" in diff and "+ # not a heading" in diff and "+ ````" in diff

    def test_control_characters_are_shown_as_escapes(self) -> None:
        # Rendered, this reads `red \x1b[31m`: the escape is shown, its backslash escaped too.
        assert inline("red \x1b[31m") == "red \\\\x1b\\[31m"

    def test_a_line_that_would_start_a_list_or_heading(self) -> None:
        assert inline("- x") == "\\- x"
        assert inline("1. x") == "1\\. x"
        assert inline("# x") == "\\# x"


class TestSize:
    def test_a_huge_value_is_cut_and_says_so(self) -> None:
        big = "word " * 200_000
        text = markdown_report([result(EXIT_DIVERGENCE, divergences=(miss("messages.1.content", "ok", big),))])
        assert len(text.encode()) < 20_000
        assert "… cut:" in text and "the HTML report has all of it" in text

    def test_many_failing_flows_stay_under_the_limit(self) -> None:
        big = "x" * 3000
        flows = [result(EXIT_DIVERGENCE, name=f"flow {i}", divergences=(miss("messages.1.content", big, big + "y"),))
                 for i in range(400)]
        text = markdown_report(flows)
        assert len(text.encode()) <= MAX_BYTES < 1024 * 1024
        assert "more failing flow(s) not shown here" in text
        assert text.count("#### ✗") < 400

    def test_a_small_budget_cuts_the_table_too(self) -> None:
        text = markdown_report([result(name=f"flow {i}") for i in range(100)], max_bytes=2000)
        assert len(text.encode()) <= 2000
        assert "more flow(s) not listed" in text
