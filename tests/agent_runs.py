"""Runs as plain data for the pure core's tests: turns built from real request bodies.

Each turn's request view comes from the wire codec (as at run time), and the
turn keeps its body, so conversations, sub-agents and the cache prefix see what
they would see in a cassette. `claude_code_run` is a parent that spawns one
Explore sub-agent through Claude Code's Agent tool, with the shapes Claude Code
sends (the sub-agent's first user message is several text blocks, the spawn
prompt last; the result comes back as the Agent call's tool result).
"""

from __future__ import annotations

import json
from typing import Any

from flowproof.turns import FinishReason, ResponseView, ToolCall, Turn, Usage
from flowproof.wire import codec_by_name

MAIN_SYSTEM = "You are an interactive agent that helps users with software engineering tasks."
EXPLORE_SYSTEM = "You are a file search specialist. Find files and report back."
TITLE_SYSTEM = "Generate a concise, sentence-case title (3-7 words)."
PROMPT = "Find the booking code in the repo and book that flight"
SPAWN_PROMPT = "Search the repository for the booking code (it starts with KQ) and report it."


def turn(index: int, provider: str, body: dict[str, Any], response: ResponseView | None) -> Turn:
    view = codec_by_name(provider).parse_request(json.dumps(body).encode())
    return Turn(index, view, response, body=body)


def said(text: str, usage: Usage | None = None) -> ResponseView:
    return ResponseView(text, (), FinishReason.STOP, "end_turn", "claude-x", usage)


def called(*calls: ToolCall, usage: Usage | None = None) -> ResponseView:
    return ResponseView("", calls, FinishReason.TOOL_CALLS, "tool_use", "claude-x", usage)


def call(name: str, call_id: str, **arguments: Any) -> ToolCall:
    return ToolCall(name, json.dumps(arguments), call_id)


def user(*texts: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": t} for t in texts]}


def tool_use(*calls: ToolCall) -> dict[str, Any]:
    return {"role": "assistant", "content": [
        {"type": "tool_use", "id": c.call_id, "name": c.name, "input": c.arguments} for c in calls]}


def tool_result(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": content}]}


def anthropic(system: str, messages: list[dict[str, Any]], tools: tuple[str, ...] = ("Agent", "Grep"),
              model: str = "claude-x") -> dict[str, Any]:
    return {"model": model, "system": [{"type": "text", "text": system}],
            "tools": [{"name": t, "input_schema": {"type": "object"}} for t in tools],
            "messages": messages, "stream": True}


SPAWN = call("Agent", "toolu_spawn", description="Find the code", prompt=SPAWN_PROMPT,
             subagent_type="Explore")
GREP = call("Grep", "toolu_grep", pattern="KQ")
SUB_ANSWER = "The booking code is KQ311 (in bookings.txt)."


def claude_code_run(*, result_returns: bool = True, sub_runs: bool = True) -> list[Turn]:
    """Parent turn 0 spawns Explore; 1 is a title call; 2-3 are the sub-agent; 4 is the parent
    receiving the result (``result_returns=False``: the parent goes on without it)."""
    first = [user("<system-reminder>Today's date is 2026-12-01.</system-reminder>", PROMPT)]
    turns = [
        turn(0, "anthropic", anthropic(MAIN_SYSTEM, first), called(SPAWN)),
        turn(1, "anthropic", anthropic(TITLE_SYSTEM, [user(PROMPT)], tools=()), said("Booking a flight")),
    ]
    sub_first = [user("<system-reminder>context</system-reminder>", SPAWN_PROMPT)]
    if sub_runs:
        turns += [
            turn(2, "anthropic", anthropic(EXPLORE_SYSTEM, sub_first, tools=("Grep",)), called(GREP)),
            turn(3, "anthropic", anthropic(EXPLORE_SYSTEM, [*sub_first, tool_use(GREP),
                                                            tool_result("toolu_grep", "bookings.txt: KQ311")],
                                           tools=("Grep",)), said(SUB_ANSWER)),
        ]
    back = tool_result("toolu_spawn", SUB_ANSWER) if result_returns else user("never mind")
    turns.append(turn(4, "anthropic", anthropic(MAIN_SYSTEM, [*first, tool_use(SPAWN), back]),
                      said("Booked KQ311.")))
    return turns


def spec_of(steps: str, head: str = "", environ: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    """A resolved FlowSpec from the YAML of its steps (each line indented two spaces)."""
    from flowproof.spec import resolve_variables
    from flowproof.spec.loader import parse_spec

    text = f"name: t\nagent:\n  command: a\n{head}steps:\n  - prompt: {PROMPT}\n{steps}"
    return resolve_variables(parse_spec(text, "t.flow.yaml"), environ or {})


def request_view(system: str = MAIN_SYSTEM):  # type: ignore[no-untyped-def]
    """A plain request view (no body) for tests about responses only."""
    from flowproof.turns import RequestView

    return RequestView("openai-chat", "gpt-x", system, (), ("user",), (), False, 10)


def claude_code_cassette():  # type: ignore[no-untyped-def]
    """`claude_code_run` as a cassette (non-streamed Anthropic responses)."""
    from flowproof.cassette import Cassette, RecordedRequest, RecordedResponse, RecordedTurn
    from flowproof.request_key import body_sha256

    turns = []
    for t in claude_code_run():
        response = t.response
        assert response is not None
        content: list[dict[str, Any]] = [{"type": "text", "text": response.text}] if response.text else []
        content += [{"type": "tool_use", "id": c.call_id, "name": c.name, "input": c.arguments}
                    for c in response.tool_calls]
        stop = "tool_use" if response.tool_calls else "end_turn"
        body = json.dumps(t.body).encode()
        turns.append(RecordedTurn(
            t.index, "anthropic",
            RecordedRequest("POST", "https://api.anthropic.com/v1/messages", {}, body_sha256(body), t.body),
            RecordedResponse(200, {"content-type": "application/json"},
                             body={"type": "message", "role": "assistant", "model": "claude-x",
                                   "content": content, "stop_reason": stop}),
        ))
    return Cassette(tuple(turns), route="proxy")
