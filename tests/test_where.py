"""Where clauses on a call's arguments (the full matcher table is tested in test_assertions.py)."""

from __future__ import annotations

import json

from flowproof.spec import Location, parse_tool_line
from flowproof.turns import ToolCall
from flowproof.where import check_clause, describe_clause, matches_all


def clauses(line: str):  # type: ignore[no-untyped-def]
    return parse_tool_line(line, Location("t", 1, 1))[1]


CALL = ToolCall("book", json.dumps({"flight": {"id": "KQ311"}, "price": 10.5, "tags": ["a"]}))


def test_matches_all() -> None:
    assert matches_all(clauses("book where flight.id equals KQ311 and price equals 10.50"), CALL)
    assert not matches_all(clauses("book where flight.id equals KQ999"), CALL)
    assert matches_all((), CALL)


def test_check_clause_says_what_was_found() -> None:
    (clause,) = clauses("book where tags contains b")
    check = check_clause(clause, CALL)
    assert not check.passed and check.actual == ["a"] and "no element equal to" in check.detail


def test_describe_clause() -> None:
    assert [describe_clause(c) for c in clauses("b where x exists and y is absent and z is 1")] == [
        "x exists", "y is absent", "z equals 1"]


def test_arguments_that_are_not_json_match_nothing() -> None:
    (clause,) = clauses("book where a exists")
    assert not check_clause(clause, ToolCall("book", "{oops")).passed
