"""Read the proxy's event log as it grows, parsing each line once.

The runner polls the log every few tens of milliseconds while the agent runs (to
see ``request_started``, ``turn`` and ``divergence`` as they happen). Re-reading and
re-parsing the whole file at every poll costs O(calls²) over a run: a recorded or
compared turn line carries the live turn (tens of KB for a coding agent), so a
30-call run re-parsed about a megabyte twenty times a second, on the CPUs the
agent and the proxy need. An `EventTail` reads only the bytes appended since the
last poll.

It returns exactly what `flowproof.runner.proxy.read_events` returns for the
same file: every complete line that parses as a JSON object, in order; a
garbled line is skipped, and a last line without its newline is returned when
it already parses (it is not consumed: the next poll reads it again, whole).

One `EventTail` follows one file written by one proxy run: make a new one when
the log is replaced. (A file that shrank is read again from the start.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["EventTail"]


class EventTail:
    """The events of the JSON-lines log at ``path``, read incrementally."""

    __slots__ = ("_events", "_offset", "path")

    def __init__(self, path: Path) -> None:
        self.path = path
        self._events: list[dict[str, Any]] = []
        self._offset = 0  # just past the last complete line parsed

    def read(self) -> list[dict[str, Any]]:
        """Every complete event written so far (a new list; the dicts are shared)."""
        try:
            with open(self.path, "rb") as fh:
                size = fh.seek(0, 2)
                if size < self._offset:
                    # Truncated or replaced by a shorter file: start over.
                    self._events, self._offset = [], 0
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        if end:
            self._events.extend(_parse_lines(data[:end]))
            self._offset += end
        tail = data[end:]
        partial = _parse_lines(tail) if tail.strip() else []
        return self._events + partial


def _parse_lines(data: bytes) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            events.append(obj)
    return events
