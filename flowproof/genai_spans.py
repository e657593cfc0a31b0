"""OpenTelemetry GenAI spans synthesized from a run: plain data in, plain span records out.

An agent that emits no telemetry of its own still shows what it did on the
wire, and flowproof has read all of it once, into the run's `RunRecord`
(`flowproof.run_record`): the model calls with their arrival and duration, the
MCP calls, the replay misses; the judge built the trajectory from it (the tool
calls the responses asked for, the sub-agents the spawn calls started,
`flowproof.subagents`). `run_spans` turns a run's record and that trajectory
into the spans the OpenTelemetry GenAI semantic conventions describe
(docs/otel.md names the version; `flowproof.runner.otel.flow_spans` does it for
a judged flow, whichever way it ran):

- one ``invoke_agent {name}`` span for the agent the flow started, and one for
  each sub-agent, under the agent that spawned it;
- one ``chat {model}`` span per model call (``generate_content`` for Gemini,
  per the provider table), under the agent the call belongs to, timed by the
  proxy: from the request's arrival (`RunTurn.started_at`) for the ``ms`` the
  log gives its turn; a replay divergence and an abandoned call are spans too,
  with an error;
- one ``execute_tool {tool}`` span per tool call, beside the chat span that
  asked for it, marked ``flowproof.tool.result``: ``mocked`` (the spec's
  ``tools:`` result replaced the agent's), ``real``, ``answered`` (flowproof
  answered the ``tools/call`` at the MCP boundary) or ``none`` (no later
  request carried a result).

A tool call at the model boundary runs from the end of the response that asked
for it to the start of the request that carried its result; an MCP call is
placed between the model calls around it (the log says when it crossed, not how
long it took). A span whose time the log does not give starts where the one
before it ended.

No content leaves by default: no prompt, reply, argument or result is an
attribute unless ``content`` is given, a function every such text goes through
(the runner passes the masking log lines get). The attribute keys are chosen
so a trace reader that classifies spans by key (promptfoo's trajectory
assertions take any string attribute whose key has a ``tool`` segment as a tool
name) reads exactly the tool spans as tools.

Pure: no OpenTelemetry import, no I/O. The exporter is `flowproof.runner.otel`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from urllib.parse import urlsplit

from flowproof.run_record import ReplayMiss, RunRecord, RunTurn
from flowproof.subagents import SubAgent
from flowproof.trajectory import BoundaryCall, Trajectory, build_trajectory
from flowproof.turns import ToolCall, Turn
from flowproof.wire.providers import genai_provider, provider

__all__ = [
    "SEMCONV_VERSION",
    "AttributeValue",
    "CallFacts",
    "RunFacts",
    "SpanKind",
    "SpanRecord",
    "build_spans",
    "call_facts",
    "run_spans",
]

#: The OpenTelemetry semantic conventions release whose GenAI spans these follow.
SEMCONV_VERSION = "1.41.0"

AttributeValue = str | bool | int | float | tuple[str, ...]


class SpanKind(StrEnum):
    """The span kinds the conventions give these spans."""

    INTERNAL = "internal"
    CLIENT = "client"


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One span, as plain data: ``key`` names it within the run and ``parent`` names its
    parent's key (None: the run's root). Times are nanoseconds since the epoch, as
    OpenTelemetry counts them (a float of seconds would blur a 250 ms call by a few hundred
    nanoseconds); ``error`` is the status description of a span that ended in an error (None:
    it did not)."""

    key: str
    parent: str | None
    name: str
    kind: SpanKind
    start: int
    end: int
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class CallFacts:
    """What the run record says about one model call besides its view (`call_facts`): when
    the request arrived (seconds since the epoch), the milliseconds until its turn or
    divergence was logged, the host and port it was addressed to, and the HTTP status it got."""

    started_at: float | None = None
    ms: float | None = None
    host: str | None = None
    port: int | None = None
    status: int | None = None


