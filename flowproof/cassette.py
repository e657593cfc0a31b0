"""The JSON cassette: recorded turns, their (de)serialization, redaction, and atomic saving.

The format ("format 1") is specified in ``docs/internals.md`` and explained for
reviewers in ``docs/cassette.md``. Everything here is pure except `load_cassette`
and `save_cassette`, the only two functions that touch the file system.

Secrets never reach a cassette: request and response headers pass an
allow-list (`filter_headers`), and key-bearing query parameters are dropped
from URLs (`redact_url`) before a `RecordedRequest` is built by the recorder.

>>> turn = RecordedTurn(
...     index=0,
...     provider="openai-chat",
...     request=RecordedRequest("POST", "https://api.openai.com/v1/chat/completions",
...                             {"content-type": "application/json"}, "ab" * 32, {"model": "m"}),
...     response=RecordedResponse(200, {"content-type": "application/json"}, body={"id": "x"}),
... )
>>> loads_cassette(dumps_cassette(Cassette((turn,))), "c.json") == Cassette((turn,))
True
"""

from __future__ import annotations

import codecs
import functools
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import unquote_plus, urlsplit, urlunsplit

from flowproof.errors import CassetteError, CassetteNotFoundError
from flowproof.mcp import McpExchange, exchange_from_json, exchange_to_json
from flowproof.model import FinishReason, ResponseView, Turn
from flowproof.wire.sse import SSEEvent

__all__ = [
    "ALLOWED_HEADERS",
    "CASSETTE_FORMAT",
    "Cassette",
    "RecordedRequest",
    "RecordedResponse",
    "RecordedTurn",
    "Route",
    "body_sha256",
    "dumps_cassette",
    "filter_headers",
    "load_cassette",
    "loads_cassette",
    "redact_url",
    "save_cassette",
    "turn_views",
]

#: The newest cassette format this flowproof reads and the one it writes.
CASSETTE_FORMAT = 1

Route = Literal["proxy", "base_url"]
_ROUTES: tuple[str, ...] = ("proxy", "base_url")

#: Header names (lowercase) a cassette may keep. An allow-list, never a deny-list:
#: a header nobody thought of cannot leak (DESIGN.md, "Real agents").
ALLOWED_HEADERS: frozenset[str] = frozenset(
    {
        "content-type",
        "anthropic-version",
        "anthropic-beta",
        "openai-beta",
        "openai-version",
        "x-goog-api-version",
    }
)

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

_FIX_HINT = "re-record it or restore it from version control"
_DEFAULT_RECORD_COMMAND = "flowproof-run <spec> --record"

# The compact JSON form a parsed body is re-emitted as (and hashed from in views).
_COMPACT: dict[str, Any] = {"ensure_ascii": False, "separators": (",", ":")}


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """A recorded model request.

    ``body`` is the request body as parsed JSON, *after* tool-result substitution
    and normalization (volatile spans and portable paths); ``body_sha256`` is the
    sha256 of exactly those normalized bytes, the key replay matches on.
    ``headers`` holds only allow-listed headers and ``url`` has no credentials.
    """

    method: str
    url: str
    headers: dict[str, str]
    body_sha256: str
    body: Any


@dataclass(frozen=True, slots=True)
class RecordedResponse:
    """A recorded response: exactly one of ``events`` (SSE), ``body`` (JSON) or ``text``.

    A response with none of the three has an empty body.
    """

    status: int
    headers: dict[str, str]
    body: Any | None = None
    events: tuple[SSEEvent, ...] | None = None
    text: str | None = None

    @property
    def is_stream(self) -> bool:
        """True when the response was a server-sent event stream."""
        return self.events is not None

    def content(self) -> bytes:
        """The bytes to send back to the client when this response is replayed.

        An SSE stream is reproduced byte for byte from each event's ``raw``; a
        JSON body is re-emitted compactly (its original whitespace is not kept).
        """
        if self.events is not None:
            from flowproof.wire.sse import encode_events

            return encode_events(self.events)
        if self.body is not None:
            try:
                return json.dumps(self.body, **_COMPACT).encode("utf-8")
            except UnicodeEncodeError:
                # A lone surrogate (a JSON "\ud83d" escape) has no UTF-8 form: send it escaped.
                return json.dumps(self.body, separators=(",", ":")).encode("ascii")
        if self.text is not None:
            return self.text.encode("utf-8", "surrogateescape")
        return b""


