"""Which model API a request is, and its system prompt (the lane key) — independent of ``flowproof.wire``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# Provider ids, spelled as flowproof's codecs and cassettes spell them.
OPENAI_CHAT = "openai-chat"
OPENAI_RESPONSES = "openai-responses"
ANTHROPIC = "anthropic"
GEMINI = "gemini"

GEMINI_PATH = re.compile(
    r"/models/(?P<model>[^/:]+):(?P<method>generateContent|streamGenerateContent)$"
)


def detect_api(method: str, path: str) -> str | None:
    """The provider id whose model endpoint ``path`` (without the query) is, or ``None``."""
    if method != "POST":
        return None
    if path.endswith("/chat/completions"):
        return OPENAI_CHAT
    if path.endswith("/responses"):
        return OPENAI_RESPONSES
    if path.endswith("/messages"):
        return ANTHROPIC
    if GEMINI_PATH.search(path):
        return GEMINI
    return None


def _texts(content: Any) -> list[str]:
    """Every text in a message content: a string, or a list of parts carrying ``text``."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
    return []


def system_prompt(api: str, body: Any) -> str:
    """The request's system/developer instructions joined by newlines (the lane key)."""
    if not isinstance(body, Mapping):
        return ""
    parts: list[str] = []
    if api in (OPENAI_CHAT, OPENAI_RESPONSES):
        if api == OPENAI_RESPONSES:
            parts += _texts(body.get("instructions"))
        items = body.get("messages") if api == OPENAI_CHAT else body.get("input")
        if isinstance(items, list):
            for item in items:
                if isinstance(item, Mapping) and item.get("role") in ("system", "developer"):
                    parts += _texts(item.get("content"))
    elif api == ANTHROPIC:
        parts += _texts(body.get("system"))
    elif api == GEMINI:
        instruction = body.get("systemInstruction", body.get("system_instruction"))
        if isinstance(instruction, Mapping):
            parts += _texts(instruction.get("parts"))
        else:
            parts += _texts(instruction)
    return "\n".join(parts)

