"""The Anthropic Messages API codec (``POST /v1/messages``).

Wire facts this codec relies on (Anthropic "Messages" and "Streaming Messages" docs):

- ``system`` is a string or a list of ``{"type": "text", "text": …}`` blocks; a
  message's ``content`` is a string or a list of blocks.
- The model asks for a tool with a ``tool_use`` block. In a non-streamed
  response its ``input`` arrives as a JSON **object**, not a string, so
  ``ToolCall.arguments_raw`` is its compact re-serialization
  (``json.dumps(input, ensure_ascii=False, separators=(",", ":"))``). In a stream
  the input arrives as ``input_json_delta.partial_json`` strings, and
  ``arguments_raw`` is their exact concatenation (``"{}"`` when empty). The two
  raw forms of one call may therefore differ in whitespace; compare uses
  ``ToolCall.canonical_arguments``.
- Tool results come back as ``tool_result`` blocks in a user message and name
  only the ``tool_use_id``; the tool name is resolved through the ``tool_use``
  block of an earlier assistant message.
- ``server_tool_use`` blocks (web search, code execution…) run on Anthropic's
  side; they are not calls the agent executes and are not reported as tool calls.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flowproof.errors import WireError
from flowproof.turns import FinishReason, RequestView, ResponseView, ToolCall, ToolResult
from flowproof.wire._json import FieldReader, compact_dumps, error_message, event_type, json_kind
from flowproof.wire.sse import SSEEvent
from flowproof.wire.usage import anthropic_usage

__all__ = ["CODEC", "AnthropicCodec"]

PROVIDER = "anthropic"

_STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "tool_use": FinishReason.TOOL_CALLS,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "refusal": FinishReason.CONTENT_FILTER,
    "pause_turn": FinishReason.OTHER,
}

# Anthropic's documented error types per HTTP status.
_ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}

# Blocks that introduce a tool id an agent-side tool_result may refer to.
_TOOL_USE_TYPES = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})

# What a tool_result's block list is joined with when it has several text blocks.
_RESULT_JOIN = "\n"

# What the text blocks of the newest user message are joined with in ``RequestView.prompt``.
_PROMPT_JOIN = "\n"


_fields = FieldReader(PROVIDER)
_load, _object, _list, _str, _opt_str = (
    _fields.load, _fields.as_object, _fields.as_list, _fields.as_str, _fields.as_opt_str
)
_dumps = compact_dumps


def _block_text(blocks: list[Any], field_name: str, joiner: str) -> str:
    """Join the ``text`` of the text blocks in ``blocks``; other block types are skipped."""
    texts = []
    for i, block in enumerate(blocks):
        block = _object(block, f"{field_name}[{i}]")
        if block.get("type") == "text":
            texts.append(_str(block.get("text"), f"{field_name}[{i}].text"))
    return joiner.join(texts)


def _system_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return _block_text(_list(value, "system"), "system", "\n\n")


def _result_content(value: Any, field_name: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return _block_text(_list(value, field_name), field_name, _RESULT_JOIN)


def _finish(stop_reason: str | None) -> FinishReason:
    if stop_reason is None:
        # No stop reason at all means the message was cut short.
        return FinishReason.ERROR
    return _STOP_REASONS.get(stop_reason, FinishReason.OTHER)


def _tool_name(tool: dict[str, Any], field_name: str) -> str:
    # Server tools (web_search, bash, text_editor) carry a name too; fall back to their type.
    name = tool.get("name", tool.get("type"))
    return _str(name, f"{field_name}.name")


# Mutable on purpose: an accumulator private to one parse_events call.
@dataclass(slots=True)
class _Block:
    """One content block being assembled from a stream."""

    type: str
    text: list[str] = field(default_factory=list)
    partial_json: list[str] = field(default_factory=list)
    tool_id: str | None = None
    name: str = ""
    initial_input: Any = None


class AnthropicCodec:
    """Codec for the Anthropic Messages API. See the module docstring for the wire facts."""

    name = PROVIDER

    def matches(self, method: str, host: str, path: str) -> bool:
        """POST to a path ending in ``/v1/messages`` (not ``count_tokens`` or ``batches``)."""
        return method.upper() == "POST" and path.rstrip("/").endswith("/v1/messages")

    def is_stream_request(self, body: bytes, path: str, query: str) -> bool:
        """True when the body says ``"stream": true``; a body that is not JSON is not a stream."""
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            return False
        return isinstance(data, dict) and data.get("stream") is True

    def parse_request(self, body: bytes) -> RequestView:
        """The provider-neutral view of a Messages request body."""
        return self.view_request(_load(body, "body"))

    def view_request(self, body: Any) -> RequestView:
        """`parse_request` of a body parsed already (a cassette's)."""
        data = _object(body, "body")
        model = _opt_str(data.get("model"), "model")
        system = _system_text(data.get("system"))
        if "messages" not in data:
            raise WireError(
                PROVIDER, "messages", "missing: a Messages request needs a messages array"
            )
        messages = _list(data["messages"], "messages")

        tools_value = data.get("tools")
        tools_list = [] if tools_value is None else _list(tools_value, "tools")
        tools = tuple(
            _tool_name(_object(t, f"tools[{i}]"), f"tools[{i}]") for i, t in enumerate(tools_list)
        )

        roles: list[str] = []
        results: list[ToolResult] = []
        names_by_id: dict[str, str] = {}
        prompt = ""
        text_size = len(system) + (len(_dumps(tools_list)) if tools_list else 0)
        for m, message in enumerate(messages):
            where = f"messages[{m}]"
            message = _object(message, where)
            role = _str(message.get("role"), f"{where}.role")
            roles.append(role)
            content = message.get("content")
            if content is None:
                if role == "user":
                    prompt = ""
                continue
            if isinstance(content, str):
                text_size += len(content)
                if role == "user":
                    prompt = content
                continue
            texts: list[str] = []
            only_results = bool(content)
            for b, block in enumerate(_list(content, f"{where}.content")):
                bwhere = f"{where}.content[{b}]"
                block = _object(block, bwhere)
                kind = _opt_str(block.get("type"), f"{bwhere}.type")
                only_results = only_results and kind == "tool_result"
                if kind == "text":
                    texts.append(_str(block.get("text"), f"{bwhere}.text"))
                    text_size += len(texts[-1])
                elif kind in _TOOL_USE_TYPES:
                    tool_id = _opt_str(block.get("id"), f"{bwhere}.id")
                    name = _opt_str(block.get("name"), f"{bwhere}.name")
                    if tool_id is not None and name is not None:
                        names_by_id[tool_id] = name
                elif kind == "tool_result":
                    call_id = _opt_str(block.get("tool_use_id"), f"{bwhere}.tool_use_id")
                    text = _result_content(block.get("content"), f"{bwhere}.content")
                    text_size += len(text)
                    name = names_by_id.get(call_id) if call_id is not None else None
                    results.append(ToolResult(call_id=call_id, name=name, content=text))
            # A user turn that only carries tool results is not a prompt: keep the earlier one.
            if role == "user" and not only_results:
                prompt = _PROMPT_JOIN.join(texts)
        return RequestView(
            provider=PROVIDER,
            model=model,
            system=system,
            tools=tools,
            roles=tuple(roles),
            tool_results=tuple(results),
            stream=data.get("stream") is True,
            text_size=text_size,
            prompt=prompt,
        )

    def parse_response(self, body: bytes) -> ResponseView:
        """The view of a non-streamed Messages response (or an Anthropic error body)."""
        return self.view_response(_load(body, "body"))

    def view_response(self, body: Any) -> ResponseView:
        """`parse_response` of a body parsed already (a cassette's)."""
        data = _object(body, "body")
        if data.get("type") == "error":
            error = data.get("error")
            raw = error.get("type") if isinstance(error, dict) else None
            return ResponseView(
                text="",
                tool_calls=(),
                finish_reason=FinishReason.ERROR,
                raw_finish_reason=raw if isinstance(raw, str) else None,
            )
        if "content" not in data:
            raise WireError(
                PROVIDER, "content", "missing: a Messages response needs a content array"
            )
        content = _list(data["content"], "content")
        texts: list[str] = []
        calls: list[ToolCall] = []
        for i, block in enumerate(content):
            where = f"content[{i}]"
            block = _object(block, where)
            kind = block.get("type")
            if kind == "text":
                texts.append(_str(block.get("text"), f"{where}.text"))
            elif kind == "tool_use":
                raw_input = block.get("input", {})
                calls.append(
                    ToolCall(
                        name=_str(block.get("name"), f"{where}.name"),
                        arguments_raw=_dumps(raw_input),
                        call_id=_opt_str(block.get("id"), f"{where}.id"),
                    )
                )
        stop_reason = _opt_str(data.get("stop_reason"), "stop_reason")
        return ResponseView(
            text="".join(texts),
            tool_calls=tuple(calls),
            finish_reason=_finish(stop_reason),
            raw_finish_reason=stop_reason,
            model=_opt_str(data.get("model"), "model"),
            usage=anthropic_usage(data.get("usage")),
        )

    def parse_events(self, events: Sequence[SSEEvent]) -> ResponseView:
        """Assemble a complete Messages stream exactly as the SDK's accumulator would.

        Events are dispatched on their JSON ``type`` (falling back to the SSE
        event name). ``input_json_delta`` fragments are concatenated in arrival
        order per block index. ``event: error`` anywhere ends the view with
        finish reason ``error``; a stream without a stop reason was cut short
        and also reads as ``error``.
        """
        blocks: dict[int, _Block] = {}
        model: str | None = None
        stop_reason: str | None = None
        error_type: str | None = None
        errored = False
        usage: list[Any] = []
        for i, event in enumerate(events):
            where = f"events[{i}]"
            if not event.data.strip():
                continue
            payload = _object(_load(event.data, f"{where}.data"), f"{where}.data")
            kind = payload.get("type")
            if not isinstance(kind, str):
                kind = event.event
            if kind == "message_start":
                message = _object(payload.get("message"), f"{where}.message")
                model = _opt_str(message.get("model"), f"{where}.message.model")
                usage.append(message.get("usage"))
                reason = _opt_str(message.get("stop_reason"), f"{where}.message.stop_reason")
                stop_reason = reason or stop_reason
            elif kind == "content_block_start":
                index = self._index(payload, where)
                start = _object(payload.get("content_block"), f"{where}.content_block")
                block_type = _str(start.get("type"), f"{where}.content_block.type")
                block = _Block(type=block_type)
                if block_type == "text":
                    initial = start.get("text", "")
                    block.text.append(_str(initial, f"{where}.content_block.text"))
                elif block_type == "tool_use":
                    block.name = _str(start.get("name"), f"{where}.content_block.name")
                    block.tool_id = _opt_str(start.get("id"), f"{where}.content_block.id")
                    block.initial_input = start.get("input")
                blocks[index] = block
            elif kind == "content_block_delta":
                index = self._index(payload, where)
                if index not in blocks:
                    raise WireError(
                        PROVIDER,
                        f"{where}.index",
                        f"delta for block {index} before its content_block_start",
                    )
                delta = _object(payload.get("delta"), f"{where}.delta")
                delta_type = delta.get("type")
                if delta_type == "text_delta":
                    blocks[index].text.append(_str(delta.get("text"), f"{where}.delta.text"))
                elif delta_type == "input_json_delta":
                    fragment = _str(delta.get("partial_json"), f"{where}.delta.partial_json")
                    blocks[index].partial_json.append(fragment)
                # thinking_delta, signature_delta, citations_delta carry no reply text.
            elif kind == "message_delta":
                usage.append(payload.get("usage"))
                delta = _object(payload.get("delta"), f"{where}.delta")
                reason = _opt_str(delta.get("stop_reason"), f"{where}.delta.stop_reason")
                stop_reason = reason or stop_reason
            elif kind == "error":
                errored = True
                error = payload.get("error")
                raw = error.get("type") if isinstance(error, dict) else None
                error_type = raw if isinstance(raw, str) else "error"
            # ping, content_block_stop, message_stop and unknown events change nothing.

        texts: list[str] = []
        calls: list[ToolCall] = []
        for index in sorted(blocks):
            block = blocks[index]
            if block.type == "text":
                texts.append("".join(block.text))
            elif block.type == "tool_use":
                raw = "".join(block.partial_json)
                if not raw:
                    # No input_json_delta at all: the start block's input ({} in practice).
                    initial = block.initial_input
                    raw = _dumps(initial) if isinstance(initial, dict) and initial else "{}"
                calls.append(ToolCall(name=block.name, arguments_raw=raw, call_id=block.tool_id))
        if errored:
            finish, raw_reason = FinishReason.ERROR, error_type
        else:
            finish, raw_reason = _finish(stop_reason), stop_reason
        return ResponseView(
            text="".join(texts),
            tool_calls=tuple(calls),
            finish_reason=finish,
            raw_finish_reason=raw_reason,
            model=model,
            usage=anthropic_usage(*usage),
        )

    @staticmethod
    def _index(payload: dict[str, Any], where: str) -> int:
        index = payload.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            raise WireError(PROVIDER, f"{where}.index", f"expected an integer, got {json_kind(index)}")
        return index

    def is_terminal_event(self, event: SSEEvent) -> bool:
        """``message_stop`` ends a Messages stream."""
        return event_type(event.event, event.data) == "message_stop"

    def path_fields(self, path: str) -> dict[str, str]:
        """Nothing: the body names the model."""
        return {}

    def rewrite_tool_results(
        self, body: bytes, results: Mapping[str, Any], call_names: Mapping[str, str] | None = None
    ) -> bytes:
        """Replace the ``content`` of each ``tool_result`` whose resolved tool name is mocked.

        A string value is used as is; any other value becomes its compact JSON.
        Other keys of the block (``is_error``, ``cache_control``) are kept. When
        nothing changes the original bytes are returned; otherwise the body is
        re-serialized as compact JSON with its key order preserved.
        """
        if not results:
            return body
        data = _object(_load(body, "body"), "body")
        messages = data.get("messages")
        if not isinstance(messages, list):
            return body
        changed = False
        names_by_id: dict[str, str] = {}
        for message in messages:
            if not isinstance(message, dict) or not isinstance(message.get("content"), list):
                continue
            for block in message["content"]:
                if not isinstance(block, dict):
                    continue
                kind = block.get("type")
                if not isinstance(kind, str):
                    continue
                if kind in _TOOL_USE_TYPES:
                    if isinstance(block.get("id"), str) and isinstance(block.get("name"), str):
                        names_by_id[block["id"]] = block["name"]
                elif kind == "tool_result":
                    call_id = block.get("tool_use_id")
                    name = names_by_id.get(call_id) if isinstance(call_id, str) else None
                    if name is None or name not in results:
                        continue
                    value = results[name]
                    new = value if isinstance(value, str) else _dumps(value)
                    if block.get("content") != new:
                        block["content"] = new
                        changed = True
        if not changed:
            return body
        return _dumps(data).encode()

    def error_body(self, status: int, message: str) -> bytes:
        """Anthropic's ``{"type":"error","error":{"type":…,"message":…}}`` for ``status``."""
        error_type = _ERROR_TYPES.get(status)
        if error_type is None:
            error_type = "api_error" if status >= 500 else "invalid_request_error"
        return _dumps({"type": "error", "error": {"type": error_type, "message": message}}).encode()

    def error_text(self, body: Any) -> str | None:
        """The message of a parsed error body in this API's shape, else None."""
        return error_message(body)


CODEC = AnthropicCodec()
