from __future__ import annotations

import gc
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from flowproof.cassette import (
    Cassette,
    RecordedRequest,
    RecordedResponse,
    RecordedTurn,
)
from flowproof.divergence import missing_calls
from flowproof.replay import Miss, Replay, Replayer, route_mismatch
from flowproof.request_key import body_sha256
from flowproof.turns import RequestView
from flowproof.views import request_view


def chat(text: str, system: str = "You book flights.") -> dict:
    return {"model": "gpt-4o", "messages": [{"role": "system", "content": system}, {"role": "user", "content": text}]}


def sha(body: dict) -> str:
    return body_sha256(json.dumps(body, separators=(",", ":")).encode())


def turn(index: int, body: dict) -> RecordedTurn:
    return RecordedTurn(
        index=index,
        provider="openai-chat",
        request=RecordedRequest("POST", "https://api.openai.com/v1/chat/completions", {}, sha(body), body),
        response=RecordedResponse(200, {}, body={"n": index}),
    )


def cassette(*bodies: dict) -> Cassette:
    return Cassette(tuple(turn(i, b) for i, b in enumerate(bodies)))


def hand_view(provider: str, body: dict) -> RequestView:
    msgs = body["messages"]
    return RequestView(
        provider=provider,
        model=body["model"],
        system="".join(m["content"] for m in msgs if m["role"] == "system"),
        tools=(),
        roles=tuple(m["role"] for m in msgs),
        tool_results=(),
        stream=False,
        text_size=0,
    )


def served_index(result: Replay | Miss) -> int:
    assert isinstance(result, Replay), result
    return result.turn.index


class TestConsumeOnce:
    def test_identical_bodies_are_each_served_once_in_order(self):
        """Twenty turns with the same body are served once each, earliest first."""
        b = chat("same")
        r = Replayer(cassette(*[b] * 20), view_of=None)
        assert [served_index(r.decide("openai-chat", sha(b), b)) for _ in range(20)] == list(range(20))
        assert r.served == 20 and r.unconsumed() == [] and not r.failed

    def test_identical_bodies_from_twenty_threads(self):
        """Twenty concurrent identical requests get twenty distinct turns."""
        b = chat("same")
        r = Replayer(cassette(*[b] * 20), view_of=None)
        barrier = threading.Barrier(20, timeout=10)

        def call(_: int) -> int:
            barrier.wait()
            return served_index(r.decide("openai-chat", sha(b), b))

        with ThreadPoolExecutor(max_workers=20) as pool:
            indices = list(pool.map(call, range(20), timeout=30))
        assert sorted(indices) == list(range(20))
        assert r.served == 20

    def test_earliest_unconsumed_wins_with_interleaved_hashes(self):
        """With bodies A B A B, each request takes the earliest unconsumed turn of its body."""
        a, b = chat("a"), chat("b")
        r = Replayer(cassette(a, b, a, b), view_of=None)
        assert served_index(r.decide("openai-chat", sha(b), b)) == 1
        assert served_index(r.decide("openai-chat", sha(a), a)) == 0
        assert served_index(r.decide("openai-chat", sha(a), a)) == 2
        assert served_index(r.decide("openai-chat", sha(b), b)) == 3

    def test_a_match_names_its_position_in_the_cassette(self):
        """Each match says where its turn sits in the cassette (the event log names it so); the
        turns of one body are served in recorded order."""
        a, b = chat("a"), chat("b")
        recorded = cassette(a, b, a)
        r = Replayer(recorded, view_of=None)
        served = [r.decide("openai-chat", sha(body), body) for body in (a, a, b)]
        assert [(d.position, d.turn) for d in served if isinstance(d, Replay)] == [
            (0, recorded.turns[0]), (2, recorded.turns[2]), (1, recorded.turns[1]),
        ]


