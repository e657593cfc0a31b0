"""Tests for flowproof.report.compare: the compare section of the text, JSON and JUnit reports."""

from __future__ import annotations

from flowproof.report.compare import first_drift, junit_cases, report_json, report_lines
from flowproof.turns import FinishReason

from ..test_compare import booking, compare, drifted, text


class TestReports:
    def test_text_lists_every_result_then_the_first_drift_in_full(self) -> None:
        """Every result has a row; only the first drift is detailed, later ones are counted."""
        lines = report_lines(drifted())
        assert lines[0] == (
            "compare: 5 result(s), 2 equal, 3 drifted (1 changed, 1 extra, 1 missing)"
        )
        assert lines[1:6] == [
            "  turn 0 | thread 0 | depth 2 | equal true | finish reason tool-calls | text exact",
            "  turn 1 | thread 1 | depth 2 | equal true | finish reason stop | text normalized",
            "  turn 2 | thread 0 | depth 4 | equal false (paired) | finish reason tool-calls | text exact",
            "  live call 3 | thread 0 | depth 6 | equal false (extra) | finish reason live stop | text -",
            "  turn 3 | thread 0 | depth 6 | equal false (missing) | finish reason recorded stop | text -",
        ]
        assert lines[6:8] == [
            (
                "  the agent changed, not only the model: the first request of thread 0 differs from"
                " recorded turn 0"
            ),
            "  - you added a tool: refund",
        ]
        assert lines[8:] == [
            "first drift:",
            "  turn 2 (thread 0, depth 4): the live response differs from the recording",
            "  - tool_calls.0.arguments.flight.id: recorded KQ311, live KQ999",
            "  - text: exact",
            (
                "2 later drift(s), listed above and not detailed: they may follow from the first;"
                " fix it and compare again"
            ),
        ]
        assert not any("replayed" in line for line in lines)

    def test_changed_finish_reason_row_names_both(self) -> None:
        """A row whose finish reason changed shows both sides."""
        row = report_lines([compare(text("Hi"), text("Hi", FinishReason.LENGTH))])[1]
        assert "finish reason recorded stop, live length" in row

    def test_all_equal_has_no_drift_section(self) -> None:
        """With no drift the report is the count line and the rows, nothing else."""
        lines = report_lines([compare(booking(), booking())])
        assert lines[0] == "compare: 1 result(s), 1 equal, 0 drifted"
        assert len(lines) == 2

    def test_json_carries_the_structured_results(self) -> None:
        """report_json holds every result's to_json and points at the first drift."""
        results = drifted()
        doc = report_json(results)
        assert doc["equal"] is False and doc["drifts"] == 3 and doc["first_drift"] == 2
        assert doc["results"] == [r.to_json() for r in results]
        assert [r["text"]["status"] for r in doc["results"]] == [
            "exact",
            "normalized",
            "exact",
            None,
            None,
        ]

    def test_junit_cases_one_per_result(self) -> None:
        """One JUnit-ready case per result; drift carries a message and the rendered result."""
        cases = junit_cases(drifted())
        assert [c["passed"] for c in cases] == [True, True, False, False, False]
        assert cases[2]["name"] == "turn 2 (thread 0, depth 4) [paired]"
        assert (
            cases[3]["message"] == "live call 3 (thread 0, depth 6): extra — no recorded turn here"
        )
        assert "flight.id: recorded KQ311, live KQ999" in cases[2]["text"]
        assert "message" not in cases[0]

    def test_first_drift(self) -> None:
        """first_drift is the first unequal result, or None."""
        results = drifted()
        assert first_drift(results) is results[2]
        assert first_drift(results[:2]) is None
