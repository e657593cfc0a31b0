"""Tests for flowproof.pairing: live calls pair with recorded turns by thread and depth."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowproof.compare import Difference
from flowproof.pairing import Call, Pairer, UnreadableTurnError, depth_of
from flowproof.turns import FinishReason, RequestView, ResponseView, ToolCall, ToolResult, Turn

MAIN = "You book flights."
TITLE = "Write a five-word title for this conversation."
PROMPT = "Book KQ311 for two"


def request(
    system: str = MAIN,
    depth: int = 2,
    prompt: str = PROMPT,
    tools: tuple[str, ...] = ("search", "book"),
) -> RequestView:
    roles = ("system", "user", *(("assistant", "tool")[i % 2] for i in range(depth - 2)))
    return RequestView(
        provider="openai-chat",
        model="gpt-test",
        system=system,
        tools=tools,
        roles=roles,
        tool_results=(),
        stream=False,
        text_size=len(system) + len(prompt),
        prompt=prompt,
    )


def calls(*pairs: tuple[str, str], call_id: str = "call_1") -> ResponseView:
    return ResponseView(
        "",
        tuple(ToolCall(n, a, f"{call_id}_{i}") for i, (n, a) in enumerate(pairs)),
        FinishReason.TOOL_CALLS,
    )


def said(text: str, finish: FinishReason = FinishReason.STOP) -> ResponseView:
    return ResponseView(text, (), finish)


def call(index: int, req: RequestView, resp: ResponseView | None, body: Any = None) -> Call:
    return Call(Turn(index, req, resp), body)


def recording() -> list[Call]:
    """A tool-using agent: search, book, reply; a concurrent title call landed second."""
    return [
        call(0, request(depth=2), calls(("search", '{"from":"NBO","to":"LHR"}'))),
        call(1, request(TITLE, depth=2), said("Booking KQ311 for two")),
        call(2, request(depth=4), calls(("book", '{"flight":{"id":"KQ311"},"seats":2}'))),
        call(3, request(depth=6), said("You are booked on KQ311.")),
    ]


def live_like() -> dict[str, Call]:
    """The same conversation from a live model: fresh ids, reordered keys, other case and spacing."""
    return {
        "search": call(
            0, request(depth=2), calls(("search", '{"to": "LHR", "from": "NBO"}'), call_id="x9")
        ),
        "title": call(1, request(TITLE, depth=2), said("booking KQ311  for two\n")),
        "book": call(
            2,
            request(depth=4),
            calls(("book", '{"seats":2, "flight":{"id":"KQ311"}}'), call_id="x10"),
        ),
        "reply": call(3, request(depth=6), said("  You are BOOKED on KQ311.")),
    }


def run(order: list[str], live: dict[str, Call] | None = None) -> tuple[Pairer, list[Any]]:
    live = live or live_like()
    pairer = Pairer(recording())
    results = []
    for n, name in enumerate(order):
        c = live[name]
        results.append(pairer.pair(Call(Turn(n, c.turn.request, c.turn.response), c.body)))
    return pairer, results


class TestLiveLikeConversation:
    def test_unchanged_agent_is_equal_everywhere(self) -> None:
        """Fresh ids, reordered argument keys and case/whitespace prose pair and compare equal."""
        pairer, results = run(["search", "title", "book", "reply"])
        assert [(r.kind, r.turn, r.thread, r.depth, r.equal) for r in results] == [
            ("paired", 0, 0, 2, True),
            ("paired", 1, 1, 2, True),
            ("paired", 2, 0, 4, True),
            ("paired", 3, 0, 6, True),
        ]
        assert [r.text.status for r in results] == ["exact", "normalized", "exact", "normalized"]
        assert pairer.finish() == ()

    def test_title_call_pairs_in_its_own_thread_in_either_order(self) -> None:
        """The title thread pairs with its own turn whether it completes first or last."""
        for order in (["title", "search", "book", "reply"], ["search", "book", "reply", "title"]):
            pairer, results = run(order)
            assert sorted((r.turn, r.live_call) for r in results) == sorted(
                (["search", "title", "book", "reply"].index(name), n)
                for n, name in enumerate(order)
            )
            assert all(r.equal for r in results)
            assert pairer.finish() == ()

    @settings(max_examples=30, deadline=None)
    @given(st.permutations(["search", "title", "book", "reply"]))
    def test_any_arrival_order_pairs_each_place_once(self, order: list[str]) -> None:
        """Whatever order the calls complete in, each pairs with the turn at its place."""
        pairer, results = run(order)
        assert all(r.kind == "paired" and r.equal for r in results)
        assert sorted(r.turn for r in results) == [0, 1, 2, 3]
        assert pairer.finish() == ()


class TestDrift:
    def test_changed_argument_names_path_and_both_values(self) -> None:
        """One changed argument is the only drift, named by path with both values."""
        live = live_like()
        live["book"] = call(
            2, request(depth=4), calls(("book", '{"flight":{"id":"KQ999"},"seats":2}'))
        )
        _, results = run(["search", "title", "book", "reply"], live)
        assert [r.equal for r in results] == [True, True, False, True]
        assert results[2].differences == (
            Difference("tool_calls.0.arguments.flight.id", "KQ311", "KQ999"),
        )

    def test_changed_finish_reason_is_drift(self) -> None:
        """The same reply cut off by length is drift on the finish reason only."""
        live = live_like()
        live["reply"] = call(
            3, request(depth=6), said("You are booked on KQ311.", FinishReason.LENGTH)
        )
        _, results = run(["search", "title", "book", "reply"], live)
        assert results[3].differences == (Difference("finish_reason", "stop", "length"),)

    def test_reworded_text_is_different(self) -> None:
        """Reworded prose is `different` and unequal."""
        live = live_like()
        live["reply"] = call(3, request(depth=6), said("Your seats on KQ311 are confirmed."))
        _, results = run(["search", "title", "book", "reply"], live)
        assert results[3].text.status == "different" and not results[3].equal

    def test_extra_call_beyond_the_recording(self) -> None:
        """A live call deeper than anything recorded in its thread is extra, with the depths known."""
        live = live_like()
        live["more"] = call(4, request(depth=8), said("Anything else?"))
        pairer, results = run(["search", "title", "book", "reply", "more"], live)
        extra = results[4]
        assert (extra.kind, extra.equal, extra.turn, extra.live_call) == ("extra", False, None, 4)
        assert extra.reason == "thread 0 has no recorded turn at depth 8 (recorded depths: 2, 4, 6)"
        assert pairer.finish() == ()

    def test_a_second_call_at_a_paired_place_is_extra(self) -> None:
        """A repeated call (a retry) at a place already paired is extra and says so."""
        _pairer, results = run(["search", "search"])
        assert results[1].kind == "extra"
        assert results[1].reason == (
            "every recorded turn of thread 0 at depth 2 is already paired:"
            " the agent made more calls here than recorded"
        )

    def test_turns_never_reached_are_missing(self) -> None:
        """A live run that stops early leaves its unreached turns missing, in turn order."""
        pairer, results = run(["search", "title"])
        assert all(r.equal for r in results)
        missing = pairer.finish()
        assert [(m.kind, m.turn, m.thread, m.depth, m.equal) for m in missing] == [
            ("missing", 2, 0, 4, False),
            ("missing", 3, 0, 6, False),
        ]
        assert missing[0].reason == "no live call reached this place in the conversation"

    def test_one_drift_does_not_cascade(self) -> None:
        """A drifted call does not shift the pairing of the calls after it."""
        live = live_like()
        live["search"] = call(0, request(depth=2), calls(("search", '{"from":"NBO","to":"CDG"}')))
        _, results = run(["search", "title", "book", "reply"], live)
        assert [r.equal for r in results] == [False, True, True, True]
        assert [r.turn for r in results] == [0, 1, 2, 3]

    def test_call_with_no_response_is_compared_as_an_error(self) -> None:
        """A live call that got no response is drift on the finish reason (error)."""
        live = live_like()
        live["reply"] = call(3, request(depth=6), None)
        _, results = run(["search", "title", "book", "reply"], live)
        assert Difference("finish_reason", "stop", "error") in results[3].differences


class TestTieRule:
    def concurrent(self) -> list[Call]:
        return [
            call(0, request(depth=2, prompt="Summarise doc A"), said("A is about cats.")),
            call(1, request(depth=2, prompt="Summarise doc B"), said("B is about dogs.")),
        ]

    def test_same_thread_and_depth_pair_by_newest_user_text(self) -> None:
        """Two concurrent calls of one thread and depth pair by their newest user text."""
        pairer = Pairer(self.concurrent())
        first = pairer.pair(
            call(0, request(depth=2, prompt="Summarise doc B"), said("B is about dogs."))
        )
        second = pairer.pair(
            call(1, request(depth=2, prompt="Summarise doc A"), said("A is about cats."))
        )
        assert (first.turn, second.turn) == (1, 0)
        assert first.equal and second.equal

    def test_same_text_pairs_in_completion_order(self) -> None:
        """With the same newest user text too, the earliest recorded turn goes first (the limit)."""
        pairer = Pairer(
            [
                call(0, request(depth=2), said("one")),
                call(1, request(depth=2), said("two")),
            ]
        )
        first = pairer.pair(call(0, request(depth=2), said("two")))
        second = pairer.pair(call(1, request(depth=2), said("one")))
        # Crosswise: each live answer is judged against the other call's recording.
        assert (first.turn, second.turn) == (0, 1)
        assert not first.equal and not second.equal

    def test_the_same_api_wins_a_tie(self) -> None:
        """Of two recorded turns at one place, the one sent to the live call's API is chosen."""
        anthropic = replace(request(), provider="anthropic")
        pairer = Pairer([call(0, anthropic, said("a")), call(1, request(), said("b"))])
        assert pairer.pair(call(0, request(), said("b"))).turn == 1
        assert pairer.pair(call(1, anthropic, said("a"))).turn == 0


