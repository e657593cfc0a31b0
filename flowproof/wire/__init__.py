"""The codec registry: which model API a request speaks, and the codec for it.

Detection is by method and path, on any host, because gateways (OpenRouter,
LiteLLM, Ollama, Azure, a local vLLM) serve the same APIs under other hosts::

    >>> detect("POST", "api.openai.com", "/v1/chat/completions").name
    'openai-chat'
    >>> detect("GET", "api.openai.com", "/v1/models") is None
    True

Model calls are always POSTs. Non-model paths on model hosts (``/api/...``,
``/v1/traces/ingest``, ``/v1/models``, ``/v1/messages/count_tokens``) are not
detected; `is_model_host` lets replay answer them locally instead.

``extra_hosts`` names hosts whose model paths are unusual (a corporate gateway
serving ``/llm/chat/completions`` is already found by its suffix; one serving
``/proxy/responses`` or ``/gw/messages`` is not). On an extra host, any POST
whose path ends with a known suffix — ``/chat/completions``, ``/responses``,
``/messages``, ``:generateContent``, ``:streamGenerateContent`` — is a model
call of that API. Extra hosts also count as model hosts for `is_model_host`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any

from flowproof.errors import WireError
from flowproof.turns import RequestView
from flowproof.wire import anthropic, gemini, openai_chat, openai_responses
from flowproof.wire.base import Codec
from flowproof.wire.providers import PROVIDERS, Provider, model_host_suffixes, model_hosts, provider
from flowproof.wire.sse import (
    SSEDecoder,
    SSEEvent,
    canonical_raw,
    encode_events,
    make_event,
    parse_sse,
)

__all__ = [
    "CODEC_NAMES",
    "MODEL_HOSTS",
    "PROVIDERS",
    "Codec",
    "Provider",
    "SSEDecoder",
    "SSEEvent",
    "available_codecs",
    "canonical_raw",
    "codec_by_name",
    "detect",
    "encode_events",
    "is_model_host",
    "make_event",
    "normalize_host",
    "parse_sse",
    "provider",
    "with_path_fields",
]

#: Every provider id a cassette may name, in detection order (the order of the provider table).
CODEC_NAMES: tuple[str, ...] = tuple(p.name for p in PROVIDERS)

# Every codec, keyed by its provider id, in the order of the provider table.
_ALL: tuple[Codec, ...] = (openai_chat.CODEC, openai_responses.CODEC, anthropic.CODEC, gemini.CODEC)
_CODECS: dict[str, Codec] = {
    codec.name: codec for codec in sorted(_ALL, key=lambda c: CODEC_NAMES.index(c.name))
}

#: Well-known model API hosts, from the provider table (`flowproof.wire.providers`). Azure
#: OpenAI and Vertex AI are matched by suffix, see `is_model_host`.
MODEL_HOSTS: frozenset[str] = frozenset(model_hosts())
_MODEL_HOST_SUFFIXES = model_host_suffixes()

# The path suffix of each API, for extra hosts (the table lists each API's most specific first).
_SUFFIXES: tuple[tuple[str, str], ...] = tuple(
    (suffix, p.name) for p in PROVIDERS for suffix in p.path_suffixes
)


def normalize_host(host: str) -> str:
    """``host`` lowercased, without a port or a trailing dot (``API.openai.com:443`` -> ``api.openai.com``)."""
    host = host.strip().lower()
    if host.startswith("["):  # [ipv6]:port
        return host.split("]", 1)[0] + "]"
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host.rstrip(".")


def available_codecs() -> tuple[Codec, ...]:
    """Every codec, in detection order."""
    return tuple(_CODECS.values())


def codec_by_name(name: str) -> Codec:
    """The codec stored in a cassette as ``name``; `WireError` for an unknown one."""
    codec = _CODECS.get(name)
    if codec is None:
        raise WireError(
            name,
            "provider",
            f"unknown provider; a cassette names one of {', '.join(CODEC_NAMES)}",
        )
    return codec


def is_model_host(host: str, extra_hosts: Collection[str] = ()) -> bool:
    """True for a well-known model API host (or one of ``extra_hosts``)."""
    host = normalize_host(host)
    if host in MODEL_HOSTS or host.endswith(_MODEL_HOST_SUFFIXES):
        return True
    return host in {normalize_host(h) for h in extra_hosts}


_VIEW_FIELDS = frozenset(f.name for f in dataclasses.fields(RequestView))


def with_path_fields(view: RequestView, fields: Mapping[str, str]) -> RequestView:
    """``view`` with the fields its URL path names (`Codec.path_fields`): for Gemini the model.

    >>> from flowproof.wire import gemini
    >>> body = b'{"contents":[{"parts":[{"text":"hi"}]}]}'
    >>> with_path_fields(gemini.CODEC.parse_request(body), {"model": "gemini-2.5-flash"}).model
    'gemini-2.5-flash'
    """
    known: dict[str, Any] = {k: v for k, v in fields.items() if k in _VIEW_FIELDS}
    return dataclasses.replace(view, **known) if known else view


def detect(method: str, host: str, path: str, extra_hosts: Collection[str] = ()) -> Codec | None:
    """The codec for a model call, or None when the request is not one.

    ``path`` is the URL path without the query string (a query is cut off
    defensively). See the module docstring for what ``extra_hosts`` changes.
    """
    if method.upper() != "POST":
        return None  # model calls are POSTs; GET /v1/responses/{id}, /v1/models… are not
    path = path.split("?", 1)[0]
    bare = normalize_host(host)
    for codec in available_codecs():
        if codec.matches("POST", bare, path):
            return codec
    if extra_hosts and bare in {normalize_host(h) for h in extra_hosts}:
        trimmed = path.rstrip("/")
        for suffix, name in _SUFFIXES:
            if trimmed.endswith(suffix):
                return _CODECS[name]
    return None
