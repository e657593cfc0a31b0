"""A tool-loop agent on the official SDKs, for every API flowproof reads, streamed or not.

Environment: FP_API (openai-chat | openai-responses | anthropic | gemini), FP_STREAM=1 to
stream, FP_TITLE=1 to also ask for a conversation title from a concurrent thread with its
own system prompt (openai-chat; FP_TITLE_DELAY seconds after the main call starts), FP_LANE
to tag the system prompt, FP_GEMINI_API_VERSION for the version in Gemini's path. The prompt
is $FLOWPROOF_PROMPT. The one tool, book_flight, always answers {"booking": "B-1042"}. Prints
the final reply.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

API = os.environ["FP_API"]
STREAM = os.environ.get("FP_STREAM") == "1"
TITLE = os.environ.get("FP_TITLE") == "1"
# FP_LANE tags the system prompt, so flows run side by side get their own fake-model lane.
SYSTEM = "You are a booking assistant. Use the tools." + (
    f" [{os.environ['FP_LANE']}]" if os.environ.get("FP_LANE") else ""
)
TITLE_SYSTEM = "Write a five-word title for this conversation."
PROMPT = os.environ.get("FLOWPROOF_PROMPT", "Book KQ311 for two")
RESULT = {"booking": "B-1042"}
MAX_TURNS = 4
PARAMETERS = {
    "type": "object",
    "properties": {"flight": {"type": "string"}, "seats": {"type": "integer"}},
    "required": ["flight", "seats"],
}


def openai_chat() -> str:
    import openai

    client = openai.OpenAI(max_retries=0)
    tools = [{"type": "function", "function": {"name": "book_flight", "parameters": PARAMETERS}}]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": PROMPT},
    ]
    text = ""
    for _ in range(MAX_TURNS):
        text, calls = chat_turn(client, messages, tools)
        if not calls:
            break
        messages.append({"role": "assistant", "content": text or None, "tool_calls": [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls]})
        for c in calls:
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": json.dumps(RESULT)})
    return text


def chat_turn(client: Any, messages: list[dict[str, Any]], tools: Any) -> tuple[str, list[dict[str, str]]]:
    if not STREAM:
        message = client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools).choices[0].message
        calls = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                 for c in message.tool_calls or []]
        return message.content or "", calls
    text, by_index = "", {}
    for chunk in client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools, stream=True):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        text += delta.content or ""
        for tc in delta.tool_calls or []:
            call = by_index.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            call["id"] = tc.id or call["id"]
            if tc.function is not None:
                call["name"] += tc.function.name or ""
                call["arguments"] += tc.function.arguments or ""
    return text, [by_index[i] for i in sorted(by_index)]


def title() -> None:
    """The side conversation: a title, from its own thread, with its own system prompt."""
    import openai

    client = openai.OpenAI(max_retries=0)
    messages = [{"role": "system", "content": TITLE_SYSTEM}, {"role": "user", "content": PROMPT}]
    time.sleep(float(os.environ.get("FP_TITLE_DELAY") or 0))
    chat_turn(client, messages, openai.NOT_GIVEN)


def openai_responses() -> str:
    import openai

    client = openai.OpenAI(max_retries=0)
    tools = [{"type": "function", "name": "book_flight", "parameters": PARAMETERS}]
    items: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    text = ""
    for _ in range(MAX_TURNS):
        if STREAM:
            response = None
            for event in client.responses.create(
                model="gpt-4o", instructions=SYSTEM, input=items, tools=tools, stream=True
            ):
                if event.type == "response.completed":
                    response = event.response
            assert response is not None, "the stream ended without response.completed"
        else:
            response = client.responses.create(model="gpt-4o", instructions=SYSTEM, input=items, tools=tools)
        text = response.output_text
        calls = [item for item in response.output if item.type == "function_call"]
        if not calls:
            break
        for c in calls:
            items.append({"type": "function_call", "call_id": c.call_id, "name": c.name, "arguments": c.arguments})
            items.append({"type": "function_call_output", "call_id": c.call_id, "output": json.dumps(RESULT)})
    return text


def anthropic_messages() -> str:
    import anthropic

    client = anthropic.Anthropic(max_retries=0)
    tools = [{"name": "book_flight", "input_schema": PARAMETERS}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    text = ""
    for _ in range(MAX_TURNS):
        kwargs: dict[str, Any] = {
            "model": "claude-sonnet-4-5", "max_tokens": 1024, "system": SYSTEM,
            "messages": messages, "tools": tools,
        }
        if STREAM:
            with client.messages.stream(**kwargs) as stream:
                message = stream.get_final_message()
        else:
            message = client.messages.create(**kwargs)
        text = "".join(b.text for b in message.content if b.type == "text")
        calls = [b for b in message.content if b.type == "tool_use"]
        if not calls:
            break
        content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        content += [{"type": "tool_use", "id": b.id, "name": b.name, "input": b.input} for b in calls]
        messages.append({"role": "assistant", "content": content})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": json.dumps(RESULT)} for b in calls]})
    return text


def gemini() -> str:
    from google import genai
    from google.genai import types

    # FP_GEMINI_API_VERSION (v1beta) picks the API version google-genai puts in the path.
    version = os.environ.get("FP_GEMINI_API_VERSION")
    client = genai.Client(api_key=os.environ.get("GEMINI_API_KEY") or os.environ["GOOGLE_API_KEY"],
                          http_options=types.HttpOptions(api_version=version) if version else None)
    config = types.GenerateContentConfig(
        system_instruction=SYSTEM,
        tools=[types.Tool(function_declarations=[
            types.FunctionDeclaration(name="book_flight", parameters_json_schema=PARAMETERS)])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    contents: list[Any] = [types.Content(role="user", parts=[types.Part(text=PROMPT)])]
    text = ""
    for _ in range(MAX_TURNS):
        if STREAM:
            chunks = list(client.models.generate_content_stream(
                model="gemini-2.0-flash", contents=contents, config=config))
        else:
            chunks = [client.models.generate_content(model="gemini-2.0-flash", contents=contents, config=config)]
        parts = [p for ch in chunks if ch.candidates for p in (ch.candidates[0].content.parts or [])]
        text = "".join(p.text for p in parts if p.text)
        calls = [p.function_call for p in parts if p.function_call]
        if not calls:
            break
        contents.append(types.Content(role="model", parts=[types.Part(function_call=c) for c in calls]))
        contents.append(types.Content(role="user", parts=[
            types.Part(function_response=types.FunctionResponse(name=c.name, response=RESULT)) for c in calls]))
    return text


def main() -> None:
    side = threading.Thread(target=title) if TITLE else None
    if side is not None:
        side.start()
    run = {"openai-chat": openai_chat, "openai-responses": openai_responses,
           "anthropic": anthropic_messages, "gemini": gemini}[API]
    print(run())
    if side is not None:
        side.join()


if __name__ == "__main__":
    main()
