"""Tests for flowproof.trajectory: threads, the main thread, tool calls and the reply rule."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from flowproof.trajectory import build_trajectory, thread_key
from flowproof.turns import FinishReason, RequestView, ResponseView, ToolCall, Turn

MAIN_SYSTEM = "You are a booking assistant. Use the tools."
TITLE_SYSTEM = "Generate a concise, sentence-case title (3-7 words)."


def request(system: str, text_size: int = 100) -> RequestView:
    return RequestView(
        provider="openai-chat",
        model="gpt-4o",
        system=system,
        tools=(),
        roles=("system", "user"),
        tool_results=(),
        stream=False,
        text_size=text_size,
    )


def reply_turn(index: int, system: str, text: str, text_size: int = 100) -> Turn:
    return Turn(index, request(system, text_size), ResponseView(text, (), FinishReason.STOP))


def tool_turn(index: int, system: str, *calls: ToolCall) -> Turn:
    return Turn(index, request(system), ResponseView("", calls, FinishReason.TOOL_CALLS))


class TestThreads:
    def test_thread_key_is_the_system_prompt(self) -> None:
        """A request's thread key is its system prompt, the key threads are grouped by."""
        assert thread_key(request(TITLE_SYSTEM)) == TITLE_SYSTEM
        trajectory = build_trajectory([reply_turn(0, MAIN_SYSTEM, "a"), reply_turn(1, TITLE_SYSTEM, "b")])
        assert [th.system for th in trajectory.threads] == [
            thread_key(t.request) for t in trajectory.turns
        ]

    def test_groups_turns_by_system_prompt(self) -> None:
        """Turns sharing a system prompt form one thread, in index order."""
        traj = build_trajectory(
            [
                reply_turn(2, MAIN_SYSTEM, "done"),
                reply_turn(1, TITLE_SYSTEM, "Flight booking"),
                tool_turn(0, MAIN_SYSTEM, ToolCall("search", "{}")),
            ]
        )
        assert [t.index for t in traj.turns] == [0, 1, 2]
        assert [th.system for th in traj.threads] == [MAIN_SYSTEM, TITLE_SYSTEM]
        assert [t.index for t in traj.threads[0].turns] == [0, 2]
        assert traj.threads[0].text_size == 200

    def test_main_is_the_thread_with_most_turns(self) -> None:
        """The thread with the most turns is the main thread even when it is smaller."""
        traj = build_trajectory(
            [
                reply_turn(0, TITLE_SYSTEM, "Big title", text_size=10_000),
                tool_turn(1, MAIN_SYSTEM, ToolCall("search", "{}")),
                reply_turn(2, MAIN_SYSTEM, "booked"),
            ]
        )
        assert traj.main is not None and traj.main.system == MAIN_SYSTEM
        assert traj.reply == "booked"

    def test_tie_goes_to_most_request_text(self) -> None:
        """Between threads with equally many turns, the one carrying more request text wins."""
        traj = build_trajectory(
            [
                reply_turn(0, MAIN_SYSTEM, "booked", text_size=5000),
                reply_turn(1, TITLE_SYSTEM, "Flight booking", text_size=80),
            ]
        )
        assert traj.reply == "booked"

    def test_full_tie_goes_to_earliest_thread(self) -> None:
        """With equal turns and equal text the thread whose first turn is earliest wins."""
        traj = build_trajectory([reply_turn(1, "second", "b", 50), reply_turn(0, "first", "a", 50)])
        assert traj.reply == "a"


