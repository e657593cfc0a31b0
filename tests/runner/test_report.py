"""Tests for flowproof.runner.report: text, JSON, JUnit, heal diff, show."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path
from xml.etree import ElementTree as ET

import jsonschema
import pytest
import xmlschema

from flowproof.assertions import MISMATCH_KINDS, Mismatch
from flowproof.cassette import loads_cassette
from flowproof.compare import compare_responses, missing_result
from flowproof.divergence import Divergence, FieldChange
from flowproof.errors import EXIT_AGENT, EXIT_ASSERTION, EXIT_DIVERGENCE, EXIT_DRIFT, EXIT_OK, FlowproofError
from flowproof.events import DivergenceEvent, DoneEvent, DriftEvent
from flowproof.model import FinishReason, ResponseView, ToolCall
from flowproof.runner.flow import FlowResult
from flowproof.runner.report import (
    junit_xml,
    render_json,
    render_text,
    show_cassette,
    worst_exit,
)
from flowproof.verdict import StepResult

from .helpers import BOOKING_TURNS, cassette_text, chat_turn


def result(code: int = EXIT_OK, **kw) -> FlowResult:
    base = dict(spec_path=Path("booking.flow.yaml"), name="Booking", mode="replay", exit_code=code,
                cassette=Path("booking.cassette.json"))
    base.update(kw)
    return FlowResult(**base)


def cassette(turns, route="proxy"):
    return loads_cassette(cassette_text(turns, route), "c.json")


class TestText:
    def test_passing_flow(self) -> None:
        """A passing flow shows ✓ per step and ends with 'Nothing to do.'."""
        text = render_text([result(steps=(StepResult(True, "ok", None, "assert: reply contains booked"),))])
        assert "✓ Booking [replay]" in text and "✓ assert: reply contains booked" in text
        assert text.endswith("Nothing to do.")

    def test_a_first_record_asks_for_no_heal_diff(self) -> None:
        """After a first-ever record there is no old cassette and so no heal diff: the advice
        says to read the new cassette, not to review a diff that does not exist."""
        text = render_text([result(mode="record", heal_diff=None)])
        assert "heal diff" not in text and "cassette diff" not in text
        assert text.splitlines()[-1] == (
            "A new cassette: read it (flowproof show booking.cassette.json) and commit it with the spec."
        )

    def test_a_re_record_asks_to_review_its_heal_diff(self) -> None:
        text = render_text([result(mode="record", heal_diff="turn 1: create_booking flight.id: KQ311 -> KQ999")])
        assert "heal diff (old cassette -> new recording):" in text
        assert text.splitlines()[-1] == "Review the heal diff above and commit booking.cassette.json."

    def test_several_flows_advise_by_what_was_recorded(self) -> None:
        """Several flows: first records only (--record-missing) ask to read the new cassettes;
        any re-record asks to review the diffs; replays alone need nothing."""
        first = result(mode="record", heal_diff=None)
        again = result(mode="record", heal_diff="turn 0: text: 'a' -> 'b'")
        replayed = result()
        assert render_text([replayed, first]).splitlines()[-1].startswith("New cassettes: read them")
        assert render_text([first, again]).splitlines()[-1] == "Review the heal diffs above and commit the cassettes."
        assert render_text([replayed, replayed]).splitlines()[-1] == "Nothing to do."

    def test_failing_step_shows_message_and_location(self) -> None:
        """A failed step shows ✗, its location and its message."""
        step = StepResult(False, "the agent has not replied", "booking.flow.yaml:9:5", "assert: reply contains booked")
        text = render_text([result(EXIT_ASSERTION, steps=(step,))])
        assert "✗ assert: reply contains booked (booking.flow.yaml:9:5)" in text
        assert "the agent has not replied" in text
        assert text.splitlines()[-1].startswith("Fix the agent")

    def test_divergence_says_how_to_rerecord(self) -> None:
        """A divergence report includes its text and ends with the record command."""
        text = render_text([result(EXIT_DIVERGENCE, divergences=("book.flight.id: recorded KQ311, replayed KQ999",))])
        assert "replayed KQ999" in text
        assert "flowproof-run booking.flow.yaml --record" in text.splitlines()[-1]

    def test_several_flows_end_with_one_table(self) -> None:
        """Several flows end with a table: a header and one aligned row per flow, in run order."""
        text = render_text([
            result(duration=1.25),
            result(EXIT_ASSERTION, spec_path=Path("deep/refund.flow.yaml"), name="Refund guard"),
        ])
        table = text.split("\n\n")[-2].splitlines()
        assert table[1].split() == ["✓", "passed", "replay", "1.2s", "booking.flow.yaml", "Booking"]
        assert table[2].split()[:4] == ["✗", "assertion", "failed", "replay"] and table[2].endswith("Refund guard")
        assert table[1].index("booking.flow.yaml") == table[2].index("deep/refund.flow.yaml")
        assert "1 of 2 flow(s) passed" in text

    def test_one_flow_has_no_table(self) -> None:
        """A single flow's report is not followed by a one-row table."""
        assert "verdict" not in render_text([result()])

    def test_worst_exit(self) -> None:
        """Several flows exit with the worst code."""
        assert worst_exit([result(EXIT_OK), result(EXIT_DIVERGENCE), result(EXIT_ASSERTION)]) == EXIT_DIVERGENCE
        assert worst_exit([]) == EXIT_OK


