"""The OpenAI Responses API (``POST /v1/responses``): codex, openai-agents, the SDK's ``responses``.

Requests carry ``instructions`` plus ``input`` items (messages, ``function_call``,
``function_call_output``…). Streams are typed events (``response.created`` …
``response.completed``) with or without ``event:`` lines, so dispatch is on the
JSON ``type``, as the OpenAI clients do. The final ``response`` object of
``response.completed`` wins when it has output; otherwise the output is
assembled from the item and delta events.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from flowproof.errors import WireError
from flowproof.turns import FinishReason, RequestView, ResponseView, ToolCall, ToolResult
from flowproof.wire._json import (
    compact_json,
    content_text,
    dump_body,
    error_message,
    event_type,
    expect_list,
    expect_object,
    json_object,
    load_json_body,
    optional_str,
    schema_size,
    substitute_outputs,
)
from flowproof.wire.base import Frame
from flowproof.wire.openai_chat import openai_error_body, wants_stream
from flowproof.wire.providers import provider
from flowproof.wire.sse import SSEEvent
from flowproof.wire.usage import responses_usage, with_usage

NAME = "openai-responses"

_SYSTEM_ROLES = frozenset({"system", "developer"})
_CALL_TYPES = {"function_call": "arguments", "custom_tool_call": "input"}
_OUTPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output"})
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})

# Hosts that serve the Responses API under a path other than /v1/responses (Azure's /openai/responses).
_RESPONSES_HOST_SUFFIXES = provider(NAME).host_suffixes


def _items(body: dict[str, Any]) -> list[Any]:
    """The ``input`` items; a string input is one user message."""
    if "input" not in body:
        if "prompt" in body:  # a stored prompt template may stand in for input
            return []
        raise WireError(
            NAME,
            "input",
            "missing: a Responses request needs input (a string or an array of items)",
        )
    value = body["input"]
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return expect_list(NAME, "input", value)


def _tool_name(tool: Any, field: str) -> str:
    tool = expect_object(NAME, field, tool)
    name = tool.get("name")
    return name if isinstance(name, str) else str(tool.get("type"))


def _item_role(item: dict[str, Any]) -> str:
    role = item.get("role")
    if isinstance(role, str):
        return role
    kind = str(item.get("type"))
    if kind in _CALL_TYPES:
        return "assistant"
    if kind in _OUTPUT_TYPES:
        return "tool"
    return kind  # reasoning, configuration_update…: named by type


def _walk_outputs(items: list[Any]) -> list[tuple[int, str | None, str | None]]:
    """``(item index, call id, resolved tool name)`` of each tool output, in order."""
    names: dict[str, str] = {}
    found: list[tuple[int, str | None, str | None]] = []
    for i, item in enumerate(items):
        item = expect_object(NAME, f"input[{i}]", item)
        kind = optional_str(item.get("type"))
        call_id = optional_str(item.get("call_id"))
        if kind in _CALL_TYPES and call_id and isinstance(item.get("name"), str):
            names[call_id] = item["name"]
        elif kind in _OUTPUT_TYPES:
            found.append((i, call_id, names.get(call_id) if call_id else None))
    return found


def _output_text(value: Any) -> str:
    """A tool output as text: a string, text parts, or compact JSON of anything else."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return content_text(value)
    return "" if value is None else compact_json(value)


def _finish(status: Any, details: Any, has_calls: bool) -> tuple[FinishReason, str | None]:
    if status == "completed":
        return (FinishReason.TOOL_CALLS if has_calls else FinishReason.STOP), "completed"
    if status == "incomplete":
        reason = details.get("reason") if isinstance(details, dict) else None
        if reason == "max_output_tokens":
            return FinishReason.LENGTH, reason
        if reason == "content_filter":
            return FinishReason.CONTENT_FILTER, reason
        return FinishReason.OTHER, optional_str(reason) or "incomplete"
    if status == "failed":
        return FinishReason.ERROR, "failed"
    return FinishReason.OTHER, optional_str(status)


