"""The event log between the addon (writer) and the runner (reader), as typed events.

One JSON object a line (the wire format is the table in docs/internals.md).
Each event class turns itself into that object (`to_json`) and back
(`from_json`); `parse_event` picks the class by the ``event`` key. The addon
only ever writes these classes and the runner only ever reads them, so the
two sides cannot disagree on a key.

The log carries data, not prose meant for a report: a replayed turn is named by
its place in the cassette the runner loaded (`ReplayedTurnEvent`), a divergence
is `Divergence.to_json()`, a compare result `CompareResult.to_json()`, an error
has a `ErrorKind`; the runner reads them once (`flowproof.run_record`) and
renders text itself.

Reading is lenient about what a judge does not need (a missing text is ``""``,
a non-integer in ``unconsumed`` is skipped), strict where a value is needed to
judge a run: a turn that is not a cassette turn, or a replayed turn without its
index and hash, raises `CassetteError`. An event this flowproof does not know
becomes `UnknownEvent`.

Pure: no I/O.

>>> parse_event(DoneEvent(unconsumed=(2,)).to_json())
DoneEvent(unconsumed=(2,))
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from flowproof.cassette import RecordedTurn, turn_from_json, turn_to_json
from flowproof.errors import CassetteError
from flowproof.witness import EgressHost, SecretLeak

__all__ = [
    "ComparedEvent",
    "DivergenceEvent",
    "DoneEvent",
    "DriftEvent",
    "EgressEvent",
    "ErrorEvent",
    "ErrorKind",
    "Event",
    "McpCallEvent",
    "McpDivergenceEvent",
    "McpRejectedEvent",
    "Listener",
    "ReadyEvent",
    "ReplayedTurnEvent",
    "RequestStartedEvent",
    "SecretLeakEvent",
    "TlsFailedEvent",
    "TurnEvent",
    "UnknownEvent",
    "parse_event",
    "parse_events",
]

#: Where a turn event's errors say the turn came from.
EVENT_LOG_SOURCE = "the proxy's event log"


def _text(obj: Mapping[str, Any], key: str = "text") -> str:
    value = obj.get(key)
    return "" if value is None else str(value)


def _id(obj: Mapping[str, Any]) -> str | None:
    value = obj.get("id")
    return None if value is None else str(value)


def _ms(obj: Mapping[str, Any]) -> float | None:
    """A duration field: a number, else None (not measured)."""
    value = obj.get("ms")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@dataclass(frozen=True, slots=True)
class Listener:
    """One address the proxy listens on; ``mode`` is mitmproxy's full mode spec."""

    mode: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class ReadyEvent:
    """The proxy listens (every listener) and runs in flowproof ``mode``."""

    NAME: ClassVar[str] = "ready"
    listen: tuple[Listener, ...]
    mode: str

    def to_json(self) -> dict[str, Any]:
        listen = [
            {"mode": entry.mode, "host": entry.host, "port": entry.port} for entry in self.listen
        ]
        return {"event": self.NAME, "listen": listen, "mode": self.mode}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ReadyEvent:
        listen: list[Listener] = []
        for entry in obj.get("listen") or ():
            if isinstance(entry, Mapping) and "host" in entry and "port" in entry:
                try:
                    listen.append(
                        Listener(str(entry.get("mode", "")), str(entry["host"]), int(entry["port"]))
                    )
                except (TypeError, ValueError):
                    continue
        return cls(tuple(listen), _text(obj, "mode"))


@dataclass(frozen=True, slots=True)
class RequestStartedEvent:
    """A model call arrived (it ends with a turn, divergence or error event of the same id)."""

    NAME: ClassVar[str] = "request_started"
    id: str
    #: When the request's first byte reached the proxy, in seconds since the epoch (None: an
    #: older addon wrote none). With a turn's ``ms`` it times the call (docs/otel.md).
    at: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"event": self.NAME, "id": self.id}
        if self.at is not None:
            out["at"] = self.at
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> RequestStartedEvent:
        at = obj.get("at")
        return cls(_text(obj, "id"), float(at) if isinstance(at, int | float) and not isinstance(at, bool) else None)


