"""The JSON cassette: recorded turns, their (de)serialization, and atomic saving.

The format ("format 1") is specified in ``docs/internals.md`` and explained for
reviewers in ``docs/cassette.md``. Everything here is pure except `load_cassette`
and `save_cassette`, the only two functions that touch the file system.

What may reach a cassette at all (the header allow-list, URLs without keys) is
decided before a turn is built, in `flowproof.redact`.

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
import gc
import json
import os
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowproof import __version__
from flowproof.advice import GENERIC_RECORD_COMMAND
from flowproof.errors import CassetteError, CassetteNotFoundError
from flowproof.files import UnreadableFileError, iter_regular_file, read_regular_file
from flowproof.mcp import McpExchange, exchange_from_json, exchange_to_json
from flowproof.mcp.stdio import StdioSession, session_from_json, session_to_json
from flowproof.options import Route
from flowproof.wire.base import Frame
from flowproof.wire.sse import SSEEvent, canonical_raw, encode_events

__all__ = [
    "CASSETTE_FORMAT",
    "MAX_CASSETTE_BYTES",
    "WEBSOCKET_FORMAT",
    "WEBSOCKET_METHOD",
    "Cassette",
    "LooseFrame",
    "RecordedConnection",
    "RecordedEvents",
    "RecordedRequest",
    "RecordedResponse",
    "RecordedTurn",
    "Route",
    "TurnRef",
    "dumps_cassette",
    "load_cassette",
    "loads_cassette",
    "save_cassette",
    "turn_from_json",
    "turn_to_json",
]

#: The newest cassette format this flowproof reads. It writes format 1 unless the cassette
#: holds WebSocket turns (`WEBSOCKET_FORMAT`), so an HTTP-only cassette stays readable by an
#: older flowproof, and one it would misread (frames it does not know) is refused by it.
CASSETTE_FORMAT = 2
#: The format of a cassette with WebSocket connections (docs/cassette.md).
WEBSOCKET_FORMAT = 2
#: The method a WebSocket turn's request is stored with: the frame is not an HTTP request.
WEBSOCKET_METHOD = "WEBSOCKET"
#: A cassette over this size is refused unread. A valid one is parsed a turn at a time; a
#: damaged one is then read whole to name the problem, twice over in memory while it parses
#: (10,000 turns are about 40 MB; docs/performance.md).
MAX_CASSETTE_BYTES = 512 * 1024 * 1024

_ROUTES: tuple[str, ...] = tuple(r.value for r in Route)

_FIX_HINT = "re-record it or restore it from version control"

# The compact JSON form a parsed body is re-emitted as.
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


class RecordedEvents(Sequence[SSEEvent]):
    """A loaded stream's events, kept as the cassette's own event objects until one is read.

    A 10,000-turn cassette holds hundreds of thousands of events, and replay reads the
    stream of only the turns it serves (as bytes, `encode`), a view only the turns it shows;
    building an `SSEEvent` (and its canonical ``raw``) for every event at load was most of
    the load's time (docs/performance.md). The objects were checked by the reader; each is
    built once, on the first read of any, and equals the tuple of the same events.
    """

    __slots__ = ("_docs", "_built")

    def __init__(self, docs: tuple[dict[str, Any], ...]) -> None:
        self._docs = docs
        self._built: tuple[SSEEvent, ...] | None = None

    def _events(self) -> tuple[SSEEvent, ...]:
        built = self._built
        if built is None:
            built = self._built = tuple(_event_of(d) for d in self._docs)
        return built

    def encode(self) -> bytes:
        """The stream's bytes (`encode_events`), without building the events."""
        if self._built is not None:
            return encode_events(self._built)
        return "".join(_raw_of(d) for d in self._docs).encode("utf-8", "surrogateescape")

    def __len__(self) -> int:
        return len(self._docs)

    def __getitem__(self, i: Any) -> Any:
        return self._events()[i]

    def __iter__(self) -> Iterator[SSEEvent]:
        return iter(self._events())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RecordedEvents):
            return self._events() == other._events()
        if isinstance(other, tuple):
            return self._events() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._events())

    def __repr__(self) -> str:
        return repr(self._events())


def _raw_of(d: Mapping[str, Any]) -> str:
    raw = d.get("raw")
    return canonical_raw(d.get("event"), d["data"]) if raw is None else str(raw)


