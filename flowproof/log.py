"""Logging through structlog: one configuration for the runner, one logger shape for the addon.

The runner calls `configure` once per command: human-readable lines by default
(structlog's console renderer), one JSON object a line with ``--log-json``, on
stderr, so stdout keeps only the report. The level comes from ``-v``/``-q``
(`level_for`): warnings by default, ``-v`` adds the per-call lines (info),
``-vv`` every proxy event (debug), ``-q`` errors only.

The addon runs inside mitmdump, whose handlers sit on the standard library's
root logger: `addon_logger` hands each event, rendered as ``event key=value …``,
to a stdlib logger there and never touches the process-wide configuration.

Every event, on both sides, passes `flowproof.redact.redact_fields` before it is
rendered, so no credential reaches a log line (docs/runner.md, "Logging and
progress").

A live status line (`flowproof.runner.progress`) and log lines share one
terminal: `TERMINAL` lets the status line step aside while a log line is
written, so the two never end up on one line.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any, TextIO

from flowproof.printable import printable
from flowproof.redact import redact_fields, secret_values

__all__ = [
    "TERMINAL",
    "Terminal",
    "addon_logger",
    "configure",
    "delivered",
    "event_first",
    "flow_prefix",
    "get_logger",
    "level_for",
    "redactor",
    "render_key_values",
    "shown_values",
]

Processor = Callable[[Any, str, MutableMapping[str, Any]], Any]


def level_for(verbosity: int) -> int:
    """The stdlib level of a ``-v`` count (negative: ``-q``).

    >>> [logging.getLevelName(level_for(v)) for v in (-1, 0, 1, 2, 3)]
    ['ERROR', 'WARNING', 'INFO', 'DEBUG', 'DEBUG']
    """
    if verbosity < 0:
        return logging.ERROR
    return (logging.WARNING, logging.INFO)[verbosity] if verbosity < 2 else logging.DEBUG


def redactor(secrets: Iterable[str] = ()) -> Processor:
    """The structlog processor that strips credentials from every event (`redact_fields`)."""
    masked = tuple(secrets)

    def redact(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> Any:
        return redact_fields(event_dict, masked)

    return redact


def render_key_values(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> str:
    """``event key=value …`` in the fields' order: one line as mitmproxy's log shows it.

    >>> render_key_values(None, "info", {"event": "turn_replayed", "turn": 2, "ms": 1.5})
    'turn_replayed turn=2 ms=1.5'
    """
    fields = dict(event_dict)
    event = str(fields.pop("event", ""))
    # Values come from recordings and agents (a model name, an error's text): shown, not obeyed.
    return printable(" ".join([event, *(f"{key}={value}" for key, value in fields.items())]))


def shown_values(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> Any:
    r"""Console lines show a value's terminal escapes instead of obeying them (`printable`):
    values come from recordings and agents (a model name, an error's text).

    >>> shown_values(None, "info", {"event": "model_call", "model": "gpt\x1b]0;x\x07"})
    {'event': 'model_call', 'model': 'gpt\\x1b]0;x\\x07'}
    """
    for key, value in event_dict.items():
        if isinstance(value, str):
            event_dict[key] = printable(value)
    return event_dict


def event_first(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> Any:
    """A JSON line starts with what it is: ``event``, ``level``, ``timestamp``, then the fields.

    >>> list(event_first(None, "info", {"turn": 0, "event": "model_call", "level": "info"}))
    ['event', 'level', 'turn']
    """
    head = {key: event_dict[key] for key in ("event", "level", "timestamp") if key in event_dict}
    return {**head, **{k: v for k, v in event_dict.items() if k not in head}}


def flow_prefix(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> Any:
    """Console lines lead with the flow's name (``-j N`` interleaves flows); JSON keeps a field.

    >>> flow_prefix(None, "info", {"event": "model_call", "flow": "booking", "turn": 0})
    {'event': '[booking] model_call', 'turn': 0}
    """
    flow = event_dict.pop("flow", None)
    if flow is not None:
        event_dict["event"] = f"[{flow}] {event_dict.get('event', '')}"
    return event_dict


class Terminal:
    """The lock log lines and the status line share, and the status line's hooks.

    A status line registers ``clear`` (wipe the line) and ``redraw`` (draw it
    again); every log line is written between the two, under the lock.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._clear: Callable[[], None] | None = None
        self._redraw: Callable[[], None] | None = None

    def attach(self, clear: Callable[[], None], redraw: Callable[[], None]) -> None:
        with self.lock:
            self._clear, self._redraw = clear, redraw

    def detach(self) -> None:
        with self.lock:
            self._clear = self._redraw = None

    def write_line(self, stream: TextIO, line: str) -> None:
        """Write ``line`` to ``stream`` with the status line out of its way."""
        with self.lock:
            if self._clear is not None:
                self._clear()
            stream.write(line + "\n")
            stream.flush()
            if self._redraw is not None:
                self._redraw()


#: The process's one terminal.
TERMINAL = Terminal()


class _LineLogger:
    """The structlog output: each rendered line through `TERMINAL`, to a stream read at write
    time (a test or click may swap ``sys.stderr`` after `configure`)."""

    def __init__(self, stream: TextIO | None) -> None:
        self._stream = stream

    def msg(self, message: str) -> None:
        TERMINAL.write_line(self._stream or sys.stderr, message)

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg


#: `configure`'s settings (level, JSON lines, stream, secrets) until a runner logger sends
#: its first event: structlog is about 30 ms of imports (python -X importtime) that a run
#: with nothing to log never needs.
_pending: tuple[int, bool, TextIO | None, frozenset[str]] | None = None
#: The level `configure` set: a runner logger drops an event below it before structlog.
_threshold = logging.NOTSET
_applied = False
_APPLY_LOCK = threading.Lock()


def configure(
    verbosity: int = 0,
    *,
    json_lines: bool = False,
    stream: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Configure structlog for this process (the runner): level from ``verbosity``
    (`level_for`), JSON lines or console lines, to ``stream`` (default: ``sys.stderr``).

    The values of the credential variables in ``environ`` (default ``os.environ``)
    are masked wherever they appear. Calling it again replaces the configuration.
    structlog is configured (and imported) with the first event a `get_logger` logger
    sends at that level or above.
    """
    global _pending, _threshold
    _threshold = level_for(verbosity)
    _pending = (_threshold, json_lines, stream, secret_values(os.environ if environ is None else environ))
    if _applied:  # structlog is loaded already: nothing to save by waiting
        _apply()


def reset() -> None:
    """Forget what `configure` set (the tests reset structlog's own defaults beside it)."""
    global _pending, _threshold
    _pending, _threshold = None, logging.NOTSET


def _apply() -> None:
    # Under the lock: a flow thread's first event must not reach structlog's default
    # configuration (which prints to stdout) while another thread is configuring it.
    with _APPLY_LOCK:
        _apply_pending()


def _apply_pending() -> None:
    global _pending, _applied
    if _pending is None:
        return
    level, json_lines, stream, secrets = _pending
    import structlog  # here, not at the top: see `_pending` (and the addon's `_AddonLogger`)

    processors: list[Processor] = [
        structlog.processors.add_log_level,
        redactor(secrets),
    ]
    if json_lines:
        processors += [
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            event_first,
            structlog.processors.JSONRenderer(sort_keys=False),
        ]
    else:
        out = stream or sys.stderr
        processors += [
            flow_prefix,
            shown_values,
            structlog.processors.TimeStamper(fmt="%H:%M:%S", utc=False),
            structlog.dev.ConsoleRenderer(
                colors=_is_terminal(out), sort_keys=False, pad_event_to=0, pad_level=False
            ),
        ]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=lambda *_args: _LineLogger(stream),
        cache_logger_on_first_use=False,
    )
    _pending, _applied = None, True


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty() and os.environ.get("NO_COLOR", "") == ""
    except (AttributeError, ValueError):
        return False


def get_logger(**initial: Any) -> Any:
    """A runner logger (after `configure`), with ``initial`` fields bound to every event."""
    return _RunnerLogger(initial)


class _Levels:
    """A logger's level methods, each handing its event to ``_emit`` with its stdlib level:
    both loggers decide whether an event is built before structlog sees it."""

    __slots__ = ()

    def _emit(self, method: str, level: int, event: str | None, args: tuple[Any, ...],
              fields: dict[str, Any]) -> Any:
        raise NotImplementedError

    def debug(self, event: str | None = None, *args: Any, **fields: Any) -> Any:
        return self._emit("debug", logging.DEBUG, event, args, fields)

    def info(self, event: str | None = None, *args: Any, **fields: Any) -> Any:
        return self._emit("info", logging.INFO, event, args, fields)

    def warning(self, event: str | None = None, *args: Any, **fields: Any) -> Any:
        return self._emit("warning", logging.WARNING, event, args, fields)

    def error(self, event: str | None = None, *args: Any, **fields: Any) -> Any:
        return self._emit("error", logging.ERROR, event, args, fields)

    def exception(self, event: str | None = None, *args: Any, **fields: Any) -> Any:
        return self._emit("exception", logging.ERROR, event, args, fields)

    def critical(self, event: str | None = None, *args: Any, **fields: Any) -> Any:
        return self._emit("critical", logging.CRITICAL, event, args, fields)


class _RunnerLogger(_Levels):
    """structlog's logger once an event passes `configure`'s level (`_pending`)."""

    __slots__ = ("_initial",)

    def __init__(self, initial: dict[str, Any]) -> None:
        self._initial = initial

    def _emit(self, method: str, level: int, event: str | None, args: tuple[Any, ...],
              fields: dict[str, Any]) -> Any:
        if level < _threshold:
            return None
        if _pending is not None:
            _apply()
        import structlog

        return getattr(structlog.get_logger(**self._initial), method)(event, *args, **fields)


def delivered(logger: logging.Logger, level: int) -> bool:
    """Whether a record of ``level`` on ``logger`` would reach a handler that takes it: the
    levels of the logger and of every handler it propagates to, as `logging.Logger.handle`
    applies them (a logger with no handler on its way falls back to `logging.lastResort`).

    mitmproxy's handler of its deprecated ``add_log`` hook takes every level and hands
    each record to every addon implementing ``add_log``: it counts only when one does."""
    if not logger.isEnabledFor(level):
        return False
    found = False
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            found = True
            if level >= handler.level and _hands_on(handler):
                return True
        current = current.parent if current.propagate else None
    return not found and logging.lastResort is not None and level >= logging.lastResort.level


def _hands_on(handler: logging.Handler) -> bool:
    legacy = sys.modules.get("mitmproxy.log")  # not imported: no mitmproxy handler exists
    if legacy is None or not isinstance(handler, legacy.LegacyLogEvents):
        return True
    from mitmproxy.addonmanager import traverse

    addons = traverse(handler.master.addons.chain)  # type: ignore[no-untyped-call]
    return any(hasattr(addon, "add_log") for addon in addons)


class _AddonLogger(_Levels):
    """The addon's logger: an event is built only when a handler would take it (`delivered`).
    Under ``mitmdump -q`` no handler takes a per-call info line, whose processors (the
    credential masking, the rendering) and record would otherwise run for every model call.

    structlog itself is imported with the first event that is delivered: it is about 13 ms
    of mitmdump's start (python -X importtime), and a quiet replay delivers none."""

    __slots__ = ("_bound", "_logger", "_secrets")

    def __init__(self, logger: logging.Logger, secrets: Iterable[str]) -> None:
        self._logger = logger
        self._secrets = tuple(secrets)
        self._bound: Any = None

    def _emit(self, method: str, level: int, event: str | None, args: tuple[Any, ...],
              fields: dict[str, Any]) -> Any:
        if not delivered(self._logger, level):
            return None
        bound = self._bound
        if bound is None:
            import structlog

            bound = self._bound = structlog.wrap_logger(
                self._logger,
                wrapper_class=structlog.stdlib.BoundLogger,
                processors=[redactor(self._secrets), render_key_values],
                # The processors are this logger's own, so the bound logger never changes:
                # bind it once instead of at every event.
                cache_logger_on_first_use=True,
            )
        return getattr(bound, method)(event, *args, **fields)


def addon_logger(name: str = "flowproof.addon", environ: Mapping[str, str] | None = None) -> Any:
    """The addon's logger: structlog over the stdlib logger ``name``, so mitmdump's own log
    handlers print the events (and its ``termlog_verbosity`` filters them), with the
    credentials of ``environ`` (default ``os.environ``) masked. An event no handler would
    take is not built (`delivered`)."""
    return _AddonLogger(logging.getLogger(name), secret_values(os.environ if environ is None else environ))
