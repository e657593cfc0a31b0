"""Tests for flowproof.report.json_report: the --json document and its schema (a contract)."""

from __future__ import annotations

import json
from importlib.resources import files

import jsonschema
import pytest

from flowproof.assertions import MISMATCH_KINDS
from flowproof.errors import EXIT_ASSERTION
from flowproof.report.json_report import render_json

from .helpers import compare_run, result, structured_results, witnessed


class TestJson:
    def test_json(self) -> None:
        """The JSON report carries the exit code and each flow's verdict."""
        doc = json.loads(render_json([result(EXIT_ASSERTION)]))
        assert doc["exit_code"] == EXIT_ASSERTION
        assert doc["flows"][0]["verdict"] == "assertion failed"

    def test_compare_carries_structured_results(self) -> None:
        """--json has the compare results as data, with text.status on each."""
        flow = json.loads(render_json([compare_run()]))["flows"][0]
        assert flow["compare"]["first_drift"] == 1
        assert [r["text"]["status"] for r in flow["compare"]["results"]] == [
            "exact", "exact", "different", None,
        ]
        assert flow["compare"]["results"][1]["differences"] == [
            {"path": "tool_calls.0.arguments.flight", "recorded": "KQ311", "live": "KQ999"}
        ]
        assert json.loads(render_json([result()]))["flows"][0]["compare"] is None


REPORT_SCHEMA = json.loads(files("flowproof").joinpath("schemas/report.schema.json").read_text())


class TestStructuredJson:
    def test_report_validates_against_the_shipped_schema(self) -> None:
        """--json of every outcome validates against flowproof/schemas/report.schema.json."""
        doc = json.loads(render_json(structured_results()))
        jsonschema.Draft202012Validator.check_schema(REPORT_SCHEMA)
        jsonschema.Draft202012Validator(REPORT_SCHEMA).validate(doc)

    def test_findings_carry_the_data(self) -> None:
        """Each failing flow's findings name kind, turn, path and both sides; a pass has none."""
        flows = json.loads(render_json(structured_results()))["flows"]
        assert flows[0]["findings"] == []
        div = flows[1]["findings"][0]
        assert (div["kind"], div["turn"], div["path"], div["hint"]) == (
            "divergence",
            1,
            "messages.1.content → flight.id",
            "re-record",
        )
        assert [(f["kind"], f["turn"]) for f in flows[2]["findings"]] == [("missing", 2)]
        drift = flows[3]["findings"][0]
        assert (drift["kind"], drift["path"], drift["recorded"], drift["live"]) == (
            "drift",
            "text",
            "booked",
            "sold out",
        )
        assert flows[4]["findings"][0]["location"] == "b.flow.yaml:9:5"
        assertion = flows[4]["findings"][0]
        assert (assertion["path"], assertion["matcher"], assertion["expected"], assertion["actual"]) == (
            "flight.id", "equals", "KQ999", "KQ311")
        assert (assertion["tool"], assertion["call"]) == ("create_booking", 2)
        assert [f["matcher"] for f in flows[4]["findings"]] == ["equals", "reply contains"]
        assert all(f["matcher"] is None for f in flows[1]["findings"])
        assert flows[5]["findings"][0]["kind"] == "error"
        # Compare: the structured compare results are the drift, path by path.
        compared = flows[6]["findings"]
        assert {f["kind"] for f in compared} == {"drift"}
        assert [f["turn"] for f in compared if f["detail"] == "missing"] == [3]
        assert any(f["turn"] == 1 and "KQ311" in json.dumps(f["recorded"]) and "KQ999" in json.dumps(f["live"])
                   for f in compared)

    def test_the_schema_lists_every_mismatch_kind(self) -> None:
        """The schema's matcher enum is the assertion module's list (plus null for other kinds)."""
        enum = REPORT_SCHEMA["$defs"]["finding"]["properties"]["matcher"]["enum"]
        assert enum == [*MISMATCH_KINDS, None]

    def test_the_schema_refuses_an_unknown_matcher(self) -> None:
        doc = json.loads(render_json(structured_results()))
        doc["flows"][4]["findings"][0]["matcher"] = "resembles"
        with pytest.raises(jsonschema.ValidationError, match="resembles"):
            jsonschema.validate(doc, REPORT_SCHEMA)

    def test_the_schema_refuses_a_finding_without_its_fields(self) -> None:
        """The schema is strict: a finding missing `path` does not validate."""
        doc = json.loads(render_json(structured_results()))
        del doc["flows"][1]["findings"][0]["path"]
        with pytest.raises(jsonschema.ValidationError, match="path"):
            jsonschema.validate(doc, REPORT_SCHEMA)


def test_json_validates_and_carries_what_the_proxy_witnessed() -> None:
    doc = json.loads(render_json([witnessed()]))
    jsonschema.Draft202012Validator(REPORT_SCHEMA).validate(doc)
    flow = doc["flows"][0]
    assert [e["host"] for e in flow["egress"]] == ["api.openai.com", "exfil.example.test"]
    assert flow["secret_leaks"][0]["where"] == "url" and flow["subagents"][0]["parent"] is None
    assert flow["steps"][0]["scope"] == "in subagent Explore #1"
    assert flow["usage"]["turns_without_usage"] == [1]