class TestMisses:
    def test_extra_call_names_the_served_turn(self):
        """A call whose body was recorded but already served is an extra call."""
        a, b = chat("a"), chat("b")
        r = Replayer(cassette(a, b), view_of=None)
        r.decide("openai-chat", sha(a), a)
        result = r.decide("openai-chat", sha(a), a)
        assert isinstance(result, Miss)
        assert result.divergence.kind == "extra"
        assert result.divergence.summary() == (
            "request 2 matches turn 0, which was already served: "
            "the agent made this call one more time than recorded"
        )
        assert r.failed and r.failed_at == 2

    def test_unmatched_body_is_explained_against_the_closest_turn(self):
        """A body with no recorded hash gets an unmatched divergence comparing it to the closest turn."""
        a, b = chat("a"), chat("b", system="Name the session.")
        r = Replayer(cassette(b, a), view_of=hand_view)
        edited = chat("A")
        result = r.decide("openai-chat", sha(edited), edited)
        assert isinstance(result, Miss)
        d = result.divergence
        assert (d.kind, d.request_number, d.closest_index, d.note) == ("unmatched", 1, 1, "same conversation")
        assert [f.render() for f in d.fields] == ["messages.1.content: recorded a, replayed A"]

    def test_a_lazy_body_is_read_only_to_explain_a_miss(self):
        """The body may come as a callable: a matching request never calls it, a miss does once."""
        a, b = chat("a"), chat("b")
        r = Replayer(cassette(a, chat("c")), view_of=hand_view)
        reads: list[str] = []

        def lazy(body: dict) -> object:
            def read() -> dict:
                reads.append(body["messages"][1]["content"])
                return body
            return read

        assert served_index(r.decide("openai-chat", sha(a), lazy(a))) == 0
        assert reads == []
        result = r.decide("openai-chat", sha(b), lazy(b))
        assert isinstance(result, Miss) and reads == ["b"]
        assert [f.render() for f in result.divergence.fields] == ["messages.1.content: recorded c, replayed b"]

    def test_fail_fast_after_the_first_miss(self):
        """After a miss every later request is refused, even one that would match, and nothing is consumed."""
        a, b = chat("a"), chat("b")
        r = Replayer(cassette(a, b), view_of=None)
        assert served_index(r.decide("openai-chat", sha(a), a)) == 0
        bad = chat("zzz")
        assert isinstance(r.decide("openai-chat", sha(bad), bad), Miss)
        later = r.decide("openai-chat", sha(b), b)
        assert isinstance(later, Miss)
        assert later.divergence.kind == "after-failure"
        assert later.divergence.summary() == (
            "request 3 was not matched: the replay already diverged at request 2"
        )
        assert [t.index for t in r.unconsumed()] == [1]
        assert r.served == 1

    def test_empty_cassette_makes_every_call_extra(self):
        """With nothing recorded the first call is an extra call with no candidate."""
        r = Replayer(Cassette(()), view_of=None)
        result = r.decide("openai-chat", "0" * 64, {})
        assert isinstance(result, Miss)
        assert result.divergence.kind == "extra" and result.divergence.closest_index is None

    def test_default_views_come_from_the_wire_codec(self):
        """With the default view function the report compares envelopes through the codec."""
        a = chat("a")
        r = Replayer(cassette(a))
        other = dict(a, model="gpt-4.1")
        result = r.decide("openai-chat", sha(other), other)
        assert isinstance(result, Miss)
        assert result.divergence.envelope == ("model: recorded gpt-4o, replayed gpt-4.1",)
        assert request_view("no-such-provider", a) is None

    def test_lone_surrogate_body_still_gets_an_envelope(self):
        """A body holding a lone surrogate (a cut emoji) is still read by the codec for the report."""
        a = chat("cut \ud83d")
        assert request_view("openai-chat", a) is not None
        r = Replayer(cassette(a))
        other = dict(a, model="gpt-4.1")
        result = r.decide("openai-chat", "0" * 64, other)
        assert isinstance(result, Miss)
        assert result.divergence.envelope == ("model: recorded gpt-4o, replayed gpt-4.1",)


class TestEndOfRun:
    def test_missing_calls_list_unconsumed_turns(self):
        """Turns never requested are reported as missing calls in recorded order."""
        a, b, c = chat("a"), chat("b"), chat("c")
        r = Replayer(cassette(a, b, c), view_of=None)
        r.decide("openai-chat", sha(b), b)
        d = missing_calls([t.index for t in r.unconsumed()])
        assert d is not None and d.kind == "missing" and d.closest_index == 0
        assert d.summary() == (
            "2 recorded turns were never requested: turns 0, 2 (the agent made fewer calls than recorded)"
        )

    def test_one_missing_turn_reads_singular(self):
        """A single unconsumed turn is named in the singular."""
        r = Replayer(cassette(chat("a")), view_of=None)
        d = missing_calls([t.index for t in r.unconsumed()])
        assert d is not None
        assert d.summary() == "1 recorded turn was never requested: turn 0 (the agent made fewer calls than recorded)"

    def test_no_missing_divergence_when_all_served(self):
        """When every turn was served there is no missing divergence."""
        a = chat("a")
        r = Replayer(cassette(a), view_of=None)
        r.decide("openai-chat", sha(a), a)
        assert r.unconsumed() == [] and missing_calls([]) is None


class TestRouteMismatch:
    def test_same_route_is_fine(self):
        """The same route gives no message."""
        assert route_mismatch("proxy", "proxy") is None

    def test_other_route_says_what_to_do(self):
        """A different route names both routes and what to do."""
        assert route_mismatch("proxy", "base_url") == (
            "the cassette was recorded through the proxy route (HTTPS_PROXY) but this run uses "
            "the base-URL route (OPENAI_BASE_URL and friends); agents may send different requests "
            "per route, so replay refuses the mismatch — set agent.route: proxy in the spec, "
            "or re-record on the base_url route"
        )


class CountingTurns(tuple):  # type: ignore[type-arg]
    """A cassette's turns that count how many turns were read, by index or by iteration."""

    reads = 0

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        CountingTurns.reads += 1
        return super().__getitem__(index)

    def __iter__(self):  # type: ignore[no-untyped-def]
        for turn in super().__iter__():
            CountingTurns.reads += 1
            yield turn


