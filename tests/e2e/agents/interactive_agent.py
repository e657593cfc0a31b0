"""An interactive chat agent on the official ``openai`` SDK (Chat Completions, streamed).

It reads the user's messages from stdin, one per line, keeps the whole
conversation, answers each message (running the ``get_weather`` tool whenever
the model asks for it) and prints each reply on its own line; it exits at EOF.

Like a real chat UI (Claude Code does this too), a line typed while the agent is
still working on an answer is not held back until that answer is printed: it is
added to the conversation at the agent's next model call. So the requests show
exactly when each prompt arrived — a driver that sends the next prompt before
the previous answer is complete changes the conversation.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from typing import Any, cast

import openai
from openai.types.chat import ChatCompletionChunk

MODEL = "gpt-4o-mini"
MAX_STEPS = 6
TOOL_SECONDS = 0.5
SYSTEM_PROMPT = "You are a travel assistant. Use get_weather for weather questions."
TOOLS: list[dict[str, Any]] = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}]

_EOF = object()


def read_lines(inbox: queue.Queue[object]) -> None:
    """Every stdin line goes into ``inbox`` as soon as it arrives; EOF becomes ``_EOF``."""
    while line := sys.stdin.readline():
        if line.strip():
            inbox.put(line.strip())
    inbox.put(_EOF)


def get_weather(city: str) -> dict[str, Any]:
    """The agent's own (toy) tool; a flow spec's mock replaces what the model is told.

    It takes a moment, as a real lookup does: between the model's tool call and the
    next model call nothing is in flight, and a driver must not take that for an answer.
    """
    time.sleep(TOOL_SECONDS)
    return {"city": city, "sky": "overcast", "celsius": 14}


def model_turn(client: openai.OpenAI, messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, str]]]:
    """One streamed model call: the text and the tool calls, accumulated from the deltas."""
    stream = cast("openai.Stream[ChatCompletionChunk]", client.chat.completions.create(
        model=MODEL, messages=messages, tools=TOOLS, stream=True,  # type: ignore[arg-type]
    ))
    text: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        if delta.content:
            text.append(delta.content)
        for tc in delta.tool_calls or []:
            call = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            if tc.id:
                call["id"] = tc.id
            if tc.function and tc.function.name:
                call["name"] = tc.function.name
            if tc.function and tc.function.arguments:
                call["arguments"] += tc.function.arguments
    return "".join(text), [calls[i] for i in sorted(calls)]


def answer(client: openai.OpenAI, messages: list[dict[str, Any]], inbox: queue.Queue[object]) -> tuple[str, bool]:
    """Answer the conversation's last user message; returns (reply, EOF seen while working)."""
    eof = False
    for _ in range(MAX_STEPS):
        # Typed ahead while working: joins the conversation now, as in a real chat UI.
        while True:
            try:
                item = inbox.get_nowait()
            except queue.Empty:
                break
            if item is _EOF:
                eof = True
            else:
                messages.append({"role": "user", "content": item})
        text, calls = model_turn(client, messages)
        if not calls:
            messages.append({"role": "assistant", "content": text})
            return text, eof
        messages.append({"role": "assistant", "content": text or None, "tool_calls": [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls]})
        for c in calls:
            result = get_weather(**json.loads(c["arguments"] or "{}"))
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": json.dumps(result)})
    raise SystemExit("interactive_agent: too many tool rounds")


def main() -> int:
    client = openai.OpenAI(max_retries=0, timeout=20)
    inbox: queue.Queue[object] = queue.Queue()
    threading.Thread(target=read_lines, args=(inbox,), daemon=True).start()
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}]
    while (item := inbox.get()) is not _EOF:
        messages.append({"role": "user", "content": item})
        reply, eof = answer(client, messages, inbox)
        print(reply, flush=True)
        if eof:
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
