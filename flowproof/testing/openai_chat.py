"""OpenAI Chat Completions in its real wire format, streamed or not."""

from __future__ import annotations

from collections.abc import Mapping
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


def render(reply: Reply, ctx: Context, stream: bool) -> Rendered:
    finish = reply.finish_reason  # the unified words are chat completions' own
    usage = {"prompt_tokens": ctx.input_tokens, "completion_tokens": ctx.output_tokens,
             "total_tokens": ctx.input_tokens + ctx.output_tokens}
    ids = ctx.tool_call_ids(reply.calls, "call_fake_", "call_")
    base = {
        "id": ctx.ident(f"chatcmpl-fake-{ctx.n}", "chatcmpl-", "completion", length=29),
        "object": "chat.completion",
        "created": FIXED_CREATED,
        "model": ctx.model,
    }
    if not stream:
        message: dict[str, Any] = {"role": "assistant",
                                   "content": reply.content if (reply.content or not reply.calls) else None,
                                   "refusal": None, "annotations": []}
        if reply.calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c, cid in zip(reply.calls, ids, strict=True)
            ]
        data = {**base, "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
                "usage": usage, "service_tier": "default", "system_fingerprint": "fp_fake"}
        return Rendered(200, "application/json", body=pretty(data))

    options = ctx.body.get("stream_options")
    include_usage = isinstance(options, Mapping) and options.get("include_usage") is True
    head = {**base, "object": "chat.completion.chunk", "service_tier": "default",
            "system_fingerprint": "fp_fake"}

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        data = {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                     "finish_reason": finish_reason}]}
        if include_usage:
            data["usage"] = None
        return sse(data)

    events = [chunk({"role": "assistant", "content": "" if reply.content or not reply.calls else None,
                     "refusal": None})]
    events += [chunk({"content": piece}) for piece in split_text(reply.content)]
    # Parallel calls are interleaved (every head, then piece k of every call) so clients
    # that assemble by ``index`` are exercised, not just ones that assume sequential calls.
    events += [
        chunk({"tool_calls": [{"index": i, "id": cid, "type": "function",
                               "function": {"name": c.name, "arguments": ""}}]})
        for i, (c, cid) in enumerate(zip(reply.calls, ids, strict=True))
    ]
    pieces = [split_arguments(c.arguments) for c in reply.calls]
    for k in range(max((len(p) for p in pieces), default=0)):
        for i, call_pieces in enumerate(pieces):
            if k < len(call_pieces):
                events.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": call_pieces[k]}}]}))
    events.append(chunk({}, finish))
    if include_usage:
        events.append(sse({**head, "choices": [], "usage": usage}))
    events.append(sse("[DONE]"))
    return Rendered(200, "text/event-stream; charset=utf-8", events=tuple(events))


# OpenAI Responses -------------------------------------------------------------
