"""Redaction: what of a request or response may reach a cassette or a log.

Secrets never reach a cassette: headers pass an allow-list (`filter_headers`)
and key-bearing query parameters are dropped from URLs (`redact_url`) before
the recorder builds a `RecordedRequest`. An allow-list, never a deny-list: a
header nobody thought of cannot leak (docs/cassette.md).

Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import cast
from urllib.parse import unquote_plus, urlsplit, urlunsplit

from flowproof.wire.providers import allowed_headers

__all__ = ["ALLOWED_HEADERS", "filter_headers", "redact_url"]

#: Header names (lowercase) a cassette may keep, from the provider table in `flowproof.wire`.
ALLOWED_HEADERS: frozenset[str] = allowed_headers()

# Query parameter names that carry credentials (Gemini's ``?key=``, signed URLs, OAuth).
_SECRET_PARAMS: frozenset[str] = frozenset(
    {
        "key",
        "api-key",
        "api_key",
        "apikey",
        "token",
        "access_token",
        "refresh_token",
        "id_token",
        "sig",
        "signature",
        "code",
        "client_secret",
        "password",
        "secret",
    }
)
_SECRET_PARAM_SUFFIXES: tuple[str, ...] = ("-key", "_key", "-token", "_token", "_secret", "-secret")


def filter_headers(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str]:
    """Keep only allow-listed headers, with lowercased names and sorted for stable diffs.

    Repeated headers are joined with ``", "`` as HTTP allows. Everything not in
    `ALLOWED_HEADERS` is dropped, credentials and cookies included.

    >>> filter_headers({"Content-Type": "application/json", "Authorization": "Bearer sk-x"})
    {'content-type': 'application/json'}
    """
    pairs: Iterable[tuple[str, str]]
    if isinstance(headers, Mapping):
        pairs = cast(Mapping[str, str], headers).items()
    else:
        pairs = headers
    kept: dict[str, str] = {}
    for name, value in pairs:
        lower = str(name).lower()
        if lower not in ALLOWED_HEADERS:
            continue
        kept[lower] = f"{kept[lower]}, {value}" if lower in kept else str(value)
    return dict(sorted(kept.items()))


def _is_secret_param(name: str) -> bool:
    lower = unquote_plus(name).strip().lower()
    return lower in _SECRET_PARAMS or lower.endswith(_SECRET_PARAM_SUFFIXES)


def redact_url(url: str) -> str:
    """``url`` without credentials: key-bearing query parameters and any ``user:pass@`` are dropped.

    The remaining parameters keep their order and their exact encoding.

    >>> redact_url("https://g.example/v1/m:generate?alt=sse&key=SECRET")
    'https://g.example/v1/m:generate?alt=sse'
    """
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    kept = [
        piece
        for piece in parts.query.split("&")
        if piece and not _is_secret_param(piece.partition("=")[0])
    ]
    return urlunsplit((parts.scheme, netloc, parts.path, "&".join(kept), parts.fragment))
