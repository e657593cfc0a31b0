"""Recording staging: a new recording replaces the cassette only when its flow passes.

The proxy writes the recording to ``x.cassette.recording.json`` beside the
cassette. After the verdict, `Staging.keep` renames it over the cassette
(returning the heal diff against the old one), `Staging.reject` keeps it aside
as ``x.cassette.rejected.json`` for inspection (unless it holds nothing: a record
that never reached the model leaves no rejected file), and `Staging.discard`
removes it on every other way out (an error, an agent that could not start,
Ctrl-C), so a failed record leaves the old cassette byte-identical. A rename
the folder refuses is a `CassetteFolderError` naming the folder (exit 2).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from flowproof.cassette import Cassette, load_cassette
from flowproof.errors import AgentError, ProxyError
from flowproof.heal import diff_cassettes
from flowproof.runner.lock import CassetteFolderError

__all__ = ["Staging", "rejected_path", "staging_path"]

#: A staged recording at most this big is read to see whether it holds anything at all
#: (an empty one is a few hundred bytes; one with a turn is never looked into).
_SMALL = 64 * 1024


def staging_path(cassette: Path) -> Path:
    """Where a recording is written before its assertions pass: ``x.cassette.recording.json``."""
    return cassette.with_name(f"{cassette.stem}.recording.json")


def rejected_path(cassette: Path) -> Path:
    """Where a recording whose assertions failed is kept for inspection."""
    return cassette.with_name(f"{cassette.stem}.rejected.json")


@dataclass(frozen=True, slots=True)
class Staging:
    """The staged recording of one cassette."""

    cassette: Path

    @property
    def path(self) -> Path:
        """The staging file the proxy writes."""
        return staging_path(self.cassette)

    def discard(self) -> None:
        """Remove the staging file: before a run (a crashed run may have left one) and on
        every way out that neither kept nor rejected it."""
        self.path.unlink(missing_ok=True)

    def reject(self) -> Path | None:
        """Keep a staged recording aside as rejected; its path, or None when there was none
        or it holds no turn and no MCP exchange (there is nothing to inspect: it is removed)."""
        if not self.path.exists():
            return None
        if _holds_nothing(self.path):
            self.discard()
            return None
        dest = rejected_path(self.cassette)
        try:
            os.replace(self.path, dest)
        except OSError as e:
            raise CassetteFolderError(self.cassette, e) from None
        return dest

    def keep(self, turns: int, existing: Cassette | None) -> str | None:
        """Make the staged recording the cassette; the heal diff against ``existing`` (None without one).

        Raises `AgentError` when the agent made no model call (an empty recording must
        not replace a good cassette, nor be minted) and `ProxyError` when the proxy
        wrote nothing.
        """
        if turns == 0:
            raise AgentError(
                "the agent made no model call, so there is nothing to record — check that it "
                "honours HTTPS_PROXY (or use `agent.route: base_url`) and that the prompt reached it"
            )
        if not self.path.exists():
            raise ProxyError("the proxy did not write the recording — see its errors above")
        heal = diff_cassettes(existing, load_cassette(self.path)) if existing is not None else None
        try:
            os.replace(self.path, self.cassette)
        except OSError as e:
            raise CassetteFolderError(self.cassette, e) from None
        return heal


def _holds_nothing(path: Path) -> bool:
    """True for a small staged recording whose ``turns`` and ``mcp`` are both empty."""
    try:
        if path.stat().st_size > _SMALL:
            return False
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return False  # unreadable: kept aside as it is, for whoever looks into it
    return isinstance(doc, dict) and doc.get("turns") == [] and not doc.get("mcp")
