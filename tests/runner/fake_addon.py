"""A stand-in for the flowproof addon: the real options and control socket, scripted sessions.

Used by the runner's unit tests so they exercise the runner alone. It is the real root
addon (`flowproof.addon.Flowproof`: the option table, the control socket, real listeners
per session) with one seam changed: a session is scripted instead of built from its
options, so it does nothing with traffic. Its event log gets ``ready`` (which also
carries the session's options, as `flowproof.options.to_json` sent them), then the
scripted events, and at close ``done``. With ``$FAKE_FLOWPROOF_SCRIPT`` (read from the
proxy's environment) naming a JSON file ``{"events": [...], "done": {...}, "cassette":
"<text>"}`` it writes those events after ``ready``, merges ``done`` into the done event,
and writes ``cassette`` to the session's cassette at close (as record mode would).
``"skip_done": true`` leaves the ``done`` event out (a proxy that died mid-shutdown).
"""

from __future__ import annotations

import json
import os
from typing import Any

from flowproof.addon import Flowproof
from flowproof.addon.eventlog import EventLog
from flowproof.addon.options import AddonConfig
from flowproof.addon.shared import Shared
from flowproof.log_events import Event, ReadyEvent
from flowproof.options import ProxyOptions, to_json


def _script() -> dict[str, Any]:
    path = os.environ.get("FAKE_FLOWPROOF_SCRIPT")
    if not path:
        return {}
    with open(path, encoding="utf-8") as fh:
        return dict(json.load(fh))


class _ScriptedLog(EventLog):
    """The session's log: ``ready`` gets the options and is followed by the scripted events."""

    __slots__ = ("options",)

    def __init__(self, options: ProxyOptions) -> None:
        super().__init__(options.report)
        self.options = options

    def emit(self, obj: dict[str, Any]) -> None:
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(obj) + "\n")

    def write(self, event: Event, *, flush: bool = True, request_json: str | None = None) -> None:
        if not isinstance(event, ReadyEvent):
            self.emit(event.to_json())
            return
        self.emit({**event.to_json(), "options": to_json(self.options)})
        for scripted in _script().get("events", []):
            self.emit(scripted)


class _ScriptedSession:
    """A session's state (`flowproof.addon.warm`'s protocol): a log and a ``done`` hook."""

    def __init__(self, options: ProxyOptions) -> None:
        self.options = options
        self.shared = Shared(AddonConfig(options))
        self.log = _ScriptedLog(options)
        self.shared.events = self.log

    @property
    def addons(self) -> list[object]:
        return [self]

    def done(self) -> None:
        script = _script()
        if "cassette" in script and self.options.cassette is not None:
            self.options.cassette.write_text(script["cassette"], encoding="utf-8")
        if script.get("skip_done"):
            return
        self.log.emit({"event": "done", "unconsumed": [], "text": "", **script.get("done", {})})


addons = [Flowproof(build=_ScriptedSession)]
