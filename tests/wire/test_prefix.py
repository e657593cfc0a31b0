"""A request body in its provider's cache order, and its conversation items."""

from __future__ import annotations

from flowproof.wire.prefix import cache_parts, conversation_items


def test_anthropic_order_and_cache_control_left_out() -> None:
    body = {
        "model": "claude-x",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi",
                                                    "cache_control": {"type": "ephemeral"}}]}],
        "system": [{"type": "text", "text": "be brief"}],
        "tools": [{"name": "Grep"}],
    }
    parts = cache_parts("anthropic", body)
    assert [(p.root, p.present, p.growing) for p in parts] == [
        ("tools", True, False), ("system", True, False), ("messages", True, True)]
    assert parts[2].value == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert "cache_control" in body["messages"][0]["content"][0]  # the body itself is untouched


def test_openai_chat_keeps_every_key() -> None:
    parts = cache_parts("openai-chat", {"messages": [{"role": "system", "content": "x",
                                                      "cache_control": 1}]})
    assert [(p.root, p.present) for p in parts] == [("tools", False), ("messages", True)]
    assert parts[1].value[0]["cache_control"] == 1


def test_responses_and_gemini_roots() -> None:
    assert [p.root for p in cache_parts("openai-responses", {})] == ["tools", "instructions", "input"]
    assert [p.root for p in cache_parts("gemini", {})][-1] == "contents"


def test_unknown_provider_or_body() -> None:
    assert cache_parts("nope", {}) == ()
    assert cache_parts("anthropic", "text") == ()
    assert conversation_items("nope", {}) is None


def test_conversation_items() -> None:
    assert conversation_items("openai-responses", {"input": "hello"}) == ("hello",)
    assert conversation_items("gemini", {"contents": [{"role": "user"}]}) == ({"role": "user"},)
    assert conversation_items("anthropic", {"model": "x"}) is None
