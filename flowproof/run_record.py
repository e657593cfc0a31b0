"""A run, read once: the proxy's event log and the cassette it served, as one typed record.

The event log is a transport, not a second cassette (docs/design.md): a replayed
turn is named by its place in the cassette the runner already loaded and
checked, and everything else crosses as data (divergences, compare results,
error kinds). `read_run` turns the log into a `RunRecord` once — the turns with
their views, the MCP calls, the misses, the compare results, the errors, the
TLS failures, the shutdown — and every consumer (the judge, the trajectory, the
reports, the pytest item and fixture) reads that record instead of the log.

Where the next facts go. A per-turn fact (the transport a turn came over) is a
field of `RunTurn`, filled where `_Reader` builds the turn; a new event kind
(WebSocket frames) is a field of `RunRecord` and one branch of `_Reader.take`,
as the egress and secret-leak events are (`RunRecord.witness`). Facts derived
from turns (threads, sub-agents, usage) come from the views, through the
trajectory built from the record. Nothing else reads the log, so nothing else
changes.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from flowproof.cassette import Cassette, RecordedTurn
from flowproof.divergence import Divergence, missing_calls
from flowproof.errors import FlowproofError
from flowproof.log_events import (
    ComparedEvent,
    DivergenceEvent,
    DoneEvent,
    DriftEvent,
    EgressEvent,
    ErrorEvent,
    ErrorKind,
    Event,
    McpCallEvent,
    McpDivergenceEvent,
    McpRejectedEvent,
    ReplayedTurnEvent,
    RequestStartedEvent,
    SecretLeakEvent,
    TlsFailedEvent,
    TurnEvent,
)
from flowproof.mcp import McpCall
from flowproof.trajectory import Trajectory, build_trajectory
from flowproof.turns import Turn
from flowproof.views import turn_views
from flowproof.witness import EgressHost, SecretLeak, Witness

if TYPE_CHECKING:
    from flowproof.compare import CompareResult

__all__ = [
    "EMPTY_RUN",
    "McpMiss",
    "Miss",
    "MissingCalls",
    "ReplayMiss",
    "RunError",
    "RunRecord",
    "RunTurn",
    "TlsFailure",
    "read_run",
]


@dataclass(frozen=True, slots=True)
class RunTurn:
    """One model call of the run, completed or abandoned by its client.

    ``recorded`` is the cassette turn served (replay) or the live turn (record,
    compare); ``view`` is its codec view, None when no codec reads it (``problem``
    says why). ``call`` is the proxy's id of the call. ``started_at`` is when the request
    reached the proxy (seconds since the epoch, from its ``request_started``; None when the
    addon wrote none) and ``ms`` how long until its answer was logged: with both the call
    has a place on the wall clock (docs/otel.md).
    """

    call: str
    recorded: RecordedTurn
    view: Turn | None
    replayed: bool
    ms: float | None = None
    problem: FlowproofError | None = field(default=None, compare=False)
    started_at: float | None = None

    @property
    def abandoned(self) -> bool:
        """The client gave up on the call before its answer ended (docs/cassette.md)."""
        return self.recorded.abandoned


@dataclass(frozen=True, slots=True)
class ReplayMiss:
    """Replay: a model request matched no recorded turn (`flowproof.divergence`).

    ``subagent`` names the sub-agent whose recorded turn the request was compared with, and
    ``spawn_turn`` the turn that spawned it (docs/subagents.md), when it is one's;
    ``started_at`` when the request reached the proxy, as `RunTurn.started_at`."""

    call: str
    divergence: Divergence
    provider: str | None = None
    model: str | None = None
    ms: float | None = None
    subagent: str | None = None
    spawn_turn: int | None = None
    started_at: float | None = None

    def render(self, record_command: str) -> str:
        """The divergence report, ending with the command that records the cassette again
        (and, inside a sub-agent, which one: an edit to its prompt reads as such)."""
        text = self.divergence.render(record_command)
        if self.subagent is not None:
            text += (f"\nthe recorded turn {self.divergence.closest_index} it was compared with is sub-agent "
                     f"{self.subagent}'s (spawned in turn {self.spawn_turn}): the change is inside that sub-agent")
        return text


@dataclass(frozen=True, slots=True)
class McpMiss:
    """Replay: a request to an MCP server matched no recorded exchange, or recorded exchanges
    were never requested (``call`` "")."""

    call: str
    text: str
    divergence: None = None

    def render(self, record_command: str) -> str:
        """The addon's account of the miss (it names no command: ``record_command`` is unused)."""
        return self.text


