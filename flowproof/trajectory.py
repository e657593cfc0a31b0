"""Turns -> threads -> tool calls -> reply: what the agent did, order-independent where it must be.

The reply rule (docs/design.md#reply): turns are grouped into
threads by system prompt, the thread with the most turns is the conversation the
flow is about, a tie goes to the thread carrying the most request text. A request
that continues a conversation by id (the Responses API's ``previous_response_id``,
which then carries only the new input, as codex sends it) belongs to the thread of
the turn whose response it names (`Chains`); when that turn had no system prompt (a
warm-up), the continuation's own system prompt names the thread. A side
conversation (a concurrent title-generation call with its own system prompt)
can therefore land before or after the main turns without changing the reply.

An abandoned turn (the client gave up on the call before its response ended)
is not part of what the agent did with the model: it is kept aside in
``Trajectory.abandoned`` and counts for neither the threads, the tool calls nor
the reply.

Tool calls come from two boundaries (docs/mcp.md). At the model boundary a call
is what the model's response asked for. At the MCP boundary a call is a
``tools/call`` request the agent sent to an MCP server (`flowproof.mcp.McpCall`),
whether flowproof answered it or forwarded it. For a tool the agent reaches over
MCP, the ``tools/call`` is the call: the model's request for it is only an
attempt (``attempts``), since the agent's own code may still refuse it. The MCP
calls are placed after the model turn that preceded them.

Threads are agents (docs/subagents.md): besides the reply rule's threads, a
trajectory knows its conversations (which request continues which,
`flowproof.conversations`) and its agent tree (`flowproof.subagents`): the
sub-agents its spawn calls started, each with its own thread. The reply rule
is unchanged by them.

Pure: no I/O, no provider branching; it reads only `flowproof.turns` values.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

from flowproof.conversations import Conversations, group_conversations
from flowproof.mcp import McpCall, mcp_tool_of
from flowproof.subagents import AgentTree, build_agents
from flowproof.turns import FinishReason, RequestView, ToolCall, Turn

__all__ = [
    "MCP",
    "MODEL",
    "BoundaryCall",
    "Thread",
    "Trajectory",
    "Chains",
    "Place",
    "boundary_of",
    "build_trajectory",
    "narrow",
    "thread_key",
]

#: The boundaries a call can cross (reports name them).
MODEL = "model"
MCP = "mcp"


@dataclass(frozen=True, slots=True)
class BoundaryCall(ToolCall):
    """A tool call seen at the MCP boundary: a ``tools/call`` the agent sent to ``server``.

    ``answered`` is True when flowproof answered it from the spec (the server never saw it).
    """

    server: str = ""
    answered: bool = False


def boundary_of(call: ToolCall) -> str:
    """The boundary a trajectory call crossed: ``"mcp"`` or ``"model"``."""
    return MCP if isinstance(call, BoundaryCall) else MODEL


@dataclass(frozen=True, slots=True)
class Thread:
    """The turns that share one system prompt, in turn-index order.

    ``text_size`` is the sum of the turns' request text sizes (the reply rule's tie-break).
    """

    system: str
    turns: tuple[Turn, ...]
    text_size: int

    @property
    def first_index(self) -> int:
        """The index of the thread's earliest turn (the last, deterministic tie-break)."""
        return self.turns[0].index


@dataclass(frozen=True, slots=True)
class Trajectory:
    """Everything the assertions read about one run.

    ``tool_calls`` lists every tool call of every turn's response in turn-index
    order (all threads: an assertion on tool calls covers the whole process),
    with MCP calls (`BoundaryCall`) after the turn that preceded them; a model
    request for a tool the agent reaches over MCP is not listed there but in
    ``attempts``. ``requested`` is every call any model response asked for.
    ``reply`` is the final assistant text of the main thread, or ``None`` when the
    agent has not replied; ``reply_absent_reason`` then says why, in words that
    fit after "the agent has not replied (...)".
    """

    turns: tuple[Turn, ...]
    threads: tuple[Thread, ...]
    main: Thread | None
    tool_calls: tuple[ToolCall, ...]
    reply: str | None
    reply_absent_reason: str | None = None
    #: Calls the client abandoned, in index order: never counted (see the module docstring).
    abandoned: tuple[Turn, ...] = ()
    requested: tuple[ToolCall, ...] = ()
    attempts: tuple[ToolCall, ...] = ()
    mcp_tools: frozenset[str] = frozenset()
    #: Which request continues which (the cache-prefix rule and sub-agent threads read it).
    conversations: Conversations = Conversations((), {}, {})
    #: The sub-agents and the agent each turn belongs to.
    agents: AgentTree = AgentTree((), {})
    #: For each of ``tool_calls``, the turn it belongs to: the model turn that asked for it, or
    #: for an MCP call the model turn that preceded it (None: before any model call).
    call_turns: tuple[int | None, ...] = ()

    @property
    def reply_absent(self) -> bool:
        """True when the agent has not replied (absent, which is not the empty text)."""
        return self.reply is None


