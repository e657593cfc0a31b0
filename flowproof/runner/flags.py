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

__all__ = ["SPEC_ADVICE", "WriterClaims", "check_cassette_flag", "check_one_writer", "check_proxy_port", "one_mode"]


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


#: What to do about two specs recording one cassette (flowproof-run, pytest flow items).
SPEC_ADVICE = "give each spec its own `cassette:`, or record them in separate runs"


class WriterClaims:
    """Who records each cassette in one run: the first writer of a cassette claims it, and a
    second one is refused, or one recording would silently replace the other.

    A writer is named as the run names it (a spec path, a pytest node id); the same writer
    claiming again is no second writer (a test that opens a second session on its cassette,
    a rerun of a failed test). Paths are compared absolute, as the cassette lock takes them.
    """

    def __init__(self) -> None:
        self._first: dict[Path, str] = {}

    def claim(self, writer: str, cassette: Path, *, advice: str = SPEC_ADVICE, shown: Path | None = None) -> None:
        """Claim ``cassette`` for ``writer``; raises `FlowproofError` (exit 2) naming both
        writers when another one claimed it first (the cassette as ``shown``, else as given)."""
        first = self._first.setdefault(Path(os.path.abspath(cassette)), writer)
        if first != writer:
            raise FlowproofError(
                f"{first} and {writer} both record {shown or cassette}, so one recording would be lost — {advice}"
            )

    def first(self, cassette: Path) -> str | None:
        """The writer that claimed ``cassette``, or None."""
        return self._first.get(Path(os.path.abspath(cassette)))


def check_one_writer(cassettes: Sequence[tuple[Path, Path]]) -> None:
    """(spec, cassette) pairs of one ``--record`` run: no two specs may record one cassette,
    or one recording would silently replace the other."""
    claims = WriterClaims()
    for spec, cassette in cassettes:
        claims.claim(str(spec), cassette)


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