def _event_of(d: Mapping[str, Any]) -> SSEEvent:
    return SSEEvent(raw=_raw_of(d), data=d["data"], event=d.get("event"), id=d.get("id"), retry=d.get("retry"))


def _plain_event(e: Any) -> bool:
    """True for an event object the reader accepts as it is (the common case, checked cheaply);
    anything else goes through `_Reader.event`, which names what is wrong."""
    if type(e) is not dict or type(e.get("data")) is not str:
        return False
    if len(e) == 1:
        return True
    for key in ("event", "id", "raw"):
        value = e.get(key)
        if value is not None and type(value) is not str:
            return False
    retry = e.get("retry")
    return retry is None or type(retry) is int


@dataclass(frozen=True, slots=True)
class RecordedResponse:
    """A recorded response: exactly one of ``events`` (SSE), ``body`` (JSON), ``text``, or
    ``frames`` (the server frames of a WebSocket turn, in order, up to its terminal frame).

    A response with none of them has an empty body. A loaded cassette's ``events`` are a
    `RecordedEvents` (built when read); a recorded one's a tuple.
    """

    status: int
    headers: dict[str, str]
    body: Any | None = None
    events: Sequence[SSEEvent] | None = None
    text: str | None = None
    frames: tuple[Frame, ...] | None = None

    @property
    def is_stream(self) -> bool:
        """True when the response was a server-sent event stream."""
        return self.events is not None

    def content(self) -> bytes:
        """The bytes to send back to the client when this response is replayed.

        An SSE stream is reproduced byte for byte from each event's ``raw``; a
        JSON body is re-emitted compactly (its original whitespace is not kept).
        """
        if isinstance(self.events, RecordedEvents):
            return self.events.encode()
        if self.events is not None:
            return encode_events(self.events)
        if self.body is not None:
            try:
                return json.dumps(self.body, **_COMPACT).encode("utf-8")
            except UnicodeEncodeError:
                # A lone surrogate (a JSON "\ud83d" escape) has no UTF-8 form: send it escaped.
                return json.dumps(self.body, separators=(",", ":")).encode("ascii")
        if self.text is not None:
            return self.text.encode("utf-8", "surrogateescape")
        if self.frames is not None:
            return b"".join(f.content for f in self.frames)
        return b""


@dataclass(frozen=True, slots=True)
class RecordedTurn:
    """One recorded model call. ``provider`` is the wire codec's name (``openai-chat`` …).

    An ``abandoned`` turn is a call the client gave up on before the response's
    terminal event (docs/cassette.md): ``response`` holds what reached the client —
    the status, headers and the events that arrived — or is None when nothing did.
    A complete turn always has a response.
    """

    index: int
    provider: str
    request: RecordedRequest
    response: RecordedResponse | None
    abandoned: bool = False
    #: The WebSocket connection (`RecordedConnection.index`) the turn was spoken on; None for HTTP.
    connection: int | None = None


@dataclass(frozen=True, slots=True)
class TurnRef:
    """In a connection's transcript: turn ``turn``, its request frame and its response frames."""

    turn: int


@dataclass(frozen=True, slots=True)
class LooseFrame:
    """In a connection's transcript: a frame that belongs to no turn (a client frame that asks
    nothing, a server frame sent while no turn was open)."""

    from_client: bool
    frame: Frame


@dataclass(frozen=True, slots=True)
class RecordedConnection:
    """One WebSocket connection to a model API: where it went, and its frame transcript.

    ``transcript`` is every frame in the order the proxy saw it, each turn named once where
    its request frame was sent (its frames are the turn's request and response). ``closed_by``
    is ``client``, ``server``, or None when the connection was still open at the end.
    """

    index: int
    provider: str
    url: str
    headers: dict[str, str]
    transcript: tuple[TurnRef | LooseFrame, ...] = ()
    closed_by: str | None = None
    close_code: int | None = None