def build_trajectory(
    turns: Sequence[Turn],
    mcp_calls: Sequence[McpCall] = (),
    mcp_tools: Collection[str] = (),
    mcp_servers: Collection[str] = (),
) -> Trajectory:
    """Build the trajectory of a run from its turns (in any order; they are sorted by index).

    ``mcp_calls`` are the ``tools/call`` requests that crossed the MCP boundary, in
    the order they crossed; ``mcp_tools`` the tools a spec declares under ``mcp:``,
    and ``mcp_servers`` its servers' names. A tool in either is an MCP tool: its
    model requests become attempts, named by the MCP tool even when the agent
    offers it to the model as ``mcp__<server>__<tool>`` (`flowproof.mcp.mcp_tool_of`).

    >>> build_trajectory([]).reply is None
    True
    """
    every = tuple(sorted(turns, key=lambda t: t.index))
    ordered = tuple(t for t in every if not t.abandoned)
    threads = _group_threads(ordered)
    main = _pick_main(threads)
    over_mcp = frozenset(mcp_tools) | {c.name for c in mcp_calls}
    servers = frozenset(mcp_servers) | {c.server for c in mcp_calls}
    requested: list[ToolCall] = []
    tool_calls: list[ToolCall] = []
    call_turns: list[int | None] = []
    pending = sorted(mcp_calls, key=lambda c: c.after_turns)  # stable: crossing order kept

    def place(calls: list[McpCall], before: int | None) -> None:
        tool_calls.extend(_boundary_call(c) for c in calls)
        call_turns.extend(before for _ in calls)

    for done, turn in enumerate(ordered):
        place([c for c in pending if c.after_turns == done], ordered[done - 1].index if done else None)
        if turn.response is not None:
            asked = [_as_mcp(c, servers, over_mcp) for c in turn.response.tool_calls]
            requested.extend(asked)
            own = [c for c in asked if c.name not in over_mcp]
            tool_calls.extend(own)
            call_turns.extend(turn.index for _ in own)
    place([c for c in pending if c.after_turns >= len(ordered)], ordered[-1].index if ordered else None)
    reply, reason = _reply_of(main)
    conversations = group_conversations(ordered)
    return Trajectory(
        turns=ordered,
        threads=threads,
        main=main,
        tool_calls=tuple(tool_calls),
        reply=reply,
        reply_absent_reason=reason,
        abandoned=tuple(t for t in every if t.abandoned),
        requested=tuple(requested),
        attempts=tuple(c for c in requested if c.name in over_mcp),
        mcp_tools=over_mcp,
        conversations=conversations,
        agents=build_agents(ordered, conversations),
        call_turns=tuple(call_turns),
    )


def narrow(
    trajectory: Trajectory, indexes: Collection[int], *, reply_thread: Sequence[Turn] | None = None
) -> Trajectory:
    """The part of ``trajectory`` made of the turns in ``indexes`` (an ``in:`` scope): their tool
    calls (an MCP call goes with the model turn before it), their threads and conversations,
    and the sub-agents spawned in them. The reply is the last turn of ``reply_thread`` when
    given (a sub-agent's final answer), else the reply rule applied to the scope's turns."""
    keep = set(indexes)
    turns = tuple(t for t in trajectory.turns if t.index in keep)
    pairs = [(c, i) for c, i in zip(trajectory.tool_calls, trajectory.call_turns, strict=True) if i in keep]
    # `requested` holds each turn's calls in turn order (named as MCP tools where they are).
    requested_list: list[ToolCall] = []
    position = 0
    for turn in trajectory.turns:
        count = len(turn.response.tool_calls) if turn.response is not None else 0
        if turn.index in keep:
            requested_list.extend(trajectory.requested[position : position + count])
        position += count
    requested = tuple(requested_list)
    threads = _group_threads(turns)
    if reply_thread is not None:
        ordered = tuple(sorted(reply_thread, key=lambda t: t.index))
        own = Thread("", ordered, sum(t.request.text_size for t in ordered)) if ordered else None
        reply, reason = _reply_of(own)
    else:
        reply, reason = _reply_of(_pick_main(threads))
    conversations = group_conversations(turns)
    agents = AgentTree(
        tuple(s for s in trajectory.agents.subagents if s.spawn_turn in keep),
        {i: a for i, a in trajectory.agents.agent_of.items() if i in keep},
    )
    return Trajectory(
        turns=turns,
        threads=threads,
        main=_pick_main(threads),
        tool_calls=tuple(c for c, _ in pairs),
        reply=reply,
        reply_absent_reason=reason,
        requested=requested,
        attempts=tuple(c for c in requested if c.name in trajectory.mcp_tools),
        mcp_tools=trajectory.mcp_tools,
        conversations=conversations,
        agents=agents,
        call_turns=tuple(i for _, i in pairs),
    )


