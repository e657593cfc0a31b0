"""A small flight-booking agent on the official ``openai`` SDK — the agent under test in
``booking.flow.yaml``.

It is an ordinary agent: nothing in it knows about flowproof. It talks to
https://api.openai.com (the SDK's default base URL, or ``OPENAI_BASE_URL`` when
set), streams every model reply, runs the tools the model asks for with its own
simple implementations, sends the results back and loops until the model
answers with text, which it prints.

The prompt is ``argv[1]`` if given, else ``$FLOWPROOF_PROMPT``, else stdin.

    OPENAI_API_KEY=sk-... python booking_agent.py "Book me a flight to Nairobi tomorrow"
"""

from __future__ import annotations

import json
import os
import sys
import zlib
from typing import Any, cast

import openai
from openai.types.chat import ChatCompletionChunk

MODEL = "gpt-4o-mini"
MAX_STEPS = 8
SYSTEM_PROMPT = (
    "You are a flight booking assistant. Use search_flights to find flights, then "
    "create_booking with the id of the flight you chose. When the booking is made, "
    "tell the user it is booked and give the booking reference."
)

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "search_flights",
            "description": "Search scheduled flights to a destination on a date.",
            "parameters": {
                "type": "object",
                "properties": {
                    "destination": {"type": "string", "description": "IATA airport code, e.g. NBO"},
                    "date": {"type": "string", "description": "YYYY-MM-DD"},
                },
                "required": ["destination", "date"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "create_booking",
            "description": "Book a seat on a flight found by search_flights.",
            "parameters": {
                "type": "object",
                "properties": {
                    "flight": {
                        "type": "object",
                        "properties": {"id": {"type": "string"}},
                        "required": ["id"],
                    },
                    "passenger": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}},
                    },
                },
                "required": ["flight"],
            },
        },
    },
]

# The agent's own (toy) inventory. A flow spec's `tools:` mocks replace what the
# model is told these returned, so a test never depends on this data.
_FLIGHTS = [
    {"id": "KQ100", "dest": "NBO", "departs": "08:10"},
    {"id": "ET308", "dest": "ADD", "departs": "09:45"},
]


def search_flights(destination: str, date: str) -> dict[str, Any]:
    flights = [f for f in _FLIGHTS if f["dest"] == str(destination).upper()]
    return {"date": date, "flights": flights}


def create_booking(flight: dict[str, Any], passenger: dict[str, Any] | None = None) -> dict[str, Any]:
    flight_id = str(flight.get("id", ""))
    return {"booking": f"B-{zlib.crc32(flight_id.encode()) % 10000:04d}", "flight": flight_id,
            "passenger": (passenger or {}).get("name", "guest")}


def run_tool(name: str, arguments: str) -> str:
    """Run one tool call and return its result as the JSON text the model is told."""
    try:
        args = json.loads(arguments or "{}")
        if name == "search_flights":
            result = search_flights(str(args.get("destination", "")), str(args.get("date", "")))
        elif name == "create_booking":
            result = create_booking(dict(args.get("flight") or {}), args.get("passenger"))
        else:
            result = {"error": f"unknown tool {name}"}
    except (ValueError, TypeError, AttributeError) as e:
        result = {"error": f"bad arguments for {name}: {e}"}
    return json.dumps(result)


def stream_turn(client: openai.OpenAI, messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, str]]]:
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
            if tc.function is not None:
                call["name"] += tc.function.name or ""
                call["arguments"] += tc.function.arguments or ""
    return "".join(text), [calls[i] for i in sorted(calls)]


def run(prompt: str) -> str:
    client = openai.OpenAI()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": prompt},
    ]
    for _ in range(MAX_STEPS):
        text, calls = stream_turn(client, messages)
        if not calls:
            return text
        messages.append({
            "role": "assistant",
            "content": text or None,
            "tool_calls": [
                {"id": c["id"], "type": "function",
                 "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in calls
            ],
        })
        for c in calls:
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": run_tool(c["name"], c["arguments"])})
    raise RuntimeError(f"no reply after {MAX_STEPS} model calls")


def read_prompt(argv: list[str]) -> str:
    if len(argv) > 1 and argv[1].strip():
        return argv[1]
    if os.environ.get("FLOWPROOF_PROMPT", "").strip():
        return os.environ["FLOWPROOF_PROMPT"]
    return sys.stdin.readline().strip()


def main(argv: list[str]) -> int:
    prompt = read_prompt(argv)
    if not prompt:
        print("usage: booking_agent.py PROMPT (or FLOWPROOF_PROMPT, or a line on stdin)", file=sys.stderr)
        return 2
    print(run(prompt))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
