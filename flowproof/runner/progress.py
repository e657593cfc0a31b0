"""Progress on long work: one log line per intercepted call (``-v``) and a live status line.

The proxy side already says everything about a call in its event log (a
``turn``, ``divergence`` or ``error`` event, with the provider, the turn and the
milliseconds it took); a `FlowWatch` reads each flow's new events as the agent
driver polls the log, and

- logs one ``model_call`` line per call (info: shown with ``-v``), with the flow
  name bound when several flows run, and one ``mcp_call`` line per MCP tool call;
- keeps the counts a status line shows: the prompt being answered, the model
  calls so far, the time since the flow started.

`Progress` draws that status line on stdout, rewritten in place with ``\\r``,
only when `status_line_enabled` says so (a terminal, no ``--json``, not CI, not
``-q``); `Progress.close` wipes it before the report is printed. The rules are
in docs/runner.md, "Logging and progress".
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from flowproof.errors import FlowproofError
from flowproof.log import TERMINAL, get_logger
from flowproof.log_events import (
    DivergenceEvent,
    ErrorEvent,
    Event,
    McpCallEvent,
    ReplayedTurnEvent,
    RequestStartedEvent,
    TurnEvent,
    parse_event,
)
from flowproof.options import Mode
from flowproof.runner.agents import EventSource, answer_complete
from flowproof.turns import Turn
from flowproof.views import request_view, turn_path_fields
from flowproof.wire import with_path_fields

__all__ = [
    "CI_VALUES_OFF",
    "FlowWatch",
    "Progress",
    "call_fields",
    "fit",
    "status_line_enabled",
]

#: ``CI`` values that do not mean "running in CI" (any other non-empty value does).
CI_VALUES_OFF = frozenset({"", "0", "false", "no", "off"})

#: What a replayed, recorded or compared call's outcome is called in its log line.
_OUTCOMES: dict[str, str] = {Mode.REPLAY: "matched", Mode.RECORD: "recorded", Mode.COMPARE: "live"}
#: How often the status line is redrawn (its elapsed time ticks).
STATUS_INTERVAL = 0.2


def status_line_enabled(
    stdout: TextIO, *, json_report: bool, quiet: bool, environ: Mapping[str, str]
) -> bool:
    """True when a live status line may be drawn on ``stdout``.

    Only on a terminal (a pipe or file gets nothing), not when stdout carries the
    ``--json`` report, not with ``-q``, not in CI (``CI`` set to anything but
    ``false``/``0``: CI logs keep every ``\\r`` rewrite as a new line) and not on a
    ``TERM=dumb`` terminal, which cannot clear a line.
    """
    if json_report or quiet:
        return False
    if environ.get("CI", "").strip().lower() not in CI_VALUES_OFF:
        return False
    if environ.get("TERM", "") == "dumb":
        return False
    try:
        return stdout.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def _model(turn_event: TurnEvent) -> str | None:
    """The model the turn's request asked for; only the request is parsed (the response is
    the bigger half). None when it cannot be read: the line is still written, the report
    says what is wrong."""
    turn = turn_event.turn
    view = request_view(turn.provider, turn.request.body)
    return None if view is None else with_path_fields(view, turn_path_fields(turn)).model


def call_fields(event: Event, replayed: Sequence[Turn] = ()) -> tuple[str, dict[str, Any]] | None:
    """The log line of one event that ends an intercepted call: its name and fields, in order.

    ``model_call``: provider, model, outcome (``matched`` turn in replay,
    ``recorded``, ``live`` in compare, ``abandoned``, ``miss``, ``error``), turn
    (the cassette turn served or recorded; the closest one for a miss) and ms.
    ``mcp_call``: server, tool and whether flowproof answered it. None for the
    other events. ``replayed`` holds the views of the replayed cassette's turns, which a
    replayed turn's event names by position.
    """
    if isinstance(event, ReplayedTurnEvent):
        served = replayed[event.index] if event.index < len(replayed) else None
        return "model_call", {
            "provider": served.request.provider if served is not None else None,
            "model": served.request.model if served is not None else None,
            "outcome": "abandoned" if served is not None and served.abandoned else _OUTCOMES[Mode.REPLAY],
            "turn": served.index if served is not None else event.index,
            "ms": event.ms,
        }
    if isinstance(event, TurnEvent):
        turn = event.turn
        outcome = "abandoned" if turn.abandoned else _OUTCOMES.get(event.mode, event.mode)
        return "model_call", {
            "provider": turn.provider,
            "model": _model(event),
            "outcome": outcome,
            "turn": turn.index,
            "ms": event.ms,
        }
    if isinstance(event, DivergenceEvent):
        divergence = event.divergence
        return "model_call", {
            "provider": event.provider,
            "model": event.model,
            "outcome": "miss",
            "closest": divergence.get("closest_index"),
            "kind": divergence.get("kind"),
            "ms": event.ms,
        }
    if isinstance(event, ErrorEvent) and event.id is not None:
        return "model_call", {"outcome": "error", "text": event.text}
    if isinstance(event, McpCallEvent):
        return "mcp_call", {
            "server": event.server,
            "tool": event.name,
            "outcome": "answered" if event.answered else "forwarded",
        }
    return None


def _width(char: str) -> int:
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def fit(text: str, columns: int) -> str:
    """``text`` on one line of at most ``columns`` cells, cut with ``…`` (a wrapped status
    line could not be rewritten in place).

    >>> fit("Book me a flight\\nto Nairobi", 12)
    'Book me a f…'
    """
    text = " ".join(text.split())
    if sum(_width(c) for c in text) <= columns:
        return text
    out, used = [], 0
    for char in text:
        if used + _width(char) > columns - 1:
            break
        out.append(char)
        used += _width(char)
    return "".join(out) + "…"


class FlowWatch:
    """One flow's progress, fed with its event log as the agent driver reads it."""

    def __init__(
        self, name: str, prompts: Sequence[str], *, log: Any, verbose: bool, debug: bool,
        replayed: Sequence[Turn] = (),
    ) -> None:
        self.name = name
        self.prompts = tuple(prompts)
        #: The views of the replayed cassette's turns (a replayed turn's event names one).
        self.replayed = tuple(replayed)
        self.started = time.monotonic()
        self.calls = 0
        #: The prompt being answered (0-based); advances like the driver's (`answer_complete`).
        self.prompt = 0
        self.finished = False
        self._log = log
        self._verbose = verbose
        self._debug = debug
        self._seen = 0
        self._turns_before = 0
        self._lock = threading.Lock()

    def source(self, events: EventSource) -> EventSource:
        """``events`` that also feeds every read to this watch (the driver polls it)."""

        def read() -> list[dict[str, Any]]:
            found = events()
            self.feed(found)
            return found

        return read

    def feed(self, raw: Sequence[dict[str, Any]]) -> None:
        """Take the whole event log read so far (it only grows): log and count the new events."""
        with self._lock:
            new = raw[self._seen :]
            if not new:
                return
            self._seen = len(raw)
            for obj in new:
                self._take(obj)
            if self.prompt < len(self.prompts) - 1 and answer_complete(raw, self._turns_before, self.replayed):
                self.prompt += 1
                self._turns_before = sum(1 for e in raw if e.get("event") == "turn")

    def _take(self, obj: Mapping[str, Any]) -> None:
        name = obj.get("event")
        if name == RequestStartedEvent.NAME:
            self.calls += 1
        if not (self._verbose or self._debug):
            return  # nothing is logged: no event is parsed
        try:
            event = parse_event(obj)
        except FlowproofError:
            return  # an unreadable turn: the verdict reports it
        line = call_fields(event, self.replayed)
        if line is not None:
            self._log.info(line[0], **line[1])
        elif self._debug:
            self._log.debug("proxy_event", name=str(name), id=obj.get("id"))

    def finish(self) -> None:
        self.finished = True

    def status(self, now: float) -> str:
        """This flow's part of the status line (the prompt, the calls, the elapsed time)."""
        calls = f"{self.calls} model call{'s' if self.calls != 1 else ''}"
        elapsed = f"{now - self.started:.1f}s"
        if not self.prompts:
            return f"{self.name} · {calls} · {elapsed}"
        count = f" {self.prompt + 1}/{len(self.prompts)}" if len(self.prompts) > 1 else ""
        prompt = " ".join(self.prompts[self.prompt].split())
        return f"{self.name} · prompt{count} “{prompt}” · {calls} · {elapsed}"

    def short(self, now: float) -> str:
        """This flow's part of a multi-flow status line."""
        return f"{self.name} {self.calls} call{'s' if self.calls != 1 else ''} {now - self.started:.0f}s"