class TestMachine:
    def test_json(self) -> None:
        """The JSON report carries the exit code and each flow's verdict."""
        doc = json.loads(render_json([result(EXIT_ASSERTION)]))
        assert doc["exit_code"] == EXIT_ASSERTION
        assert doc["flows"][0]["verdict"] == "assertion failed"

    def test_junit(self) -> None:
        """JUnit XML has one testcase per flow and marks failures."""
        root = ET.fromstring(junit_xml([result(), result(EXIT_DIVERGENCE, name="Other")]).split("\n", 1)[1])
        assert root.get("tests") == "2" and root.get("failures") == "1"
        cases = root.findall("testcase")
        assert cases[0].find("failure") is None
        assert cases[1].find("failure") is not None


def compare_run():
    """A compare flow: two equal turns, a changed argument, a reworded reply, a missing turn."""
    def book(flight: str) -> ResponseView:
        return ResponseView("", (ToolCall("book", f'{{"flight":"{flight}"}}'),), FinishReason.TOOL_CALLS)

    said = ResponseView("Booked.", (), FinishReason.STOP)
    results = (
        compare_responses(said, said, turn=0, live_call=0, thread=1, depth=2),
        compare_responses(book("KQ311"), book("KQ999"), turn=1, live_call=1, thread=0, depth=2),
        compare_responses(said, ResponseView("Done!", (), FinishReason.STOP), turn=2, live_call=2,
                          thread=0, depth=4),
        missing_result(said, turn=3, thread=0, depth=6, reason="no live call reached this place"),
    )
    return result(EXIT_DRIFT, mode="compare", compare=results)


class TestCompareReport:
    def test_text_lists_every_result_and_details_the_first_drift_only(self) -> None:
        """Every result has a row with text.status; the first drift is detailed, later ones counted."""
        text = render_text([compare_run()])
        assert "compare: 4 result(s), 1 equal, 3 drifted (2 changed, 0 extra, 1 missing)" in text
        assert "turn 0 | thread 1 | depth 2 | equal true | finish reason stop | text exact" in text
        assert "turn 3 | thread 0 | depth 6 | equal false (missing)" in text
        assert "- tool_calls.0.arguments.flight: recorded KQ311, live KQ999" in text
        assert "Done!" not in text  # the second drift is counted, not explained
        assert "2 later drift(s)" in text
        assert "replayed" not in text and "fewer model calls" not in text

    def test_json_carries_structured_results(self) -> None:
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

    def test_junit_has_a_case_per_result(self) -> None:
        """--junit adds one testcase per compare result; drifted ones are failures."""
        suite = ET.fromstring(junit_xml([compare_run()]))
        assert suite.get("tests") == "5" and suite.get("failures") == "4"
        names = [c.get("name") for c in suite.iter("testcase")]
        assert "Booking [compare] turn 1 (thread 0, depth 2) [paired]" in names
        failure = suite.find("testcase[@name='Booking [compare] turn 1 (thread 0, depth 2) [paired]']/failure")
        assert failure is not None and "recorded KQ311, live KQ999" in (failure.text or "")


