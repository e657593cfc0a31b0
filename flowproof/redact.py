"""Redaction: what of a request or response may reach a cassette or a log.

Secrets never reach a cassette: headers pass an allow-list (`filter_headers`)
and key-bearing query parameters are dropped from URLs (`redact_url`) before
the recorder builds a `RecordedRequest`. An allow-list, never a deny-list: a
header nobody thought of cannot leak (docs/cassette.md).

Logs get the same care (`redact_fields`, applied to every log event by
`flowproof.log`): a ``headers`` mapping passes the same allow-list, a field
named like a credential is masked, URLs in text lose their credentials, and the
values of the environment's credential variables are masked wherever they
appear.

Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, cast
from urllib.parse import unquote_plus, urlsplit, urlunsplit

from flowproof.wire.providers import allowed_headers

__all__ = [
    "ALLOWED_HEADERS",
    "REDACTED",
    "REQUEST_HEADERS",
    "filter_headers",
    "is_secret_name",
    "masked_url",
    "redact_data",
    "redact_fields",
    "redact_text",
    "redact_url",
    "secret_values",
]

#: What a masked secret reads as in a log line.
REDACTED = "[redacted]"

#: Header names (lowercase) a cassette may keep, from the provider table in `flowproof.wire`.
ALLOWED_HEADERS: frozenset[str] = allowed_headers()

#: Kept on requests only: how the agent sent the body (the cassette holds it decoded). A
#: response is stored decoded and replayed as stored, so its encoding must not travel with it.
REQUEST_HEADERS: frozenset[str] = frozenset({"content-encoding"})

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


def filter_headers(
    headers: Mapping[str, str] | Iterable[tuple[str, str]], *, request: bool = False
) -> dict[str, str]:
    """Keep only allow-listed headers, with lowercased names and sorted for stable diffs.

    Repeated headers are joined with ``", "`` as HTTP allows. Everything not in
    `ALLOWED_HEADERS` (with ``request``: or in `REQUEST_HEADERS`) is dropped,
    credentials and cookies included.

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
        if lower not in ALLOWED_HEADERS and not (request and lower in REQUEST_HEADERS):
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


def masked_url(url: str) -> str:
    """``url`` for a message about a setting: its userinfo, query string and fragment each
    shown as ``…`` (a value a user typed may hold a key anywhere in them).

    >>> masked_url("https://u:pw@h/p?key=sk-1#frag")
    'https://…@h/p?…#…'
    """
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


# Names of headers, log fields and environment variables that carry a credential, beyond
# the query-parameter names above (compared with "_" read as "-").
_SECRET_NAMES: frozenset[str] = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "passwd", "credentials"}
)
_SECRET_NAME_SUFFIXES: tuple[str, ...] = ("-apikey", "password", "-pat", "-credentials")
#: A value shorter than this is never masked by value: "1" or "true" would blank ordinary text.
_MIN_SECRET_VALUE = 8
# The credential after an HTTP auth scheme, wherever a header value was pasted into text.
_AUTH_SCHEME = re.compile(r"(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=:-]{6,}")
_URL_IN_TEXT = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s'\"<>]+")


def is_secret_name(name: str) -> bool:
    """True when a header, log field or environment variable of this name holds a credential.

    >>> [is_secret_name(n) for n in ("Authorization", "OPENAI_API_KEY", "x-goog-api-key", "model")]
    [True, True, True, False]
    """
    lower = name.strip().lower().replace("_", "-")
    return (
        lower in _SECRET_NAMES
        or lower.endswith(_SECRET_NAME_SUFFIXES)
        or _is_secret_param(lower)
    )


def secret_values(environ: Mapping[str, str]) -> frozenset[str]:
    """The values of ``environ``'s credential variables (`is_secret_name`), to mask in text.

    >>> sorted(secret_values({"OPENAI_API_KEY": "sk-live-123456", "HOME": "/home/me", "GH_TOKEN": "x"}))
    ['sk-live-123456']
    """
    return frozenset(
        value
        for name, value in environ.items()
        if len(value) >= _MIN_SECRET_VALUE and is_secret_name(name)
    )


def _safe_url(url: str) -> str:
    try:
        return redact_url(url)
    except ValueError:  # not parseable as a URL (a stray "[" in the host): nothing of it is shown
        return REDACTED


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every value of ``secrets`` masked, the credential after ``Bearer``/``Basic``
    masked, and credentials dropped from the URLs in it (`redact_url`).

    >>> redact_text("GET https://g.example/v1?key=abc failed: Bearer sk-123456789", ["abc"])
    'GET https://g.example/v1 failed: Bearer [redacted]'
    """
    # Longest first, so a secret that contains another is masked whole.
    for secret in sorted(secrets, key=len, reverse=True):
        if secret and secret in text:
            text = text.replace(secret, REDACTED)
    text = _AUTH_SCHEME.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    return _URL_IN_TEXT.sub(lambda m: _safe_url(m.group(0)), text)


def redact_data(value: Any, secrets: Iterable[str] = ()) -> Any:
    """``value`` (a text, or JSON-like data at any depth) with every string through
    `redact_text`: the one masking every report applies (text, pytest, JSON, JUnit, HTML,
    markdown), with the same ``secrets`` the log lines mask (`secret_values`).

    >>> redact_data({"stdout": ["key sk-live-123456"], "turns": 2}, ["sk-live-123456"])
    {'stdout': ['key [redacted]'], 'turns': 2}
    """
    masked = tuple(secrets)
    if isinstance(value, str):
        return redact_text(value, masked)
    if isinstance(value, Mapping):
        return {k: redact_data(v, masked) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_data(v, masked) for v in value]
    return value


def redact_fields(fields: Mapping[str, Any], secrets: Iterable[str] = ()) -> dict[str, Any]:
    """A copy of a log event's fields that holds no credential.

    A field named like a credential (`is_secret_name`) is masked, a ``headers``
    mapping keeps only allow-listed headers (`filter_headers`), and every string,
    at any depth, goes through `redact_text`.

    >>> redact_fields({"event": "call", "api_key": "sk-1", "headers": {"Authorization": "x"}})
    {'event': 'call', 'api_key': '[redacted]', 'headers': {}}
    """
    masked = tuple(secrets)
    return {key: _redact_value(key, value, masked) for key, value in fields.items()}


def _redact_value(key: object, value: Any, secrets: tuple[str, ...]) -> Any:
    if isinstance(key, str) and is_secret_name(key):
        return REDACTED
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, Mapping):
        if isinstance(key, str) and key.lower() == "headers":
            value = filter_headers({str(k): str(v) for k, v in value.items()})
        return {k: _redact_value(k, v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_value(None, v, secrets) for v in value]
    return value
