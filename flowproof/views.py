"""Recorded turns as provider-neutral views, through the wire codecs.

A cassette stores request and response bodies as parsed JSON; the codecs read
them as they are (`Codec.view_request`, `Codec.view_response`), so no view
serializes a body in order to parse it again. The request fields an API names
in the URL path (Gemini's model) are applied to every request view here.

Pure: no I/O.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from flowproof.cassette import RecordedResponse, RecordedTurn
from flowproof.errors import WireError
from flowproof.turns import FinishReason, RequestView, ResponseView, Turn
from flowproof.wire import Codec, codec_by_name, with_path_fields
from flowproof.wire.frames import frames_as_events

__all__ = ["request_view", "turn_path_fields", "turn_views", "url_path"]


def turn_views(turn: RecordedTurn) -> Turn:
    """The provider-neutral `Turn` of a recorded turn, through the codec named by ``turn.provider``.

    The request view is read from the stored body, which is the *normalized*
    body (volatile spans appear as ``«volatile:…»`` placeholders). A response
    with status >= 400 becomes a view with `FinishReason.ERROR` and the error text.
    Raises `WireError` (a `FlowproofError`) when the codec cannot read the turn, its
    ``part`` naming the body (``request`` or ``response``).
    """
    codec = codec_by_name(turn.provider)
    try:
        request = codec.view_request(turn.request.body)
    except WireError as e:
        raise _in_part(e, "request") from None
    request = with_path_fields(request, codec.path_fields(url_path(turn.request.url)))
    body = turn.request.body
    if not turn.abandoned:
        try:
            response = _response_view(codec, turn.response)
        except WireError as e:
            raise _in_part(e, "response") from None
        return Turn(index=turn.index, request=request, response=response, body=body)
    try:
        # What arrived of an abandoned call is shown when it reads; it is never judged.
        response = _response_view(codec, turn.response)
    except WireError:
        response = None
    return Turn(index=turn.index, request=request, response=response, abandoned=True, body=body)


def _in_part(error: WireError, part: str) -> WireError:
    """``error`` saying which body of the turn it was found in (the message is unchanged)."""
    return WireError(error.provider, error.field, error.reason, part=part)


def request_view(provider: str, body: Any) -> RequestView | None:
    """The request view of a parsed body through the wire codec, or None if there is none.

    Used only where a view is a courtesy (explaining a miss, a log line's model), so a
    missing codec or an unexpected body shape degrades the output instead of failing it.
    """
    try:
        return codec_by_name(provider).view_request(body)
    except Exception:  # noqa: BLE001 — see docstring
        return None


def url_path(url: str) -> str:
    """The path of a recorded request's URL (no query)."""
    return urlsplit(url).path


def turn_path_fields(turn: RecordedTurn) -> dict[str, str]:
    """The request fields a recorded turn's URL path names (`Codec.path_fields`); empty for a
    provider this flowproof does not know (matching then rests on the body alone)."""
    try:
        codec = codec_by_name(turn.provider)
    except WireError:
        return {}
    return codec.path_fields(url_path(turn.request.url))


def _error_text(codec: Codec, response: RecordedResponse) -> str:
    """The provider's error message, else the whole body as text."""
    message = codec.error_text(response.body) if response.body is not None else None
    return message if message is not None else response.content().decode("utf-8", "replace")


def _response_view(codec: Codec, resp: RecordedResponse | None) -> ResponseView | None:
    if resp is None:
        return None
    if resp.status >= 400:
        return ResponseView(
            text=_error_text(codec, resp),
            tool_calls=(),
            finish_reason=FinishReason.ERROR,
            raw_finish_reason=f"http {resp.status}",
        )
    if resp.events is not None:
        return codec.parse_events(resp.events)
    if resp.frames is not None:
        # A WebSocket turn: its server frames read as the stream events they carry.
        return codec.parse_events(frames_as_events(resp.frames))
    if resp.body is not None:
        return codec.view_response(resp.body)
    return codec.parse_response(resp.content())