@dataclass(frozen=True, slots=True)
class TurnEvent:
    """A live model call (record, compare) completed or was abandoned: the turn as recorded."""

    NAME: ClassVar[str] = "turn"
    id: str
    mode: str
    turn: RecordedTurn
    #: Milliseconds from the request's arrival at the proxy to this event (None: not measured).
    ms: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "event": self.NAME,
            "id": self.id,
            "mode": self.mode,
            "turn": turn_to_json(self.turn),
        }
        if self.ms is not None:
            out["ms"] = self.ms
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> TurnEvent:
        """Raises `CassetteError` when ``turn`` is not a cassette turn."""
        return cls(
            _text(obj, "id"),
            _text(obj, "mode"),
            turn_from_json(obj.get("turn"), EVENT_LOG_SOURCE),
            _ms(obj),
        )


@dataclass(frozen=True, slots=True)
class ReplayedTurnEvent:
    """Replay: a model call was answered from the cassette, named by ``index``, its position in
    the cassette's turns (the cassette the runner loaded and checked). ``body_sha256`` is the
    hash the request matched: the runner checks it against that turn, so a cassette changed
    under a run is caught instead of misread."""

    NAME: ClassVar[str] = "turn"
    MODE: ClassVar[str] = "replay"
    id: str
    index: int
    body_sha256: str
    #: Milliseconds from the request's arrival at the proxy to this event (None: not measured).
    ms: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "event": self.NAME,
            "id": self.id,
            "mode": self.MODE,
            "index": self.index,
            "body_sha256": self.body_sha256,
        }
        if self.ms is not None:
            out["ms"] = self.ms
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ReplayedTurnEvent:
        """Raises `CassetteError` without an integer ``index`` and a ``body_sha256``."""
        index, sha = obj.get("index"), obj.get("body_sha256")
        if isinstance(index, bool) or not isinstance(index, int) or index < 0 or not isinstance(sha, str):
            raise CassetteError(
                EVENT_LOG_SOURCE,
                f"replayed turn {_text(obj, 'id')!r} does not name its cassette turn "
                "(an integer `index` and its `body_sha256`)",
            )
        return cls(_text(obj, "id"), index, sha, _ms(obj))


@dataclass(frozen=True, slots=True)
class DivergenceEvent:
    """Replay: a model request matched nothing; ``divergence`` is `Divergence.to_json()`."""

    NAME: ClassVar[str] = "divergence"
    id: str
    divergence: Mapping[str, Any] = field(default_factory=dict)
    #: The call's wire codec and model, and milliseconds from its arrival to this event.
    provider: str | None = None
    model: str | None = None
    ms: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"event": self.NAME, "id": self.id, "divergence": dict(self.divergence)}
        for key in ("provider", "model", "ms"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> DivergenceEvent:
        divergence = obj.get("divergence")
        provider, model = obj.get("provider"), obj.get("model")
        return cls(
            _text(obj, "id"),
            divergence if isinstance(divergence, Mapping) else {},
            None if provider is None else str(provider),
            None if model is None else str(model),
            _ms(obj),
        )


@dataclass(frozen=True, slots=True)
class McpDivergenceEvent:
    """Replay: a request to an MCP server matched no recorded exchange, or (``id`` "", at
    shutdown) recorded exchanges were never requested; ``text`` says which (docs/mcp.md)."""

    NAME: ClassVar[str] = "mcp_divergence"
    id: str
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"event": self.NAME, "id": self.id, "text": self.text}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> McpDivergenceEvent:
        return cls(_text(obj, "id"), _text(obj))


@dataclass(frozen=True, slots=True)
class DriftEvent:
    """Compare: a result (``result``, `CompareResult.to_json()`) is not equal, or the compare
    handler rejected it (``handled``; ``text`` is the handler's message)."""

    NAME: ClassVar[str] = "drift"
    id: str
    text: str
    result: Mapping[str, Any]
    handled: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"event": self.NAME, "id": self.id, "text": self.text, "result": dict(self.result)}
        if self.handled:
            out["handled"] = True
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> DriftEvent:
        result = obj.get("result")
        return cls(
            _text(obj, "id"),
            _text(obj),
            result if isinstance(result, Mapping) else {},
            bool(obj.get("handled")),
        )


