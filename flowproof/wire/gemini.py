"""The Google Gemini API codec (``models/<model>:generateContent`` and ``:streamGenerateContent``).

Wire facts this codec relies on (Gemini API reference, "Generating content" and
"Function calling"):

- The model is named in the URL path (``/v1beta/models/gemini-2.5-flash:generateContent``),
  not in the body, and ``parse_request`` sees only the body: ``RequestView.model``
  is the body's ``model`` field when a client sends one, else ``None``;
  `GeminiCodec.path_fields` gives the path's model, which
  `flowproof.wire.with_path_fields` puts into the view.
- Keys may be camelCase (REST, the official SDKs) or snake_case (accepted by
  the API, sent by some clients): both are read.
- ``:streamGenerateContent?alt=sse`` answers with SSE events whose ``data:`` is
  one complete ``GenerateContentResponse`` chunk each. Without ``alt=sse`` the
  same chunks arrive as one JSON **array**; `GeminiCodec.parse_response`
  accepts that array form too.
- Gemini reports ``finishReason: STOP`` when it asks for function calls, so a
  response with any ``functionCall`` part finishes with ``tool-calls``.
- ``functionCall.args`` is a JSON object; ``ToolCall.arguments_raw`` is its
  compact serialization. ``functionResponse.response`` must be an object: a
  mocked tool result that is not a dict is wrapped as ``{"result": value}``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from flowproof.errors import WireError
from flowproof.turns import FinishReason, RequestView, ResponseView, ToolCall, ToolResult
from flowproof.wire._json import FieldReader, compact_dumps, error_message, event_payload
from flowproof.wire.sse import SSEEvent
from flowproof.wire.usage import gemini_usage

__all__ = ["CODEC", "GeminiCodec", "model_from_path"]

PROVIDER = "gemini"

# Gemini Developer API paths, plus Vertex AI's publisher-model form.
_PATH = re.compile(
    r"/(?:v1|v1beta|v1alpha|v1beta1)/"
    r"(?:projects/[^/]+/locations/[^/]+/publishers/[^/]+/)?"
    r"(?P<kind>models|tunedModels)/(?P<model>[^/:]+)"
    r":(?P<method>generateContent|streamGenerateContent)$"
)

_FINISH_REASONS: dict[str, FinishReason] = {
    "STOP": FinishReason.STOP,
    "MAX_TOKENS": FinishReason.LENGTH,
    "SAFETY": FinishReason.CONTENT_FILTER,
    "RECITATION": FinishReason.CONTENT_FILTER,
    "BLOCKLIST": FinishReason.CONTENT_FILTER,
    "PROHIBITED_CONTENT": FinishReason.CONTENT_FILTER,
    "SPII": FinishReason.CONTENT_FILTER,
    "IMAGE_SAFETY": FinishReason.CONTENT_FILTER,
    "MALFORMED_FUNCTION_CALL": FinishReason.ERROR,
}

# google.rpc.Code names per HTTP status, as Google APIs use them.
_STATUS_NAMES: dict[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    412: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def model_from_path(path: str) -> str | None:
    """The model named in a Gemini request path, e.g. ``"gemini-2.5-flash"``; ``None`` if none.

    >>> model_from_path("/v1beta/models/gemini-2.5-flash:streamGenerateContent")
    'gemini-2.5-flash'
    """
    found = _PATH.search(path)
    return found.group("model") if found else None


_fields = FieldReader(PROVIDER)
_load, _object, _list, _str, _opt_str = (
    _fields.load, _fields.as_object, _fields.as_list, _fields.as_str, _fields.as_opt_str
)
_dumps = compact_dumps


def _get(data: dict[str, Any], camel: str, snake: str) -> tuple[Any, str]:
    """The value under the camelCase key, else the snake_case one, with the key actually used."""
    if camel in data:
        return data[camel], camel
    return data.get(snake), snake


def _parts_text(content: Any, field_name: str) -> str:
    """Join the text parts of a Content (``{"parts": [{"text": …}]}``) with blank lines."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    content = _object(content, field_name)
    parts = content.get("parts")
    if parts is None:
        return ""
    texts = []
    for i, part in enumerate(_list(parts, f"{field_name}.parts")):
        part = _object(part, f"{field_name}.parts[{i}]")
        if "text" in part:
            texts.append(_str(part["text"], f"{field_name}.parts[{i}].text"))
    return "\n\n".join(texts)


