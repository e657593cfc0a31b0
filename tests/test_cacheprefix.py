"""The cache-prefix rule on plain turns: a timestamp in the system prompt is named, moved markers are not."""

from __future__ import annotations

from flowproof.cacheprefix import cache_breaks, evaluate_cache_prefix
from flowproof.spec import CachePrefixAssertion, Location
from flowproof.trajectory import build_trajectory

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

STEP = CachePrefixAssertion("cache prefix stable", Location("t", 1, 1))


def loop(system_1: str, system_2: str, *, first_2=None, tools_2=("Agent", "Grep")):  # type: ignore[no-untyped-def]
    first = [user(PROMPT)]
    second_first = first_2 if first_2 is not None else first
    return build_trajectory([
        turn(0, "anthropic", anthropic(system_1, first), called(GREP)),
        turn(1, "anthropic", anthropic(MAIN_SYSTEM, [user("title")], tools=()), said("Title")),
        turn(2, "anthropic", anthropic(system_2, [*second_first, tool_use(GREP),
                                                 tool_result("toolu_grep", "KQ311")], tools=tools_2), said("done")),
    ])


def test_a_stable_run_passes_and_counts_what_it_checked() -> None:
    result = evaluate_cache_prefix(STEP, build_trajectory(claude_code_run()))
    assert result.passed and "(2 continuation(s) checked)" in result.message


def test_a_timestamp_in_the_system_prompt_is_named_with_both_excerpts() -> None:
    traj = loop(MAIN_SYSTEM + " Time: 10:00:01", MAIN_SYSTEM + " Time: 10:00:07")
    (found,) = cache_breaks(traj)
    assert (found.conversation, found.earlier, found.later, found.path) == (0, 0, 2, "system.0.text")
    assert found.byte == len((MAIN_SYSTEM + " Time: 10:00:0").encode())
    assert found.earlier_text.endswith('10:00:01"') and found.later_text.endswith('10:00:07"')
    result = evaluate_cache_prefix(STEP, traj)
    assert not result.passed
    assert "conversation 0: turn 2 does not keep turn 0's prefix: system.0.text differs at byte" in result.message
    assert [(m.path, m.turn) for m in result.mismatches] == [("system.0.text", 2)]


def test_tools_come_first_in_anthropic_cache_order() -> None:
    (found,) = cache_breaks(loop(MAIN_SYSTEM + " a", MAIN_SYSTEM + " b", tools_2=("Grep", "Agent")))
    assert found.path == "tools.0.name"


def test_an_edited_earlier_message_is_a_break() -> None:
    (found,) = cache_breaks(loop(MAIN_SYSTEM, MAIN_SYSTEM, first_2=[user(PROMPT + "!")]))
    assert found.path == "messages.0.content.0.text" and found.byte == len(PROMPT.encode())


def test_a_moved_cache_control_marker_is_not_a_break() -> None:
    marked = [{"role": "user", "content": [{"type": "text", "text": PROMPT, "cache_control": {"type": "ephemeral"}}]}]
    assert cache_breaks(loop(MAIN_SYSTEM, MAIN_SYSTEM, first_2=marked)) == []
