"""The replay key of a model request: tool-result rewrite → normalize → sha256.

The one owner of the hash path (docs/internals.md), the same at record, replay
and compare:

1. ``codec.rewrite_tool_results(raw, tool_results)`` — the spec's mocked tool
   results; these are the bytes forwarded upstream.
2. ``normalizer.apply(forwarded)`` — volatile spans and portable paths.
3. ``sha256(normalized)`` — the key of the replay index.

The body is parsed as few times as the steps allow: the rewrite parses only
when the spec mocks tools, the normalizer only when it declares something (and
returns the very same bytes otherwise), and the normalized body is parsed once
more, lazily, the first time `PreparedRequest.body` is read (the cassette
stores it; replay reads it only to explain a miss).

Pure.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flowproof.errors import FlowproofError
from flowproof.normalize import Normalizer
from flowproof.wire.base import Codec

__all__ = ["PreparedRequest", "body_sha256", "parse_body", "prepare_request"]

_UNPARSED: Any = object()


def body_sha256(data: bytes) -> str:
    """The hex sha256 of ``data``: the replay index key of a (normalized) request body."""
    return hashlib.sha256(data).hexdigest()


def parse_body(data: bytes) -> Any:
    """The parsed JSON body, or its text when it is not JSON (stored readable either way)."""
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return data.decode("utf-8", "surrogateescape")


@dataclass(slots=True)
class PreparedRequest:
    """One request on the hash path.

    ``forwarded`` is what goes upstream (tool results substituted), ``normalized``
    what is hashed, ``sha256`` the replay key. ``rewrite_error`` says why the tool
    results could not be substituted (the codec could not read the body; it is
    then forwarded as sent and the hash says what it is).
    """

    forwarded: bytes
    normalized: bytes
    sha256: str
    rewrite_error: str | None = None
    _body: Any = field(default=_UNPARSED, repr=False)

    @property
    def body(self) -> Any:
        """The normalized body parsed as JSON (its text when it is not JSON); parsed once."""
        if self._body is _UNPARSED:
            self._body = parse_body(self.normalized)
        return self._body


def prepare_request(
    codec: Codec,
    raw: bytes,
    tool_results: Mapping[str, Any],
    normalizer: Normalizer,
) -> PreparedRequest:
    """Run ``raw`` (the body the agent sent) through the hash path for ``codec``'s API."""
    forwarded = raw
    rewrite_error: str | None = None
    if tool_results:
        try:
            forwarded = codec.rewrite_tool_results(raw, tool_results)
        except FlowproofError as e:
            rewrite_error = str(e)
    normalized = normalizer.apply(forwarded)
    return PreparedRequest(forwarded, normalized, body_sha256(normalized), rewrite_error)
