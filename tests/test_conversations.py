"""Conversations that continue: tool-call ids, reply text, side calls and a changed system prompt."""

from __future__ import annotations

from flowproof.conversations import group_conversations

from .agent_runs import (
    GREP,
    MAIN_SYSTEM,
    PROMPT,
    anthropic,
    called,
    claude_code_run,
    said,
    tool_result,
    tool_use,
    turn,
    user,
)


def test_a_claude_code_run_has_three_conversations() -> None:
    conversations = group_conversations(claude_code_run())
    assert [[t.index for t in c.turns] for c in conversations.all] == [[0, 4], [1], [2, 3]]
    assert conversations.previous == {4: 0, 3: 2}


def test_a_changed_system_prompt_does_not_break_the_conversation() -> None:
    """The timestamp in the system prompt is what the cache rule must catch, so the turns must
    still be one conversation (grouping by system prompt would split them)."""
    first = [user(PROMPT)]
    turns = [
        turn(0, "anthropic", anthropic(MAIN_SYSTEM + " Now: 10:00:01", first), called(GREP)),
        turn(1, "anthropic", anthropic(MAIN_SYSTEM + " Now: 10:00:07",
                                       [*first, tool_use(GREP), tool_result("toolu_grep", "x")]), said("done")),
    ]
    assert group_conversations(turns).previous == {1: 0}


def test_text_replies_continue_when_the_history_is_kept() -> None:
    turns = [
        turn(0, "openai-chat", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}, said("Hello there")),
        turn(1, "openai-chat", {"model": "m", "messages": [
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello there"},
            {"role": "user", "content": "book it"}]}, said("ok")),
    ]
    assert group_conversations(turns).previous == {1: 0}


def test_the_same_short_reply_in_an_unrelated_conversation_does_not_join() -> None:
    turns = [
        turn(0, "openai-chat", {"model": "m", "messages": [{"role": "user", "content": "a"}]}, said("OK")),
        turn(1, "openai-chat", {"model": "m", "messages": [
            {"role": "user", "content": "b"}, {"role": "assistant", "content": "OK"},
            {"role": "user", "content": "c"}]}, said("fine")),
    ]
    assert group_conversations(turns).previous == {}


def test_abandoned_and_bodiless_turns_are_left_out() -> None:
    runs = claude_code_run()
    from dataclasses import replace

    runs[3] = replace(runs[3], abandoned=True)
    runs[1] = replace(runs[1], body=None)
    conversations = group_conversations(runs)
    assert 3 not in conversations.number_of
    assert conversations.number_of[1] != conversations.number_of[0]


def test_later_follows_the_chain() -> None:
    runs = claude_code_run()
    conversations = group_conversations(runs)
    assert [t.index for t in conversations.later(runs[2])] == [3]
    assert conversations.later(runs[4]) == ()
