"""Which recorded turn a live call is judged against: its place in the conversation.

A live model mints new tool-call ids, reorders argument keys and rewords prose,
so from its second call a live request never equals the recorded one byte for
byte. Compare therefore pairs by place, never by bytes (docs/compare.md):

- the thread: requests are grouped by system prompt, exactly as the reply rule
  groups them (`flowproof.trajectory.thread_key`), so a concurrent side thread
  (a title call) pairs within its own thread whatever the arrival order;
- the depth: how many messages/items the request carries.

A request that continues a response by id (``previous_response_id``) carries only
its new input: it is placed in the thread of the turn whose response it names, at
that turn's depth plus its own (`flowproof.trajectory.Chains`), on the recorded
side by the recorded ids and on the live side by the live ones.

Tie rule: when several unpaired recorded turns share a live call's thread and
depth (concurrent calls of one conversation), the one sent to the same API wins,
then the one whose newest user text equals the live call's, then the earliest
recorded. Limit: two such calls with the same API and newest user text that
complete in the opposite order live pair crosswise, so a difference between the
two calls themselves reads as drift.

A live call with no counterpart is ``extra``; a recorded turn still unpaired
when the run ends is ``missing``. Both are drift results like any other.

Pure: plain data in, `flowproof.compare.CompareResult` values out.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flowproof.compare import (
    CompareResult,
    Difference,
    RequestContext,
    compare_responses,
    extra_result,
    missing_result,
)
from flowproof.divergence import diff_fields, envelope_changes
from flowproof.errors import FlowproofError
from flowproof.normalize import looks_like_per_run_id
from flowproof.trajectory import Chains, build_trajectory
from flowproof.turns import FinishReason, RequestView, ResponseView, Turn

__all__ = ["Call", "Pairer", "UnreadableTurnError", "depth_of"]

# What a call that got no response is compared as: it ended, in error, with nothing said.
_NO_RESPONSE = ResponseView(text="", tool_calls=(), finish_reason=FinishReason.ERROR)


@dataclass(frozen=True, slots=True)
class Call:
    """One model call as compare reads it: its provider-neutral turn, its parsed request body.

    ``body`` is only read for the request-side context; None leaves the body
    fields out of it (the envelope is still compared).
    """

    turn: Turn
    body: Any = None
    #: Why the recorded response cannot be read (the call still has its place), or None.
    problem: str | None = None


class UnreadableTurnError(FlowproofError):
    """A live call's place holds a recorded turn whose response cannot be read: nothing to compare."""

    def __init__(self, turn: int, live_call: int, problem: str) -> None:
        self.turn = turn
        super().__init__(
            f"live call {live_call} cannot be compared with recorded turn {turn}: its recorded"
            f" response cannot be read ({problem}) — re-record the cassette"
        )


def depth_of(request: RequestView) -> int:
    """How deep in its conversation a request is: the number of messages/items it carries."""
    return len(request.roles)


