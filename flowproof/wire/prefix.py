"""A request body as its provider's prompt cache reads it, and its conversation items.

The cache-prefix rule (`flowproof.cacheprefix`) and the grouping of requests
into continuing conversations (`flowproof.conversations`) need the parts of a
request body the provider table names: the roots in ``cache_order`` (tools,
system, conversation) and the conversation list itself. Keys the cache does not
read (``cache_ignored_keys``) are left out, so Claude Code moving its
``cache_control`` marker to the newest message is not a change.

Pure; the provider facts come from `flowproof.wire.providers`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flowproof.wire.providers import provider

__all__ = ["CachePart", "cache_parts", "conversation_items"]


@dataclass(frozen=True, slots=True)
class CachePart:
    """One root of a request body in cache order. ``present`` is False when the body has none;
    ``growing`` marks the conversation root, the only one a later request may extend."""

    root: str
    present: bool
    value: Any
    growing: bool


def _strip(value: Any, ignored: frozenset[str]) -> Any:
    if not ignored:
        return value
    if isinstance(value, dict):
        return {k: _strip(v, ignored) for k, v in value.items() if k not in ignored}
    if isinstance(value, list):
        return [_strip(v, ignored) for v in value]
    return value


def cache_parts(provider_name: str, body: Any) -> tuple[CachePart, ...]:
    """The roots of ``body`` in the provider's cache order (unknown provider or a body that is
    not an object: none)."""
    try:
        row = provider(provider_name)
    except KeyError:
        return ()
    if not isinstance(body, dict):
        return ()
    ignored = frozenset(row.cache_ignored_keys)
    return tuple(
        CachePart(root, root in body, _strip(body.get(root), ignored), root in row.message_roots)
        for root in row.cache_order
    )


def conversation_items(provider_name: str, body: Any) -> tuple[Any, ...] | None:
    """The conversation list of ``body`` (messages, input items or contents), cache-ignored keys
    left out; a plain-text ``input`` is one item. None when the body carries no conversation."""
    try:
        row = provider(provider_name)
    except KeyError:
        return None
    if not isinstance(body, dict):
        return None
    ignored = frozenset(row.cache_ignored_keys)
    for root in row.message_roots:
        value = body.get(root)
        if isinstance(value, list):
            return tuple(_strip(item, ignored) for item in value)
        if isinstance(value, str):
            return (value,)
    return None
