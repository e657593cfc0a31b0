"""The default addons a proxy the runner started does without.

mitmproxy hands every event (a request's headers, its body, a response, each
WebSocket message…) to every addon of its chain in turn, whether the addon has a
hook for it or not: a context manager, a coroutine and a walk of the addon's
children per addon per event. ``mitmdump`` starts with 36 addons; dropping 21 of the
24 below took the proxy's CPU per replayed JSON call from 2.61 to 1.88 ms, and
the other three 2.23 to 2.07 ms on a busier run (benchmarks/replay_peers.py,
docs/performance.md).

A proxy `flowproof.runner` started (``flowproof_control`` is set, and the runner
alone sets it) runs with ``-q`` and the options the runner gives it, so the addons
below can do nothing there: each serves a feature only an option the runner never
sets turns on (saving flows, a HAR file, header and body rewrites, map-local and
map-remote, server playback, sticky cookies and auth, proxy auth, a
block list, the browser launcher), a console command (``cut``, ``export``,
``comment``, the command history), prints flows (the dumper, silent under
``-q``), acts on DNS flows only (the resolver and the HTTPS-record stripping:
the runner's listeners are ``regular`` and ``reverse``, which carry none; a DNS,
``local`` or WireGuard listener would need both back), or decides at start-up
alone (keep-serving, for a replayed flow file). `drop_unused` removes them when
the proxy starts running. Everything that shapes the traffic an agent sees
stays: TLS, the proxy server, the next layer, the Alt-Svc rewrite, h2c, the
block of non-local clients, and the onboarding app. ``mitmdump -s`` by hand (no
control socket) keeps every addon.

Of the addons that stay, most have no hook for most events, yet mitmproxy still
enters each of them for each event; `skip_idle` makes the same proxy pass over
an addon that has neither the event's hook nor children. Two more costs per call
go the same way in that proxy alone: the handler of mitmproxy's deprecated
``add_log`` hook when no addon implements it (`drop_legacy_log`), and the
debug-only type check of every HTTP message mitmproxy builds (`skip_message_checks`).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

from mitmproxy import exceptions, hooks, http
from mitmproxy.addonmanager import safecall, traverse
from mitmproxy.log import LegacyLogEvents

__all__ = ["UNUSED", "drop_legacy_log", "drop_unused", "skip_idle", "skip_message_checks"]

#: mitmproxy's addons (module and class) that a proxy of the runner never uses.
UNUSED = frozenset({
    "mitmproxy.addons.anticache.AntiCache",
    "mitmproxy.addons.anticomp.AntiComp",
    "mitmproxy.addons.blocklist.BlockList",
    "mitmproxy.addons.browser.Browser",
    "mitmproxy.addons.command_history.CommandHistory",
    "mitmproxy.addons.comment.Comment",
    "mitmproxy.addons.cut.Cut",
    "mitmproxy.addons.dns_resolver.DnsResolver",
    "mitmproxy.addons.dumper.Dumper",
    "mitmproxy.addons.export.Export",
    "mitmproxy.addons.keepserving.KeepServing",
    "mitmproxy.addons.maplocal.MapLocal",
    "mitmproxy.addons.mapremote.MapRemote",
    "mitmproxy.addons.modifybody.ModifyBody",
    "mitmproxy.addons.modifyheaders.ModifyHeaders",
    "mitmproxy.addons.proxyauth.ProxyAuth",
    "mitmproxy.addons.readfile.ReadFileStdin",
    "mitmproxy.addons.save.Save",
    "mitmproxy.addons.savehar.SaveHar",
    "mitmproxy.addons.serverplayback.ServerPlayback",
    "mitmproxy.addons.stickyauth.StickyAuth",
    "mitmproxy.addons.stickycookie.StickyCookie",
    "mitmproxy.addons.strip_dns_https_records.StripDnsHttpsRecords",
    "mitmproxy.addons.upstream_auth.UpstreamAuth",
})


def drop_unused(addons: Any) -> list[str]:
    """Remove the `UNUSED` addons from mitmproxy's addon manager ``addons``; return the class
    names removed, in chain order.

    Removing runs an addon's ``done`` hook, which mitmproxy can only call when it is not a
    coroutine: an addon whose ``done`` is one stays (mitmproxy 12: client playback, which is
    not in the list anyway)."""
    dropped: list[str] = []
    for addon in list(addons.chain):
        kind = type(addon)
        if f"{kind.__module__}.{kind.__qualname__}" not in UNUSED:
            continue
        if inspect.iscoroutinefunction(getattr(addon, "done", None)):
            continue
        addons.remove(addon)
        dropped.append(kind.__name__)
    return dropped


def drop_legacy_log(master: Any) -> bool:
    """Uninstall ``master``'s handler of mitmproxy's deprecated ``add_log`` hook when no addon
    implements the hook; True if it was.

    That handler takes every log record at every level: it formats the record, then wakes
    the event loop through its self-pipe to hand it to every addon's ``add_log``. mitmproxy
    logs each client's connect and disconnect at info, so a proxy serving a connection per
    streamed call paid that twice a call for no reader: no addon of a runner's proxy
    implements ``add_log``, and ``-q`` shows no info line. Records still reach every other
    handler (the terminal log's, at the level ``-q`` gives it)."""
    if any(hasattr(addon, "add_log") for addon in traverse(master.addons.chain)):
        return False
    dropped = False
    for handler in list(logging.getLogger().handlers):
        if isinstance(handler, LegacyLogEvents) and handler.master is master:
            handler.uninstall()
            dropped = True
    return dropped


def skip_message_checks() -> Callable[[], None]:
    """Construct mitmproxy's HTTP messages without the runtime type check of every field; return
    what puts the check back.

    mitmproxy defines that check (``MessageData.__post_init__``) only ``if __debug__``: it is
    a development aid that ``python -O`` leaves out, and it costs more than the parse it
    follows (a request head read in 46 µs, 10 µs of them parsing; a response made in 34 µs,
    10 of them making it). A replayed call builds two or four messages (its request, its
    answer, and with a new tunnel the ``CONNECT`` and its answer), whose fields come from
    mitmproxy's own parser and constructors. In a runner's proxy they are built as under
    ``-O``; every other check and assertion stays."""
    checked = http.MessageData.__dict__.get("__post_init__")
    if checked is None or checked is _unchecked:  # python -O, or already left out
        return lambda: None
    http.MessageData.__post_init__ = _unchecked  # type: ignore[method-assign]

    def restore() -> None:
        http.MessageData.__post_init__ = checked  # type: ignore[method-assign]

    return restore


def _unchecked(self: object) -> None:
    """``MessageData.__post_init__`` as ``python -O`` defines it: not at all."""


def skip_idle(addons: Any) -> None:
    """Make the addon manager ``addons`` pass over, in each event it triggers, an addon with
    neither that event's hook nor children, instead of entering it.

    mitmproxy's ``trigger_event`` enters every addon of the chain for every event (and a
    flow's event twice: the event, then ``update``): a context manager, a coroutine, and a
    generator walking the addon and its children for a hook, per addon. For an addon with
    neither, that finds nothing and calls nothing. Every other addon is entered exactly as
    mitmproxy does, in chain order, with its error handling and ``AddonHalt``; an attribute
    named like the hook that is not None goes that way too (mitmproxy decides what it is)."""

    async def trigger_event(event: hooks.Hook) -> None:
        name = event.name
        for addon in addons.chain:
            if getattr(addon, name, None) is None and not hasattr(addon, "addons"):
                continue
            try:
                with safecall():
                    await addons.invoke_addon(addon, event)
            except exceptions.AddonHalt:
                return

    addons.trigger_event = trigger_event
