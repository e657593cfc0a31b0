"""The JSON-lines event log the runner reads (``flowproof_report``; schema in docs/internals.md).

One typed event (`flowproof.log_events`) a line, flushed per line, so a runner
polling the file sees each event as soon as it happens. A warm proxy runs a
session's hooks on that session's worker thread while the event loop may log for
it too (a TLS failure, an aborted close), so each line is written under a lock.

A writer may hold back the flush of a line that another line of the same hook
always follows (replay's ``request_started``, then its ``turn`` or
``divergence``): the two reach the file in one write, and a line is never cut.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import IO

from flowproof.log_events import Event

__all__ = ["EventLog"]


class EventLog:
    """Appends events to ``path``; with no path every `write` is a no-op.

    The file is opened lazily on the first event, in append mode, so a run that
    shares one log between several proxies (or restarts one) never truncates it.
    It is the last addon of the flowproof chain: its ``done`` hook closes the
    file after every other addon has written its last event.
    """

    __slots__ = ("_file", "_lock", "path")

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._file: IO[str] | None = None
        self._lock = threading.Lock()

    def write(self, event: Event, *, flush: bool = True) -> None:
        """Write ``event`` as one line and flush it (with ``flush=False``: at the next
        flushed write or at `close`; see the module docstring)."""
        if self.path is None:
            return
        line = json.dumps(event.to_json(), ensure_ascii=False, default=str)
        with self._lock:
            if self._file is None:
                # backslashreplace: a lone surrogate (a body that is not UTF-8, or a JSON
                # "\ud83d" escape) becomes the JSON escape "\udcff", so the line stays valid
                # JSON that loads back to the same string instead of failing the hook.
                self._file = open(self.path, "a", encoding="utf-8", errors="backslashreplace")  # noqa: SIM115
            self._file.write(line + "\n")
            if flush:
                self._file.flush()

    def close(self) -> None:
        """Close the file (a later `write` reopens it)."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def done(self) -> None:
        """mitmproxy's shutdown hook: close the file."""
        self.close()