class TestSideConversation:
    def test_title_call_in_either_order_gives_same_reply(self) -> None:
        """A concurrent title call landing before or after the main turns leaves the reply alone."""
        call = ToolCall("search_flights", '{"destination":"NBO"}')
        for title_index, main_indices in ((0, (1, 2)), (1, (0, 2)), (2, (0, 1))):
            turns = [
                reply_turn(title_index, TITLE_SYSTEM, "Booking a flight", text_size=60),
                tool_turn(main_indices[0], MAIN_SYSTEM, call),
                reply_turn(main_indices[1], MAIN_SYSTEM, "You are booked on KQ311.", 4000),
            ]
            traj = build_trajectory(turns)
            assert traj.reply == "You are booked on KQ311.", title_index

    def test_single_turn_tie_with_title_call(self) -> None:
        """A one-turn task ties with a one-turn title call and wins on request text."""
        for order in ((0, 1), (1, 0)):
            traj = build_trajectory(
                [
                    reply_turn(order[0], MAIN_SYSTEM, "Hello there", text_size=3000),
                    reply_turn(order[1], TITLE_SYSTEM, "Greeting", text_size=70),
                ]
            )
            assert traj.reply == "Hello there"

    def test_tool_calls_cover_every_thread_in_index_order(self) -> None:
        """tool_calls lists every call of every turn, ordered by turn index."""
        a, b, c = ToolCall("a", "{}"), ToolCall("b", "{}"), ToolCall("c", "{}")
        traj = build_trajectory(
            [tool_turn(2, MAIN_SYSTEM, c), tool_turn(0, MAIN_SYSTEM, a, b), tool_turn(1, "x", c)]
        )
        assert [t.name for t in traj.tool_calls] == ["a", "b", "c", "c"]


class TestReply:
    def test_last_turn_tool_call_means_absent(self) -> None:
        """A main thread ending in a tool call has no reply, and the reason names the tool."""
        traj = build_trajectory(
            [
                reply_turn(0, MAIN_SYSTEM, "let me look"),
                tool_turn(1, MAIN_SYSTEM, ToolCall("create_booking", "{}")),
            ]
        )
        assert traj.reply is None
        assert traj.reply_absent
        assert traj.reply_absent_reason == "its last turn ended in a tool call to create_booking"

    def test_tool_call_with_text_is_still_absent(self) -> None:
        """Text next to a tool call in the last turn is not a reply."""
        turn = Turn(
            0,
            request(MAIN_SYSTEM),
            ResponseView("Searching now", (ToolCall("search", "{}"),), FinishReason.TOOL_CALLS),
        )
        assert build_trajectory([turn]).reply is None

    def test_finish_reason_tool_calls_without_calls_is_absent(self) -> None:
        """A tool-calls finish reason with no parsed call still reads as absent."""
        turn = Turn(0, request(MAIN_SYSTEM), ResponseView("", (), FinishReason.TOOL_CALLS))
        traj = build_trajectory([turn])
        assert traj.reply is None
        assert traj.reply_absent_reason == "its last turn ended in a tool call"

    def test_failed_call_is_absent(self) -> None:
        """A last turn with no response (a failed call) has no reply."""
        traj = build_trajectory(
            [reply_turn(0, MAIN_SYSTEM, "hi"), Turn(1, request(MAIN_SYSTEM), None)]
        )
        assert traj.reply is None
        assert traj.reply_absent_reason is not None and "no response" in traj.reply_absent_reason

    def test_empty_text_is_a_present_reply(self) -> None:
        """An empty final message is a reply of "" and not absent."""
        traj = build_trajectory([reply_turn(0, MAIN_SYSTEM, "")])
        assert traj.reply == ""
        assert not traj.reply_absent
        assert traj.reply_absent_reason is None

    def test_no_turns_is_absent(self) -> None:
        """A run with no model calls has no main thread and no reply."""
        traj = build_trajectory([])
        assert traj.main is None and traj.reply is None
        assert traj.reply_absent_reason == "no model call was made"
        assert traj.tool_calls == ()


class TestOrderIndependence:
    @settings(max_examples=150, deadline=None)
    @given(
        st.integers(min_value=1, max_value=4),
        st.integers(min_value=1, max_value=4),
        st.randoms(use_true_random=False),
    )
    def test_interleaving_threads_never_changes_the_reply(
        self, main_turns: int, side_turns: int, rnd: random.Random
    ) -> None:
        """However a side conversation interleaves with the main one, the reply is the same."""
        side_turns = min(side_turns, main_turns)  # the rule's stated limit: the side is not bigger
        labels = ["main"] * main_turns + ["side"] * side_turns
        rnd.shuffle(labels)
        done = {"main": 0, "side": 0}
        turns = []
        for index, label in enumerate(labels):
            done[label] += 1
            system, size = (MAIN_SYSTEM, 4000) if label == "main" else (TITLE_SYSTEM, 60)
            if label == "main" and done["main"] < main_turns:
                turns.append(tool_turn(index, system, ToolCall("search", "{}")))
            else:
                turns.append(reply_turn(index, system, f"{label} says done", size))
        rnd.shuffle(turns)
        traj = build_trajectory(turns)
        assert traj.reply == "main says done"
        assert [t.index for t in traj.turns] == list(range(len(labels)))


