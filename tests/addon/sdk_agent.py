"""A tiny tool-calling agent on the official SDKs, run as a subprocess by test_e2e.py.

It talks to the real API hosts (https://api.openai.com, https://api.anthropic.com):
only HTTPS_PROXY and SSL_CERT_FILE in its environment route it through flowproof.
It prints one JSON object: every turn as the SDK parsed it, or the API error.

Environment: FP_PROVIDER (openai|anthropic), FP_SYSTEM, FP_MAX_TURNS, FP_TAMPER
(send back a changed tool argument), FP_EXTRA (one more call at the end),
FP_CONCURRENT (N identical one-shot calls in parallel threads instead).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

import anthropic
import openai

PROVIDER = os.environ.get("FP_PROVIDER", "openai")
SYSTEM = os.environ.get("FP_SYSTEM", "You are a booking assistant. Use the tools.")
MAX_TURNS = int(os.environ.get("FP_MAX_TURNS", "2"))
TAMPER = os.environ.get("FP_TAMPER") == "1"
EXTRA = os.environ.get("FP_EXTRA") == "1"
CONCURRENT = int(os.environ.get("FP_CONCURRENT", "0"))
USER = "Book me a flight to Nairobi."
KEY = "sk-e2e-secret-key-123"

OPENAI_TOOLS = [{"type": "function", "function": {
    "name": "search_flights", "description": "Search flights.",
    "parameters": {"type": "object", "properties": {"dest": {"type": "string"}}, "required": ["dest"]}}}]
ANTHROPIC_TOOLS = [{"name": "search_flights", "description": "Search flights.",
                    "input_schema": {"type": "object", "properties": {"dest": {"type": "string"}}}}]


def openai_turn(client: openai.OpenAI, messages: list[dict[str, Any]]) -> dict[str, Any]:
    stream = client.chat.completions.create(
        model="gpt-4o", messages=messages, tools=OPENAI_TOOLS, stream=True)  # type: ignore[arg-type]
    text, calls = "", {}
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        text += delta.content or ""
        for tc in delta.tool_calls or []:
            call = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            call["id"] = tc.id or call["id"]
            if tc.function is not None:
                call["name"] += tc.function.name or ""
                call["arguments"] += tc.function.arguments or ""
    return {"text": text, "calls": [calls[i] for i in sorted(calls)]}


def run_openai() -> list[dict[str, Any]]:
    client = openai.OpenAI(api_key=KEY, max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
    turns = []
    for _ in range(MAX_TURNS):
        turn = openai_turn(client, messages)
        turns.append(turn)
        if not turn["calls"]:
            break
        sent = [dict(c) for c in turn["calls"]]
        if TAMPER:
            sent[0]["arguments"] = json.dumps({**json.loads(sent[0]["arguments"]), "dest": "NBX"})
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in sent]})
        for c in sent:
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": '{"flights": ["KQ311"]}'})
    if EXTRA:
        turns.append(openai_turn(client, messages))
    return turns


def run_anthropic() -> list[dict[str, Any]]:
    client = anthropic.Anthropic(api_key=KEY, max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": USER}]
    turns = []
    for _ in range(MAX_TURNS):
        with client.messages.stream(model="claude-sonnet-4-5", max_tokens=256, system=SYSTEM,
                                    messages=messages, tools=ANTHROPIC_TOOLS) as stream:  # type: ignore[arg-type]
            final = stream.get_final_message()
        text = "".join(b.text for b in final.content if b.type == "text")
        calls = [{"id": b.id, "name": b.name, "arguments": json.dumps(b.input, sort_keys=True)}
                 for b in final.content if b.type == "tool_use"]
        turns.append({"text": text, "calls": calls, "stop": final.stop_reason})
        if not calls:
            break
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in final.content]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": c["id"], "content": '{"flights": ["KQ311"]}'} for c in calls]})
    return turns


def run_concurrent() -> list[dict[str, Any]]:
    client = openai.OpenAI(api_key=KEY, max_retries=0)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Name this session."}]
    results: list[dict[str, Any]] = []
    lock = threading.Lock()

    def one() -> None:
        try:
            turn: dict[str, Any] = openai_turn(client, messages)
        except openai.APIStatusError as e:
            turn = {"error": e.status_code}
        with lock:
            results.append(turn)

    threads = [threading.Thread(target=one) for _ in range(CONCURRENT)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def main() -> int:
    try:
        if CONCURRENT:
            turns = run_concurrent()
        elif PROVIDER == "anthropic":
            turns = run_anthropic()
        else:
            turns = run_openai()
    except (openai.APIStatusError, anthropic.APIStatusError) as e:
        print(json.dumps({"error": e.status_code, "message": str(e)}))
        return 3
    except (openai.APIError, anthropic.APIError) as e:
        # No status: the connection failed or the stream was cut.
        print(json.dumps({"error": type(e).__name__, "message": str(e)}))
        return 4
    print(json.dumps({"turns": turns}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
