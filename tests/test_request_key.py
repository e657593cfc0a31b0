"""The replay key: tool-result rewrite, normalization, sha256."""

from __future__ import annotations

import hashlib
import json

from flowproof.normalize import Normalizer
from flowproof.request_key import body_sha256, match_key, parse_body, prepare_request
from flowproof.wire import codec_by_name

CHAT = codec_by_name("openai-chat")


def chat(*messages: dict) -> bytes:
    return json.dumps(
        {"model": "gpt-4o", "messages": list(messages)}, separators=(",", ":")
    ).encode()


TOOL_TURN = chat(
    {"role": "user", "content": "book"},
    {
        "role": "assistant",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "live result"},
)


class TestBodySha256:
    def test_is_hex_sha256(self):
        """body_sha256 returns the hex sha256 of the bytes."""
        assert (
            body_sha256(b"") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        )


class TestParseBody:
    def test_json_and_text(self):
        """JSON is parsed; anything else is kept as (surrogate-escaped) text."""
        assert parse_body(b'{"a":1}') == {"a": 1}
        assert parse_body(b"not json \xff") == "not json \udcff"


class TestPrepareRequest:
    def test_nothing_declared_keeps_the_very_bytes(self):
        """Without tool mocks or volatile rules the body is forwarded and hashed as sent."""
        raw = chat({"role": "user", "content": "hi"})
        prepared = prepare_request(CHAT, raw, {}, Normalizer())
        assert prepared.forwarded is raw and prepared.normalized is raw
        assert prepared.sha256 == hashlib.sha256(raw).hexdigest()
        assert prepared.body["messages"][0]["content"] == "hi"

    def test_tool_results_are_substituted_before_hashing(self):
        """A mocked tool result replaces the live one in the forwarded bytes and in the key."""
        prepared = prepare_request(CHAT, TOOL_TURN, {"search": "mocked"}, Normalizer())
        assert b"mocked" in prepared.forwarded and b"live result" not in prepared.forwarded
        assert prepared.sha256 == body_sha256(prepared.normalized)
        assert prepared.body["messages"][2]["content"] == "mocked"

    def test_normalized_bytes_are_hashed_but_forwarded_bytes_are_not_normalized(self):
        """Portable paths go into the key; the agent's own bytes go upstream."""
        raw = chat({"role": "user", "content": "look in /home/u/proj/src"})
        prepared = prepare_request(CHAT, raw, {}, Normalizer(cwd="/home/u/proj"))
        assert prepared.forwarded == raw
        assert "«cwd»/src" in prepared.body["messages"][0]["content"]
        assert prepared.sha256 == body_sha256(prepared.normalized) != body_sha256(raw)

    def test_unreadable_body_is_forwarded_as_sent_with_the_reason(self):
        """A body the codec cannot read keeps its bytes; the rewrite error says why."""
        prepared = prepare_request(CHAT, b"not json", {"search": "mocked"}, Normalizer())
        assert prepared.forwarded == b"not json"
        assert prepared.rewrite_error is not None and "openai-chat" in prepared.rewrite_error
        assert prepared.body == "not json"


class TestPathFields:
    def test_gemini_names_the_model_of_its_path_in_the_key(self):
        gemini = codec_by_name("gemini")
        body = b'{"contents":[{"parts":[{"text":"hi"}]}]}'
        flash = prepare_request(gemini, body, {}, Normalizer(), "/v1beta/models/gemini-2.5-flash:generateContent")
        lite = prepare_request(gemini, body, {}, Normalizer(), "/v1beta/models/gemini-2.5-flash-lite:generateContent")
        assert flash.sha256 == lite.sha256 and flash.key != lite.key
        assert flash.path_fields == {"model": "gemini-2.5-flash"}

    def test_a_body_only_api_keys_on_the_body_hash_alone(self):
        """No path fields: the key is the hash, as in every cassette recorded before them."""
        prepared = prepare_request(
            codec_by_name("openai-chat"), b'{"model":"m"}', {}, Normalizer(), "/v1/chat/completions"
        )
        assert prepared.key == prepared.sha256 and match_key("ab", {}) == "ab"