#: A replay divergence, at the model boundary or the MCP boundary.
Miss = ReplayMiss | McpMiss


@dataclass(frozen=True, slots=True)
class MissingCalls:
    """Replay: the recorded turns (their ``index``) the agent never asked for."""

    turns: tuple[int, ...]

    @property
    def divergence(self) -> Divergence:
        divergence = missing_calls(self.turns)
        assert divergence is not None  # a MissingCalls is never empty
        return divergence

    def render(self, record_command: str) -> str:
        """The missing-calls report, ending with the command that records the cassette again."""
        return self.divergence.render(record_command)


@dataclass(frozen=True, slots=True)
class RunError:
    """Something that fails the run (exit 5): ``kind`` says what, ``text`` says it to a person."""

    kind: ErrorKind
    text: str
    call: str | None = None
    #: ``upstream_unreachable``: the ``host:port`` dialled, and the model host the agent addressed.
    address: str | None = None
    host: str | None = None


@dataclass(frozen=True, slots=True)
class TlsFailure:
    """A client did not trust the proxy's CA for ``host`` (``model``: a host of model calls)."""

    host: str
    text: str
    model: bool = True


@dataclass(frozen=True, slots=True)
class RunRecord:
    """Everything one run's proxy reported, typed, each in the order it was logged."""

    #: Every model call, abandoned ones included (`RunTurn.abandoned`).
    turns: tuple[RunTurn, ...] = ()
    #: The ``tools/call`` requests that crossed the MCP boundary, placed after the turns before them.
    mcp_calls: tuple[McpCall, ...] = ()
    #: Requests to an MCP server refused as not JSON-RPC 2.0 (a report note each).
    mcp_rejected: tuple[str, ...] = ()
    misses: tuple[Miss, ...] = ()
    #: Compare: every result (paired, extra, missing) in the order the proxy delivered them.
    compare: tuple[CompareResult, ...] = ()
    #: Compare: the texts of the results a compare handler rejected.
    rejected_by_handler: tuple[str, ...] = ()
    errors: tuple[RunError, ...] = ()
    tls_failures: tuple[TlsFailure, ...] = ()
    #: What the proxy saw beyond model calls: every host reached (once each) and every leak.
    witness: Witness = field(default_factory=Witness)
    #: The proxy shut down cleanly (its ``done`` event).
    done: bool = False
    #: Replay and compare: the indexes of the recorded turns never requested (from ``done``).
    unconsumed: tuple[int, ...] = ()
    #: Model calls that began (``request_started``) and have not ended yet.
    in_flight: tuple[str, ...] = ()

    @property
    def completed(self) -> tuple[RunTurn, ...]:
        """The turns the trajectory counts (not abandoned)."""
        return tuple(t for t in self.turns if not t.abandoned)

    @property
    def abandoned(self) -> tuple[RunTurn, ...]:
        return tuple(t for t in self.turns if t.abandoned)

    @property
    def missing(self) -> MissingCalls | None:
        """Replay: the recorded calls never made, or None."""
        return MissingCalls(self.unconsumed) if self.unconsumed else None

    def views(self) -> tuple[Turn, ...]:
        """The view of every turn; raises the `FlowproofError` of the first one no codec reads."""
        for turn in self.turns:
            if turn.problem is not None:
                raise turn.problem
        return tuple(t.view for t in self.turns if t.view is not None)

    def readable(self) -> bool:
        """True when every turn has a view (`views` will not raise)."""
        return all(t.problem is None for t in self.turns)

    def trajectory(self, mcp_tools: Collection[str] = (), mcp_servers: Collection[str] = ()) -> Trajectory:
        """What the agent did (`flowproof.trajectory`): the turns with the MCP calls among them;
        ``mcp_tools`` and ``mcp_servers`` are the tools and servers a spec declares under
        ``mcp:``. Raises like `views`."""
        return build_trajectory(self.views(), self.mcp_calls, mcp_tools, mcp_servers)