class TestUnreadableTurns:
    def test_a_live_call_at_an_unreadable_turn_is_an_error_not_a_verdict(self) -> None:
        """A recorded response no codec reads keeps its place; pairing there raises a clear error."""
        pairer = Pairer([Call(Turn(0, request(), None), problem="content: missing")])
        with pytest.raises(UnreadableTurnError, match="recorded response cannot be read") as info:
            pairer.pair(call(3, request(), said("hi")))
        assert info.value.turn == 0
        assert "live call 3 cannot be compared with recorded turn 0" in str(info.value)
        assert pairer.finish() == ()  # its place was taken: it is not also missing


class TestRequestContext:
    def test_unchanged_first_request_has_no_context(self) -> None:
        """When the agent sends what it sent before, there is nothing to say about the request."""
        body = {"model": "gpt-test", "messages": [{"role": "user", "content": PROMPT}]}
        pairer = Pairer([call(0, request(), said("Hi"), body)])
        assert pairer.pair(call(0, request(), said("hi"), dict(body))).context is None

    def test_a_new_tool_is_noted_on_the_first_call_only(self) -> None:
        """A tool added to the agent: the thread's first result says the agent changed."""
        pairer = Pairer(recording())
        tools = ("search", "book", "refund")
        first = pairer.pair(
            call(0, request(tools=tools), calls(("search", '{"from":"NBO","to":"LHR"}')))
        )
        later = pairer.pair(
            call(
                1,
                request(depth=4, tools=tools),
                calls(("book", '{"flight":{"id":"KQ311"},"seats":2}')),
            )
        )
        assert first.equal and first.context is not None
        assert first.context.lines() == [
            (
                "the agent changed, not only the model: the first request of thread 0 differs from"
                " recorded turn 0"
            ),
            "- you added a tool: refund",
        ]
        assert later.context is None

    def test_an_edited_prompt_names_the_field(self) -> None:
        """An edited user prompt shows as a body field, `recorded X, live Y`."""
        rec = {"messages": [{"role": "user", "content": "Book KQ311"}]}
        live = {"messages": [{"role": "user", "content": "Book KQ999"}]}
        pairer = Pairer([call(0, request(), said("ok"), rec)])
        result = pairer.pair(call(0, request(), said("ok"), live))
        assert result.context is not None
        assert result.context.fields == (
            Difference("messages.0.content", "Book KQ311", "Book KQ999"),
        )
        assert result.context.lines()[1] == (
            '- messages.0.content: recorded "Book KQ311", live "Book KQ999"'
        )

    def test_per_run_ids_are_not_an_agent_change(self) -> None:
        """A session id that moves between runs is not reported as the agent changing."""
        rec = {"metadata": {"user_id": "session_0c6f1f2e-8a3b-4d6e-9f10-1a2b3c4d5e6f"}}
        live = {"metadata": {"user_id": "session_7d2e9a41-1b2c-4e5f-8a9b-0c1d2e3f4a5b"}}
        pairer = Pairer([call(0, request(), said("ok"), rec)])
        assert pairer.pair(call(0, request(), said("ok"), live)).context is None

    def test_edited_system_prompt_is_a_new_thread_with_context(self) -> None:
        """A changed system prompt matches no recorded thread: extra results, a note, and missing."""
        rec_body = {"messages": [{"role": "system", "content": MAIN}]}
        live_body = {"messages": [{"role": "system", "content": "You book flights and hotels."}]}
        recorded = [call(0, request(), said("Hi"), rec_body), call(1, request(TITLE), said("T"))]
        pairer = Pairer(recorded)
        result = pairer.pair(
            call(0, request("You book flights and hotels."), said("Hi"), live_body)
        )
        assert (result.kind, result.thread, result.reason) == (
            "extra",
            2,
            "no recorded thread has this system prompt",
        )
        assert result.context is not None
        assert result.context.lines() == [
            (
                "the agent changed, not only the model (no recorded thread has its system prompt;"
                " closest is thread 0): the first request of thread 2 differs from recorded turn 0"
            ),
            '- messages.0.content: recorded "You book flights.", live "You book flights and hotels."',
        ]
        assert [(m.kind, m.turn) for m in pairer.finish()] == [("missing", 0), ("missing", 1)]


