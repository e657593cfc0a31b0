"""Tests for flowproof.report.files: writing --junit and --html, atomically for the page."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from flowproof.report import files as files_module
from flowproof.report.files import write_html, write_junit, write_markdown

from .helpers import result
from .test_html import diverged


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

        monkeypatch.setattr(files_module.os, "replace", refuse)
        with pytest.raises(OSError):
            write_html([diverged()], path)
        assert path.read_text(encoding="utf-8") == "old report"
        assert [p.name for p in tmp_path.iterdir()] == ["run.html"]


class TestWriteMarkdown:
    def test_a_plain_path_is_written_by_a_rename(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Not the step summary: the old file is replaced whole, never appended to."""
        path = tmp_path / "out" / "summary.md"
        path.parent.mkdir()
        path.write_text("old summary\n", encoding="utf-8")
        renamed: list[str] = []
        real = files_module.os.replace
        monkeypatch.setattr(files_module.os, "replace", lambda a, b: (renamed.append(str(b)), real(a, b)))
        write_markdown([diverged()], path, step_summary=str(tmp_path / "elsewhere.md"))
        text = path.read_text(encoding="utf-8")
        assert text.startswith("### flowproof") and "old summary" not in text
        assert renamed == [str(path)]
        assert [p.name for p in path.parent.iterdir()] == ["summary.md"]

    def test_the_step_summary_is_appended_to(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """GitHub's convention: other steps wrote there first, and their text stays."""
        summary = tmp_path / "step_summary"
        summary.write_text("## Lint\nall clean", encoding="utf-8")
        monkeypatch.chdir(tmp_path)
        write_markdown([diverged()], Path("step_summary"), step_summary=str(summary))
        text = summary.read_text(encoding="utf-8")
        assert text.startswith("## Lint\nall clean\n\n### flowproof\n")
        write_markdown([result()], summary, step_summary=str(summary))
        assert summary.read_text(encoding="utf-8").count("### flowproof") == 2


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask

    def test_the_cassette_is_shown_relative_to_the_working_directory(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.chdir(tmp_path)
        path = tmp_path / "run.html"
        write_html([result(cassette=tmp_path / "specs" / "booking.cassette.json")], path)
        page = path.read_text(encoding="utf-8")
        assert "cassette specs/booking.cassette.json" in page and str(tmp_path) not in page




class TestJunitFile:
    def test_writes_the_xml_and_creates_the_folder(self, tmp_path: Path) -> None:
        path = tmp_path / "reports" / "junit.xml"
        write_junit([result()], path)
        assert ET.fromstring(path.read_text(encoding="utf-8").split("\n", 1)[1]).get("tests") == "1"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
