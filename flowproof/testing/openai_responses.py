"""OpenAI Responses in its real wire format, streamed or not."""

from __future__ import annotations

import base64
from typing import Any

from flowproof.testing.base import (
    FIXED_CREATED,
    Context,
    Rendered,
    pretty,
    split_arguments,
    split_text,
    sse,
)
from flowproof.testing.script import Reply

#: The incomplete_details reason of the unified finish reasons that end a response incomplete;
#: stop and tool_calls both end it "completed" (Responses has no finish word of its own).
INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}


def render(reply: Reply, ctx: Context, stream: bool) -> Rendered:
    """The answer over HTTP: one JSON response object, or an SSE stream of `stream_events`."""
    if not stream:
        return Rendered(200, "application/json", body=pretty(stream_events(reply, ctx)[-1]["response"]))
    events = tuple(sse(payload, event=payload["type"]) for payload in stream_events(reply, ctx))
    return Rendered(200, "text/event-stream; charset=utf-8", events=events)


def stream_events(reply: Reply | None, ctx: Context, *, response_id: str | None = None) -> list[dict[str, Any]]:
    """The stream's events as JSON objects, ``response.created`` to the terminal event (whose
    ``response`` is also the whole non-streamed answer). Over a WebSocket each is one text frame.

    ``reply`` None is a warm-up (``generate: false``): a response with no output at all.
    ``response_id`` replaces the counter id ``resp_fake_N``."""
    msg_id = ctx.ident(f"msg_fake_{ctx.n}", "msg_", "message", length=48)
    call_ids = ctx.tool_call_ids(reply.calls, "call_fake_", "call_") if reply is not None else []
    items: list[dict[str, Any]] = []
    warm_up = reply is None
    if reply is None:
        reply = Reply.text("")
    if reply.reasoning is not None:
        items.append(_reasoning_item(reply.reasoning, ctx))
    if not warm_up and (reply.content or not reply.calls):
        items.append({"id": msg_id, "type": "message", "status": "completed", "role": "assistant",
                      "content": [{"type": "output_text", "text": reply.content, "annotations": [],
                                   "logprobs": []}]})
    for i, (call, k) in enumerate(zip(reply.calls, ctx.call_ids, strict=True)):
        items.append({"id": ctx.ident(f"fc_fake_{k}", "fc_", "item", i, length=48), "type": "function_call",
                      "status": "completed", "arguments": call.arguments, "call_id": call_ids[i],
                      "name": call.name})
    finish = reply.finish_reason
    status = "incomplete" if finish in INCOMPLETE_REASONS else "completed"
    tools = ctx.body.get("tools")
    instructions = ctx.body.get("instructions")
    previous = ctx.body.get("previous_response_id")
    store = ctx.body.get("store")

    def response(state: str, output: list[dict[str, Any]], done: bool) -> dict[str, Any]:
        return {
            "id": response_id or ctx.ident(f"resp_fake_{ctx.n}", "resp_", "response", length=48),
            "object": "response",
            "created_at": FIXED_CREATED,
            "status": state,
            "background": False,
            "completed_at": FIXED_CREATED if state == "completed" else None,
            "error": None,
            "incomplete_details": {"reason": INCOMPLETE_REASONS[finish]} if state == "incomplete" else None,
            "instructions": instructions if isinstance(instructions, (str, list)) else None,
            "max_output_tokens": ctx.body.get("max_output_tokens"),
            "model": ctx.model,
            "output": output,
            "parallel_tool_calls": True,
            "previous_response_id": previous if isinstance(previous, str) else None,
            "reasoning": {"effort": None, "summary": None},
            "store": store if isinstance(store, bool) else True,
            "temperature": 1.0,
            "text": {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": tools if isinstance(tools, list) else [],
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": {
                "input_tokens": ctx.input_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": ctx.output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": ctx.input_tokens + ctx.output_tokens,
            }
            if done
            else None,
            "user": None,
            "metadata": {},
        }

    events: list[dict[str, Any]] = []

    def emit(kind: str, **data: Any) -> None:
        events.append({"type": kind, "sequence_number": len(events), **data})

    emit("response.created", response=response("in_progress", [], False))
    emit("response.in_progress", response=response("in_progress", [], False))
    for index, item in enumerate(items):
        if item["type"] == "reasoning":
            emit("response.output_item.added", output_index=index, item={**item, "summary": []})
        elif item["type"] == "message":
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            emit("response.output_item.added", output_index=index,
                 item={**item, "status": "in_progress", "content": []})
            emit("response.content_part.added", item_id=item["id"], output_index=index, content_index=0,
                 part=part)
            for piece in split_text(reply.content):
                emit("response.output_text.delta", item_id=item["id"], output_index=index, content_index=0,
                     delta=piece, logprobs=[])
            emit("response.output_text.done", item_id=item["id"], output_index=index, content_index=0,
                 text=reply.content, logprobs=[])
            emit("response.content_part.done", item_id=item["id"], output_index=index, content_index=0,
                 part={**part, "text": reply.content})
        else:
            emit("response.output_item.added", output_index=index,
                 item={**item, "status": "in_progress", "arguments": ""})
            for piece in split_arguments(item["arguments"]):
                emit("response.function_call_arguments.delta", item_id=item["id"], output_index=index,
                     delta=piece)
            emit("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                 name=item["name"], arguments=item["arguments"])
        emit("response.output_item.done", output_index=index, item=item)
    emit(f"response.{status}", response=response(status, items, True))
    return events


def _reasoning_item(summary: str, ctx: Context) -> dict[str, Any]:
    """A reasoning item; with ``encrypted_content`` when the request asked for it (``include``)."""
    item: dict[str, Any] = {"id": ctx.ident(f"rs_fake_{ctx.n}", "rs_", "reasoning", length=48),
                            "type": "reasoning", "summary": [{"type": "summary_text", "text": summary}]}
    include = ctx.body.get("include")
    if isinstance(include, list) and "reasoning.encrypted_content" in include:
        item["encrypted_content"] = "gAAAAA" + base64.b64encode(f"fake-reasoning:{ctx.n}:{summary}".encode()).decode()
    return item


# Anthropic Messages -----------------------------------------------------------