@dataclass(frozen=True, slots=True)
class RunFacts:
    """The run around the trajectory: the flow's name (the root agent's), the mode, an id
    unique to this run (conversation ids derive from it), when the agent started and
    stopped, and the run's exit code; ``error`` is the root's status text when the run failed
    (None: the exit code's meaning, which quotes nothing of the run)."""

    flow: str
    mode: str
    run_id: str
    started_at: float
    ended_at: float
    exit_code: int = 0
    error: str | None = None


#: The span keys (parents are named by them).
ROOT = "agent"

#: A failed run's root status without content: what its exit code means (docs/runner.md).
EXIT_MEANINGS = {1: "an assertion failed", 2: "the spec or the command line is wrong", 3: "replay diverged",
                 4: "compare found drift", 5: "the agent or the proxy failed"}

_OPERATION = "gen_ai.operation.name"
_PROVIDER = "gen_ai.provider.name"
_AGENT = "gen_ai.agent.name"
_CONVERSATION = "gen_ai.conversation.id"
_REQUEST_MODEL = "gen_ai.request.model"
_ERROR_TYPE = "error.type"


def call_facts(turn: RunTurn) -> CallFacts:
    """The `CallFacts` of one turn of a run record: its timing, and the address and status of
    the turn it served (in replay the recorded one: the host the agent addressed then)."""
    url = urlsplit(turn.recorded.request.url)
    try:
        port = url.port or (443 if url.scheme in ("https", "wss") else 80)
    except ValueError:
        port = None
    status = turn.recorded.response.status if turn.recorded.response is not None else None
    return CallFacts(turn.started_at, turn.ms, url.hostname, port, status)


def run_spans(
    record: RunRecord,
    run: RunFacts,
    *,
    trajectory: Trajectory | None = None,
    mocked: Collection[str] = (),
    content: Callable[[str], str] | None = None,
) -> tuple[SpanRecord, ...]:
    """The spans of one run from its record: ``trajectory`` is the one the judge built from
    it (`Verdict.trajectory`, the spec's ``mcp:`` tools and servers named as such), None when
    a turn no codec reads kept the judge from building one: the turns that are read then, the
    rest left out (the run's report says why it failed)."""
    if trajectory is None:
        trajectory = build_trajectory(tuple(t.view for t in record.turns if t.view is not None), record.mcp_calls)
    calls = {t.recorded.index: call_facts(t) for t in record.turns}
    misses = tuple(m for m in record.misses if isinstance(m, ReplayMiss))
    return build_spans(trajectory, run, calls, misses=misses, mocked=mocked, content=content)


def build_spans(
    trajectory: Trajectory,
    run: RunFacts,
    calls: Mapping[int, CallFacts],
    *,
    misses: Sequence[ReplayMiss] = (),
    mocked: Collection[str] = (),
    content: Callable[[str], str] | None = None,
) -> tuple[SpanRecord, ...]:
    """The GenAI spans of one run (see the module docstring), parents before children.

    ``calls`` are the facts of each turn by index (`call_facts`), ``misses`` the run's replay
    misses at the model boundary, ``mocked`` the tools whose result the spec's ``tools:``
    gives, ``content`` the masking for opt-in content.
    """
    return _Builder(trajectory, run, calls, frozenset(mocked), content).build(misses)


