"""Where reports meet the file system: ``--junit PATH``, ``--html PATH`` and ``--markdown PATH``.

The renderers beside this module are pure; these functions only write what they
render. The HTML page and the Markdown report are written atomically: the text goes to a
temporary file beside ``path``, then one rename, so a reader never sees half a page and a
failed write leaves the old file as it was. The one exception is GitHub's step summary
(the file ``$GITHUB_STEP_SUMMARY`` names): the job's other steps write there too, so the
Markdown report is appended to it, as GitHub asks.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from flowproof.report.html import html_report
from flowproof.report.junit import junit_xml
from flowproof.report.markdown import markdown_report
from flowproof.verdict import FlowResult

__all__ = ["shown_path", "write_html", "write_junit", "write_markdown"]


def write_junit(results: Sequence[FlowResult], path: Path, *, secrets: Iterable[str] = ()) -> None:
    """Write `junit_xml` to ``path`` (parent directories are created), ``secrets`` masked."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(junit_xml(results, secrets=secrets), encoding="utf-8")


def shown_path(path: Path) -> str:
    """``path`` relative to the working directory when it lies inside it: a page uploaded
    from CI reads the same as the repository, not as the build machine's folders."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_html(results: Sequence[FlowResult], path: Path, *, secrets: Iterable[str] = ()) -> None:
    """Write `html_report` to ``path`` (parent directories are created) by a rename,
    ``secrets`` masked."""
    _write_atomically(html_report(results, shown_path=shown_path, secrets=secrets), path)


def write_markdown(
    results: Sequence[FlowResult], path: Path, *, secrets: Iterable[str] = (), step_summary: str | None = None
) -> None:
    """Write `markdown_report` to ``path``, ``secrets`` masked: appended when ``path`` is the
    file ``step_summary`` names (``$GITHUB_STEP_SUMMARY``: other steps write there too), else
    by a rename (parent directories are created)."""
    text = markdown_report(results, secrets=secrets)
    if step_summary and _same_file(path, Path(step_summary)):
        with path.open("a+b") as out:
            size = out.seek(0, os.SEEK_END)
            if size:
                out.seek(size - 1)
            # A blank line first: an earlier step's last paragraph does not swallow the heading.
            separator = "" if not size else "\n" if out.read(1) == b"\n" else "\n\n"
            out.write((separator + text).encode("utf-8", "replace"))
        return
    _write_atomically(text, path)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and a.samefile(b))
    except OSError:
        return False


def _write_atomically(text: str, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as out:
            out.write(text)
        # mkstemp creates the file private; a report is for reading (a CI artifact).
        os.chmod(temp, 0o644 & ~_umask())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