def _view(output: list[Any], status: Any, details: Any, model: str | None) -> ResponseView:
    texts: list[str] = []
    calls: list[ToolCall] = []
    for i, item in enumerate(output):
        item = expect_object(NAME, f"output[{i}]", item)
        kind = item.get("type")
        if kind == "message":
            for part in item.get("content") or ():
                # output_text parts; the SDK's output_text joins them with nothing in between
                if isinstance(part, dict) and part.get("type") == "output_text":
                    texts.append(str(part.get("text") or ""))
        elif kind in _CALL_TYPES:
            calls.append(
                ToolCall(
                    name=str(item.get("name") or ""),
                    arguments_raw=str(item.get(_CALL_TYPES[kind]) or ""),
                    call_id=optional_str(item.get("call_id")),
                )
            )
        # hosted tool calls (web_search_call, …) and reasoning run server-side: not agent tool calls
    reason, raw = _finish(status, details, bool(calls))
    return ResponseView(
        text="".join(texts),
        tool_calls=tuple(calls),
        finish_reason=reason,
        raw_finish_reason=raw,
        model=model,
    )


def _error_view(
    error: Any, model: str | None, text: str = "", calls: tuple[ToolCall, ...] = ()
) -> ResponseView:
    kind = "error"
    if isinstance(error, dict):
        kind = str(error.get("code") or error.get("type") or "error")
    return ResponseView(
        text=text,
        tool_calls=calls,
        finish_reason=FinishReason.ERROR,
        raw_finish_reason=kind,
        model=model,
    )