@dataclass(frozen=True, slots=True)
class RecordedTurn:
    """One recorded model call. ``provider`` is the wire codec's name (``openai-chat`` …)."""

    index: int
    provider: str
    request: RecordedRequest
    response: RecordedResponse


@dataclass(frozen=True, slots=True)
class Cassette:
    """A whole cassette: the turns in the order they completed, and the route they took.

    ``mcp`` holds the recorded MCP exchanges (docs/mcp.md), written only when there are any.
    """

    turns: tuple[RecordedTurn, ...]
    route: Route = "proxy"
    format: int = CASSETTE_FORMAT
    mcp: tuple[McpExchange, ...] = ()


# --------------------------------------------------------------------------- redaction


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


def body_sha256(data: bytes) -> str:
    """The hex sha256 of ``data``: the replay index key of a (normalized) request body."""
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------- serialization


def _canonical_raw(event: str | None, data: str) -> str:
    from flowproof.wire.sse import canonical_raw

    return canonical_raw(event, data)


def _event_to_json(e: SSEEvent) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if e.event is not None:
        out["event"] = e.event
    if e.id is not None:
        out["id"] = e.id
    if e.retry is not None:
        out["retry"] = e.retry
    out["data"] = e.data
    # ``raw`` only when re-emission from event/data would not give the recorded bytes.
    if _canonical_raw(e.event, e.data) != e.raw:
        out["raw"] = e.raw
    return out


def turn_to_json(t: RecordedTurn) -> dict[str, Any]:
    """One turn as the JSON object the cassette (and the addon's event log) stores."""
    req = t.request
    resp = t.response
    response: dict[str, Any] = {"status": resp.status, "headers": dict(resp.headers)}
    if resp.events is not None:
        response["events"] = [_event_to_json(e) for e in resp.events]
    elif resp.body is not None:
        response["body"] = resp.body
    elif resp.text is not None:
        response["text"] = resp.text
    return {
        "index": t.index,
        "provider": t.provider,
        "request": {
            "method": req.method,
            "url": req.url,
            "headers": dict(req.headers),
            "body_sha256": req.body_sha256,
            "body": req.body,
        },
        "response": response,
    }


@functools.cache
def _generator() -> str:
    try:
        from importlib.metadata import version

        return f"flowproof {version('flowproof')}"
    except Exception:  # noqa: BLE001 — metadata is cosmetic; a source checkout may lack it
        return "flowproof"


def _file_errors(e: UnicodeError) -> tuple[bytes, int]:
    """Encode a cassette's lone surrogates: U+DC80..U+DCFF back to the byte they escape
    (surrogateescape, so an SSE stream that is not UTF-8 round-trips byte for byte),
    any other one as its JSON escape ``\\udXXX`` (it sits inside a JSON string)."""
    if not isinstance(e, UnicodeEncodeError):
        raise e
    out = bytearray()
    for ch in e.object[e.start : e.end]:
        cp = ord(ch)
        if 0xDC80 <= cp <= 0xDCFF:
            out.append(cp - 0xDC00)
        elif 0xD800 <= cp <= 0xDFFF:
            out += b"\\u%04x" % cp
        else:
            raise e
    return bytes(out), e.end


codecs.register_error("flowproof-cassette", _file_errors)


def dumps_cassette(cassette: Cassette) -> str:
    """The cassette as pretty-printed JSON: two-space indent, stable key order, final newline."""
    doc = {
        "format": cassette.format,
        "generator": _generator(),
        "route": cassette.route,
        "turns": [turn_to_json(t) for t in cassette.turns],
    }
    if cassette.mcp:
        doc["mcp"] = [exchange_to_json(e) for e in cassette.mcp]
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


