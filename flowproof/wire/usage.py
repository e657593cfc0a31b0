"""Token usage from each provider's own response fields, as one `flowproof.turns.Usage`.

``Usage.input_tokens`` counts every input token the call consumed, cache reads
and writes included, and ``output_tokens`` every output token, reasoning
included; the cache counts are parts of the input. What each API reports:

- chat completions: ``usage.prompt_tokens`` (cached tokens included) and
  ``prompt_tokens_details.cached_tokens``, ``usage.completion_tokens``
  (reasoning included); streamed, the final chunk when the request asked for
  ``stream_options.include_usage``, else nothing;
- Responses: ``usage.input_tokens`` (cached included) with
  ``input_tokens_details.cached_tokens``, ``usage.output_tokens``; streamed, on
  the terminal event's ``response``;
- Anthropic: ``usage.input_tokens`` *excludes* the cache, which is reported as
  ``cache_read_input_tokens`` and ``cache_creation_input_tokens``; streamed,
  ``message_start`` carries the input side and ``message_delta`` the cumulative
  output (newer servers repeat the input fields there, which then win);
- Gemini: ``usageMetadata.promptTokenCount`` (cached included) with
  ``cachedContentTokenCount``, ``candidatesTokenCount`` plus
  ``thoughtsTokenCount`` (thinking is billed as output); streamed, the last
  chunk's metadata.

A response whose API reported nothing has no usage (None), which budget
assertions report by turn rather than count as zero. Pure.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from flowproof.turns import ResponseView, Usage

__all__ = ["anthropic_usage", "chat_usage", "gemini_usage", "responses_usage", "with_usage"]


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _at(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _usage(input_tokens: int | None, output_tokens: int | None, cache_read: int | None = None,
           cache_write: int | None = None) -> Usage | None:
    if input_tokens is None and output_tokens is None:
        return None
    return Usage(input_tokens=input_tokens or 0, output_tokens=output_tokens or 0,
                 cache_read_tokens=cache_read or 0, cache_write_tokens=cache_write or 0)


def chat_usage(usage: Any) -> Usage | None:
    """A chat completion's ``usage`` object (None when it is absent or null)."""
    return _usage(_count(_at(usage, "prompt_tokens")), _count(_at(usage, "completion_tokens")),
                  _count(_at(usage, "prompt_tokens_details", "cached_tokens")))


def responses_usage(usage: Any) -> Usage | None:
    """A Responses ``response.usage`` object."""
    return _usage(_count(_at(usage, "input_tokens")), _count(_at(usage, "output_tokens")),
                  _count(_at(usage, "input_tokens_details", "cached_tokens")))


def anthropic_usage(*parts: Any) -> Usage | None:
    """Anthropic ``usage`` objects in stream order (``message_start``'s, then each
    ``message_delta``'s): a later field replaces an earlier one."""
    fields: dict[str, int] = {}
    for part in parts:
        if not isinstance(part, dict):
            continue
        for key in ("input_tokens", "output_tokens", "cache_read_input_tokens",
                    "cache_creation_input_tokens"):
            value = _count(part.get(key))
            if value is not None:
                fields[key] = value
    if "input_tokens" not in fields and "output_tokens" not in fields:
        return None
    read = fields.get("cache_read_input_tokens", 0)
    write = fields.get("cache_creation_input_tokens", 0)
    # Anthropic's input_tokens are the uncached ones only: the call consumed all three.
    return Usage(input_tokens=fields.get("input_tokens", 0) + read + write,
                 output_tokens=fields.get("output_tokens", 0),
                 cache_read_tokens=read, cache_write_tokens=write)


def gemini_usage(metadata: Any) -> Usage | None:
    """A Gemini ``usageMetadata`` object."""
    output = _count(_at(metadata, "candidatesTokenCount"))
    thoughts = _count(_at(metadata, "thoughtsTokenCount"))
    if output is not None or thoughts is not None:
        output = (output or 0) + (thoughts or 0)
    return _usage(_count(_at(metadata, "promptTokenCount")), output,
                  _count(_at(metadata, "cachedContentTokenCount")))


def with_usage(view: ResponseView, usage: Usage | None) -> ResponseView:
    """``view`` carrying ``usage`` (the same view when there is none)."""
    return view if usage is None else replace(view, usage=usage)