class Pairer:
    """Pairs live calls with recorded turns one at a time, as they complete.

    `pair` judges one live call (a paired or an extra result); `finish` reports
    the recorded turns no live call reached (missing results). Thread-safe: the
    addon calls it from whichever connection completes.
    """

    def __init__(self, recorded: Sequence[Call]) -> None:
        trajectory = build_trajectory([c.turn for c in recorded])
        self._calls = {c.turn.index: c for c in recorded}
        #: thread key -> thread number (threads numbered by their first recorded turn).
        self._threads = {th.system: n for n, th in enumerate(trajectory.threads)}
        self._first_turn = {n: th.turns[0].index for n, th in enumerate(trajectory.threads)}
        self._sizes = {n: len(th.turns) for n, th in enumerate(trajectory.threads)}
        #: (thread, depth) -> recorded turn indexes not yet paired, in recorded order.
        self._open: dict[tuple[int, int], list[int]] = {}
        self._place: dict[int, tuple[int, int]] = {}
        chains = Chains()
        depths = {t.index: chains.add(t).depth for t in sorted(trajectory.turns, key=lambda t: t.index)}
        for n, th in enumerate(trajectory.threads):
            for t in th.turns:
                key = (n, depths[t.index])
                self._open.setdefault(key, []).append(t.index)
                self._place[t.index] = key
        #: The live calls' continuations, resolved by the live response ids.
        self._live = Chains()
        #: thread keys no recorded thread has, numbered after the recorded threads.
        self._new_threads: dict[str, int] = {}
        #: threads that have had their first live call (the request-side context is about it).
        self._seen: set[int] = set()
        self._lock = threading.Lock()

    def pair(self, live: Call) -> CompareResult:
        """Judge one completed live call against the recorded turn at its place."""
        request = live.turn.request
        response = live.turn.response or _NO_RESPONSE
        index = live.turn.index
        with self._lock:
            place = self._live.add(live.turn)
            key, depth = place.key, place.depth
            thread = self._threads.get(key)
            if thread is None:
                number = self._new_threads.setdefault(
                    key, len(self._threads) + len(self._new_threads)
                )
                first = number not in self._seen
                self._seen.add(number)
                context = self._new_thread_context(number, live, depth) if first else None
                return extra_result(
                    response,
                    live_call=index,
                    thread=number,
                    depth=depth,
                    reason="no recorded thread has this system prompt",
                    context=context,
                )
            first = thread not in self._seen
            self._seen.add(thread)
            context = self._context(thread, self._first_turn[thread], live) if first else None
            candidates = self._open.get((thread, depth), [])
            if not candidates:
                return extra_result(
                    response,
                    live_call=index,
                    thread=thread,
                    depth=depth,
                    reason=self._extra_reason(thread, depth),
                    context=context,
                )
            chosen = min(candidates, key=lambda i: self._tie_rank(i, request))
            candidates.remove(chosen)
        problem = self._calls[chosen].problem
        if problem is not None:
            raise UnreadableTurnError(chosen, index, problem)
        recorded = self._calls[chosen].turn.response or _NO_RESPONSE
        return compare_responses(
            recorded,
            response,
            turn=chosen,
            live_call=index,
            thread=thread,
            depth=depth,
            context=context,
        )

    def finish(self) -> tuple[CompareResult, ...]:
        """A ``missing`` result for every recorded turn no live call was paired with, in turn order."""
        with self._lock:
            unpaired = sorted(i for indexes in self._open.values() for i in indexes)
        out = []
        for i in unpaired:
            thread, depth = self._place[i]
            out.append(
                missing_result(
                    self._calls[i].turn.response or _NO_RESPONSE,
                    turn=i,
                    thread=thread,
                    depth=depth,
                    reason="no live call reached this place in the conversation",
                )
            )
        return tuple(out)

    # ------------------------------------------------------------------ helpers

    def _tie_rank(self, turn: int, live: RequestView) -> tuple[bool, bool, int]:
        """The tie rule's order: the same API, then the same newest user text, then the earliest."""
        recorded = self._calls[turn].turn.request
        return (recorded.provider != live.provider, recorded.prompt != live.prompt, turn)

    def _extra_reason(self, thread: int, depth: int) -> str:
        depths = sorted({d for (th, d) in self._place.values() if th == thread})
        if depth in depths:
            return (
                f"every recorded turn of thread {thread} at depth {depth} is already paired:"
                " the agent made more calls here than recorded"
            )
        shown = ", ".join(str(d) for d in depths)
        return f"thread {thread} has no recorded turn at depth {depth} (recorded depths: {shown})"

    def _new_thread_context(self, number: int, live: Call, depth: int) -> RequestContext | None:
        """Set a new thread's first request against the recorded thread it most likely replaced.

        Context only, so a heuristic is acceptable: a recorded thread with no live
        call yet, preferring the same first depth, then the most turns, then the earliest.
        """
        unseen = [n for n in self._threads.values() if n not in self._seen]
        if not unseen:
            return None

        def rank(n: int) -> tuple[bool, int, int]:
            first = self._calls[self._first_turn[n]].turn.request
            return (depth_of(first) != depth, -self._sizes[n], n)

        closest = min(unseen, key=rank)
        context = self._context(closest, self._first_turn[closest], live)
        if context is None:
            return None
        return RequestContext(
            thread=number,
            turn=context.turn,
            envelope=context.envelope,
            fields=context.fields,
            note=f"the agent changed, not only the model (no recorded thread has its system"
            f" prompt; closest is thread {closest})",
        )

    def _context(self, thread: int, turn: int, live: Call) -> RequestContext | None:
        """The request-side note for a thread's first live call, or None when nothing real moved."""
        recorded = self._calls[turn]
        envelope = envelope_changes(recorded.turn.request, live.turn.request, other="live")
        fields: list[Difference] = []
        if recorded.body is not None and live.body is not None:
            for change in diff_fields(recorded.body, live.body):
                if change.path == "model" and any(e.startswith("model:") for e in envelope):
                    continue  # the envelope already said it, in the same words
                if _per_run_id(change.recorded, change.replayed):
                    continue  # a session id or timestamp moving is not the agent changing
                path = change.path + (f" → {change.inner}" if change.inner else "")
                fields.append(Difference(path, change.recorded, change.replayed))
        if not envelope and not fields:
            return None
        return RequestContext(
            thread=thread, turn=turn, envelope=tuple(envelope), fields=tuple(fields)
        )


def _per_run_id(recorded: Any, live: Any) -> bool:
    return (
        isinstance(recorded, str)
        and isinstance(live, str)
        and (looks_like_per_run_id(recorded, live) is not None)
    )
