"""Where reports meet the file system: ``--junit PATH`` and ``--html PATH``.

The renderers beside this module are pure; these functions only write what they
render. The HTML page is written atomically: the text goes to a temporary file
beside ``path``, then one rename, so a reader never sees half a page and a failed
write leaves the old file as it was.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from flowproof.report.html import html_report
from flowproof.report.junit import junit_xml
from flowproof.verdict import FlowResult

__all__ = ["shown_path", "write_html", "write_junit"]


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
    text = html_report(results, shown_path=shown_path, secrets=secrets)
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
