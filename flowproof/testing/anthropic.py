"""Anthropic Messages in its real wire format, streamed or not."""

from __future__ import annotations

from typing import Any

from flowproof.testing.base import (
    Context,
    Rendered,
    arguments_object,
    compact,
    render_error,
    split_arguments,
    split_text,
    sse,
)
from flowproof.testing.detect import ANTHROPIC
from flowproof.testing.script import Reply

#: Anthropic's stop_reason for each unified finish reason.
STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens", "content_filter": "refusal"}


def render(reply: Reply, ctx: Context, stream: bool) -> Rendered:
    stop = STOP_REASONS[reply.finish_reason]
    ids = ctx.tool_call_ids(reply.calls, "toolu_fake_", "toolu_01")
    message = {
        "id": ctx.ident(f"msg_fake_{ctx.n}", "msg_01", "message"),
        "type": "message",
        "role": "assistant",
        "model": ctx.model,
    }
    usage = {"input_tokens": ctx.input_tokens, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0, "output_tokens": ctx.output_tokens}
    if not stream:
        blocks: list[dict[str, Any]] = []
        if reply.content or not reply.calls:
            blocks.append({"type": "text", "text": reply.content})
        for call, cid in zip(reply.calls, ids, strict=True):
            args = arguments_object(call)
            if args is None:
                return render_error(ANTHROPIC, 500, f"fake model: tool call {call.name!r} has arguments that are "
                              "not a JSON object, and an Anthropic tool_use input must be one")
            blocks.append({"type": "tool_use", "id": cid, "name": call.name, "input": args})
        data = {**message, "content": blocks, "stop_reason": stop, "stop_sequence": None, "usage": usage}
        return Rendered(200, "application/json", body=compact(data).encode())

    events: list[bytes] = []

    def emit(kind: str, **data: Any) -> None:
        events.append(sse({"type": kind, **data}, event=kind))

    emit("message_start", message={**message, "content": [], "stop_reason": None, "stop_sequence": None,
                                   "usage": {**usage, "output_tokens": 1}})
    index = 0
    if reply.content or not reply.calls:
        emit("content_block_start", index=0, content_block={"type": "text", "text": ""})
        emit("ping")
        for piece in split_text(reply.content):
            emit("content_block_delta", index=0, delta={"type": "text_delta", "text": piece})
        emit("content_block_stop", index=0)
        index = 1
    for call, cid in zip(reply.calls, ids, strict=True):
        emit("content_block_start", index=index,
             content_block={"type": "tool_use", "id": cid, "name": call.name, "input": {}})
        if index == 0:
            emit("ping")
        # Anthropic opens every tool input with an empty partial_json; the SDK must cope, so do we.
        for piece in ["", *split_arguments(call.arguments)]:
            emit("content_block_delta", index=index, delta={"type": "input_json_delta", "partial_json": piece})
        emit("content_block_stop", index=index)
        index += 1
    emit("message_delta", delta={"stop_reason": stop, "stop_sequence": None},
         usage={"output_tokens": ctx.output_tokens})
    emit("message_stop")
    return Rendered(200, "text/event-stream; charset=utf-8", events=tuple(events))


# Gemini -----------------------------------------------------------------------