class _Reader:
    """Validates one parsed cassette document; every problem names the turn and field."""

    def __init__(self, path: Path | str) -> None:
        self.path = path

    def fail(self, where: str, reason: str) -> CassetteError:
        return CassetteError(self.path, f"{where}: {reason}", _FIX_HINT)

    def field(
        self, obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str
    ) -> Any:
        if key not in obj:
            raise self.fail(where, f"field {key!r} is missing")
        value = obj[key]
        # bool is an int subclass; a status of ``true`` is still corrupt.
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
            raise self.fail(
                where, f"field {key!r} should be {_kind_name(kind)}, not {_json_type(value)}"
            )
        return value

    def headers(self, obj: Mapping[str, Any], where: str) -> dict[str, str]:
        raw = self.field(obj, "headers", dict, where)
        for k, v in raw.items():
            if not isinstance(v, str):
                raise self.fail(where, f"header {k!r} should be a string, not {_json_type(v)}")
        return dict(raw)

    def event(self, obj: Any, where: str) -> SSEEvent:
        if not isinstance(obj, dict):
            raise self.fail(where, f"should be an object, not {_json_type(obj)}")
        data = self.field(obj, "data", str, where)
        event = obj.get("event")
        if event is not None and not isinstance(event, str):
            raise self.fail(where, f"field 'event' should be a string, not {_json_type(event)}")
        ev_id = obj.get("id")
        if ev_id is not None and not isinstance(ev_id, str):
            raise self.fail(where, f"field 'id' should be a string, not {_json_type(ev_id)}")
        retry = obj.get("retry")
        if retry is not None and (not isinstance(retry, int) or isinstance(retry, bool)):
            raise self.fail(where, f"field 'retry' should be an integer, not {_json_type(retry)}")
        raw = obj.get("raw")
        if raw is None:
            raw = _canonical_raw(event, data)
        elif not isinstance(raw, str):
            raise self.fail(where, f"field 'raw' should be a string, not {_json_type(raw)}")
        return SSEEvent(raw=raw, data=data, event=event, id=ev_id, retry=retry)

    def turn(self, obj: Any, position: int) -> RecordedTurn:
        where = f"turn {position}"
        if not isinstance(obj, dict):
            raise self.fail(where, f"should be an object, not {_json_type(obj)}")
        index = self.field(obj, "index", int, where)
        provider = self.field(obj, "provider", str, where)
        req = self.field(obj, "request", dict, where)
        rw = f"{where} request"
        if "body" not in req:
            raise self.fail(rw, "field 'body' is missing")
        request = RecordedRequest(
            method=self.field(req, "method", str, rw),
            url=self.field(req, "url", str, rw),
            headers=self.headers(req, rw),
            body_sha256=self.field(req, "body_sha256", str, rw),
            body=req["body"],
        )
        resp = self.field(obj, "response", dict, where)
        sw = f"{where} response"
        present = [k for k in ("events", "body", "text") if k in resp]
        if len(present) > 1:
            both = " and ".join(present)
            raise self.fail(sw, f"has {both}; a response holds exactly one of them")
        events: tuple[SSEEvent, ...] | None = None
        text: str | None = None
        if "events" in resp:
            raw_events = self.field(resp, "events", list, sw)
            events = tuple(self.event(e, f"{sw} event {i}") for i, e in enumerate(raw_events))
        if "text" in resp:
            text = self.field(resp, "text", str, sw)
        response = RecordedResponse(
            status=self.field(resp, "status", int, sw),
            headers=self.headers(resp, sw),
            body=resp.get("body"),
            events=events,
            text=text,
        )
        return RecordedTurn(index=index, provider=provider, request=request, response=response)

    def cassette(self, doc: Any) -> Cassette:
        if not isinstance(doc, dict):
            raise self.fail("top level", f"should be an object, not {_json_type(doc)}")
        fmt = self.field(doc, "format", int, "top level")
        if fmt > CASSETTE_FORMAT:
            raise CassetteError(
                self.path,
                f"cassette format {fmt} is newer than this flowproof reads "
                f"(format {CASSETTE_FORMAT})",
                "upgrade flowproof to replay it",
            )
        if fmt < 1:
            raise self.fail("top level", f"unknown cassette format {fmt}")
        route = doc.get("route", "proxy")
        if route not in _ROUTES:
            raise self.fail("top level", f"route {route!r} is not one of {', '.join(_ROUTES)}")
        turns = self.field(doc, "turns", list, "top level")
        mcp = doc.get("mcp", [])
        if not isinstance(mcp, list):
            raise self.fail("top level", f"`mcp` should be an array, not {_json_type(mcp)}")
        try:
            exchanges = tuple(exchange_from_json(e, i) for i, e in enumerate(mcp))
        except ValueError as e:
            raise CassetteError(self.path, str(e), "re-record the flow") from None
        return Cassette(
            turns=tuple(self.turn(t, i) for i, t in enumerate(turns)),
            route=cast(Route, route),
            format=fmt,
            mcp=exchanges,
        )


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {int: "an integer", str: "a string", dict: "an object", list: "an array"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def loads_cassette(text: str, path: Path | str) -> Cassette:
    """Parse cassette ``text``; ``path`` only names the file in errors.

    Raises `CassetteError` for invalid JSON (with line:col), a newer format, or a
    missing or mistyped field (naming the turn and the field).
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise CassetteError(
            path,
            f"not valid JSON at line {e.lineno}:{e.colno} ({e.msg}); "
            "the file is truncated or damaged",
            _FIX_HINT,
        ) from None
    except RecursionError:
        raise CassetteError(path, "nested too deeply to be a cassette", _FIX_HINT) from None
    return _Reader(path).cassette(doc)


def load_cassette(path: Path | str, *, record_command: str = _DEFAULT_RECORD_COMMAND) -> Cassette:
    """Read the cassette at ``path``.

    A missing file raises `CassetteNotFoundError` telling the user to run
    ``record_command``; nothing ever records implicitly.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise CassetteNotFoundError(p, record_command) from None
    except OSError as e:
        raise CassetteError(
            p, f"cannot be read ({e.strerror or e})", "check the path and its permissions"
        ) from None
    # surrogateescape mirrors the writer: an SSE stream with invalid UTF-8 round-trips byte-exactly.
    return loads_cassette(raw.decode("utf-8", "surrogateescape"), p)


def save_cassette(cassette: Cassette, path: Path | str) -> None:
    """Write ``cassette`` to ``path`` atomically.

    The text goes to a temporary file in the same directory, is flushed and
    fsynced, then renamed over ``path``: a crash or a failed write leaves the old
    file byte-identical and no temporary file behind. Failures raise `CassetteError`.
    """
    p = Path(path)
    data = dumps_cassette(cassette)
    try:
        payload = data.encode("utf-8", "flowproof-cassette")
    except UnicodeEncodeError as e:
        raise CassetteError(
            p, f"cannot be written: a body holds text that is not UTF-8 ({e.reason})"
        ) from None
    directory = p.parent if str(p.parent) else Path(".")
    tmp_name: str | None = None
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=directory)
        try:
            # mkstemp creates 0600; a committed fixture should keep the usual file mode.
            mode = p.stat().st_mode & 0o777 if p.exists() else 0o644
            os.fchmod(fd, mode)
            view = memoryview(payload)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp_name, p)
        tmp_name = None
        _fsync_dir(directory)
    except OSError as e:
        raise CassetteError(
            p, f"cannot be written ({e.strerror or e})", "the previous file, if any, is unchanged"
        ) from None
    finally:
        if tmp_name is not None:
            try:
                os.unlink(tmp_name)
            except OSError:
                pass


