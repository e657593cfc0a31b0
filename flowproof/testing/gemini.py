"""Gemini generateContent / streamGenerateContent in its real wire format, streamed or not."""

from __future__ import annotations

import json
from typing import Any

from flowproof.testing.base import (
    Context,
    Rendered,
    arguments_object,
    pretty,
    render_error,
    split_text,
    sse,
)
from flowproof.testing.detect import GEMINI
from flowproof.testing.script import Reply

#: Gemini's finishReason for each unified finish reason (it has no word for a tool call: STOP).
FINISH_REASONS = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS", "content_filter": "SAFETY"}


def render(reply: Reply, ctx: Context, stream: bool, alt_sse: bool) -> Rendered:
    finish = FINISH_REASONS[reply.finish_reason]
    ids = ctx.tool_call_ids(reply.calls, "", "", length=8)
    call_parts: list[dict[str, Any]] = []
    for call, cid in zip(reply.calls, ids, strict=True):
        args = arguments_object(call)
        if args is None:
            return render_error(GEMINI, 500, f"fake model: tool call {call.name!r} has arguments that are not a "
                          "JSON object, and a Gemini functionCall needs an args object")
        function_call: dict[str, Any] = {"name": call.name, "args": args}
        if cid is not None:
            function_call = {"id": cid, **function_call}
        call_parts.append({"functionCall": function_call})
    usage = {"promptTokenCount": ctx.input_tokens, "candidatesTokenCount": ctx.output_tokens,
             "totalTokenCount": ctx.input_tokens + ctx.output_tokens}

    def chunk(parts: list[dict[str, Any]], last: bool) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}}
        if last:
            candidate["finishReason"] = finish
        candidate["index"] = 0
        return {"candidates": [candidate],
                "usageMetadata": usage if last else {"promptTokenCount": ctx.input_tokens,
                                                     "totalTokenCount": ctx.input_tokens},
                "modelVersion": ctx.model, "responseId": ctx.ident(f"fake-response-{ctx.n}", "", "response", length=22)}

    text_parts = [{"text": reply.content}] if (reply.content or not reply.calls) else []
    if not stream:
        return Rendered(200, "application/json", body=pretty(chunk(text_parts + call_parts, True)))

    pieces: list[list[dict[str, Any]]] = [[{"text": p}] for p in split_text(reply.content)]
    # Gemini never streams function-call arguments: each call arrives whole, in the last chunk.
    if call_parts or not pieces:
        pieces.append(call_parts or [{"text": ""}])
    chunks = [chunk(parts, i == len(pieces) - 1) for i, parts in enumerate(pieces)]
    if alt_sse:
        # Google terminates each SSE event with CRLF CRLF; clients must accept it.
        return Rendered(200, "text/event-stream", events=tuple(sse(c, eol="\r\n") for c in chunks))
    # Without alt=sse, streamGenerateContent answers one JSON array, element by element.
    array = [("[" if i == 0 else "\n,\r\n").encode() + json.dumps(c, indent=2, ensure_ascii=False).encode()
             for i, c in enumerate(chunks)]
    array.append(b"\n]")
    return Rendered(200, "application/json; charset=UTF-8", events=tuple(array))

