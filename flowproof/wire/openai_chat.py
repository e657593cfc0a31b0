"""The OpenAI Chat Completions API (``POST …/chat/completions``), and every gateway that copies it.

Covers api.openai.com, Azure (``/openai/deployments/<name>/chat/completions``),
OpenRouter, Groq, Ollama, vLLM and LiteLLM: they all speak this body shape.
Streams are ``data: <chunk JSON>`` blocks ending in ``data: [DONE]``; tool-call
deltas are merged by their ``index`` exactly as the openai SDK does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flowproof.errors import WireError
from flowproof.turns import FinishReason, RequestView, ResponseView, ToolCall, ToolResult
from flowproof.wire._json import (
    content_text,
    dump_body,
    error_message,
    expect_list,
    expect_object,
    json_object,
    load_json_body,
    optional_str,
    schema_size,
    substitute_outputs,
)
from flowproof.wire.sse import SSEEvent
from flowproof.wire.usage import chat_usage, with_usage

NAME = "openai-chat"

_SYSTEM_ROLES = frozenset({"system", "developer"})

_FINISH = {
    "stop": FinishReason.STOP,
    "tool_calls": FinishReason.TOOL_CALLS,
    "function_call": FinishReason.TOOL_CALLS,
    "length": FinishReason.LENGTH,
    "content_filter": FinishReason.CONTENT_FILTER,
}

# OpenAI's own error "type" per status, so SDKs raise the matching exception class.
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    409: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def finish_reason(raw: Any) -> FinishReason:
    """The unified finish reason of a chat ``finish_reason`` (unknown or missing -> OTHER)."""
    return _FINISH.get(raw, FinishReason.OTHER) if isinstance(raw, str) else FinishReason.OTHER


def openai_error_body(status: int, message: str) -> bytes:
    """An error body in OpenAI's format, shared by the chat and responses codecs."""
    error_type = _ERROR_TYPES.get(
        status, "server_error" if status >= 500 else "invalid_request_error"
    )
    return dump_body(
        {"error": {"message": message, "type": error_type, "param": None, "code": "flowproof"}}
    )