class Progress:
    """The per-call log lines of every flow of a run, and the status line (when ``status``).

    ``total`` is the number of flows; with more than one, each log line carries
    the flow's name and the status line shows every running flow compactly.
    """

    def __init__(
        self,
        *,
        total: int,
        verbosity: int = 0,
        status: bool = False,
        stream: TextIO | None = None,
        cancelled: Callable[[], bool] | None = None,
        columns: Callable[[], int] | None = None,
        interval: float = STATUS_INTERVAL,
    ) -> None:
        self.total = total
        self.verbosity = verbosity
        self.status = status
        self._stream = stream
        self._cancelled = cancelled
        self._columns = columns or (lambda: shutil.get_terminal_size().columns)
        self._interval = interval
        self._watches: list[FlowWatch] = []
        self._lock = threading.Lock()
        self._shown = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(
        self, spec_path: Path, name: str, prompts: Sequence[str], replayed: Sequence[Turn] = ()
    ) -> FlowWatch:
        """Start watching one flow (and the status line, with the first flow); ``replayed``:
        the views of the cassette a replay serves."""
        log = get_logger(flow=name) if self.total > 1 else get_logger()
        flow = FlowWatch(
            name or spec_path.name, prompts, log=log,
            verbose=self.verbosity >= 1, debug=self.verbosity >= 2, replayed=replayed,
        )
        with self._lock:
            self._watches.append(flow)
            if self.status and self._thread is None and not self._stop.is_set():
                TERMINAL.attach(self._clear, self._redraw)
                self._thread = threading.Thread(target=self._run, name="flowproof-status", daemon=True)
                self._thread.start()
        return flow

    def line(self, now: float | None = None) -> str:
        """The status line as it reads now (without ``\\r``), fitted to the terminal."""
        now = time.monotonic() if now is None else now
        with self._lock:
            watches = list(self._watches)
        running = [w for w in watches if not w.finished]
        if not running:
            # Between flows, or after the last one and before the summary: a line of counts
            # alone would say nothing the summary does not say next.
            text = ""
        elif self.total <= 1:
            text = running[0].status(now)
        else:
            done = len(watches) - len(running)
            text = f"[{done}/{self.total} done] " + " · ".join(w.short(now) for w in running)
        return fit(text, max(10, self._columns() - 1)) if text else ""

    # ------------------------------------------------------------------ drawing

    def _out(self) -> TextIO:
        return self._stream or sys.stdout

    def _clear(self) -> None:
        if self._shown:
            out = self._out()
            out.write("\r\x1b[K")
            out.flush()
            self._shown = False

    def _redraw(self) -> None:
        if self._stop.is_set() or (self._cancelled is not None and self._cancelled()):
            return
        text = self.line()
        out = self._out()
        out.write("\r" + text + "\x1b[K")
        out.flush()
        self._shown = bool(text)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            with TERMINAL.lock:
                if self._cancelled is not None and self._cancelled():
                    # The runner is about to report the interruption: leave the line clean.
                    self._clear()
                    continue
                self._redraw()

    def close(self) -> None:
        """Stop the status line and wipe it (before the report is printed)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        with TERMINAL.lock:
            self._clear()
            TERMINAL.detach()
