"""JSON helpers shared by the wire codecs: strict loading with WireError, deterministic dumping.

Every codec reads untrusted bodies. These helpers turn "not JSON", "not an
object" and "a field of the wrong type" into `flowproof.errors.WireError`
naming the provider and the field, so no raw KeyError/TypeError escapes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from flowproof.errors import WireError


def load_json_body(provider: str, body: bytes | str, what: str = "body") -> dict[str, Any]:
    """Parse ``body`` as a JSON object, or raise `WireError` naming ``provider`` and ``what``."""
    try:
        value = json.loads(body)
    except UnicodeDecodeError as e:
        raise WireError(provider, what, f"is not UTF-8 ({e.reason} at byte {e.start})") from None
    except (ValueError, RecursionError) as e:  # RecursionError: absurdly deep nesting
        raise WireError(
            provider, what, f"is not valid JSON ({e}); expected a JSON object"
        ) from None
    return json_object(provider, value, what)


def json_object(provider: str, value: Any, what: str = "body") -> dict[str, Any]:
    """A parsed body when it is a JSON object, or `WireError` naming ``provider`` and ``what``
    (the check `load_json_body` makes, for a body that was parsed already)."""
    if not isinstance(value, dict):
        raise WireError(provider, what, f"is a JSON {type_name(value)}, expected a JSON object")
    return value


def dump_body(obj: Any) -> bytes:
    """Compact, deterministic JSON bytes: key order kept, no spaces, UTF-8 (not ASCII escapes)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def compact_json(value: Any) -> str:
    """A tool result as the model sees it: strings unchanged, anything else compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def type_name(value: Any) -> str:
    """The JSON name of a parsed value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def expect_list(provider: str, field: str, value: Any) -> list[Any]:
    """``value`` when it is a JSON array, else a `WireError` naming ``field``."""
    if not isinstance(value, list):
        raise WireError(provider, field, f"is a JSON {type_name(value)}, expected an array")
    return value


def expect_object(provider: str, field: str, value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else a `WireError` naming ``field``."""
    if not isinstance(value, dict):
        raise WireError(provider, field, f"is a JSON {type_name(value)}, expected an object")
    return value


def optional_str(value: Any) -> str | None:
    """``value`` when it is a string, else None (for lenient optional fields like ``model``)."""
    return value if isinstance(value, str) else None


def content_text(content: Any, sep: str = "") -> str:
    """The text of a message ``content``: a string, or the ``text`` of each part of a list.

    Parts without text (images, files, audio) contribute nothing; a part that is
    a bare string counts as text (some gateways send that).
    """
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
        return sep.join(texts)
    return ""


def schema_size(value: Any) -> int:
    """Characters of ``value`` as compact JSON (tool schemas count toward a request's text size)."""
    if value is None:
        return 0
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def substitute_outputs(
    items: list[Any],
    outputs: Iterable[tuple[int, str | None, str | None]],
    field: str,
    results: Mapping[str, Any],
) -> bool:
    """Set ``items[i][field]`` to the mocked result of each ``(i, call id, tool name)`` output
    whose tool is in ``results``; True when anything changed (so the body is re-serialized)."""
    changed = False
    for i, _call_id, name in outputs:
        if name is None or name not in results:
            continue
        new = compact_json(results[name])
        if items[i].get(field) != new:
            items[i][field] = new
            changed = True
    return changed


def compact_dumps(value: Any) -> str:
    """Compact JSON text, key order kept, UTF-8 characters unescaped (arguments, tool results)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def json_kind(value: Any) -> str:
    """A parsed value's JSON type with its article, for messages: "an array", "a string", "null"."""
    name = type_name(value)
    if name == "null":
        return name
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


class FieldReader:
    """Typed access to untrusted JSON for one provider: every mismatch is a `WireError`
    naming the provider and the field, as ``anthropic: messages[0].role: expected a
    string, got an array``."""

    __slots__ = ("provider",)

    def __init__(self, provider: str) -> None:
        self.provider = provider

    def load(self, body: bytes | str, field_name: str) -> Any:
        try:
            return json.loads(body)
        except (ValueError, RecursionError) as e:
            raise WireError(self.provider, field_name, f"not valid JSON ({e})") from None

    def as_object(self, value: Any, field_name: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self._mismatch(field_name, "a JSON object", value)
        return value

    def as_list(self, value: Any, field_name: str) -> list[Any]:
        if not isinstance(value, list):
            raise self._mismatch(field_name, "a JSON array", value)
        return value

    def as_str(self, value: Any, field_name: str) -> str:
        if not isinstance(value, str):
            raise self._mismatch(field_name, "a string", value)
        return value

    def as_opt_str(self, value: Any, field_name: str) -> str | None:
        return None if value is None else self.as_str(value, field_name)

    def _mismatch(self, field_name: str, expected: str, value: Any) -> WireError:
        return WireError(self.provider, field_name, f"expected {expected}, got {json_kind(value)}")


def event_payload(data: str) -> dict[str, Any] | None:
    """An SSE event's ``data`` as a JSON object, or None (keep-alives, ``[DONE]``, anything else).

    Lenient on purpose: it only asks "is this the terminal event?", and a chunk it
    cannot read is simply not one.
    """
    text = data.strip()
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def event_type(event_name: str | None, data: str) -> str | None:
    """The type of an SSE event: its ``event:`` name, else its JSON ``type`` field."""
    if event_name:
        return event_name
    payload = event_payload(data)
    kind = payload.get("type") if payload is not None else None
    return kind if isinstance(kind, str) else None


def error_message(body: Any) -> str | None:
    """The message of a parsed JSON error body: ``{"error": {"message"}}`` (OpenAI, Gemini,
    and Anthropic inside its envelope), ``{"error": "…"}`` or ``{"message": "…"}``."""
    if not isinstance(body, dict):
        return None
    err = body.get("error")
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        return str(err["message"])
    if isinstance(err, str):
        return err
    if isinstance(body.get("message"), str):
        return str(body["message"])
    return None