#: The record of a run whose proxy reported nothing (a flow that never started).
EMPTY_RUN = RunRecord()


def read_run(
    events: Iterable[Event], cassette: Cassette | None, *, views: Sequence[Turn] | None = None
) -> RunRecord:
    """The `RunRecord` of one run's typed event log.

    ``cassette`` is the cassette the runner loaded for replay (a replayed turn names its
    place in it); ``views`` its turns' views by position, when already built (the
    cassette check builds them), so no turn is viewed twice. A replayed turn the cassette
    does not hold, or whose hash differs from the turn it names, is an ``event_log`` error.
    """
    reader = _Reader(cassette, views)
    for event in events:
        reader.take(event)
    return reader.record()


class _Reader:
    """One pass over the log (`read_run`)."""

    def __init__(self, cassette: Cassette | None, views: Sequence[Turn] | None) -> None:
        self.cassette = cassette
        self.views = views
        self.cached: dict[int, RunTurn] = {}
        self.turns: list[RunTurn] = []
        self.mcp_calls: list[McpCall] = []
        self.mcp_rejected: list[str] = []
        self.misses: list[Miss] = []
        self.compare: list[CompareResult] = []
        self.rejected: list[str] = []
        self.errors: list[RunError] = []
        self.tls: list[TlsFailure] = []
        self.hosts: dict[str, EgressHost] = {}
        self.leaks: list[SecretLeak] = []
        self.done = False
        self.unconsumed: tuple[int, ...] = ()
        #: Every call that began, with when it reached the proxy (None: not logged).
        self.started: dict[str, float | None] = {}
        self.ended: set[str] = set()

    def take(self, event: Event) -> None:
        if isinstance(event, RequestStartedEvent):
            self.started[event.id] = event.at
        elif isinstance(event, TurnEvent):
            self.ended.add(event.id)
            self.turns.append(_live_turn(event, self.started.get(event.id)))
        elif isinstance(event, ReplayedTurnEvent):
            self.ended.add(event.id)
            self._replayed(event)
        elif isinstance(event, DivergenceEvent):
            self.ended.add(event.id)
            self.misses.append(ReplayMiss(event.id, _divergence(event.divergence), event.provider,
                                          event.model, event.ms, started_at=self.started.get(event.id)))
        elif isinstance(event, McpDivergenceEvent):
            self.misses.append(McpMiss(event.id, event.text))
        elif isinstance(event, ComparedEvent | DriftEvent):
            self.ended.add(event.id)
            self._compared(event)
        elif isinstance(event, ErrorEvent):
            if event.id is not None:
                self.ended.add(event.id)
            self.errors.append(RunError(event.kind, event.text, event.id, event.address, event.host))
        elif isinstance(event, TlsFailedEvent):
            self.tls.append(TlsFailure(event.host, event.text, event.model))
        elif isinstance(event, EgressEvent):
            self.hosts.setdefault(event.host.address, event.host)
        elif isinstance(event, SecretLeakEvent):
            self.leaks.append(event.leak)
        elif isinstance(event, McpCallEvent):
            after = sum(1 for t in self.turns if not t.abandoned)
            self.mcp_calls.append(McpCall(event.server, event.name, event.arguments, event.answered, after))
        elif isinstance(event, McpRejectedEvent):
            self.mcp_rejected.append(event.text)
        elif isinstance(event, DoneEvent):
            self.done = True
            self.unconsumed = event.unconsumed

    def _replayed(self, event: ReplayedTurnEvent) -> None:
        turns = self.cassette.turns if self.cassette is not None else ()
        if event.index >= len(turns):
            held = f"holds {len(turns)} turn(s)" if self.cassette is not None else "was not loaded"
            self._log_error(event.id, f"the proxy served turn {event.index} of a cassette that {held}")
            return
        recorded = turns[event.index]
        if recorded.request.body_sha256 != event.body_sha256:
            self._log_error(
                event.id,
                f"the proxy served turn {event.index} for a request hashed {event.body_sha256[:12]}…, "
                f"but that turn of the cassette flowproof loaded is {recorded.request.body_sha256[:12]}… — "
                "was the cassette changed during the run?",
            )
            return
        turn = self.cached.get(event.index)
        if turn is None:
            view, problem = _view(recorded, self.views, event.index)
            turn = self.cached[event.index] = RunTurn(event.id, recorded, view, True, event.ms, problem)
        self.turns.append(RunTurn(event.id, recorded, turn.view, True, event.ms, turn.problem,
                                  started_at=self.started.get(event.id)))

    def _compared(self, event: ComparedEvent | DriftEvent) -> None:
        if isinstance(event, DriftEvent) and event.handled:
            # The handler's rejection fails the run; its text is the handler's message.
            self.rejected.append(event.text)
        if not event.result:
            return
        from flowproof.compare import CompareResult  # a compare run's alone (0.01 s of imports)

        try:
            self.compare.append(CompareResult.from_json(event.result))
        except (KeyError, ValueError, TypeError) as err:
            self._log_error(event.id, f"the proxy logged a compare result flowproof cannot read: {err!r}")

    def _placed(self, misses: tuple[Miss, ...]) -> tuple[Miss, ...]:
        """Each model miss with the sub-agent its closest recorded turn belongs to, if any
        (the cassette's own agents: the served turns alone may not show the spawn)."""
        closest = [m.divergence.closest_index for m in misses if isinstance(m, ReplayMiss)]
        if self.cassette is None or not any(i is not None for i in closest):
            return misses
        try:
            views = self.views if self.views is not None else tuple(turn_views(t) for t in self.cassette.turns)
            agents = build_trajectory(views).agents
        except FlowproofError:
            return misses  # a turn no codec reads: the divergence speaks for itself
        out: list[Miss] = []
        for miss in misses:
            index = miss.divergence.closest_index if isinstance(miss, ReplayMiss) else None
            number = agents.agent_of.get(index) if index is not None else None
            if isinstance(miss, ReplayMiss) and number is not None:
                spawned = agents.subagents[number]
                miss = replace(miss, subagent=spawned.label(), spawn_turn=spawned.spawn_turn)
            out.append(miss)
        return tuple(out)

    def _log_error(self, call: str | None, text: str) -> None:
        self.errors.append(RunError(ErrorKind.EVENT_LOG, text, call))

    def record(self) -> RunRecord:
        return RunRecord(
            turns=tuple(self.turns),
            mcp_calls=tuple(self.mcp_calls),
            mcp_rejected=tuple(self.mcp_rejected),
            misses=self._placed(tuple(self.misses)),
            compare=tuple(self.compare),
            rejected_by_handler=tuple(self.rejected),
            errors=tuple(self.errors),
            tls_failures=tuple(self.tls),
            witness=Witness(tuple(self.hosts.values()), tuple(self.leaks)),
            done=self.done,
            unconsumed=self.unconsumed,
            in_flight=tuple(c for c in self.started if c not in self.ended),
        )


def _live_turn(event: TurnEvent, started_at: float | None) -> RunTurn:
    view, problem = _view(event.turn, None, 0)
    return RunTurn(event.id, event.turn, view, False, event.ms, problem, started_at)


def _view(
    turn: RecordedTurn, views: Sequence[Turn] | None, position: int
) -> tuple[Turn | None, FlowproofError | None]:
    if views is not None and position < len(views):
        return views[position], None
    try:
        return turn_views(turn), None
    except FlowproofError as e:
        return None, e


def _divergence(data: Any) -> Divergence:
    """A logged divergence; one flowproof cannot read is still a divergence (the run failed)."""
    try:
        return Divergence.from_json(data)
    except (KeyError, ValueError, TypeError) as err:
        return Divergence("unmatched", None, None, envelope=(f"the proxy's account of it cannot be read: {err!r}",))