def wants_stream(body: bytes) -> bool:
    """True when a JSON body has ``"stream": true`` (lenient: a non-JSON body is not a stream)."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict) and value.get("stream") is True


def _messages(body: dict[str, Any]) -> list[Any]:
    if "messages" not in body:
        raise WireError(
            NAME, "messages", "missing: a chat completion request needs a messages array"
        )
    return expect_list(NAME, "messages", body["messages"])


def _tool_names(body: dict[str, Any]) -> list[str]:
    names: list[str] = []
    tools = body.get("tools")
    if tools is not None:
        for i, tool in enumerate(expect_list(NAME, "tools", tools)):
            tool = expect_object(NAME, f"tools[{i}]", tool)
            kind = tool.get("type")
            spec = (
                tool.get(kind) if isinstance(kind, str) else None
            )  # {"type":"function","function":{…}}
            name = spec.get("name") if isinstance(spec, dict) else tool.get("name")
            names.append(name if isinstance(name, str) else str(kind))
    functions = body.get("functions")  # the legacy function-calling field
    if functions is not None:
        for i, fn in enumerate(expect_list(NAME, "functions", functions)):
            name = expect_object(NAME, f"functions[{i}]", fn).get("name")
            names.append(name if isinstance(name, str) else "")
    return names


def _call_names(message: dict[str, Any]) -> dict[str, str]:
    """``tool_call_id -> function name`` for one assistant message."""
    out: dict[str, str] = {}
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            if not isinstance(call, dict) or not isinstance(call.get("id"), str):
                continue
            spec = call.get("function") or call.get("custom")
            if isinstance(spec, dict) and isinstance(spec.get("name"), str):
                out[call["id"]] = spec["name"]
    return out


def _walk_tool_messages(messages: list[Any]) -> list[tuple[int, str | None, str | None]]:
    """``(message index, call id, resolved tool name)`` of each tool result, in order."""
    names: dict[str, str] = {}
    found: list[tuple[int, str | None, str | None]] = []
    for i, message in enumerate(messages):
        message = expect_object(NAME, f"messages[{i}]", message)
        role = message.get("role")
        if role == "assistant":
            names.update(_call_names(message))
        elif role == "tool":
            call_id = optional_str(message.get("tool_call_id"))
            found.append((i, call_id, names.get(call_id) if call_id else None))
        elif role == "function":  # legacy: the name travels with the result
            found.append((i, None, optional_str(message.get("name"))))
    return found


def _message_size(message: dict[str, Any]) -> int:
    size = len(content_text(message.get("content")))
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            spec = call.get("function") if isinstance(call, dict) else None
            if isinstance(spec, dict) and isinstance(spec.get("arguments"), str):
                size += len(spec["arguments"])
    return size


@dataclass(slots=True)
class _PartialCall:
    name: list[str] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)
    call_id: str | None = None

    def add(self, delta: dict[str, Any]) -> None:
        if isinstance(delta.get("id"), str) and delta["id"] and self.call_id is None:
            self.call_id = delta["id"]
        fn = delta.get("function")
        if not isinstance(fn, dict):
            fn = delta  # the legacy delta.function_call has name/arguments at top level
        # Strings concatenate, as the openai SDK's accumulator does.
        if isinstance(fn.get("name"), str):
            self.name.append(fn["name"])
        if isinstance(fn.get("arguments"), str):
            self.arguments.append(fn["arguments"])

    def build(self) -> ToolCall:
        return ToolCall(
            name="".join(self.name), arguments_raw="".join(self.arguments), call_id=self.call_id
        )


class OpenAIChatCodec:
    """The Chat Completions codec (``name = "openai-chat"``)."""

    name = NAME

    def matches(self, method: str, host: str, path: str) -> bool:
        """POST to any path ending in ``/chat/completions`` (OpenAI, Azure, OpenRouter, Groq, Ollama…)."""
        return method.upper() == "POST" and path.rstrip("/").endswith("/chat/completions")

    def is_stream_request(self, body: bytes, path: str, query: str) -> bool:
        """True when the body says ``"stream": true``."""
        return wants_stream(body)

    def parse_request(self, body: bytes) -> RequestView:
        """The provider-neutral view of a chat completion request."""
        return self.view_request(load_json_body(NAME, body, "request body"))

    def view_request(self, body: Any) -> RequestView:
        """`parse_request` of a body parsed already (a cassette's)."""
        data = json_object(NAME, body, "request body")
        messages = _messages(data)
        system: list[str] = []
        roles: list[str] = []
        prompt = ""
        size = 0
        for i, message in enumerate(messages):
            message = expect_object(NAME, f"messages[{i}]", message)
            role = message.get("role")
            if not isinstance(role, str):
                raise WireError(NAME, f"messages[{i}].role", "missing or not a string")
            roles.append(role)
            if role in _SYSTEM_ROLES:
                system.append(content_text(message.get("content"), "\n\n"))
            elif role == "user":  # tool results travel as role "tool", never as prompts
                prompt = content_text(message.get("content"), "\n")
            size += _message_size(message)
        size += schema_size(data.get("tools")) + schema_size(data.get("functions"))
        results = tuple(
            ToolResult(call_id=call_id, name=name, content=content_text(messages[i].get("content")))
            for i, call_id, name in _walk_tool_messages(messages)
        )
        return RequestView(
            provider=NAME,
            model=optional_str(data.get("model")),
            system="\n\n".join(system),
            tools=tuple(_tool_names(data)),
            roles=tuple(roles),
            tool_results=results,
            stream=data.get("stream") is True,
            text_size=size,
            prompt=prompt,
        )

    def parse_response(self, body: bytes) -> ResponseView:
        """The view of a non-streamed ``chat.completion`` body (or an error body)."""
        return self.view_response(load_json_body(NAME, body, "response body"))

    def view_response(self, body: Any) -> ResponseView:
        """`parse_response` of a body parsed already (a cassette's)."""
        data = json_object(NAME, body, "response body")
        return with_usage(self._response_view(data), chat_usage(data.get("usage")))

    def _response_view(self, data: dict[str, Any]) -> ResponseView:
        if "choices" not in data and isinstance(data.get("error"), dict):
            return _error_view(data["error"], optional_str(data.get("model")))
        if "choices" not in data:
            raise WireError(
                NAME, "choices", "missing: a chat completion response has a choices array"
            )
        choices = expect_list(NAME, "choices", data["choices"])
        model = optional_str(data.get("model"))
        if not choices:
            return ResponseView(
                text="", tool_calls=(), finish_reason=FinishReason.OTHER, model=model
            )
        choice = expect_object(NAME, "choices[0]", choices[0])
        message = expect_object(NAME, "choices[0].message", choice.get("message", {}))
        text = content_text(message.get("content"))
        if not text and isinstance(message.get("refusal"), str):
            text = message["refusal"]
        calls: list[ToolCall] = []
        for j, call in enumerate(message.get("tool_calls") or ()):
            call = expect_object(NAME, f"choices[0].message.tool_calls[{j}]", call)
            if isinstance(call.get("custom"), dict):  # custom tools carry free-form "input"
                spec, args_key = call["custom"], "input"
            else:
                spec = expect_object(
                    NAME, f"choices[0].message.tool_calls[{j}].function", call.get("function")
                )
                args_key = "arguments"
            calls.append(
                ToolCall(
                    name=str(spec.get("name", "")),
                    arguments_raw=str(spec.get(args_key) or ""),
                    call_id=optional_str(call.get("id")),
                )
            )
        legacy = message.get("function_call")
        if isinstance(legacy, dict):
            calls.append(
                ToolCall(
                    name=str(legacy.get("name", "")),
                    arguments_raw=str(legacy.get("arguments") or ""),
                )
            )
        raw_reason = choice.get("finish_reason")
        return ResponseView(
            text=text,
            tool_calls=tuple(calls),
            finish_reason=finish_reason(raw_reason),
            raw_finish_reason=optional_str(raw_reason),
            model=model,
        )

    def parse_events(self, events: Sequence[SSEEvent]) -> ResponseView:
        """Assemble a chat completion stream as the openai SDK does, up to ``data: [DONE]``."""
        usage: list[Any] = []
        view = self._stream_view(events, usage)
        return with_usage(view, chat_usage(usage[-1]) if usage else None)

    def _stream_view(self, events: Sequence[SSEEvent], usage: list[Any]) -> ResponseView:
        text: list[str] = []
        refusal: list[str] = []
        calls: dict[Any, _PartialCall] = {}
        model: str | None = None
        raw_reason: str | None = None
        error: dict[str, Any] | None = None
        for n, event in enumerate(events):
            data = event.data.strip()
            if not data:
                continue  # comments, keep-alives, stray blank lines
            if data == "[DONE]":
                break
            chunk = load_json_body(NAME, data, f"events[{n}].data")
            if isinstance(chunk.get("error"), dict):
                error = chunk["error"]
                continue
            if model is None:
                model = optional_str(chunk.get("model"))
            if isinstance(chunk.get("usage"), dict):
                usage.append(chunk["usage"])
            choices = chunk.get("choices")
            if not isinstance(choices, list):
                continue  # e.g. a usage-only chunk from some gateways
            for choice in choices:  # empty for the include_usage chunk
                if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                    continue  # only the first choice, like parse_response
                delta = choice.get("delta")
                if isinstance(delta, dict):
                    if isinstance(delta.get("content"), str):
                        text.append(delta["content"])
                    if isinstance(delta.get("refusal"), str):
                        refusal.append(delta["refusal"])
                    for k, call_delta in enumerate(delta.get("tool_calls") or ()):
                        if not isinstance(call_delta, dict):
                            continue
                        key = call_delta.get("index")
                        if not isinstance(key, int):
                            key = _index_fallback(calls, call_delta, k)
                        calls.setdefault(key, _PartialCall()).add(call_delta)
                    if isinstance(delta.get("function_call"), dict):
                        calls.setdefault("function_call", _PartialCall()).add(
                            delta["function_call"]
                        )
                if isinstance(choice.get("finish_reason"), str):
                    raw_reason = choice["finish_reason"]
        # Tool calls in index order; a legacy function_call (keyed by name) comes last.
        keys = sorted(k for k in calls if isinstance(k, int)) + [
            k for k in calls if not isinstance(k, int)
        ]
        body_text = "".join(text) or "".join(refusal)
        tool_calls = tuple(calls[k].build() for k in keys)
        if error is not None:
            view = _error_view(error, model)
            return ResponseView(
                body_text, tool_calls, view.finish_reason, view.raw_finish_reason, model
            )
        return ResponseView(
            text=body_text,
            tool_calls=tool_calls,
            finish_reason=finish_reason(raw_reason),
            raw_finish_reason=raw_reason,
            model=model,
        )

    def is_terminal_event(self, event: SSEEvent) -> bool:
        """``data: [DONE]`` ends a chat completion stream (the SDKs stop reading there)."""
        return event.data.strip() == "[DONE]"

    def path_fields(self, path: str) -> dict[str, str]:
        """Nothing: the body names the model."""
        return {}

    def rewrite_tool_results(
        self, body: bytes, results: Mapping[str, Any], call_names: Mapping[str, str] | None = None
    ) -> bytes:
        """Replace the ``content`` of every ``role: tool`` message whose tool is in ``results``."""
        if not results:
            return body
        data = load_json_body(NAME, body, "request body")
        messages = _messages(data)
        changed = substitute_outputs(messages, _walk_tool_messages(messages), "content", results)
        return dump_body(data) if changed else body

    def error_body(self, status: int, message: str) -> bytes:
        """``{"error": {"message", "type", "param", "code"}}`` as OpenAI sends it."""
        return openai_error_body(status, message)

    def error_text(self, body: Any) -> str | None:
        """The message of a parsed error body in this API's shape, else None."""
        return error_message(body)


def _index_fallback(calls: dict[Any, _PartialCall], delta: dict[str, Any], position: int) -> int:
    # Some gateways omit "index": a new id opens a new call, otherwise the last call continues.
    ints = [k for k in calls if isinstance(k, int)]
    if not ints:
        return position
    last = max(ints)
    new_id = delta.get("id")
    if isinstance(new_id, str) and new_id and calls[last].call_id not in (None, new_id):
        return last + 1
    return last


def _error_view(error: dict[str, Any], model: str | None) -> ResponseView:
    kind = error.get("type") or error.get("code") or "error"
    return ResponseView(
        text="",
        tool_calls=(),
        finish_reason=FinishReason.ERROR,
        raw_finish_reason=str(kind),
        model=model,
    )


CODEC = OpenAIChatCodec()