class _Chunks:
    """Accumulates GenerateContentResponse chunks (one for a plain response, many for a stream)."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.calls: list[ToolCall] = []
        self.finish: str | None = None
        self.block_reason: str | None = None
        self.model: str | None = None
        self.error: str | None = None
        self.seen_candidates = False
        self.usage: Any = None

    def add(self, chunk: Any, where: str) -> None:
        chunk = _object(chunk, where)
        if "error" in chunk and "candidates" not in chunk:
            error = chunk["error"]
            status = error.get("status") if isinstance(error, dict) else None
            self.error = status if isinstance(status, str) else "error"
            return
        model = chunk.get("modelVersion")
        if isinstance(model, str):
            self.model = model
        metadata, _ = _get(chunk, "usageMetadata", "usage_metadata")
        if isinstance(metadata, dict):
            self.usage = metadata  # cumulative: the last chunk's is the call's
        feedback, key = _get(chunk, "promptFeedback", "prompt_feedback")
        if feedback is not None:
            feedback = _object(feedback, f"{where}.{key}")
            reason, rkey = _get(feedback, "blockReason", "block_reason")
            self.block_reason = _opt_str(reason, f"{where}.{key}.{rkey}") or self.block_reason
        candidates = chunk.get("candidates")
        if candidates is None:
            return
        candidates = _list(candidates, f"{where}.candidates")
        if not candidates:
            return
        self.seen_candidates = True
        # Only the first candidate is the agent's answer; clients read candidates[0].
        cwhere = f"{where}.candidates[0]"
        candidate = _object(candidates[0], cwhere)
        reason, rkey = _get(candidate, "finishReason", "finish_reason")
        reason = _opt_str(reason, f"{cwhere}.{rkey}")
        if reason is not None:
            self.finish = reason
        content = candidate.get("content")
        if content is None:
            return
        content = _object(content, f"{cwhere}.content")
        parts = content.get("parts")
        if parts is None:
            return
        for i, part in enumerate(_list(parts, f"{cwhere}.content.parts")):
            pwhere = f"{cwhere}.content.parts[{i}]"
            part = _object(part, pwhere)
            call, ckey = _get(part, "functionCall", "function_call")
            if call is not None:
                call = _object(call, f"{pwhere}.{ckey}")
                args = call.get("args")
                self.calls.append(
                    ToolCall(
                        name=_str(call.get("name"), f"{pwhere}.{ckey}.name"),
                        arguments_raw=_dumps({} if args is None else args),
                        call_id=_opt_str(call.get("id"), f"{pwhere}.{ckey}.id"),
                    )
                )
            elif "text" in part and part.get("thought") is not True:
                # Thought summaries (thought: true) are reasoning, not reply text.
                self.texts.append(_str(part["text"], f"{pwhere}.text"))

    def view(self, *, stream: bool) -> ResponseView:
        if self.error is not None:
            finish, raw = FinishReason.ERROR, self.error
        elif self.finish is not None:
            raw = self.finish
            if self.calls and self.finish == "STOP":
                finish = FinishReason.TOOL_CALLS
            else:
                finish = _FINISH_REASONS.get(self.finish, FinishReason.OTHER)
        elif self.block_reason is not None:
            finish, raw = FinishReason.CONTENT_FILTER, self.block_reason
        elif self.calls:
            # Some gateways omit finishReason on function-call answers.
            finish, raw = FinishReason.TOOL_CALLS, None
        else:
            # A stream that never said why it ended was cut short.
            finish, raw = (FinishReason.ERROR if stream else FinishReason.OTHER), None
        return ResponseView(
            text="".join(self.texts),
            tool_calls=tuple(self.calls),
            finish_reason=finish,
            raw_finish_reason=raw,
            model=self.model,
            usage=gemini_usage(self.usage),
        )


class GeminiCodec:
    """Codec for the Gemini ``generateContent`` API. See the module docstring for the wire facts."""

    name = PROVIDER

    def matches(self, method: str, host: str, path: str) -> bool:
        """POST to ``/(v1|v1beta|v1alpha)/(models|tunedModels)/<m>:(stream)?generateContent``."""
        return method.upper() == "POST" and _PATH.search(path) is not None

    def is_stream_request(self, body: bytes, path: str, query: str) -> bool:
        """True for ``:streamGenerateContent``.

        The response is SSE only with ``alt=sse`` in ``query``; without it the
        chunks come as one JSON array, which `parse_response` reads.
        """
        found = _PATH.search(path)
        return found is not None and found.group("method") == "streamGenerateContent"

    def parse_request(self, body: bytes) -> RequestView:
        """The provider-neutral view of a ``GenerateContentRequest`` body.

        ``model`` is the body's ``model`` field or ``None`` (the path names it:
        see `model_from_path`), and ``stream`` is always ``False``: only the path
        says whether a Gemini call streams (see `is_stream_request`).
        """
        return self.view_request(_load(body, "body"))

    def view_request(self, body: Any) -> RequestView:
        """`parse_request` of a body parsed already (a cassette's)."""
        data = _object(body, "body")
        model = _opt_str(data.get("model"), "model")
        instruction, skey = _get(data, "systemInstruction", "system_instruction")
        system = _parts_text(instruction, skey)
        if "contents" not in data:
            raise WireError(
                PROVIDER, "contents", "missing: a generateContent request needs a contents array"
            )
        contents = _list(data["contents"], "contents")

        tools_value = data.get("tools")
        tools_list = [] if tools_value is None else _list(tools_value, "tools")
        tools: list[str] = []
        for t, tool in enumerate(tools_list):
            tool = _object(tool, f"tools[{t}]")
            decls, dkey = _get(tool, "functionDeclarations", "function_declarations")
            for d, decl in enumerate([] if decls is None else _list(decls, f"tools[{t}].{dkey}")):
                decl = _object(decl, f"tools[{t}].{dkey}[{d}]")
                tools.append(_str(decl.get("name"), f"tools[{t}].{dkey}[{d}].name"))
            # Built-in tools (googleSearch, codeExecution, urlContext…) are named by their key.
            tools.extend(
                key for key in tool if key not in ("functionDeclarations", "function_declarations")
            )

        roles: list[str] = []
        results: list[ToolResult] = []
        prompt = ""
        text_size = len(system) + (len(_dumps(tools_list)) if tools_list else 0)
        for c, content in enumerate(contents):
            where = f"contents[{c}]"
            content = _object(content, where)
            role = content.get("role")
            role = "user" if role is None else _str(role, f"{where}.role")
            roles.append(role)
            parts = content.get("parts")
            if parts is None:
                if role == "user":
                    prompt = ""
                continue
            texts: list[str] = []
            only_responses = bool(parts)
            for p, part in enumerate(_list(parts, f"{where}.parts")):
                pwhere = f"{where}.parts[{p}]"
                part = _object(part, pwhere)
                if "text" in part:
                    texts.append(_str(part["text"], f"{pwhere}.text"))
                    text_size += len(texts[-1])
                response, rkey = _get(part, "functionResponse", "function_response")
                only_responses = only_responses and response is not None
                if response is not None:
                    response = _object(response, f"{pwhere}.{rkey}")
                    text = _dumps(response.get("response"))
                    text_size += len(text)
                    results.append(
                        ToolResult(
                            call_id=_opt_str(response.get("id"), f"{pwhere}.{rkey}.id"),
                            name=_str(response.get("name"), f"{pwhere}.{rkey}.name"),
                            content=text,
                        )
                    )
            # A user turn that only carries function responses is not a prompt: keep the earlier one.
            if role == "user" and not only_responses:
                prompt = "\n".join(texts)
        return RequestView(
            provider=PROVIDER,
            model=model,
            system=system,
            tools=tuple(tools),
            roles=tuple(roles),
            tool_results=tuple(results),
            stream=False,
            text_size=text_size,
            prompt=prompt,
        )

    def parse_response(self, body: bytes) -> ResponseView:
        """The view of a ``GenerateContentResponse``, or of the JSON-array stream form."""
        return self.view_response(_load(body, "body"))

    def view_response(self, body: Any) -> ResponseView:
        """`parse_response` of a body parsed already (a cassette's)."""
        data = body
        chunks = _Chunks()
        if isinstance(data, list):
            for i, chunk in enumerate(data):
                chunks.add(chunk, f"body[{i}]")
            return chunks.view(stream=True)
        data = _object(data, "body")
        chunks.add(data, "body")
        if not chunks.seen_candidates and chunks.block_reason is None and chunks.error is None:
            raise WireError(
                PROVIDER,
                "candidates",
                "missing: a response needs candidates or promptFeedback.blockReason",
            )
        return chunks.view(stream=False)

    def parse_events(self, events: Sequence[SSEEvent]) -> ResponseView:
        """Merge ``alt=sse`` chunks: text concatenated, calls collected, last finishReason wins."""
        chunks = _Chunks()
        for i, event in enumerate(events):
            if not event.data.strip():
                continue
            chunks.add(_load(event.data, f"events[{i}].data"), f"events[{i}].data")
        return chunks.view(stream=True)

    def is_terminal_event(self, event: SSEEvent) -> bool:
        """A chunk whose candidate carries a ``finishReason``: Gemini's last chunk (it sends no
        end marker of its own)."""
        payload = event_payload(event.data)
        candidates = payload.get("candidates") if payload is not None else None
        if not isinstance(candidates, list):
            return False
        return any(
            isinstance(c, dict) and (c.get("finishReason") or c.get("finish_reason")) for c in candidates
        )

    def path_fields(self, path: str) -> dict[str, str]:
        """``{"model": …}`` from ``/v1beta/models/{model}:generateContent``: Gemini names the
        model in the path, so the replay key and the divergence report must see it there."""
        model = model_from_path(path.split("?", 1)[0])
        return {"model": model} if model is not None else {}

    def rewrite_tool_results(
        self, body: bytes, results: Mapping[str, Any], call_names: Mapping[str, str] | None = None
    ) -> bytes:
        """Replace ``functionResponse.response`` for each mocked tool name.

        Gemini requires the response to be an object: a mocked dict is used as
        is, any other value ``v`` becomes ``{"result": v}``. ``name`` and ``id``
        are kept. Unchanged -> the original bytes; changed -> compact JSON with
        the key order preserved.
        """
        if not results:
            return body
        data = _object(_load(body, "body"), "body")
        contents = data.get("contents")
        if not isinstance(contents, list):
            return body
        changed = False
        for content in contents:
            if not isinstance(content, dict) or not isinstance(content.get("parts"), list):
                continue
            for part in content["parts"]:
                if not isinstance(part, dict):
                    continue
                response, _ = _get(part, "functionResponse", "function_response")
                if not isinstance(response, dict):
                    continue
                name = response.get("name")
                if not isinstance(name, str) or name not in results:
                    continue
                value = results[name]
                new = value if isinstance(value, dict) else {"result": value}
                if response.get("response") != new:
                    response["response"] = new
                    changed = True
        if not changed:
            return body
        return _dumps(data).encode()

    def error_body(self, status: int, message: str) -> bytes:
        """Google's error JSON: ``{"error":{"code":…,"message":…,"status":"NOT_FOUND"}}``."""
        name = _STATUS_NAMES.get(status)
        if name is None:
            name = "INTERNAL" if status >= 500 else "INVALID_ARGUMENT"
        return _dumps({"error": {"code": status, "message": message, "status": name}}).encode()

    def error_text(self, body: Any) -> str | None:
        """The message of a parsed error body in this API's shape, else None."""
        return error_message(body)


CODEC = GeminiCodec()
