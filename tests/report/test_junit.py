"""Tests for flowproof.report.junit: one testcase per flow and per compare result, in the shape CI reads."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

import xmlschema

from flowproof.errors import EXIT_DIVERGENCE
from flowproof.report.json_report import render_json
from flowproof.report.junit import junit_xml

from .helpers import compare_run, result, structured_results, witnessed


class TestJunit:
    def test_junit(self) -> None:
        """JUnit XML has one testcase per flow and marks failures."""
        root = ET.fromstring(junit_xml([result(), result(EXIT_DIVERGENCE, name="Other")]).split("\n", 1)[1])
        assert root.get("tests") == "2" and root.get("failures") == "1"
        cases = root.findall("testcase")
        assert cases[0].find("failure") is None
        assert cases[1].find("failure") is not None

    def test_compare_has_a_case_per_result(self) -> None:
        """--junit adds one testcase per compare result; drifted ones are failures."""
        suite = ET.fromstring(junit_xml([compare_run()]))
        assert suite.get("tests") == "5" and suite.get("failures") == "4"
        names = [c.get("name") for c in suite.iter("testcase")]
        assert "Booking [compare] turn 1 (thread 0, depth 2) [paired]" in names
        failure = suite.find("testcase[@name='Booking [compare] turn 1 (thread 0, depth 2) [paired]']/failure")
        assert failure is not None and "recorded KQ311, live KQ999" in (failure.text or "")


#: Jenkins' JUnit schema (junit-10.xsd, MIT licensed, the file pytest validates its own
#: --junitxml against): the shape Jenkins, GitLab and the surefire/xunit2 readers accept.
JUNIT_XSD = xmlschema.XMLSchema(Path(__file__).parents[1] / "data" / "junit-10.xsd")


def junit_problems(text: str) -> list[str]:
    """Every way ``text`` departs from the JUnit schema, and counts that disagree with the
    cases (the schema cannot say that); empty when it conforms."""
    problems = [str(e.reason or e.message) for e in JUNIT_XSD.iter_errors(text)]
    root = ET.fromstring(text)
    suites = [root] if root.tag == "testsuite" else list(root)
    for suite in suites:
        cases = [c for c in suite if c.tag == "testcase"]
        counts = {"tests": len(cases),
                  "failures": sum(1 for c in cases if c.find("failure") is not None),
                  "errors": sum(1 for c in cases if c.find("error") is not None)}
        problems += [f"{k}={suite.get(k)} but {v} found" for k, v in counts.items() if suite.get(k) != str(v)]
    return problems


def flow_cases(suite: ET.Element) -> list[ET.Element]:
    """The testcase of each flow (each compare result has one of its own, after its flow's)."""
    return [c for c in suite.findall("testcase") if "[compare] " not in (c.get("name") or "")]


class TestStructuredJunit:
    def test_junit_has_the_shape_ci_reads(self) -> None:
        """The JUnit file of every outcome (guard warnings included) conforms to the JUnit shape."""
        assert junit_problems(junit_xml(structured_results())) == []

    def test_the_shape_check_catches_a_property_in_a_testcase(self) -> None:
        """The checker is not blind: a testcase holding <properties> is reported."""
        bad = '<testsuite name="s" tests="1" failures="0" errors="0"><testcase name="c"><properties/></testcase></testsuite>'  # noqa: E501
        assert len(junit_problems(bad)) == 1 and "properties" in junit_problems(bad)[0]
        assert junit_problems(bad.replace('tests="1"', 'tests="2"').replace("<properties/>", "")) == [
            "tests=2 but 1 found"
        ]

    def test_each_finding_is_a_failure_with_its_data(self) -> None:
        """After the readable report, each finding is a <failure> typed by kind whose text is the
        finding as JSON (what --json carries)."""
        results = structured_results()
        suite = ET.fromstring(junit_xml(results))
        case = flow_cases(suite)[1]
        first, *extra = case.findall("failure")
        assert first.get("message") == "replay divergence" and "matches no recorded turn" in (first.text or "")
        assert [e.get("type") for e in extra] == ["flowproof.divergence"]
        assert extra[0].get("message", "").startswith("divergence at turn 1, messages.1.content → flight.id:")
        assert json.loads(extra[0].text or "") == json.loads(render_json(results))["flows"][1]["findings"][0]
        assert [e.get("type") for e in flow_cases(suite)[5].findall("error")] == ["exit-5", "flowproof.error"]

    def test_an_assertion_finding_reads_as_expected_and_actual(self) -> None:
        """A failed where clause's JUnit message says which call, which path, what was expected
        and what it held; other assertion findings keep their message's first line."""
        suite = ET.fromstring(junit_xml(structured_results()))
        extra = flow_cases(suite)[4].findall("failure")[1:]
        assert [e.get("message") for e in extra] == [
            'assertion at call 2 (create_booking), flight.id: expected equals "KQ999", actual "KQ311"',
            "assertion: expected create_booking",
        ]


def test_junit_says_what_the_proxy_witnessed_in_system_out() -> None:
    out = ET.fromstring(junit_xml([witnessed()]).split("\n", 1)[1]).find("testcase/system-out")
    assert out is not None and "hosts contacted: api.openai.com:443 (model)" in (out.text or "")
    assert "unused mock: search_hotels" in (out.text or "")