class TestShow:
    def test_conversation(self) -> None:
        """show prints each turn with model, user text, tool calls and the reply."""
        text = show_cassette(cassette(BOOKING_TURNS), "c.json")
        assert text.startswith("c.json: 3 turn(s), route proxy")
        assert "model: gpt-4o" in text
        assert "user: 'Book me a flight'" in text
        assert '→ tool call create_booking {"flight":{"id":"KQ311"}}' in text
        assert "Your flight is booked: B-1042." in text

    def test_one_turn_and_one_thread(self) -> None:
        """--turn keeps one turn; --thread keeps a thread's turns, numbered by first turn."""
        helper = chat_turn(3, text="Sub-agent answer.", system="You search flights.")
        c = cassette([*BOOKING_TURNS, helper])
        one = show_cassette(c, "c.json", turn=1)
        assert "turn 1 —" in one and "turn 0 —" not in one and "turn 2 —" not in one
        assert "  thread: 0" in one
        side = show_cassette(c, "c.json", thread=1)
        assert "thread 1: turn(s) 3" in side and "Sub-agent answer." in side and "turn 0 —" not in side
        main = show_cassette(c, "c.json", thread=0)
        assert [line.split(" —")[0] for line in main.splitlines() if line.startswith("turn ")] == [
            "turn 0", "turn 1", "turn 2"]

    def test_a_turn_or_thread_that_is_not_there_names_what_is(self) -> None:
        """Asking for a missing turn or thread is a usage error listing the ones there are."""
        with pytest.raises(FlowproofError, match="has no turn 7 — its turns are: 0, 1, 2"):
            show_cassette(cassette(BOOKING_TURNS), "c.json", turn=7)
        with pytest.raises(FlowproofError, match="has no thread 2 — its threads are: 0"):
            show_cassette(cassette(BOOKING_TURNS), "c.json", thread=2)


def anthropic_tool_result_turn(index: int) -> dict:
    """An anthropic cassette turn whose newest user message holds only a tool result."""
    return {
        "index": index,
        "provider": "anthropic",
        "request": {
            "method": "POST",
            "url": "https://api.anthropic.com/v1/messages",
            "headers": {"content-type": "application/json"},
            "body_sha256": f"{index:064x}",
            "body": {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Book me a flight to NBO"}]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "tu_1", "name": "search_flights",
                     "input": {"destination": "NBO"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "tu_1", "content": "KQ311 found"}]},
            ]},
        },
        "response": {
            "status": 200,
            "headers": {"content-type": "application/json"},
            "body": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                     "content": [{"type": "text", "text": "KQ311 is available."}],
                     "stop_reason": "end_turn"},
        },
    }


class TestShowPrompt:
    def test_user_line_is_the_prompt_not_the_tool_result(self) -> None:
        """For an anthropic turn ending in a tool-result turn, the user line is the earlier prompt."""
        text = show_cassette(cassette([anthropic_tool_result_turn(0)]), "c.json")
        user_lines = [line for line in text.splitlines() if line.startswith("  user:")]
        assert user_lines == ["  user: 'Book me a flight to NBO'"]
        assert "tool result (search_flights): 'KQ311 found'" in text


# --------------------------------------------------------------------------- structured results

def structured_results() -> list[FlowResult]:
    """One flow of every outcome, with the events and steps that produced it."""
    div = Divergence("unmatched", 2, 1, fields=(FieldChange("messages.1.content", "{}", "{}", inner="flight.id"),),
                     hint="re-record").to_json()
    drift = {"equal": False, "turn_index": 0, "tool_calls": {"equal": True, "recorded": [], "live": []},
             "finish_reason": {"equal": True, "recorded": "stop", "live": "stop"},
             "text": {"status": "different", "recorded": "booked", "live": "sold out"}}
    failed_step = StepResult(False, "expected create_booking", "b.flow.yaml:9:5", "assert_tool_call: create_booking",
                             (Mismatch("equals", "flight.id", "KQ999", "KQ311", "create_booking", 2),
                              Mismatch("reply contains", None, "booked", None)))
    return [
        result(steps=(StepResult(True, "ok", None, "assert: reply contains booked"),),
               guards=({"assertion": "assert_no_tool_call: issue_refund", "warning": "compliance, not enforcement"},)),
        result(EXIT_DIVERGENCE, divergences=("request 2 matches no recorded turn",),
               events=(DivergenceEvent("1", "request 2 matches no recorded turn", div),)),
        result(EXIT_DIVERGENCE, missing="1 recorded call(s) were never made", events=(DoneEvent((2,)),)),
        result(EXIT_DRIFT, mode="compare", drifts=("text differs",), events=(DriftEvent("0", "text differs", drift),)),
        result(EXIT_ASSERTION, steps=(failed_step,)),
        result(EXIT_AGENT, error="the agent exited with code 1", agent_stdout="\x1b[31mboom\x1b[0m"),
        compare_run(),
    ]


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
        case = suite.findall("testcase")[1]
        first, *extra = case.findall("failure")
        assert first.get("message") == "replay divergence" and "matches no recorded turn" in (first.text or "")
        assert [e.get("type") for e in extra] == ["flowproof.divergence"]
        assert extra[0].get("message", "").startswith("divergence at turn 1, messages.1.content → flight.id:")
        assert json.loads(extra[0].text or "") == json.loads(render_json(results))["flows"][1]["findings"][0]
        assert [e.get("type") for e in suite.findall("testcase")[5].findall("error")] == ["exit-5", "flowproof.error"]

    def test_an_assertion_finding_reads_as_expected_and_actual(self) -> None:
        """A failed where clause's JUnit message says which call, which path, what was expected
        and what it held; other assertion findings keep their message's first line."""
        suite = ET.fromstring(junit_xml(structured_results()))
        extra = suite.findall("testcase")[4].findall("failure")[1:]
        assert [e.get("message") for e in extra] == [
            'assertion at call 2 (create_booking), flight.id: expected equals "KQ999", actual "KQ311"',
            "assertion: expected create_booking",
        ]