@dataclass(frozen=True, slots=True)
class Cassette:
    """A whole cassette: the turns in the order they completed, and the route they took.

    ``mcp`` holds the recorded MCP exchanges and ``mcp_stdio`` the recorded stdio MCP
    sessions (docs/mcp.md), ``connections`` the WebSocket connections the turns with a
    ``connection`` were spoken on; each is written only when there are any.
    """

    turns: tuple[RecordedTurn, ...]
    route: Route = Route.PROXY
    #: The format the file was read as (informational: the writer picks the format itself).
    format: int = field(default=1, compare=False)
    mcp: tuple[McpExchange, ...] = ()
    mcp_stdio: tuple[StdioSession, ...] = ()
    connections: tuple[RecordedConnection, ...] = ()

    @property
    def speaks_websocket(self) -> bool:
        """True when the recorded agent spoke to a model API over a WebSocket."""
        return bool(self.connections)


# --------------------------------------------------------------------------- serialization


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
    if canonical_raw(e.event, e.data) != e.raw:
        out["raw"] = e.raw
    return out


def _response_to_json(resp: RecordedResponse | None) -> dict[str, Any] | None:
    if resp is None:
        return None
    response: dict[str, Any] = {"status": resp.status, "headers": dict(resp.headers)}
    if resp.events is not None:
        response["events"] = [_event_to_json(e) for e in resp.events]
    elif resp.body is not None:
        response["body"] = resp.body
    elif resp.text is not None:
        response["text"] = resp.text
    elif resp.frames is not None:
        response["frames"] = [f.to_json() for f in resp.frames]
    return response


def turn_to_json(t: RecordedTurn) -> dict[str, Any]:
    """One turn as the JSON object the cassette (and the addon's event log) stores.

    ``abandoned`` is written only when true, so a complete turn reads as before.
    """
    req = t.request
    head: dict[str, Any] = {"index": t.index, "provider": t.provider}
    if t.abandoned:
        head["abandoned"] = True
    if t.connection is not None:
        head["connection"] = t.connection
    return {
        **head,
        "request": {
            "method": req.method,
            "url": req.url,
            "headers": dict(req.headers),
            "body_sha256": req.body_sha256,
            "body": req.body,
        },
        "response": _response_to_json(t.response),
    }


def _generator() -> str:
    # The package's own version, not the installed metadata's: metadata is looked up by
    # distribution name, and "flowproof" on PyPI is another project (docs/install.md).
    return f"flowproof {__version__}"


# Lone surrogates other than U+DC80..U+DCFF: they escape no byte (a JSON "\ud83d" escape
# cut from its pair), so the file holds them as that escape, inside a JSON string.
_UNPAIRED = re.compile("[\ud800-\udc7f\udd00-\udfff]")


def _encode_file(text: str) -> bytes:
    """A cassette's text as UTF-8. U+DC80..U+DCFF go back to the byte they escape
    (surrogateescape: an SSE stream that is not UTF-8 round-trips byte for byte);
    any other lone surrogate is written as its JSON escape ``\\udXXX``."""
    escaped = _UNPAIRED.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return escaped.encode("utf-8", "surrogateescape")


def _entry_to_json(entry: TurnRef | LooseFrame) -> dict[str, Any]:
    if isinstance(entry, TurnRef):
        return {"turn": entry.turn}
    return {"client" if entry.from_client else "server": entry.frame.to_json()}


def connection_to_json(c: RecordedConnection) -> dict[str, Any]:
    """One WebSocket connection as the cassette stores it."""
    out: dict[str, Any] = {
        "index": c.index,
        "provider": c.provider,
        "url": c.url,
        "headers": dict(c.headers),
        "transcript": [_entry_to_json(e) for e in c.transcript],
    }
    if c.closed_by is not None:
        out["closed_by"] = c.closed_by
    if c.close_code is not None:
        out["close_code"] = c.close_code
    return out


