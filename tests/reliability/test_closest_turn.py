"""Issue 19 item 13: a divergence is explained against the recorded call it belongs to.

An agent makes its main call and a concurrent title call with a system prompt of its own.
The title call was recorded first, so it is the earliest unserved turn; a replay whose main
system prompt was edited by one word must still be explained against the main call, naming
the edited word, every time."""

from __future__ import annotations

import shlex
import sys
from dataclasses import replace
from pathlib import Path

from flowproof.testing import FakeModelServer, Reply, Script
from tests.e2e.conftest import AGENTS, Flowproof, write_spec


def spec(folder: Path, lane: str, title_delay: float) -> Path:
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(AGENTS / 'api_loop_agent.py'))}"
    return write_spec(folder / "titled.flow.yaml", "\n".join([
        "name: titled", "agent:", f"  command: {command}", "  timeout: 60", "  env:",
        "    FP_API: openai-chat", "    FP_STREAM: '0'", "    FP_TITLE: '1'",
        f"    FP_TITLE_DELAY: '{title_delay}'", f"    FP_LANE: '{lane}'",
        "cassette: titled.cassette.json", "steps:", "  - prompt: Book KQ311 for two",
        "  - assert_tool_call: book_flight", "",
    ]))


def test_a_one_word_system_prompt_edit_is_named_with_a_title_call_recorded_first(
    tmp_path: Path, flowproof: Flowproof
) -> None:
    main = [replace(Reply.tool_call("book_flight", {"flight": "KQ311", "seats": 2}), first_chunk_delay=1.0),
            Reply.text("You are booked on KQ311, reference B-1042.")]
    server = FakeModelServer(Script(tuple(main), {"five-word title": (Reply.text("Booking KQ311 for two"),)}))
    server.start()
    try:
        upstream = ["--upstream", f"api.openai.com={server.url}"]
        recorded = flowproof.run(spec(tmp_path, "north", 0), "--record", *upstream, keys=True)
    finally:
        server.stop()
    assert recorded.code == 0, recorded.output
    # Replayed with the main system prompt edited ("[north]" -> "[south]"); the title call
    # comes late, so the main call's miss is explained while the title turn is still unserved.
    edited = spec(tmp_path, "south", 1.5)
    for _ in range(3):
        ran = flowproof.run(edited)
        assert ran.code == 3, ran.output
        assert "closest is turn 1 (same conversation)" not in ran.output
        assert "closest is turn 1 (the closest unconsumed turn: same API, model, tools and depth" in ran.output
        assert "- messages.0.content: recorded " in ran.output and "[north]" in ran.output
        assert "[south]" in ran.output, ran.output