class TestDepthAndThreads:
    def test_depth_counts_messages(self) -> None:
        """depth_of is the number of messages/items the request carries."""
        assert depth_of(request(depth=5)) == 5

    def test_tool_results_do_not_move_the_place(self) -> None:
        """Different tool results (a live tool answered otherwise) still pair at the same place."""
        recorded = [call(0, request(depth=4), said("ok"))]
        live_req = replace(
            request(depth=4), tool_results=(ToolResult("id9", "search", "other result"),)
        )
        assert Pairer(recorded).pair(call(0, live_req, said("ok"))).turn == 0

    def test_concurrent_pairing_is_thread_safe(self) -> None:
        """Many threads pairing at once pair every recorded turn exactly once."""
        recorded = [call(i, request(f"agent {i}"), said(str(i))) for i in range(40)]
        pairer = Pairer(recorded)
        results: list[Any] = []
        lock = threading.Lock()

        def worker(i: int) -> None:
            r = pairer.pair(call(i, request(f"agent {i}"), said(str(i))))
            with lock:
                results.append(r)

        workers = [threading.Thread(target=worker, args=(i,)) for i in range(40)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert sorted(r.turn for r in results) == list(range(40))
        assert all(r.equal for r in results)
        assert pairer.finish() == ()


class TestContinuationsById:
    """Live continuations name live response ids (fresh every run): they pair by the chain."""

    @staticmethod
    def turn(index: int, system: str, rid: str, previous: str | None = None, output: str = "") -> Turn:
        roles = ("developer", "user") if previous is None else ("tool",)
        req = RequestView("openai-responses", "m", system, (), roles, (), True, 10,
                          previous_response_id=previous)
        return Turn(index, req, ResponseView(f"done {output}", (), FinishReason.STOP, response_id=rid))

    def test_two_chains_pair_within_their_own_roots_whatever_the_order(self) -> None:
        """A main agent and a helper each continue by id with only a tool output (no system
        prompt, no user text): without the chain their continuations would look alike."""
        recorded = [Call(t) for t in (
            self.turn(0, "main agent", "rA"), self.turn(1, "helper agent", "rB"),
            self.turn(2, "", "rA2", previous="rA", output="main"), self.turn(3, "", "rB2", previous="rB",
                                                                          output="helper"),
        )]
        pairer = Pairer(recorded)
        live = [
            self.turn(0, "helper agent", "xB"), self.turn(1, "main agent", "xA"),
            # The helper's continuation completes first this time.
            self.turn(2, "", "xB2", previous="xB", output="helper"), self.turn(3, "", "xA2", previous="xA",
                                                                           output="main"),
        ]
        results = [pairer.pair(Call(t)) for t in live]
        assert [(r.kind, r.turn, r.equal) for r in results] == [
            ("paired", 1, True), ("paired", 0, True), ("paired", 3, True), ("paired", 2, True)]
        assert [r.depth for r in results[2:]] == [4, 4]  # 2 items, the answer, 1 new item
        assert pairer.finish() == ()