class TestAbandonedTurns:
    def test_an_abandoned_turn_counts_for_nothing(self):
        """A title call the agent abandoned holds the most text and a tool call: still not counted."""
        main = reply_turn(0, MAIN_SYSTEM, "Booked KQ311.")
        title_calls = ToolCall("rename", "{}")
        title = Turn(1, request(TITLE_SYSTEM, text_size=10_000),
                     ResponseView("a title", (title_calls,), FinishReason.TOOL_CALLS), abandoned=True)
        trajectory = build_trajectory([title, main])
        assert trajectory.reply == "Booked KQ311."
        assert trajectory.tool_calls == ()
        assert [t.index for t in trajectory.turns] == [0]
        assert [t.index for t in trajectory.abandoned] == [1]
        assert [th.system for th in trajectory.threads] == [MAIN_SYSTEM]

    def test_only_abandoned_turns_mean_no_reply(self):
        title = Turn(0, request(TITLE_SYSTEM), None, abandoned=True)
        trajectory = build_trajectory([title])
        assert trajectory.reply is None and trajectory.reply_absent_reason == "no model call was made"


class TestMcpBoundary:
    """Calls that crossed the MCP boundary, and model requests that became attempts."""

    def test_mcp_call_replaces_the_model_request_and_is_placed_after_its_turn(self) -> None:
        from flowproof.mcp import McpCall
        from flowproof.trajectory import MCP, MODEL, boundary_of

        traj = build_trajectory(
            [
                tool_turn(0, MAIN_SYSTEM, ToolCall("search", "{}"), ToolCall("export", '{"n":1}')),
                reply_turn(1, MAIN_SYSTEM, "exported"),
            ],
            mcp_calls=[McpCall("exports", "export", '{"n": 1}', answered=True, after_turns=1)],
        )
        assert [(c.name, boundary_of(c)) for c in traj.tool_calls] == [("search", MODEL), ("export", MCP)]
        assert [c.name for c in traj.attempts] == ["export"]
        assert [c.name for c in traj.requested] == ["search", "export"]
        assert traj.tool_calls[1].arguments == {"n": 1}

    def test_declared_mcp_tool_refused_by_the_agent_is_an_attempt_not_a_call(self) -> None:
        """The model asked, the agent's code refused: no MCP call, so not called."""
        traj = build_trajectory(
            [tool_turn(0, MAIN_SYSTEM, ToolCall("export", "{}")), reply_turn(1, MAIN_SYSTEM, "no")],
            mcp_tools={"export"},
        )
        assert traj.tool_calls == ()
        assert [c.name for c in traj.attempts] == ["export"]
        assert traj.mcp_tools == frozenset({"export"})

    def test_a_model_request_under_the_agent_s_qualified_name_is_the_mcp_tool(self) -> None:
        """Claude Code asks for mcp__exports__export: the attempt is named export, and it is not
        listed as a model-boundary call beside the MCP call it led to."""
        from flowproof.mcp import McpCall
        from flowproof.trajectory import MCP, boundary_of

        traj = build_trajectory(
            [tool_turn(0, MAIN_SYSTEM, ToolCall("mcp__exports__export", '{"n":1}'), ToolCall("Bash", "{}")),
             reply_turn(1, MAIN_SYSTEM, "exported")],
            mcp_calls=[McpCall("exports", "export", '{"n": 1}', answered=True, after_turns=1)],
            mcp_tools={"export"}, mcp_servers={"exports"},
        )
        assert [(c.name, boundary_of(c)) for c in traj.tool_calls] == [("Bash", "model"), ("export", MCP)]
        assert [c.name for c in traj.attempts] == ["export"]
        assert traj.attempts[0].arguments == {"n": 1}
        # Another server's tool of the same name, and an unknown tool, keep their names.
        other = build_trajectory(
            [tool_turn(0, MAIN_SYSTEM, ToolCall("mcp__other__export", "{}"), ToolCall("exports__nope", "{}"))],
            mcp_tools={"export"}, mcp_servers={"exports"},
        )
        assert [c.name for c in other.tool_calls] == ["mcp__other__export", "exports__nope"]

    def test_mcp_calls_before_any_turn_and_after_the_last(self) -> None:
        from flowproof.mcp import McpCall

        traj = build_trajectory(
            [reply_turn(0, MAIN_SYSTEM, "hi")],
            mcp_calls=[McpCall("s", "a", "{}", False, 0), McpCall("s", "b", "{}", False, 1)],
        )
        assert [c.name for c in traj.tool_calls] == ["a", "b"]


