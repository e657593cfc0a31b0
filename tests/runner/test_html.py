"""Tests for flowproof.runner.html: the --html page of a run, and how it is written."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from flowproof.divergence import Divergence, FieldChange
from flowproof.errors import EXIT_DIVERGENCE, EXIT_OK
from flowproof.events import DivergenceEvent, DoneEvent, parse_events
from flowproof.runner import html as html_module
from flowproof.runner.cli import run_command
from flowproof.runner.flow import FlowResult
from flowproof.runner.html import flow_conversation, html_report, write_html

from .conftest import FAKE_ADDON
from .helpers import BOOKING_TURNS, cassette_text, chat_turn, turn_events, write_script, write_spec


def result(code: int = EXIT_OK, **kw) -> FlowResult:
    base = {"spec_path": Path("booking.flow.yaml"), "name": "Booking", "mode": "replay", "exit_code": code,
                "cassette": Path("booking.cassette.json")}
    base.update(kw)
    return FlowResult(**base)


def diverged() -> FlowResult:
    """Two turns served, then the third request changed a tool result."""
    divergence = Divergence(
        kind="unmatched", request_number=3, closest_index=2,
        fields=(FieldChange("messages.5.content", "B-1042", "B-2077", inner="booking"),),
    )
    events = (
        *parse_events(turn_events(BOOKING_TURNS[:2])),
        DivergenceEvent("2", divergence.render(), divergence.to_json()),
        DoneEvent(unconsumed=(2,)),
    )
    return result(EXIT_DIVERGENCE, events=events, divergences=(divergence.render(),))


class TestReport:
    def test_the_conversation_comes_from_the_flows_events(self) -> None:
        """The turns the proxy reported are the conversation: tool calls with their arguments."""
        conversation = flow_conversation(diverged())
        assert conversation is not None
        [thread] = conversation["threads"]
        calls = [c["name"] for t in thread["turns"] for c in t["response"]["tool_calls"]]
        assert calls == ["search_flights", "create_booking"]

    def test_request_text_is_shown_as_the_cassette_holds_it(self) -> None:
        """A normalized volatile span shows as its placeholder, as in the cassette."""
        turn = chat_turn(0, text="Booked.", user="Book me a flight on «volatile:date»")
        page = html_report([result(events=tuple(parse_events(turn_events([turn]))))])
        assert "Book me a flight on «volatile:date»" in page

    def test_a_flow_that_never_ran_has_no_conversation(self) -> None:
        assert flow_conversation(result(2, error="spec error")) is None
        assert "spec error" in html_report([result(2, error="spec error")])

    def test_a_divergence_is_shown_at_its_first_bad_turn(self) -> None:
        page = html_report([result(), diverged()])
        assert page.count('<section class="flow') == 2
        assert "first bad turn: divergence at recorded turn 2" in page
        assert "messages.5.content → booking" in page
        assert "B-<mark>1042</mark>" in page and "B-<mark>2077</mark>" in page
        assert "0 of 2" not in page and "1 of 2 flow(s) passed · exit code 3" in page


    def test_the_cassette_is_shown_relative_to_the_working_directory(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.chdir(tmp_path)
        page = html_report([result(cassette=tmp_path / "specs" / "booking.cassette.json")])
        assert "cassette specs/booking.cassette.json" in page and str(tmp_path) not in page


class TestWrite:
    def test_writes_a_readable_file_and_creates_the_folder(self, tmp_path: Path) -> None:
        path = tmp_path / "reports" / "run.html"
        write_html([diverged()], path)
        assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
        assert stat.S_IMODE(path.stat().st_mode) & 0o044 == 0o044 & ~_umask()
        assert [p.name for p in path.parent.iterdir()] == ["run.html"]

    def test_a_failed_write_leaves_the_old_report_and_no_temporary_file(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        path = tmp_path / "run.html"
        path.write_text("old report", encoding="utf-8")

        def refuse(*_args: object) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(html_module.os, "replace", refuse)
        with pytest.raises(OSError):
            write_html([diverged()], path)
        assert path.read_text(encoding="utf-8") == "old report"
        assert [p.name for p in tmp_path.iterdir()] == ["run.html"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.fixture
def fake_env(ca_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """The CLI on the stand-in addon (tests/runner/fake_addon.py) replaying ``events``."""
    monkeypatch.setenv("FLOWPROOF_ADDON_SCRIPT", str(FAKE_ADDON))
    monkeypatch.setenv("FLOWPROOF_CA_DIR", str(ca_dir))
    monkeypatch.delenv("FLOWPROOF_UPSTREAM", raising=False)

    def set_script(**script) -> None:
        monkeypatch.setenv("FAKE_FLOWPROOF_SCRIPT", str(write_script(tmp_path / "script.json", **script)))

    return set_script


class TestFlag:
    def test_every_flow_of_a_parallel_run_is_on_the_page(self, tmp_path: Path, fake_env) -> None:
        """-j 2 with --html: one page, both flows, the exit code unchanged by the report."""
        a = write_spec(tmp_path, name="a")
        b = write_spec(tmp_path, name="b")
        (tmp_path / "a.cassette.json").write_text(cassette_text(BOOKING_TURNS))
        fake_env(events=turn_events(BOOKING_TURNS))
        page = tmp_path / "report.html"
        res = CliRunner().invoke(run_command, [str(a), str(b), "-j", "2", "--html", str(page)], catch_exceptions=False)
        assert res.exit_code == 2, res.output
        text = page.read_text(encoding="utf-8")
        assert "1 of 2 flow(s) passed · exit code 2" in text
        assert "tool call · create_booking" in text and "Your flight is booked: B-1042." in text
        assert "no cassette to replay" in text

    def test_an_unwritable_path_is_one_line_and_exit_2(self, tmp_path: Path, fake_env) -> None:
        spec = write_spec(tmp_path)
        (tmp_path / "booking.cassette.json").write_text(cassette_text(BOOKING_TURNS))
        fake_env(events=turn_events(BOOKING_TURNS))
        blocker = tmp_path / "file"
        blocker.write_text("not a folder")
        res = CliRunner().invoke(run_command, [str(spec), "--html", str(blocker / "r.html")], catch_exceptions=False)
        assert res.exit_code == 2
        assert f"cannot write the HTML report to {blocker / 'r.html'}" in res.output
        assert "Traceback" not in res.output

    def test_an_empty_shard_still_writes_a_page(self, tmp_path: Path, fake_env) -> None:
        spec = write_spec(tmp_path)
        page = tmp_path / "report.html"
        res = CliRunner().invoke(
            run_command, [str(spec), "--shard", "2/2", "--html", str(page)], catch_exceptions=False
        )
        assert res.exit_code == 0, res.output
        assert "No flow ran." in page.read_text(encoding="utf-8")
