"""The commands flowproof tells a user to run: one owner, always shell-quoted.

Every error and report that says "record it first with: …" takes its text from
here, so a spec path with a space or a quote reads as a command that works
when pasted into a shell.

Pure.

>>> record_command("my flows/booking.flow.yaml")
"flowproof-run 'my flows/booking.flow.yaml' --record"
"""

from __future__ import annotations

import shlex
from pathlib import Path

__all__ = ["ADDON_SCRIPT", "GENERIC_RECORD_COMMAND", "addon_record_command", "record_command"]

#: What to run when no spec is known (a cassette read on its own).
GENERIC_RECORD_COMMAND = "flowproof-run <spec> --record"
#: The addon as a ``mitmdump -s`` script, relative to a checkout of the project.
ADDON_SCRIPT = "addon/flowproof_addon.py"


def record_command(spec_path: Path | str) -> str:
    """The exact command that (re-)records a spec's cassette."""
    return f"flowproof-run {shlex.quote(str(spec_path))} --record"


def addon_record_command(cassette: Path | str | None) -> str:
    """The bare-mitmdump command that records to ``cassette`` (``PATH`` when none is set)."""
    target = shlex.quote(str(cassette)) if cassette else "PATH"
    return (
        f"mitmdump -s {ADDON_SCRIPT} --set flowproof_mode=record --set flowproof_cassette={target}"
    )
