"""``--html PATH``: the run's flows as one self-contained page, written atomically.

The page is `flowproof.report_html.render_html` of the ``--json`` document
(`runner.report.result_json` per flow), each flow with its conversation rebuilt
from the events the proxy reported — the same turns and MCP calls its
assertions read. A crash never leaves half a page: the text goes to a
temporary file beside ``path``, then one rename.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flowproof.mcp import calls_from_events
from flowproof.report_html import conversation_json, render_html
from flowproof.runner.flow import FlowResult, trajectory_turns
from flowproof.runner.report import render_json_doc
from flowproof.trajectory import build_trajectory

__all__ = ["html_report", "write_html"]


def flow_conversation(result: FlowResult) -> dict[str, Any] | None:
    """The flow's conversation (`conversation_json`), or None when no model call was seen
    (a spec error, a missing cassette, an agent that never started)."""
    turns = trajectory_turns(result.events)
    mcp_calls = calls_from_events([e.to_json() for e in result.events])
    if not turns and not mcp_calls:
        return None
    return conversation_json(build_trajectory(turns, mcp_calls), mcp_calls)


def _shown_path(path: Path) -> str:
    """``path`` relative to the working directory when it lies inside it: a page uploaded
    from CI reads the same as the repository, not as the build machine's folders."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def html_report(results: Sequence[FlowResult]) -> str:
    """The page for a run of ``results`` (in run order)."""
    doc = render_json_doc(results)
    for flow, result in zip(doc["flows"], results, strict=True):
        flow["conversation"] = flow_conversation(result)
        if result.cassette is not None:
            flow["cassette"] = _shown_path(result.cassette)
    return render_html(doc)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_html(results: Sequence[FlowResult], path: Path) -> None:
    """Write `html_report` to ``path`` (parent directories are created) by a rename, so a
    reader never sees half a page and a failed write leaves the old file as it was."""
    text = html_report(results)
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
