"""Command-line values checked before anything starts.

A bad ``--upstream``, ``--extra-host``, ``--proxy-port`` or ``--shard`` must end the
run at once with exit 2 and one line saying what to write instead, never reach
mitmproxy (whose own error is a traceback blamed on the agent). A URL is only ever
echoed back through `redact_url`: a query string (``?key=…``) or ``user:password@``
never reaches the terminal or a report.
"""

from __future__ import annotations

import errno
import os
import re
import socket
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from flowproof.errors import FlowproofError

__all__ = ["check_cassette_flag", "check_one_writer", "check_extra_host", "check_proxy_port", "check_upstream_url",
           "one_mode", "redact_url"]

# A DNS name or an IPv4 address, with an optional port: what mitmproxy can route on.
_HOST = re.compile(r"(?=.{1,253}(:\d+)?$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                   r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?(:\d{1,5})?")


def redact_url(url: str) -> str:
    """``url`` without its userinfo, query string and fragment (each shown as ``…``)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<an unparsable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "…@" + netloc.rsplit("@", 1)[1]
    text = f"{parts.scheme}://{netloc}{parts.path}" if parts.scheme else f"{netloc}{parts.path}"
    if parts.query:
        text += "?…"
    if parts.fragment:
        text += "#…"
    return text


def check_upstream_url(host: str, url: str) -> str:
    """A ``--upstream HOST=URL`` target, validated; FlowproofError (exit 2) otherwise."""
    shown = f"--upstream {host}={redact_url(url)}"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise FlowproofError(f"bad {shown}: {e} — write HOST=http(s)://host[:port][/path]") from None
    if parts.scheme not in ("http", "https"):
        raise FlowproofError(f"bad {shown}: the URL must start with http:// or https://")
    if not parts.hostname:
        raise FlowproofError(f"bad {shown}: the URL names no host — e.g. http://127.0.0.1:8000")
    if parts.username is not None or parts.password is not None:
        raise FlowproofError(
            f"bad {shown}: the URL carries a user name or password — remove it; the agent's "
            "own key is forwarded upstream"
        )
    if parts.query or parts.fragment or url.rstrip().endswith(("?", "#")):
        raise FlowproofError(
            f"bad {shown}: the URL has a query string or fragment, which flowproof does not "
            "forward — remove it (and keep keys out of URLs)"
        )
    if port == 0:
        raise FlowproofError(f"bad {shown}: port 0 cannot be dialled")
    if not _HOST.fullmatch(host.strip()):
        raise FlowproofError(f"bad {shown}: `{host}` is not a host name")
    return url


def check_extra_host(host: str) -> str:
    """A ``--extra-host`` value: a bare host name (optionally ``:port``), lower-cased."""
    if not _HOST.fullmatch(host):
        shown = redact_url(host) if "://" in host or "@" in host or "?" in host else host
        raise FlowproofError(
            f"bad extra host `{shown}` — give a bare host name, e.g. llm-gateway.internal"
        )
    return host.lower()


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