@dataclass(frozen=True, slots=True)
class ComparedEvent:
    """Compare: a live response equals the recording, or a compare handler took the result."""

    NAME: ClassVar[str] = "compared"
    id: str
    result: Mapping[str, Any]
    handled: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"event": self.NAME, "id": self.id, "result": dict(self.result)}
        if self.handled:
            out["handled"] = True
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ComparedEvent:
        result = obj.get("result")
        return cls(
            _text(obj, "id"),
            result if isinstance(result, Mapping) else {},
            bool(obj.get("handled")),
        )


@dataclass(frozen=True, slots=True)
class TlsFailedEvent:
    """A client does not trust the proxy's CA for ``host``; ``model``: the host carries model
    calls (a provider's, a mapped or a gateway host), so the failure stopped them."""

    NAME: ClassVar[str] = "tls_failed"
    host: str
    text: str
    model: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"event": self.NAME, "host": self.host, "text": self.text, "model": self.model}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> TlsFailedEvent:
        return cls(_text(obj, "host"), _text(obj), obj.get("model") is not False)


class ErrorKind(StrEnum):
    """What failed, so a judge decides on data and never on an error's wording."""

    #: flowproof failed in one of its own hooks (a bug of ours: the call was refused).
    HOOK = "hook"
    #: A model call failed before it completed: the upstream cut it.
    UPSTREAM = "upstream"
    #: The proxy could not connect to a model host (refused, a name that does not resolve, a
    #: timeout): the error names the address it dialled (`ErrorEvent.address`).
    UPSTREAM_UNREACHABLE = "upstream_unreachable"
    #: A live response flowproof cannot record (its codec cannot read it).
    RESPONSE = "response"
    #: A model request flowproof refused and never forwarded (a body that decodes past the cap,
    #: one the run's options make it refuse).
    REQUEST = "request"
    #: The recorded cassette could not be written.
    CASSETTE_WRITE = "cassette_write"
    #: A live call could not be compared with its recording.
    COMPARE = "compare"
    #: An MCP server could not be reached, or speaks a transport flowproof does not serve.
    MCP = "mcp"
    #: A flow's session on the shared proxy was closed unfinished: a hook of its (a compare
    #: handler, a volatile pattern) did not return in time.
    SESSION = "session"
    #: The runner could not read what the proxy logged (`flowproof.run_record`).
    EVENT_LOG = "event_log"
    #: A line that names no kind this flowproof knows.
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class ErrorEvent:
    """Anything else that fails the run: ``kind`` says what failed, ``text`` says it to a
    person; ``id`` names the model call when there is one. An ``upstream_unreachable`` error
    also says where: ``address`` is the ``host:port`` the proxy dialled, ``host`` the model host
    the agent addressed (they differ when ``--upstream`` maps it)."""

    NAME: ClassVar[str] = "error"
    text: str
    kind: ErrorKind
    id: str | None = None
    address: str | None = None
    host: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"event": self.NAME, "kind": self.kind.value}
        if self.id is not None:
            out["id"] = self.id
        out["text"] = self.text
        if self.address is not None:
            out["address"] = self.address
        if self.host is not None:
            out["host"] = self.host
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ErrorEvent:
        try:
            kind = ErrorKind(str(obj.get("kind")))
        except ValueError:
            kind = ErrorKind.OTHER
        address, host = obj.get("address"), obj.get("host")
        return cls(_text(obj), kind, _id(obj), address if isinstance(address, str) else None,
                   host if isinstance(host, str) else None)


@dataclass(frozen=True, slots=True)
class DoneEvent:
    """Shutdown: the indexes of the recorded turns never requested (replay, compare)."""

    NAME: ClassVar[str] = "done"
    unconsumed: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"event": self.NAME, "unconsumed": list(self.unconsumed)}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> DoneEvent:
        raw = obj.get("unconsumed") or ()
        unconsumed = (
            tuple(i for i in raw if isinstance(i, int) and not isinstance(i, bool))
            if isinstance(raw, list | tuple)
            else ()
        )
        return cls(unconsumed)