def dumps_cassette(cassette: Cassette) -> str:
    """The cassette as pretty-printed JSON: two-space indent, stable key order, final newline."""
    doc = {
        "format": WEBSOCKET_FORMAT if cassette.connections else 1,
        "generator": _generator(),
        "route": cassette.route,
        "turns": [turn_to_json(t) for t in cassette.turns],
    }
    if cassette.mcp:
        doc["mcp"] = [exchange_to_json(e) for e in cassette.mcp]
    if cassette.mcp_stdio:
        doc["mcp_stdio"] = [session_to_json(s) for s in cassette.mcp_stdio]
    if cassette.connections:
        doc["connections"] = [connection_to_json(c) for c in cassette.connections]
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
            raw = canonical_raw(event, data)
        elif not isinstance(raw, str):
            raise self.fail(where, f"field 'raw' should be a string, not {_json_type(raw)}")
        return SSEEvent(raw=raw, data=data, event=event, id=ev_id, retry=retry)

    def events(self, objs: list[Any], where: str) -> RecordedEvents:
        for i, e in enumerate(objs):
            # Inline, the commonest shape ({"data": "..."}): hundreds of thousands of events.
            if not (type(e) is dict and len(e) == 1 and type(e.get("data")) is str) and not _plain_event(e):
                self.event(e, f"{where} event {i}")  # raises, naming the field
        return RecordedEvents(tuple(objs))

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
        abandoned = obj.get("abandoned", False)
        if not isinstance(abandoned, bool):
            raise self.fail(where, f"field 'abandoned' should be true or false, not {_json_type(abandoned)}")
        connection = obj.get("connection")
        if connection is not None and (not isinstance(connection, int) or isinstance(connection, bool)):
            raise self.fail(where, f"field 'connection' should be an integer, not {_json_type(connection)}")
        if abandoned and obj.get("response", {}) is None:
            # Nothing reached the client before it gave up.
            return RecordedTurn(index, provider, request, None, abandoned=True, connection=connection)
        resp = self.field(obj, "response", dict, where)
        sw = f"{where} response"
        present = [k for k in ("events", "body", "text", "frames") if k in resp]
        if len(present) > 1:
            both = " and ".join(present)
            raise self.fail(sw, f"has {both}; a response holds exactly one of them")
        events: RecordedEvents | None = None
        text: str | None = None
        if "events" in resp:
            events = self.events(self.field(resp, "events", list, sw), sw)
        if "text" in resp:
            text = self.field(resp, "text", str, sw)
        frames: tuple[Frame, ...] | None = None
        if "frames" in resp:
            frames = tuple(self.frame(f, f"{sw} frame {i}") for i, f in enumerate(self.field(resp, "frames", list, sw)))
        response = RecordedResponse(
            status=self.field(resp, "status", int, sw),
            headers=self.headers(resp, sw),
            body=resp.get("body"),
            events=events,
            text=text,
            frames=frames,
        )
        return RecordedTurn(
            index=index, provider=provider, request=request, response=response, abandoned=abandoned,
            connection=connection,
        )

    def frame(self, obj: Any, where: str) -> Frame:
        try:
            return Frame.from_json(obj)
        except ValueError as e:
            raise self.fail(where, str(e)) from None

    def connection(self, obj: Any, position: int, turns: int) -> RecordedConnection:
        where = f"connection {position}"
        if not isinstance(obj, dict):
            raise self.fail(where, f"should be an object, not {_json_type(obj)}")
        entries: list[TurnRef | LooseFrame] = []
        for i, entry in enumerate(self.field(obj, "transcript", list, where)):
            at = f"{where} transcript entry {i}"
            if not isinstance(entry, dict) or len(entry) != 1:
                raise self.fail(at, 'should be one of {"turn": N}, {"client": FRAME}, {"server": FRAME}')
            if "turn" in entry:
                ref = self.field(entry, "turn", int, at)
                if not 0 <= ref < turns:
                    raise self.fail(at, f"names turn {ref}, but the cassette has {turns} turns")
                entries.append(TurnRef(ref))
            elif "client" in entry or "server" in entry:
                side = "client" if "client" in entry else "server"
                entries.append(LooseFrame(side == "client", self.frame(entry[side], at)))
            else:
                raise self.fail(at, 'should be one of {"turn": N}, {"client": FRAME}, {"server": FRAME}')
        closed_by = obj.get("closed_by")
        if closed_by not in (None, "client", "server"):
            raise self.fail(where, f"field 'closed_by' should be client or server, not {closed_by!r}")
        close_code = obj.get("close_code")
        if close_code is not None and (not isinstance(close_code, int) or isinstance(close_code, bool)):
            raise self.fail(where, f"field 'close_code' should be an integer, not {_json_type(close_code)}")
        return RecordedConnection(
            index=self.field(obj, "index", int, where),
            provider=self.field(obj, "provider", str, where),
            url=self.field(obj, "url", str, where),
            headers=self.headers(obj, where),
            transcript=tuple(entries),
            closed_by=closed_by,
            close_code=close_code,
        )

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
        route = doc.get("route", Route.PROXY.value)
        if route not in _ROUTES:
            raise self.fail("top level", f"route {route!r} is not one of {', '.join(_ROUTES)}")
        turns = self.field(doc, "turns", list, "top level")
        mcp = doc.get("mcp", [])
        if not isinstance(mcp, list):
            raise self.fail("top level", f"`mcp` should be an array, not {_json_type(mcp)}")
        stdio = doc.get("mcp_stdio", [])
        if not isinstance(stdio, list):
            raise self.fail("top level", f"`mcp_stdio` should be an array, not {_json_type(stdio)}")
        try:
            exchanges = tuple(exchange_from_json(e, i) for i, e in enumerate(mcp))
            sessions = tuple(session_from_json(s, i) for i, s in enumerate(stdio))
        except ValueError as e:
            raise CassetteError(self.path, str(e), "re-record the flow") from None
        connections = doc.get("connections", [])
        if not isinstance(connections, list):
            raise self.fail("top level", f"`connections` should be an array, not {_json_type(connections)}")
        return Cassette(
            turns=tuple(self.turn(t, i) for i, t in enumerate(turns)),
            route=Route(route),
            format=fmt,
            mcp=exchanges,
            mcp_stdio=sessions,
            connections=tuple(self.connection(c, i, len(turns)) for i, c in enumerate(connections)),
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


def turn_from_json(obj: Any, source: Path | str) -> RecordedTurn:
    """One turn object (as `turn_to_json` writes it) back into a `RecordedTurn`.

    ``source`` names where it came from in errors (a cassette, the event log).
    Raises `CassetteError` naming the field that is missing or mistyped.
    """
    return _Reader(source).turn(obj, 0)


def loads_cassette(text: str, path: Path | str) -> Cassette:
    """Parse cassette ``text``; ``path`` only names the file in errors.

    Raises `CassetteError` for invalid JSON (with line:col), a newer format, or a
    missing or mistyped field (naming the turn and the field).
    """
    with _collector_paused():
        return _Reader(path).cassette(_parse(text, path))


@contextmanager
def _collector_paused() -> Iterator[None]:
    """A cassette's document and turns hold no reference cycles, yet their millions of new
    objects would start the cyclic collector again and again while they are built, each pass
    walking everything built so far (more than a third of a big cassette's load): paused."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _parse(text: str, path: Path | str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise CassetteError(
            path,
            f"not valid JSON at line {e.lineno}:{e.colno} ({e.msg}); "
            "the file is truncated or damaged",
            _FIX_HINT,
        ) from None
    except RecursionError:
        raise CassetteError(path, "nested too deeply to be a cassette", _FIX_HINT) from None


def load_cassette(path: Path | str, *, record_command: str = GENERIC_RECORD_COMMAND) -> Cassette:
    """Read the cassette at ``path``.

    A missing file raises `CassetteNotFoundError` telling the user to run
    ``record_command``; nothing ever records implicitly.
    """
    p = Path(path)
    with _collector_paused():
        doc = _parse_by_turn(p)
        if doc is None:
            # Not a JSON object, or unreadable: read whole, which names the problem. The bytes
            # are freed once decoded and the text once parsed (neither is a local here), so the
            # peak holds two copies of the file, never three.
            doc = _parse(_read_text(p, record_command), p)
        return _Reader(p).cassette(doc)


_STREAM_CHUNK = 1 << 20
_DECODER = json.JSONDecoder()
_WHITESPACE = re.compile(r"[ \t\n\r]*")  # JSON's own


def _parse_by_turn(p: Path) -> Any | None:
    """The document `_parse` would make of the file, read a megabyte at a time and parsed one
    turn at a time, so that the file's text never sits beside all of its parsed objects: those
    two together were the peak of a big cassette's load, twice its size (docs/performance.md).

    Only the top level (an object) and the ``turns`` array are walked here; every turn and
    every other value is parsed by `json`'s own scanner. Anything that is not that shape or
    not valid JSON, and an unreadable path, gives None: the caller reads the file whole, which
    names the problem.
    """
    chunks = iter_regular_file(p, MAX_CASSETTE_BYTES, _STREAM_CHUNK)
    try:
        return _document(_TextStream(chunks))
    except (OSError, ValueError, RecursionError):  # UnreadableFileError and JSONDecodeError are ValueErrors
        return None
    finally:
        chunks.close()


def _document(s: _TextStream) -> dict[str, Any] | None:
    if not s.take("{"):
        return None
    doc: dict[str, Any] = {}
    more = not s.take("}")
    while more:
        if s.peek() != '"':
            return None
        key = s.value()
        if not s.take(":"):
            return None
        if key == "turns" and s.take("["):
            turns = _items(s)
            if turns is None:
                return None
            doc[key] = turns
        else:
            doc[key] = s.value()
        more = s.take(",")
        if not more and not s.take("}"):
            return None
    return doc if s.peek() == "" else None  # json.loads refuses anything after the document


def _items(s: _TextStream) -> list[Any] | None:
    """The rest of an array whose ``[`` was taken, each item parsed as soon as it is read."""
    items: list[Any] = []
    if s.take("]"):
        return items
    while True:
        items.append(s.value())
        if not s.take(","):
            return items if s.take("]") else None


class _TextStream:
    """A file's text, decoded as it is read, with a cursor; what lies before it is dropped."""

    __slots__ = ("_chunks", "_decoder", "_text", "_at", "_ended")

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        # surrogateescape, as the whole-file read: invalid UTF-8 round-trips byte for byte.
        self._decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
        self._text = ""
        self._at = 0
        self._ended = False

    def _more(self) -> bool:
        """Read on, at least as much again as is held past the cursor (a value longer than one
        read is parsed again a few times, not once per read); False at the end of the file."""
        if self._ended:
            return False
        parts = [self._text[self._at:]]
        want, got = max(len(parts[0]), 1), 0
        while got < want:
            chunk = next(self._chunks, None)
            if chunk is None:
                parts.append(self._decoder.decode(b"", final=True))
                self._ended = True
                break
            parts.append(self._decoder.decode(chunk))
            got += len(chunk)
        self._text, self._at = "".join(parts), 0
        return True

    def peek(self) -> str:
        """The next character that is not whitespace (the cursor moves to it); "" at the end."""
        while True:
            match = _WHITESPACE.match(self._text, self._at)
            assert match is not None  # it matches the empty string too
            self._at = match.end()
            if self._at < len(self._text):
                return self._text[self._at]
            if not self._more():
                return ""

    def take(self, char: str) -> bool:
        """Step over ``char`` if it comes next."""
        if self.peek() != char:
            return False
        self._at += 1
        return True

    def value(self) -> Any:
        """The JSON value at the cursor, which moves past it."""
        self.peek()  # the scanner takes no whitespace before a value
        while True:
            try:
                value, end = _DECODER.raw_decode(self._text, self._at)
            except ValueError:
                if self._more():  # it may go on in the next read
                    continue
                raise
            if end + 2 >= len(self._text) and self._more():
                continue  # a number may go on in the next read ("1" of "12"; "1" of "1.5" is "1.")
            self._at = end
            return value


def _read_text(p: Path, record_command: str) -> str:
    try:
        raw = read_regular_file(p, MAX_CASSETTE_BYTES)
    except UnreadableFileError as e:
        if e.kind is not None:
            raise CassetteError(p, f"is {e.kind}, not a regular file", "name a cassette file") from None
        raise CassetteError(
            p, f"is over the {MAX_CASSETTE_BYTES:,}-byte limit of a cassette",
            "split the flow into smaller flows, each with its own cassette",
        ) from None
    except FileNotFoundError:
        raise CassetteNotFoundError(p, record_command) from None
    except OSError as e:
        raise CassetteError(
            p, f"cannot be read ({e.strerror or e})", "check the path and its permissions"
        ) from None
    # surrogateescape mirrors the writer: an SSE stream with invalid UTF-8 round-trips byte-exactly.
    return raw.decode("utf-8", "surrogateescape")


def save_cassette(cassette: Cassette, path: Path | str) -> None:
    """Write ``cassette`` to ``path`` atomically.

    The text goes to a temporary file in the same directory, is flushed and
    fsynced, then renamed over ``path``: a crash or a failed write leaves the old
    file byte-identical and no temporary file behind. Failures raise `CassetteError`.
    """
    p = Path(path)
    data = dumps_cassette(cassette)
    payload = _encode_file(data)
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