def _fsync_dir(directory: Path) -> None:
    # Makes the rename itself durable; not every platform lets a directory be opened.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- views


def _error_text(response: RecordedResponse) -> str:
    body = response.body
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return cast(str, err["message"])
        if isinstance(err, str):
            return err
        if isinstance(body.get("message"), str):
            return cast(str, body["message"])
    return response.content().decode("utf-8", "replace")


def turn_views(turn: RecordedTurn) -> Turn:
    """The provider-neutral `Turn` of a recorded turn, through the codec named by ``turn.provider``.

    The request view is parsed from the stored body, which is the *normalized*
    body (volatile spans appear as ``«volatile:…»`` placeholders). A response
    with status >= 400 becomes a view with `FinishReason.ERROR` and the error text.
    """
    from flowproof.wire import codec_by_name

    codec = codec_by_name(turn.provider)
    # surrogatepass: json.loads decodes bytes with it, so a lone surrogate survives the trip.
    request = codec.parse_request(
        json.dumps(turn.request.body, **_COMPACT).encode("utf-8", "surrogatepass")
    )
    resp = turn.response
    response: ResponseView
    if resp.status >= 400:
        response = ResponseView(
            text=_error_text(resp),
            tool_calls=(),
            finish_reason=FinishReason.ERROR,
            raw_finish_reason=f"http {resp.status}",
        )
    elif resp.events is not None:
        response = codec.parse_events(resp.events)
    else:
        response = codec.parse_response(resp.content())
    return Turn(index=turn.index, request=request, response=response)
