"""Every report masks the credentials flowproof knows, the same way the log lines do: the text
report, a failing pytest item's text, --json, --junit, --html and --markdown, from one function
(`flowproof.redact.redact_data`)."""

from __future__ import annotations

from dataclasses import replace
from xml.etree import ElementTree as ET

from flowproof.errors import EXIT_AGENT
from flowproof.redact import REDACTED, redact_data, redact_text
from flowproof.report.html import html_report
from flowproof.report.json_report import render_json, render_json_doc
from flowproof.report.junit import junit_xml
from flowproof.report.markdown import markdown_report
from flowproof.report.text import flow_report, render_text
from flowproof.verdict import StepResult

from ..runner.helpers import chat_turn, turn_events
from .helpers import judged, miss, result

KEY = "sk-report-mask-0123456789"


def leaking() -> list:
    """A run whose agent printed its key everywhere a report shows text: its output, the
    flow's error, a check's message, a divergence, and the model's reply (the conversation)."""
    turn = chat_turn(0, text=f"Your key is {KEY}.", user=f"remember {KEY}")
    conversation = judged(turn_events([turn]), [turn])
    crashed = result(
        EXIT_AGENT,
        error=f"the agent exited with code 3: bad key {KEY}",
        agent_stdout=f"using OPENAI_API_KEY={KEY}\n",
        agent_stderr=f"401 for key {KEY}\n",
        steps=(StepResult(False, f"expected the reply without {KEY}", "b.flow.yaml:4:5", "assert: reply"),),
        divergences=(miss("messages.1.content", "hello", f"key {KEY}"),),
        reply=f"Your key is {KEY}.",
    )
    return [crashed, replace(conversation, agent_stdout=KEY)]


class TestEveryReportMasks:
    def test_the_text_report(self) -> None:
        text = render_text(leaking(), verbose=True, secrets=[KEY])
        assert KEY not in text and REDACTED in text

    def test_a_failing_pytest_item_and_a_session_report(self) -> None:
        text = flow_report(leaking()[0], secrets=[KEY], after=f"\n  then: {KEY}")
        assert KEY not in text and "using OPENAI_API_KEY=[redacted]" in text

    def test_json(self) -> None:
        text = render_json(leaking(), secrets=[KEY])
        assert KEY not in text and REDACTED in text

    def test_junit_every_text_and_attribute(self) -> None:
        text = junit_xml(leaking(), secrets=[KEY])
        assert KEY not in text
        ET.fromstring(text)  # still well-formed XML

    def test_html_conversation_included(self) -> None:
        page = html_report(leaking(), secrets=[KEY])
        assert KEY not in page
        assert "Your key is [redacted]." in page

    def test_markdown_summary_and_diff(self) -> None:
        text = markdown_report(leaking(), secrets=[KEY])
        assert KEY not in text
        assert "+ key [redacted]" in text  # the divergence's replayed side, in the diff block

    def test_without_secrets_the_value_is_shown(self) -> None:
        """The masking is the secrets': an ordinary value is left as it was."""
        assert KEY in render_text(leaking(), verbose=True)
        assert KEY in render_json_doc(leaking())["flows"][0]["agent"]["stdout"]
        assert KEY in markdown_report(leaking())


def test_reports_mask_as_log_lines_do() -> None:
    """The reports' function is the log lines' `redact_text`, applied at every depth."""
    text = f"GET https://h.example/v1?key=abc failed: Bearer sk-123456789 {KEY}"
    assert redact_data({"a": [text], "n": 1}, [KEY]) == {"a": [redact_text(text, [KEY])], "n": 1}