def witnessed() -> FlowResult:
    """A flow that reached a stray host, leaked a secret (masked), left a mock unused and spawned
    a sub-agent."""
    return result(
        EXIT_ASSERTION,
        steps=(StepResult(True, "ok", None, "in subagent Explore #1: Grep", scope="in subagent Explore #1"),),
        egress=({"host": "api.openai.com", "port": 443, "role": "model", "via": "connect"},
                {"host": "exfil.example.test", "port": 80, "role": "other", "via": "http"}),
        secret_leaks=({"label": "${T}", "host": "exfil.example.test", "method": "POST",
                       "url": "http://exfil.example.test/c?t=«secret:T»", "where": "url", "path": "query",
                       "model_call": False},),
        unused_mocks=({"name": "search_hotels", "server": None, "has_result": True, "location": "b.flow.yaml:8:5",
                       "text": "search_hotels (tools:, b.flow.yaml:8:5): no request carried its result"},),
        subagents=({"number": 0, "name": "Explore", "label": "Explore #1", "family": "claude-code", "parent": None,
                    "spawn_turn": 0, "turns": [2, 3], "result_turn": 4,
                    "text": "Explore #1 (claude-code): spawned in turn 0, ran in turn(s) 2, 3, result in turn 4"},),
        agent_tree=("the agent",
                    "  └─ Explore #1 (claude-code): spawned in turn 0, ran in turn(s) 2, 3, result in turn 4"),
        usage={"input_tokens": 10, "output_tokens": 2, "cache_read_tokens": 0, "cache_write_tokens": 0,
               "turns_without_usage": [1]},
    )


class TestWhatEveryReportSays:
    def test_text_lists_hosts_leaks_unused_mocks_and_the_tree(self) -> None:
        text = render_text([witnessed()])
        assert "  hosts contacted: api.openai.com:443 (model), exfil.example.test:80" in text
        assert ("  secret leak: ${T} went to exfil.example.test: request POST "
                "http://exfil.example.test/c?t=«secret:T», in the URL at query") in text
        assert "  unused mock: search_hotels (tools:, b.flow.yaml:8:5): no request carried its result" in text
        assert "    the agent\n      └─ Explore #1 (claude-code)" in text

    def test_hosts_are_listed_on_a_pass_too(self) -> None:
        passed = result(egress=({"host": "api.openai.com", "port": 443, "role": "model", "via": "connect"},))
        assert "hosts contacted: api.openai.com:443 (model)" in render_text([passed])

    def test_json_validates_and_carries_them(self) -> None:
        doc = json.loads(render_json([witnessed()]))
        jsonschema.Draft202012Validator(REPORT_SCHEMA).validate(doc)
        flow = doc["flows"][0]
        assert [e["host"] for e in flow["egress"]] == ["api.openai.com", "exfil.example.test"]
        assert flow["secret_leaks"][0]["where"] == "url" and flow["subagents"][0]["parent"] is None
        assert flow["steps"][0]["scope"] == "in subagent Explore #1"
        assert flow["usage"]["turns_without_usage"] == [1]

    def test_junit_says_them_in_system_out(self) -> None:
        out = ET.fromstring(junit_xml([witnessed()]).split("\n", 1)[1]).find("testcase/system-out")
        assert out is not None and "hosts contacted: api.openai.com:443 (model)" in (out.text or "")
        assert "unused mock: search_hotels" in (out.text or "")


def test_show_draws_the_parent_and_its_sub_agents() -> None:
    from tests.agent_runs import claude_code_cassette

    text = show_cassette(claude_code_cassette(), "cc.json")
    lines = text.splitlines()
    assert lines[1:3] == ["the agent",
                          "  └─ Explore #1 (claude-code): spawned in turn 0, ran in turn(s) 2, 3, result in turn 4"]
    turn_2 = text.split("turn 2 —", 1)[1].split("turn 3 —", 1)[0]
    assert "  sub-agent: Explore #1" in turn_2
    assert "sub-agent:" not in text.split("turn 1 —", 1)[1].split("turn 2 —", 1)[0]
