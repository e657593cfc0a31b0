"""The strict matcher: a replayed request must match a recorded turn byte for byte.

Rules (docs/design.md#matching):

- The key is the sha256 of the request body after tool-result substitution and
  normalization, plus the fields the API names in the URL path (Gemini's
  model; `flowproof.request_key.match_key`); headers are not matched.
- Every recorded turn is served exactly once. Among unconsumed turns with the
  same body the earliest wins, so concurrent calls may arrive in any order and a
  sequential agent still maps turn K to turn K.
- The first request that matches nothing fails the replay; every later request
  is refused without being matched (fail fast: no searching past a divergence).
- An abandoned turn (the client gave up on it at record) is served like any
  other when it is requested again, and never reported missing when it is not.

Pure and O(1) per request: a dict from hash to a deque of turn positions.

>>> from flowproof.cassette import Cassette
>>> Replayer(Cassette(())).decide("openai-chat", "00" * 32, {}).divergence.kind
'extra'
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from flowproof.cassette import Cassette, RecordedTurn
from flowproof.divergence import ClosestTurns, Divergence, explain_miss
from flowproof.options import Route
from flowproof.request_key import match_key
from flowproof.turns import RequestView
from flowproof.views import request_view, turn_path_fields
from flowproof.wire import with_path_fields

__all__ = ["Miss", "Replay", "Replayer", "ViewOf", "route_mismatch"]

#: Builds the request view of a parsed body for a provider, or None when it cannot.
ViewOf = Callable[[str, Any], RequestView | None]


@dataclass(frozen=True, slots=True)
class Replay:
    """The request matched: serve ``turn``'s recorded response; ``position`` is its place in
    the cassette's turns (what the event log names it by)."""

    turn: RecordedTurn
    position: int


@dataclass(frozen=True, slots=True)
class Miss:
    """The request matched nothing: the run has failed, ``divergence`` says why."""

    divergence: Divergence


class Replayer:
    """Serves recorded turns to replayed requests; thread-safe (the addon calls it per connection).

    ``view_of`` builds request views for the divergence report (default: the wire codecs).
    """

    def __init__(self, cassette: Cassette, view_of: ViewOf | None = request_view) -> None:
        self.cassette = cassette
        self._view_of = view_of
        self._lock = threading.Lock()
        # match key (`match_key`) -> positions in ``cassette.turns`` not yet served, in recorded order.
        self._index: dict[str, deque[int]] = {}
        # Every position per key, kept to explain an extra call after all are served.
        self._all: dict[str, list[int]] = {}
        #: The path fields of each recorded turn, by position (for the divergence report).
        self._path_fields: list[dict[str, str]] = []
        for pos, turn in enumerate(cassette.turns):
            self._path_fields.append(turn_path_fields(turn))
            key = match_key(turn.request.body_sha256, self._path_fields[pos])
            self._index.setdefault(key, deque()).append(pos)
            self._all.setdefault(key, []).append(pos)
        self._consumed: set[int] = set()
        self._requests = 0
        self._failed_at: int | None = None
        self._closest: ClosestTurns | None = None

    @property
    def served(self) -> int:
        """How many recorded turns have been served."""
        with self._lock:
            return len(self._consumed)

    @property
    def failed(self) -> bool:
        """True once a request has matched nothing: the replay has diverged."""
        with self._lock:
            return self._failed_at is not None

    @property
    def failed_at(self) -> int | None:
        """The 1-based number of the first request that matched nothing, if any."""
        with self._lock:
            return self._failed_at

    def decide(
        self, provider: str, body_sha256: str, body: Any, path_fields: Mapping[str, str] | None = None
    ) -> Replay | Miss:
        """Match one request: the earliest unconsumed turn with this body hash and these path
        fields (`Codec.path_fields` of the request's URL path), or a `Miss`.

        ``body`` (the parsed normalized body) is only read to explain a miss; it may be a
        zero-argument callable returning it (a JSON body never is one), so a request that
        matches never pays for parsing its body (docs/hotpath.md).
        """
        fields = dict(path_fields or {})
        key = match_key(body_sha256, fields)
        with self._lock:
            self._requests += 1
            number = self._requests
            if self._failed_at is not None:
                return Miss(
                    Divergence(
                        kind="after-failure",
                        request_number=number,
                        closest_index=None,
                        note=f"the replay already diverged at request {self._failed_at}",
                    )
                )
            queue = self._index.get(key)
            if queue:
                pos = queue.popleft()
                self._consumed.add(pos)
                return Replay(self.cassette.turns[pos], pos)
            self._failed_at = number
            if queue is not None:
                last = self.cassette.turns[self._all[key][-1]]
                return Miss(
                    Divergence(
                        kind="extra",
                        request_number=number,
                        closest_index=last.index,
                        note=(
                            f"matches turn {last.index}, which was already served: "
                            "the agent made this call one more time than recorded"
                        ),
                    )
                )
            consumed = frozenset(self._consumed)
        # The explanation (views, deepdiff) runs outside the lock: the replay has
        # already failed, and other connections only need the cheap refusal above.
        if callable(body):
            body = body()
        return Miss(self._explain(provider, body, fields, consumed, number))

    def _explain(
        self, provider: str, body: Any, fields: dict[str, str], consumed: frozenset[int], number: int
    ) -> Divergence:
        view_of = self._view_of
        view = view_of(provider, body) if view_of is not None else None
        if view is not None:
            view = with_path_fields(view, fields)
        positions = {id(t): pos for pos, t in enumerate(self.cassette.turns)}

        def recorded_fields(turn: RecordedTurn) -> dict[str, str]:
            pos = positions.get(id(turn))
            return self._path_fields[pos] if pos is not None else turn_path_fields(turn)

        def views(turn: RecordedTurn) -> RequestView | None:
            if view_of is None:
                return None
            recorded = view_of(turn.provider, turn.request.body)
            return with_path_fields(recorded, recorded_fields(turn)) if recorded is not None else None

        if self._closest is None:
            # Built on the first miss only (a passing replay never needs it), once per cassette.
            self._closest = ClosestTurns(self.cassette.turns, self._path_fields.__getitem__)
        return explain_miss(
            body, view, self.cassette, consumed, views, request_number=number,
            path_fields=fields, recorded_path_fields=recorded_fields, api=provider, index=self._closest,
        )

    def unconsumed(self) -> list[RecordedTurn]:
        """The recorded turns never served, in recorded order; abandoned turns are left out:
        the agent gave up on them at record, so not asking again is no missing call."""
        with self._lock:
            consumed = set(self._consumed)
        return [
            t for pos, t in enumerate(self.cassette.turns) if pos not in consumed and not t.abandoned
        ]


_ROUTE_WORDS: dict[str, str] = {
    Route.PROXY: "the proxy route (HTTPS_PROXY)",
    Route.BASE_URL: "the base-URL route (OPENAI_BASE_URL and friends)",
}


def route_mismatch(cassette_route: str, route: str) -> str | None:
    """A message when a cassette recorded on one route is replayed on the other, else None.

    Some agents send different requests per route, so replay refuses the mismatch.
    """
    if cassette_route == route:
        return None
    rec = _ROUTE_WORDS.get(cassette_route, repr(cassette_route))
    now = _ROUTE_WORDS.get(route, repr(route))
    return (
        f"the cassette was recorded through {rec} but this run uses {now}; "
        f"agents may send different requests per route, so replay refuses the mismatch — "
        f"set agent.route: {cassette_route} in the spec, or re-record on the {route} route"
    )
