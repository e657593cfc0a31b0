"""The replay key of a model request: tool-result rewrite → normalize → sha256.

The one owner of the hash path (docs/internals.md), the same at record, replay
and compare:

1. ``codec.rewrite_tool_results(raw, tool_results)`` — the spec's mocked tool
   results; these are the bytes forwarded upstream.
2. ``normalizer.apply(forwarded)`` — volatile spans and portable paths.
3. ``sha256(normalized)`` — the body's hash; the replay index key is `match_key`
   of it and the fields the API names in the URL path (`Codec.path_fields`:
   Gemini's model), so a changed model in a Gemini path matches nothing.

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

__all__ = ["PreparedRequest", "body_sha256", "match_key", "parse_body", "prepare_request"]

_UNPARSED: Any = object()


def body_sha256(data: bytes) -> str:
    """The hex sha256 of ``data``: the replay index key of a (normalized) request body."""
    return hashlib.sha256(data).hexdigest()


def match_key(body_sha256: str, path_fields: Mapping[str, str]) -> str:
    """The replay index key: the body hash, plus the fields the URL path names, if any.

    Without path fields the key is the body hash itself, so every cassette recorded
    before path fields existed keeps its keys.

    >>> match_key("ab", {})
    'ab'
    >>> match_key("ab", {"model": "gemini-2.5-flash"})
    'ab {"model":"gemini-2.5-flash"}'
    """
    if not path_fields:
        return body_sha256
    return f"{body_sha256} {json.dumps(dict(sorted(path_fields.items())), separators=(',', ':'))}"


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
    what is hashed, ``sha256`` its hash, ``path_fields`` what the URL path names
    (`Codec.path_fields`), ``key`` the replay index key. ``rewrite_error`` says why the tool
    results could not be substituted (the codec could not read the body; it is
    then forwarded as sent and the hash says what it is).
    """

    forwarded: bytes
    normalized: bytes
    sha256: str
    rewrite_error: str | None = None
    path_fields: dict[str, str] = field(default_factory=dict)
    _body: Any = field(default=_UNPARSED, repr=False)

    @property
    def key(self) -> str:
        """The replay index key (`match_key` of the hash and the path fields)."""
        return match_key(self.sha256, self.path_fields)

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
    path: str = "",
    call_names: Mapping[str, str] | None = None,
) -> PreparedRequest:
    """Run ``raw`` (the body the agent sent to ``path``) through the hash path for ``codec``'s API.

    ``call_names`` names tool calls of earlier responses by id (`Codec.rewrite_tool_results`)."""
    forwarded = raw
    rewrite_error: str | None = None
    if tool_results:
        try:
            forwarded = codec.rewrite_tool_results(raw, tool_results, call_names)
        except FlowproofError as e:
            rewrite_error = str(e)
    normalized = normalizer.apply(forwarded)
    return PreparedRequest(
        forwarded, normalized, body_sha256(normalized), rewrite_error, codec.path_fields(path)
    )