@dataclass(frozen=True, slots=True)
class McpCallEvent:
    """A ``tools/call`` crossed the MCP boundary; ``answered``: flowproof answered it (docs/mcp.md)."""

    NAME: ClassVar[str] = "mcp_call"
    server: str
    name: str
    arguments: str
    answered: bool

    def to_json(self) -> dict[str, Any]:
        return {"event": self.NAME, "server": self.server, "name": self.name,
                "arguments": self.arguments, "answered": self.answered}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> McpCallEvent:
        return cls(_text(obj, "server"), _text(obj, "name"), _text(obj, "arguments") or "{}",
                   obj.get("answered") is True)


@dataclass(frozen=True, slots=True)
class McpRejectedEvent:
    """A request to an MCP server was not JSON-RPC 2.0: refused with a JSON-RPC error (a report note)."""

    NAME: ClassVar[str] = "mcp_rejected"
    id: str
    server: str
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"event": self.NAME, "id": self.id, "server": self.server, "text": self.text}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> McpRejectedEvent:
        return cls(_text(obj, "id"), _text(obj, "server"), _text(obj))


@dataclass(frozen=True, slots=True)
class EgressEvent:
    """The agent tried to reach a host (once per host and port, in every mode; docs/spec.md)."""

    NAME: ClassVar[str] = "egress"
    host: EgressHost

    def to_json(self) -> dict[str, Any]:
        return {"event": self.NAME, **self.host.to_json()}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> EgressEvent:
        return cls(EgressHost.from_json(obj))


@dataclass(frozen=True, slots=True)
class SecretLeakEvent:
    """A declared secret was in a request the agent sent: where it went, never its value."""

    NAME: ClassVar[str] = "secret_leak"
    leak: SecretLeak

    def to_json(self) -> dict[str, Any]:
        return {"event": self.NAME, **self.leak.to_json()}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> SecretLeakEvent:
        return cls(SecretLeak.from_json(obj))


@dataclass(frozen=True, slots=True)
class UnknownEvent:
    """An event this flowproof does not know (written by a newer addon): kept, never judged."""

    name: str
    fields: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {**self.fields, "event": self.name}


Event = (
    ReadyEvent
    | RequestStartedEvent
    | TurnEvent
    | ReplayedTurnEvent
    | DivergenceEvent
    | McpDivergenceEvent
    | DriftEvent
    | ComparedEvent
    | TlsFailedEvent
    | ErrorEvent
    | DoneEvent
    | McpCallEvent
    | McpRejectedEvent
    | EgressEvent
    | SecretLeakEvent
    | UnknownEvent
)

_CLASSES: dict[str, Any] = {
    cls.NAME: cls
    for cls in (
        ReadyEvent,
        RequestStartedEvent,
        TurnEvent,
        DivergenceEvent,
        McpDivergenceEvent,
        DriftEvent,
        ComparedEvent,
        TlsFailedEvent,
        ErrorEvent,
        DoneEvent,
        McpCallEvent,
        McpRejectedEvent,
        EgressEvent,
        SecretLeakEvent,
    )
}


def parse_event(obj: Mapping[str, Any]) -> Event:
    """The typed event of one log line (parsed JSON); `UnknownEvent` for a name not known here.

    Raises `CassetteError` for a ``turn`` event whose turn is not a cassette turn (a live
    turn) or that does not name its cassette turn (a replayed one).
    """
    name = str(obj.get("event", ""))
    if name == ReplayedTurnEvent.NAME and obj.get("mode") == ReplayedTurnEvent.MODE:
        return ReplayedTurnEvent.from_json(obj)
    cls = _CLASSES.get(name)
    if cls is None:
        return UnknownEvent(name, dict(obj))
    event: Event = cls.from_json(obj)
    return event


def parse_events(objs: Iterable[Mapping[str, Any]]) -> list[Event]:
    """`parse_event` of every line, in order."""
    return [parse_event(obj) for obj in objs]