def _as_mcp(call: ToolCall, servers: Collection[str], tools: Collection[str]) -> ToolCall:
    """The model's call named by the MCP tool it stands for (unchanged when it is no MCP tool)."""
    if not servers:
        return call
    tool = mcp_tool_of(call.name, servers, tools)
    return call if tool is None or tool == call.name else replace(call, name=tool)


def _boundary_call(call: McpCall) -> BoundaryCall:
    return BoundaryCall(call.name, call.arguments_raw, server=call.server, answered=call.answered)


def thread_key(request: RequestView) -> str:
    """The key that puts a request in its thread: its system prompt (compare pairs by it too).
    A request continuing an earlier response belongs to that response's thread instead (`Chains`)."""
    return request.system


@dataclass(frozen=True, slots=True)
class Place:
    """Where a request sits: its thread's key, and its depth in the conversation (the messages or
    input items it carries, plus, for a continuation, everything before it in the chain)."""

    key: str
    depth: int


class Chains:
    """Resolves continuations by id: feed the turns in completion order (`add`), and `place`
    says where a request sits. A parent completes before a request can name its response, so
    it is always known by then; a request naming a response nobody saw keeps its own place."""

    def __init__(self) -> None:
        self._by_response: dict[str, Place] = {}

    def place(self, request: RequestView) -> Place:
        parent = self._by_response.get(request.previous_response_id or "")
        if parent is None:
            return Place(thread_key(request), len(request.roles))
        # A parent without a system prompt (codex's warm-up: no input at all) lends none: the
        # first continuation that brings one starts that prompt's thread, on both sides of a
        # compare alike, since a live call is placed before its chain has gone further.
        key = parent.key or thread_key(request)
        # +1 for the parent's answer, which the continuation no longer carries.
        return Place(key, parent.depth + 1 + len(request.roles))

    def add(self, turn: Turn) -> Place:
        """The turn's place; its response id now names that place for later continuations."""
        place = self.place(turn.request)
        response_id = turn.response.response_id if turn.response is not None else None
        if response_id:
            self._by_response[response_id] = place
        return place


def _group_threads(ordered: tuple[Turn, ...]) -> tuple[Thread, ...]:
    groups: dict[str, list[Turn]] = {}
    chains = Chains()
    for turn in ordered:
        groups.setdefault(chains.add(turn).key, []).append(turn)
    # dicts keep insertion order and `ordered` is sorted, so threads come out by first turn index.
    return tuple(
        Thread(system=system, turns=tuple(ts), text_size=sum(t.request.text_size for t in ts))
        for system, ts in groups.items()
    )


def _pick_main(threads: tuple[Thread, ...]) -> Thread | None:
    if not threads:
        return None
    # Most turns, then most request text, then the earliest first turn: order-independent.
    return min(threads, key=lambda th: (-len(th.turns), -th.text_size, th.first_index))


def _reply_of(main: Thread | None) -> tuple[str | None, str | None]:
    if main is None:
        return None, "no model call was made"
    last = main.turns[-1]
    response = last.response
    if response is None:
        return None, f"its last model call, turn {last.index}, got no response"
    if response.tool_calls:
        names = ", ".join(dict.fromkeys(c.name for c in response.tool_calls))
        return None, f"its last turn ended in a tool call to {names}"
    if response.finish_reason is FinishReason.TOOL_CALLS:
        return None, "its last turn ended in a tool call"
    return response.text, None