class _Builder:
    def __init__(self, trajectory: Trajectory, run: RunFacts, calls: Mapping[int, CallFacts],
                 mocked: frozenset[str], content: Callable[[str], str] | None) -> None:
        self.trajectory = trajectory
        self.run = run
        self.calls = calls
        self.mocked = mocked
        self.content = content
        #: turn index -> (start, end) in nanoseconds, every turn placed on the run's clock.
        self.times: dict[int, tuple[int, int]] = {}

    def build(self, misses: Sequence[ReplayMiss]) -> tuple[SpanRecord, ...]:
        # One span per turn index: a span's key is its turn's, and a log that names a
        # cassette turn twice (`read_run` keeps both) must not give two spans one key.
        turns = sorted({t.index: t for t in (*self.trajectory.turns, *self.trajectory.abandoned)}.values(),
                       key=lambda t: t.index)
        self._place(turns)
        chats = [self._chat(turn) for turn in turns]
        tools = [self._tool(number, call, turn)
                 for number, (call, turn) in enumerate(zip(self.trajectory.tool_calls,
                                                           self.trajectory.call_turns, strict=True))]
        failed = [self._miss(number, miss) for number, miss in enumerate(misses)]
        children = [*chats, *tools, *failed]
        agents = self._agents(children)
        return (*agents, *children)

    # -- time -----------------------------------------------------------------------------

    def _place(self, turns: Sequence[Turn]) -> None:
        cursor = _ns(self.run.started_at)
        for turn in turns:
            facts = self.calls.get(turn.index, CallFacts())
            start = _ns(facts.started_at) if facts.started_at is not None else cursor
            end = start + _ms_ns(facts.ms)
            self.times[turn.index] = (start, end)
            cursor = max(cursor, end)

    def _end_of(self, index: int | None) -> int:
        return self.times[index][1] if index is not None and index in self.times else _ns(self.run.started_at)

    def _next_start(self, after: int | None, fallback: int) -> int:
        """When the first model call after turn ``after`` began (the model then knows a result)."""
        later = [t.index for t in self.trajectory.turns if after is None or t.index > after]
        return self.times[min(later)][0] if later else fallback

    # -- spans ----------------------------------------------------------------------------

    def _parent_of(self, index: int | None) -> str:
        number = self.trajectory.agents.agent_of.get(index) if index is not None else None
        return ROOT if number is None else f"{ROOT}/{number}"

    def _model_attributes(self, codec: str, model: str | None, facts: CallFacts) -> dict[str, AttributeValue]:
        row = provider(codec)
        attributes: dict[str, AttributeValue] = {
            _OPERATION: row.genai_operation,
            _PROVIDER: genai_provider(codec, facts.host),
        }
        if model:
            attributes[_REQUEST_MODEL] = model
        if facts.host:
            attributes["server.address"] = facts.host
            if facts.port is not None:
                attributes["server.port"] = facts.port
        return attributes

    def _chat(self, turn: Turn) -> SpanRecord:
        facts = self.calls.get(turn.index, CallFacts())
        request, response = turn.request, turn.response
        attributes = self._model_attributes(request.provider, request.model, facts)
        attributes["gen_ai.request.stream"] = request.stream
        attributes["flowproof.turn"] = turn.index
        conversation = self.trajectory.conversations.number_of.get(turn.index)
        if conversation is not None:
            attributes[_CONVERSATION] = f"{self.run.run_id}-{conversation}"
        error: str | None = None
        if response is not None:
            if response.model:
                attributes["gen_ai.response.model"] = response.model
            attributes["gen_ai.response.finish_reasons"] = (response.raw_finish_reason or response.finish_reason.value,)
            attributes["flowproof.finish_reason"] = response.finish_reason.value
            usage = response.usage
            if usage is not None:
                attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
                attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
                attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cache_read_tokens
                attributes["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write_tokens
        if turn.abandoned:
            attributes["flowproof.abandoned"] = True
            attributes[_ERROR_TYPE] = "client_abandoned"
            error = "the client gave up on the call before its answer ended"
        elif facts.status is not None and facts.status >= 400:
            attributes[_ERROR_TYPE] = str(facts.status)
            error = f"the model API answered HTTP {facts.status}"
        elif response is None:
            attributes[_ERROR_TYPE] = "_OTHER"
            error = "the call got no response"
        operation = str(attributes[_OPERATION])
        start, end = self.times[turn.index]
        parent = ROOT if turn.abandoned else self._parent_of(turn.index)
        return SpanRecord(f"chat/{turn.index}", parent, _named(operation, request.model), SpanKind.CLIENT,
                          start, end, attributes, error)

    def _miss(self, number: int, miss: ReplayMiss) -> SpanRecord:
        attributes: dict[str, AttributeValue] = (
            self._model_attributes(miss.provider, miss.model, CallFacts(miss.started_at, miss.ms))
            if miss.provider is not None and _known_codec(miss.provider)
            else {_OPERATION: "chat", _PROVIDER: "_OTHER", **({_REQUEST_MODEL: miss.model} if miss.model else {})}
        )
        attributes[_ERROR_TYPE] = "replay_divergence"
        attributes["flowproof.divergence"] = True
        start = _ns(miss.started_at if miss.started_at is not None else self.run.ended_at)
        end = start + _ms_ns(miss.ms)
        return SpanRecord(f"miss/{number}", ROOT, _named(str(attributes[_OPERATION]), miss.model), SpanKind.CLIENT,
                          start, end, attributes, "replay diverged: no recorded turn matches this request")

    def _tool(self, number: int, call: ToolCall, turn: int | None) -> SpanRecord:
        attributes: dict[str, AttributeValue] = {_OPERATION: "execute_tool", "gen_ai.tool.name": call.name}
        if call.call_id:
            attributes["gen_ai.tool.call.id"] = call.call_id
        if turn is not None:
            attributes["flowproof.turn"] = turn
        start = self._end_of(turn)
        result_text: str | None = None
        if isinstance(call, BoundaryCall):
            attributes["gen_ai.tool.type"] = "extension"
            attributes["flowproof.tool.boundary"] = "mcp"
            attributes["flowproof.mcp.server"] = call.server
            attributes["flowproof.tool.result"] = "answered" if call.answered else "real"
            end = self._next_start(turn, start)
        else:
            attributes["gen_ai.tool.type"] = "function"
            attributes["flowproof.tool.boundary"] = "model"
            carried = self._result_turn(call, turn)
            if carried is None:
                attributes["flowproof.tool.result"] = "none"
                end = start
            else:
                attributes["flowproof.tool.result"] = "mocked" if call.name in self.mocked else "real"
                end, result_text = carried
        if self.content is not None:
            attributes["gen_ai.tool.call.arguments"] = self.content(call.arguments_raw)
            if result_text is not None:
                attributes["gen_ai.tool.call.result"] = self.content(result_text)
        return SpanRecord(f"tool/{number}", self._parent_of(turn), f"execute_tool {call.name}", SpanKind.INTERNAL,
                          start, max(start, end), attributes)

    def _result_turn(self, call: ToolCall, asked_in: int | None) -> tuple[int, str] | None:
        """When the first later request carrying ``call``'s result began, and that result."""
        agent = self.trajectory.agents.agent_of.get(asked_in) if asked_in is not None else None
        for turn in self.trajectory.turns:
            if asked_in is not None and turn.index <= asked_in:
                continue
            for result in turn.request.tool_results:
                by_id = call.call_id is not None and result.call_id == call.call_id
                # Without ids (some Gemini calls) the name within the same agent is the link.
                by_name = (call.call_id is None and result.name == call.name
                           and self.trajectory.agents.agent_of.get(turn.index) == agent)
                if by_id or by_name:
                    return self.times[turn.index][0], result.content
        return None

    def _agents(self, children: Sequence[SpanRecord]) -> list[SpanRecord]:
        tree = self.trajectory.agents
        under: dict[str, list[SpanRecord]] = {}
        for span in children:
            under.setdefault(span.parent or ROOT, []).append(span)
        # Deepest first: an agent's span covers its sub-agents', so theirs are needed first.
        spans: dict[str, SpanRecord] = {}
        for sub in sorted(tree.subagents, key=lambda s: _depth(s, tree.subagents), reverse=True):
            key = f"{ROOT}/{sub.number}"
            spans[key] = self._subagent(sub, [*under.get(key, ()),
                                              *(spans[f"{ROOT}/{c.number}"] for c in tree.children(sub.number))])
        root = self._root([*under.get(ROOT, ()), *(spans[f"{ROOT}/{c.number}"] for c in tree.children(None))])
        return [root, *(spans[f"{ROOT}/{s.number}"] for s in tree.subagents)]

    def _agent_attributes(self, name: str, turns: Sequence[Turn]) -> dict[str, AttributeValue]:
        attributes: dict[str, AttributeValue] = {_OPERATION: "invoke_agent", _AGENT: name}
        if turns:
            first = min(turns, key=lambda t: t.index)
            facts = self.calls.get(first.index, CallFacts())
            attributes[_PROVIDER] = genai_provider(first.request.provider, facts.host)
            if first.request.model:
                attributes[_REQUEST_MODEL] = first.request.model
        return attributes

    def _root(self, children: Sequence[SpanRecord]) -> SpanRecord:
        tree = self.trajectory.agents
        own = tree.root_turns(self.trajectory.turns)
        attributes = self._agent_attributes(self.run.flow, own)
        attributes["flowproof.mode"] = self.run.mode
        attributes["flowproof.exit_code"] = self.run.exit_code
        error = None
        if self.run.exit_code != 0:
            attributes[_ERROR_TYPE] = f"exit_{self.run.exit_code}"
            meaning = EXIT_MEANINGS.get(self.run.exit_code, "the flow failed")
            error = self.run.error or f"{meaning} (exit {self.run.exit_code})"
        start, end = _cover(_ns(self.run.started_at), _ns(self.run.ended_at), children)
        return SpanRecord(ROOT, None, f"invoke_agent {self.run.flow}", SpanKind.INTERNAL, start, end,
                          attributes, error)

    def _subagent(self, sub: SubAgent, children: Sequence[SpanRecord]) -> SpanRecord:
        attributes = self._agent_attributes(sub.name, sub.turns)
        attributes["flowproof.agent.label"] = sub.label()
        attributes["flowproof.agent.family"] = sub.family
        attributes["flowproof.spawn.turn"] = sub.spawn_turn
        attributes["flowproof.agent.returned"] = sub.returned
        if sub.turns:
            first = min(sub.turns, key=lambda t: t.index)
            conversation = self.trajectory.conversations.number_of.get(first.index)
            if conversation is not None:
                attributes[_CONVERSATION] = f"{self.run.run_id}-{conversation}"
        start = self._end_of(sub.spawn_turn)
        end = start
        if sub.result_turn is not None and sub.result_turn in self.times and sub.result_turn != sub.spawn_turn:
            # The parent received the result: the sub-agent was done by then.
            end = max(end, self.times[sub.result_turn][0])
        start, end = _cover(start, end, children)
        parent = ROOT if sub.parent is None else f"{ROOT}/{sub.parent}"
        return SpanRecord(f"{ROOT}/{sub.number}", parent, f"invoke_agent {sub.name}", SpanKind.INTERNAL,
                          start, end, attributes)


def _named(operation: str, model: str | None) -> str:
    return f"{operation} {model}" if model else operation


def _known_codec(name: str) -> bool:
    try:
        provider(name)
    except KeyError:
        return False
    return True


def _ns(seconds: float) -> int:
    return round(seconds * 1_000_000_000)


def _ms_ns(ms: float | None) -> int:
    return round((ms or 0.0) * 1_000_000)


def _cover(start: int, end: int, children: Iterable[SpanRecord]) -> tuple[int, int]:
    """``start``..``end`` widened to cover every child (a parent span holds its children)."""
    for child in children:
        start, end = min(start, child.start), max(end, child.end)
    return start, max(start, end)


def _depth(sub: SubAgent, subagents: Sequence[SubAgent]) -> int:
    depth, parent = 0, sub.parent
    while parent is not None:
        depth, parent = depth + 1, subagents[parent].parent
    return depth
