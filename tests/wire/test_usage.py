"""Usage per codec: each provider's own fields, golden payloads, and what "no usage" means."""

from __future__ import annotations

import pytest

from flowproof.turns import Usage
from flowproof.wire import codec_by_name
from flowproof.wire.usage import anthropic_usage, chat_usage, gemini_usage, responses_usage

from .conftest import DATA_DIR, Golden

CASES = [
    ("openai-chat", "openai_chat", "cache_usage.response.json"),
    ("openai-chat", "openai_chat", "include_usage.response.sse"),
    ("openai-responses", "openai_responses", "cache_usage.response.json"),
    ("anthropic", "anthropic", "cache_usage.response.json"),
    ("anthropic", "anthropic", "cache_usage_stream.response.sse"),
    ("gemini", "gemini", "cache_usage.response.json"),
]


@pytest.mark.parametrize(("codec", "directory", "name"), CASES, ids=[f"{c[1]}/{c[2]}" for c in CASES])
def test_golden_usage(codec: str, directory: str, name: str) -> None:
    golden = Golden(DATA_DIR / directory)
    parser = codec_by_name(codec)
    if name.endswith(".sse"):
        view = parser.parse_events(golden.events(name))
    else:
        view = parser.parse_response(golden.bytes(name))
    golden.assert_view(view, name.split(".")[0])


class TestFields:
    def test_chat_counts_cached_prompt_tokens_inside_the_input(self) -> None:
        usage = chat_usage({"prompt_tokens": 100, "completion_tokens": 7,
                            "prompt_tokens_details": {"cached_tokens": 64}})
        assert usage == Usage(100, 7, cache_read_tokens=64)
        assert usage is not None and usage.total == 107

    def test_responses(self) -> None:
        assert responses_usage({"input_tokens": 5, "output_tokens": 2}) == Usage(5, 2)

    def test_anthropic_input_is_uncached_plus_both_cache_counts(self) -> None:
        usage = anthropic_usage({"input_tokens": 10, "cache_read_input_tokens": 100,
                                 "cache_creation_input_tokens": 50, "output_tokens": 1})
        assert usage == Usage(160, 1, cache_read_tokens=100, cache_write_tokens=50)

    def test_anthropic_stream_parts_later_fields_win(self) -> None:
        usage = anthropic_usage({"input_tokens": 10, "output_tokens": 1}, None, {"output_tokens": 40})
        assert usage == Usage(10, 40)

    def test_gemini_thinking_is_output(self) -> None:
        assert gemini_usage({"promptTokenCount": 3, "candidatesTokenCount": 2,
                             "thoughtsTokenCount": 5}) == Usage(3, 7)

    @pytest.mark.parametrize(
        "value", [None, {}, {"prompt_tokens": "12"}, {"prompt_tokens": -1}, {"prompt_tokens": True}, []]
    )
    def test_absent_or_unreadable_is_no_usage(self, value: object) -> None:
        """Never a made-up zero: a budget assertion must be able to say the turn lacked usage."""
        assert chat_usage(value) is None
        assert responses_usage(value) is None
        assert anthropic_usage(value) is None
        assert gemini_usage(value) is None


def test_a_stream_without_its_usage_chunk_has_none() -> None:
    events = Golden(DATA_DIR / "openai_chat").events("empty_text.response.sse")
    assert codec_by_name("openai-chat").parse_events(events).usage is None


def test_usage_does_not_make_views_unequal() -> None:
    """Two answers that differ only in usage are the same answer (compare judges views)."""
    codec = codec_by_name("openai-responses")
    body = b'{"status":"completed","output":[],"usage":{"input_tokens":1,"output_tokens":1}}'
    other = b'{"status":"completed","output":[],"usage":{"input_tokens":9,"output_tokens":9}}'
    assert codec.parse_response(body) == codec.parse_response(other)