class _Assembler:
    """Output items rebuilt from ``output_item`` and delta events, by ``output_index``."""

    def __init__(self) -> None:
        self.items: dict[int, dict[str, Any]] = {}
        self.done: set[int] = set()
        self.text: dict[tuple[int, int], list[str]] = {}
        self.args: dict[int, list[str]] = {}
        self.by_id: dict[str, int] = {}

    def _index(self, event: dict[str, Any]) -> int:
        index = event.get("output_index")
        if isinstance(index, int):
            return index
        item_id = event.get("item_id")
        if isinstance(item_id, str) and item_id in self.by_id:
            return self.by_id[item_id]
        return max(self.items, default=0)

    def add(self, kind: str, event: dict[str, Any]) -> None:
        if kind in ("response.output_item.added", "response.output_item.done"):
            item = event.get("item")
            if isinstance(item, dict):
                index = self._index(event)
                self.items[index] = dict(item)
                if isinstance(item.get("id"), str):
                    self.by_id[item["id"]] = index
                if kind.endswith(".done"):
                    self.done.add(index)
        elif kind == "response.output_text.delta" and isinstance(event.get("delta"), str):
            part = (self._index(event), _int(event.get("content_index")))
            self.text.setdefault(part, []).append(event["delta"])
        elif kind == "response.output_text.done" and isinstance(event.get("text"), str):
            self.text[(self._index(event), _int(event.get("content_index")))] = [event["text"]]
        elif kind in (
            "response.function_call_arguments.delta",
            "response.custom_tool_call_input.delta",
        ):
            if isinstance(event.get("delta"), str):
                self.args.setdefault(self._index(event), []).append(event["delta"])
        elif kind == "response.function_call_arguments.done" and isinstance(
            event.get("arguments"), str
        ):
            self.args[self._index(event)] = [event["arguments"]]
        elif kind == "response.custom_tool_call_input.done" and isinstance(event.get("input"), str):
            self.args[self._index(event)] = [event["input"]]

    def output(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for index in sorted(self.items):
            item = dict(self.items[index])
            kind = item.get("type")
            if index not in self.done:  # a finished item is authoritative; else use the deltas
                if kind == "message":
                    parts = sorted((c, "".join(t)) for (i, c), t in self.text.items() if i == index)
                    item["content"] = [{"type": "output_text", "text": t} for _, t in parts]
                elif kind in _CALL_TYPES and index in self.args:
                    item[_CALL_TYPES[kind]] = "".join(self.args[index])
            out.append(item)
        # text deltas whose item was never announced still reached the client
        for index in sorted({i for i, _ in self.text} - set(self.items)):
            parts = sorted((c, "".join(t)) for (i, c), t in self.text.items() if i == index)
            out.append(
                {
                    "type": "message",
                    "content": [{"type": "output_text", "text": t} for _, t in parts],
                }
            )
        return out


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0


class OpenAIResponsesCodec:
    """The Responses API codec (``name = "openai-responses"``)."""

    name = NAME

    def matches(self, method: str, host: str, path: str) -> bool:
        """POST to ``…/v1/responses`` on any host, or ``…/responses`` on Azure OpenAI.

        ``GET /v1/responses/{id}``, ``…/cancel`` and ``…/input_tokens`` are not model calls.
        """
        if method.upper() != "POST":
            return False
        path = path.rstrip("/")
        if path.endswith("/v1/responses"):
            return True
        host = host.lower().rsplit(":", 1)[0] if host.count(":") == 1 else host.lower()
        return path.endswith("/responses") and host.endswith(_RESPONSES_HOST_SUFFIXES)

    def is_stream_request(self, body: bytes, path: str, query: str) -> bool:
        """True when the body says ``"stream": true``."""
        return wants_stream(body)

    def parse_request(self, body: bytes) -> RequestView:
        """The provider-neutral view of a Responses request."""
        return self.view_request(load_json_body(NAME, body, "request body"))

    def view_request(self, body: Any) -> RequestView:
        """`parse_request` of a body parsed already (a cassette's)."""
        data = json_object(NAME, body, "request body")
        items = _items(data)
        system: list[str] = []
        instructions = data.get("instructions")
        if isinstance(instructions, str) and instructions:
            system.append(instructions)
        size = len(instructions) if isinstance(instructions, str) else 0
        roles: list[str] = []
        prompt = ""
        tools = [
            _tool_name(t, f"tools[{i}]")
            for i, t in enumerate(expect_list(NAME, "tools", data.get("tools") or []))
        ]
        for i, item in enumerate(items):
            item = expect_object(NAME, f"input[{i}]", item)
            role = _item_role(item)
            roles.append(role)
            text = content_text(item.get("content"))
            if role in _SYSTEM_ROLES and text:
                system.append(text)
            elif role == "user":  # a string input is one user item; tool outputs are role "tool"
                prompt = content_text(item.get("content"), "\n")
            size += len(text)
            kind = optional_str(item.get("type"))
            if kind in _CALL_TYPES:
                size += len(str(item.get(_CALL_TYPES[kind]) or ""))
            elif kind in _OUTPUT_TYPES:
                size += len(_output_text(item.get("output")))
            if isinstance(item.get("tools"), list):  # codex's "additional_tools" input item
                tools.extend(
                    _tool_name(t, f"input[{i}].tools[{j}]") for j, t in enumerate(item["tools"])
                )
                size += schema_size(item["tools"])
        size += schema_size(data.get("tools"))
        results = tuple(
            ToolResult(call_id=call_id, name=name, content=_output_text(items[i].get("output")))
            for i, call_id, name in _walk_outputs(items)
        )
        return RequestView(
            provider=NAME,
            model=optional_str(data.get("model")),
            system="\n\n".join(system),
            tools=tuple(tools),
            roles=tuple(roles),
            tool_results=results,
            stream=data.get("stream") is True,
            text_size=size,
            prompt=prompt,
            previous_response_id=optional_str(data.get("previous_response_id")),
        )

    def parse_response(self, body: bytes) -> ResponseView:
        """The view of a non-streamed ``response`` object (or an error body)."""
        return self.view_response(load_json_body(NAME, body, "response body"))

    def view_response(self, body: Any) -> ResponseView:
        """`parse_response` of a body parsed already (a cassette's)."""
        return self._response_view(json_object(NAME, body, "response body"), "response body")

    def _response_view(self, data: dict[str, Any], where: str) -> ResponseView:
        return with_usage(self._plain_view(data, where), responses_usage(data.get("usage")))

    def _plain_view(self, data: dict[str, Any], where: str) -> ResponseView:
        model = optional_str(data.get("model"))
        if "output" not in data and "status" not in data and isinstance(data.get("error"), dict):
            return _error_view(data["error"], model)
        output = expect_list(NAME, f"{where}.output", data.get("output") or [])
        # A response object without "status" (some compatible servers) is a finished one.
        status = data.get("status", "completed")
        view = _view(output, status, data.get("incomplete_details"), model)
        if data.get("status") == "failed":
            view = _error_view(data.get("error"), model, view.text, view.tool_calls)
        # The id a later request continues from (previous_response_id): threads follow it.
        return dataclasses.replace(view, response_id=optional_str(data.get("id")))

    def parse_events(self, events: Sequence[SSEEvent]) -> ResponseView:
        """Assemble a Responses stream: the terminal event's response, else the deltas."""
        assembler = _Assembler()
        final: dict[str, Any] | None = None
        error: Any = None
        model: str | None = None
        for n, event in enumerate(events):
            data = event.data.strip()
            if not data or data == "[DONE]":  # keep-alives; some gateways add a chat-style [DONE]
                continue
            payload = load_json_body(NAME, data, f"events[{n}].data")
            kind = payload.get("type") or event.event or ""
            response = payload.get("response")
            if isinstance(response, dict) and model is None:
                model = optional_str(response.get("model"))
            if kind in _TERMINAL and isinstance(response, dict):
                final = response
            elif kind == "error":
                error = payload.get("error") if isinstance(payload.get("error"), dict) else payload
            else:
                assembler.add(str(kind), payload)
        assembled = assembler.output()
        if final is not None:
            model = optional_str(final.get("model")) or model
            if not final.get("output") and assembled:
                # Some servers send the terminal response without output: keep what streamed.
                final = {**final, "output": assembled}
            return self._response_view(final, "response.completed.response")
        view = _view(assembled, "in_progress", None, model)
        if error is not None:
            return _error_view(error, model, view.text, view.tool_calls)
        return view  # a stream cut before its terminal event: finish reason OTHER

    def is_terminal_event(self, event: SSEEvent) -> bool:
        """``response.completed``, ``response.incomplete`` or ``response.failed``."""
        return event_type(event.event, event.data) in _TERMINAL

    def path_fields(self, path: str) -> dict[str, str]:
        """Nothing: the body names the model."""
        return {}

    def rewrite_tool_results(
        self, body: bytes, results: Mapping[str, Any], call_names: Mapping[str, str] | None = None
    ) -> bytes:
        """Replace ``output`` of every ``function_call_output`` item whose tool is in ``results``;
        a call the body does not carry (a continuation by id) is named by ``call_names``."""
        if not results:
            return body
        data = load_json_body(NAME, body, "request body")
        if isinstance(data.get("input"), str):
            return body  # a plain prompt carries no tool outputs
        items = _items(data)
        outputs = [
            (i, call_id, name or (call_names or {}).get(call_id or ""))
            for i, call_id, name in _walk_outputs(items)
        ]
        changed = substitute_outputs(items, outputs, "output", results)
        return dump_body(data) if changed else body

    def error_body(self, status: int, message: str) -> bytes:
        """``{"error": {"message", "type", "param", "code"}}`` as OpenAI sends it."""
        return openai_error_body(status, message)

    def error_text(self, body: Any) -> str | None:
        """The message of a parsed error body in this API's shape, else None."""
        return error_message(body)


CODEC = OpenAIResponsesCodec()


# --------------------------------------------------------------------------- over a WebSocket

#: The server events that end a turn over a WebSocket: the stream's terminal events, and the
#: ``error`` event (the API fails the request with it; codex reads its ``status``).
_FRAME_TERMINAL = _TERMINAL | {"error"}


class ResponsesFrames:
    """The Responses API over a WebSocket (``GET /v1/responses`` upgraded): each client
    ``response.create`` frame is a turn's request (codex's ``generate: false`` warm-up
    included), the server's events up to the terminal one its answer."""

    name = NAME

    def matches_upgrade(self, host: str, path: str) -> bool:
        """The Responses path, as for ``POST`` (`OpenAIResponsesCodec.matches`)."""
        return CODEC.matches("POST", host, path)

    def is_request(self, frame: Frame) -> bool:
        return _frame_type(frame) == "response.create"

    def is_terminal(self, frame: Frame) -> bool:
        # Every server frame passes here: parse only the few that can name a terminal event.
        text = frame.text
        if text is None or not any(kind in text for kind in _FRAME_TERMINAL):
            return False
        return _frame_type(frame) in _FRAME_TERMINAL

    def error_frame(self, status: int, message: str) -> Frame:
        """``{"type": "error", "status": S, "error": {…}}``: with ``status`` a client ends its
        turn at once (codex does; without it codex waits for more)."""
        error = json.loads(openai_error_body(status, message))["error"]
        return Frame(text=compact_json({"type": "error", "status": status, "error": error}))

    def error_status(self, frame: Frame) -> int | None:
        if _frame_type(frame) != "error" or frame.text is None:
            return None
        data = json.loads(frame.text)
        status = data.get("status", data.get("status_code"))
        return status if isinstance(status, int) and not isinstance(status, bool) and status >= 400 else None


def _frame_type(frame: Frame) -> str | None:
    if frame.text is None or '"type"' not in frame.text:
        return None
    try:
        data = json.loads(frame.text)
    except ValueError:
        return None
    kind = data.get("type") if isinstance(data, dict) else None
    return kind if isinstance(kind, str) else None


FRAMES = ResponsesFrames()
