"""Command-line values checked before anything starts.

A bad ``--proxy-port``, ``--cassette`` or ``--record`` set must end the run at once
with exit 2 and one line saying what to write instead, never reach mitmproxy (whose
own error is a traceback blamed on the agent). ``--upstream`` and ``--extra-host``
(and their environment variables) are checked by `flowproof.options.host_settings`,
with the parsers the addon itself uses.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Sequence
from pathlib import Path

from flowproof.errors import FlowproofError

__all__ = ["check_cassette_flag", "check_one_writer", "check_proxy_port", "one_mode"]


def check_proxy_port(port: int) -> None:
    """A fixed ``--proxy-port`` must be free on 127.0.0.1 now (0 means any free port)."""
    if port == 0:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the proxy binds: a port whose last connections are in TIME_WAIT (the previous
        # run on the same port) is free to listen on again.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as e:
            reason = ("it is already in use" if e.errno == errno.EADDRINUSE
                      else f"it cannot be opened ({e.strerror or e})")
            raise FlowproofError(
                f"bad --proxy-port {port}: {reason} — pick a free port, or omit --proxy-port"
            ) from None


def check_cassette_flag(path: str) -> None:
    """``--cassette`` never names a staging or rejected recording: those are not cassettes."""
    for suffix, what in ((".recording.json", "an unfinished recording"),
                         (".rejected.json", "a rejected recording")):
        if path.endswith(suffix):
            raise FlowproofError(
                f"bad --cassette {path}: a `*{suffix}` file is {what}, not a cassette — "
                "name the `*.cassette.json` file"
            )


def check_one_writer(cassettes: Sequence[tuple[Path, Path]]) -> None:
    """(spec, cassette) pairs of one ``--record`` run: no two specs may record one cassette,
    or one recording would silently replace the other."""
    seen: dict[Path, Path] = {}
    for spec, cassette in cassettes:
        key = Path(os.path.abspath(cassette))
        if key in seen:
            raise FlowproofError(
                f"{seen[key]} and {spec} both record {cassette}, so one recording would be "
                "lost — give each spec its own `cassette:`, or record them in separate runs"
            )
        seen[key] = spec


def one_mode(given: Sequence[str], default: str = "--replay") -> str:
    """The one mode flag of a run (``--record`` …), or ``default`` when none was given.

    Two mode flags are a usage error, never "the last one wins": a typo such as
    ``--compare --record`` in a scheduled job would otherwise rewrite a committed cassette.
    """
    flags = list(dict.fromkeys(given))
    if len(flags) > 1:
        raise FlowproofError(
            f"{', '.join(flags[:-1])} and {flags[-1]} ask for {len(flags)} different modes — give one of them "
            "(replay, the default, needs no flag)"
        )
    return flags[0] if flags else default