class TestCost:
    @staticmethod
    def served_all(n: int) -> tuple[Replayer, float]:
        """A Replayer over an n-turn cassette, and the seconds it took to serve every turn once."""
        bodies = [{"i": i} for i in range(n)]
        turns = CountingTurns(
            RecordedTurn(i, "openai-chat", RecordedRequest("POST", "u", {}, f"{i:064x}", b), RecordedResponse(200, {}))
            for i, b in enumerate(bodies)
        )
        r = Replayer(Cassette(turns), view_of=None)
        CountingTurns.reads = 0
        gc.disable()  # as timeit does: a collection would charge the whole heap to one size
        try:
            start = time.perf_counter()
            # Reverse order: a scan from the front would cost O(n) per request here.
            for i in reversed(range(n)):
                assert served_index(r.decide("openai-chat", f"{i:064x}", bodies[i])) == i
            decided = time.perf_counter() - start
        finally:
            gc.enable()
        assert r.served == n
        return r, decided

    def test_building_reads_each_turn_once(self):
        """The index is built in one pass over the cassette."""
        turns = CountingTurns(
            RecordedTurn(i, "openai-chat", RecordedRequest("POST", "u", {}, f"{i:064x}", {}), RecordedResponse(200, {}))
            for i in range(1_000)
        )
        CountingTurns.reads = 0
        Replayer(Cassette(turns), view_of=None)
        assert CountingTurns.reads == 1_000

    def test_serving_reads_one_turn_per_request(self):
        """Each request is a dict hit: serving n turns reads n turns, never a scan of the cassette."""
        self.served_all(10_000)
        assert CountingTurns.reads == 10_000

    def test_cost_does_not_grow_with_cassette_size(self):
        """Serving every turn of a 10x larger cassette costs about 10x, not the 100x of a scan.

        Compared within one run (the best of three, so a busy machine slows both sizes alike)
        rather than against a wall-clock bound that a loaded 2-CPU machine can miss.
        """
        small = min(self.served_all(2_000)[1] for _ in range(3))
        large = min(self.served_all(20_000)[1] for _ in range(3))
        assert large / small < 50, (small, large)


class TestAbandonedTurns:
    def test_an_abandoned_turn_is_served_when_asked(self):
        title = chat("Name this session", system="Title it.")
        recorded = Cassette((turn(0, chat("Book KQ311")), replace(turn(1, title), abandoned=True)))
        replayer = Replayer(recorded)
        decision = replayer.decide("openai-chat", sha(title), title)
        assert isinstance(decision, Replay) and decision.turn.abandoned

    def test_an_abandoned_turn_never_asked_for_is_not_missing(self):
        title = chat("Name this session", system="Title it.")
        main = chat("Book KQ311")
        replayer = Replayer(Cassette((turn(0, main), replace(turn(1, title), abandoned=True))))
        replayer.decide("openai-chat", sha(main), main)
        assert replayer.unconsumed() == []


GEMINI_URL = "https://generativelanguage.googleapis.com/v1beta/models/{}:streamGenerateContent?alt=sse"
GEMINI_BODY = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


def gemini_turn(model: str) -> RecordedTurn:
    return RecordedTurn(
        index=0,
        provider="gemini",
        request=RecordedRequest("POST", GEMINI_URL.format(model), {}, sha(GEMINI_BODY), GEMINI_BODY),
        response=RecordedResponse(200, {}, body={"candidates": []}),
    )


class TestModelInThePath:
    def test_the_same_body_under_another_model_matches_nothing(self):
        """Gemini's model is in the path: the key covers it, and the report names the model."""
        replayer = Replayer(Cassette((gemini_turn("gemini-2.5-flash"),)))
        decision = replayer.decide("gemini", sha(GEMINI_BODY), GEMINI_BODY, {"model": "gemini-2.5-flash-lite"})
        assert isinstance(decision, Miss)
        text = decision.divergence.render()
        assert "- model: recorded gemini-2.5-flash, replayed gemini-2.5-flash-lite" in text
        assert "parsed bodies are equal" not in text

    def test_the_recorded_model_matches(self):
        replayer = Replayer(Cassette((gemini_turn("gemini-2.5-flash"),)))
        decision = replayer.decide("gemini", sha(GEMINI_BODY), GEMINI_BODY, {"model": "gemini-2.5-flash"})
        assert isinstance(decision, Replay)

    def test_without_a_view_the_model_is_a_field_change(self):
        """No codec view (the report degraded): the path field is still named."""
        replayer = Replayer(Cassette((gemini_turn("gemini-2.5-flash"),)), view_of=None)
        decision = replayer.decide("gemini", sha(GEMINI_BODY), GEMINI_BODY, {"model": "gemini-2.5-pro"})
        assert isinstance(decision, Miss)
        assert "- model: recorded gemini-2.5-flash, replayed gemini-2.5-pro" in decision.divergence.render()