class TestThreadsAreAgents:
    def test_a_trajectory_knows_its_sub_agents_and_keeps_the_reply_rule(self) -> None:
        from .agent_runs import claude_code_run

        traj = build_trajectory(claude_code_run())
        assert [s.name for s in traj.agents.subagents] == ["Explore"]
        assert len(traj.conversations.all) == 3
        # The reply rule is unchanged: the main thread (by system prompt) answered last.
        assert traj.reply == "Booked KQ311."

    def test_each_tool_call_knows_its_turn(self) -> None:
        from flowproof.mcp import McpCall

        traj = build_trajectory(
            [tool_turn(0, MAIN_SYSTEM, ToolCall("search", "{}")), reply_turn(1, MAIN_SYSTEM, "done")],
            [McpCall("exports", "export", "{}", True, after_turns=1)],
        )
        assert [c.name for c in traj.tool_calls] == ["search", "export"]
        assert traj.call_turns == (0, 0)


class TestContinuationsById:
    """A Responses request continuing by ``previous_response_id`` carries only its new input
    (no instructions): it belongs to the thread of the turn whose response it names."""

    @staticmethod
    def turn(index: int, system: str, text: str, *, rid: str, previous: str | None = None,
             size: int = 100) -> Turn:
        req = RequestView("openai-responses", "m", system, (), ("user",), (), True, size,
                          previous_response_id=previous)
        return Turn(index, req, ResponseView(text, (), FinishReason.STOP, response_id=rid))

    def test_a_chain_is_one_thread_whatever_its_requests_carry(self) -> None:
        chain = [
            self.turn(0, MAIN_SYSTEM, "", rid="warm"),  # codex's generate:false warm-up
            self.turn(2, "", "Searching.", rid="r1", previous="warm"),
            self.turn(4, "", "Booked KQ311.", rid="r2", previous="r1"),
        ]
        # A side conversation with more text than any single continuation, two turns long.
        side = [self.turn(1, TITLE_SYSTEM, "Title", rid="t1", size=5000),
                self.turn(3, TITLE_SYSTEM, "Title again", rid="t2", size=5000)]
        trajectory = build_trajectory([*side, *chain])
        assert trajectory.main is not None
        assert [t.index for t in trajectory.main.turns] == [0, 2, 4]
        assert trajectory.main.system == MAIN_SYSTEM
        assert trajectory.reply == "Booked KQ311."
        assert len(trajectory.threads) == 2

    def test_a_warm_up_without_instructions_lends_no_thread(self) -> None:
        """codex 0.171.0's warm-up carries no input; its first real turn brings the instructions."""
        trajectory = build_trajectory([
            self.turn(0, "", "", rid="warm"),
            self.turn(1, MAIN_SYSTEM, "Searching.", rid="r1", previous="warm"),
            self.turn(2, "", "Booked.", rid="r2", previous="r1"),
            self.turn(3, TITLE_SYSTEM, "Title", rid="t1", size=5000),
        ])
        assert trajectory.main is not None and trajectory.main.system == MAIN_SYSTEM
        assert [t.index for t in trajectory.main.turns] == [1, 2] and trajectory.reply == "Booked."
        assert [th.system for th in trajectory.threads] == ["", MAIN_SYSTEM, TITLE_SYSTEM]

    def test_an_unknown_previous_response_keeps_its_own_thread(self) -> None:
        trajectory = build_trajectory([self.turn(0, MAIN_SYSTEM, "a", rid="r0"),
                                       self.turn(1, "", "b", rid="r1", previous="elsewhere")])
        assert [th.system for th in trajectory.threads] == [MAIN_SYSTEM, ""]
