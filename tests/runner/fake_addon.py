"""A stand-in for the flowproof addon: same options, scripted events.

Used by the runner's unit tests so they exercise the runner alone. It writes
``ready`` (with its listen addresses) from the ``running`` hook and ``done`` at
shutdown. With ``$FAKE_FLOWPROOF_SCRIPT`` naming a JSON file
``{"events": [...], "done": {...}, "cassette": "<text>"}`` it also writes those
events after ``ready``, merges ``done`` into the done event, and writes
``cassette`` to ``flowproof_cassette`` at shutdown (as record mode would).
``"skip_done": true`` leaves the ``done`` event out (a proxy that died mid-shutdown).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from mitmproxy import ctx


def _script() -> dict:
    path = os.environ.get("FAKE_FLOWPROOF_SCRIPT")
    if not path:
        return {}
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


class FakeFlowproof:
    def load(self, loader) -> None:
        loader.add_option("flowproof_mode", str, "replay", "mode")
        loader.add_option("flowproof_cassette", str, "", "cassette")
        loader.add_option("flowproof_spec", str, "", "spec")
        loader.add_option("flowproof_upstream", Sequence[str], [], "upstream")
        loader.add_option("flowproof_extra_hosts", Sequence[str], [], "extra hosts")
        loader.add_option("flowproof_route", str, "proxy", "route")
        loader.add_option("flowproof_report", str, "", "report")
        loader.add_option("flowproof_compare_handler", str, "", "handler")
        loader.add_option("flowproof_transport", str, "auto", "transport")

    def _emit(self, event: dict) -> None:
        if not ctx.options.flowproof_report:
            return
        with open(ctx.options.flowproof_report, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(event) + "\n")

    def running(self) -> None:
        server = ctx.master.addons.get("proxyserver")
        listen = []
        for instance in server.servers:
            for host, port, *_ in instance.listen_addrs:
                listen.append({"mode": instance.mode.full_spec, "host": host, "port": port})
        self._emit({"event": "ready", "listen": listen, "options": {
            "mode": ctx.options.flowproof_mode,
            "cassette": ctx.options.flowproof_cassette,
            "spec": ctx.options.flowproof_spec,
            "upstream": list(ctx.options.flowproof_upstream),
            "route": ctx.options.flowproof_route,
            "compare_handler": ctx.options.flowproof_compare_handler,
        }})
        for event in _script().get("events", []):
            self._emit(event)

    def done(self) -> None:
        script = _script()
        if "cassette" in script and ctx.options.flowproof_cassette:
            with open(ctx.options.flowproof_cassette, "w", encoding="utf-8") as fh:
                fh.write(script["cassette"])
        if script.get("skip_done"):
            return
        self._emit({"event": "done", "unconsumed": [], "text": "", **script.get("done", {})})


addons = [FakeFlowproof()]
