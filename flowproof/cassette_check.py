"""Whole-cassette checks: what a cassette must be before it is replayed, shown or kept.

`check_cassette` runs when a cassette file is loaded. The reader already checks
the document's shape; this checks what is served to the agent: every SSE event's
data is JSON (or the ``[DONE]`` sentinel), every text is valid UTF-8 (a cassette
read with ``surrogateescape`` carries an invalid byte as U+DC80..U+DCFF), and
every turn parses through its provider's codec. A bad cassette is a
`CassetteError` (exit 2) naming the file, the turn and the field — never served
to the agent, where its crash would be blamed on the agent.

`error_turns` lists the turns that recorded an HTTP error status, and the MCP
servers that refused every request (`flowproof.mcp.refused`), for the record
report, the heal diff and the refusal to keep them (docs/reliability.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flowproof.cassette import Cassette, RecordedTurn
from flowproof.errors import CassetteError, FlowproofError
from flowproof.mcp.refused import exchange_outcomes, refused_servers, session_outcomes
from flowproof.turns import Turn
from flowproof.views import turn_views
from flowproof.wire.frames import frame_codec_by_name

__all__ = ["check_cassette", "error_turns"]

_HINT = "re-record it or restore it from version control"
#: SSE data lines that are not JSON by design (the OpenAI end-of-stream marker, keep-alives).
_NON_JSON_DATA = ("[DONE]", "")


def _bad_byte(text: str) -> int | None:
    """The first byte a ``surrogateescape`` decode could not read, or None when the text is UTF-8."""
    for ch in text:
        if 0xDC80 <= ord(ch) <= 0xDCFF:
            return ord(ch) - 0xDC00
    return None


def _strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    """(where, text) of every string in a JSON-like value, keys included."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield f"{where}.{key}", str(key)
            yield from _strings(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, f"{where}.{i}")


def _turn_strings(turn: RecordedTurn, where: str) -> Iterator[tuple[str, str]]:
    yield from _strings(turn.request.body, f"{where} request body")
    response = turn.response
    if response is None:  # an abandoned call that got nothing back
        return
    if response.events is not None:
        for i, event in enumerate(response.events):
            yield f"{where} response event {i} data", event.data
            yield f"{where} response event {i} raw", event.raw
    if response.text is not None:
        yield f"{where} response text", response.text
    for i, frame in enumerate(response.frames or ()):
        if frame.text is not None:
            yield f"{where} response frame {i}", frame.text
    yield from _strings(response.body, f"{where} response body")


def check_cassette(cassette: Cassette, path: Path | str) -> tuple[Turn, ...]:
    """Raise `CassetteError` naming turn and field for the first thing that cannot be replayed;
    else the view of every turn, by position (a runner keeps them: views are built once)."""
    views: list[Turn] = []
    for position, turn in enumerate(cassette.turns):
        where = f"turn {position}"
        for field, text in _turn_strings(turn, where):
            byte = _bad_byte(text)
            if byte is not None:
                raise CassetteError(path, f"{field} is not UTF-8 (byte 0x{byte:02x})", _HINT)
        events = turn.response.events if turn.response is not None else None
        for i, event in enumerate(events or ()):
            if event.data.strip() in _NON_JSON_DATA:
                continue
            try:
                json.loads(event.data)
            except ValueError as e:
                raise CassetteError(
                    path, f"{where} response event {i} data is not JSON ({e})", _HINT
                ) from None
        try:
            views.append(turn_views(turn))
        except FlowproofError as e:
            raise CassetteError(
                path, f"{where} ({turn.provider}) is not a valid exchange for its provider: {e}",
                _HINT,
            ) from None
    return tuple(views)


def error_turns(cassette: Cassette) -> tuple[str, ...]:
    """One line per turn that recorded an HTTP error status from the upstream (over a
    WebSocket: an error frame standing for one), and one per MCP server that refused every
    request of the recording (a 401 pinned in a cassette is no test)."""
    lines = []
    for turn in cassette.turns:
        response = turn.response
        if response is None:
            continue
        if response.frames:
            frames = frame_codec_by_name(turn.provider)
            status = frames.error_status(response.frames[-1]) if frames is not None else None
            if status is not None:
                lines.append(f"turn {turn.index} recorded an error event with status {status} from the upstream")
        elif response.status >= 400:
            lines.append(f"turn {turn.index} recorded an HTTP {response.status} from the upstream")
    return tuple(lines) + refused_servers([*exchange_outcomes(cassette.mcp), *session_outcomes(cassette.mcp_stdio)])
