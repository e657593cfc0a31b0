"""Every registered codec provides the whole Codec protocol."""

from __future__ import annotations

import inspect
import json

import pytest

from flowproof import wire
from flowproof.wire.base import Codec
from flowproof.wire.sse import make_event

PROTOCOL_METHODS = [
    name
    for name, _ in inspect.getmembers(Codec, predicate=inspect.isfunction)
    if not name.startswith("_")
]


@pytest.mark.parametrize("name", sorted(wire.CODEC_NAMES))
class TestCodecProtocol:
    def test_codec_is_registered_under_its_name(self, name: str) -> None:
        """codec_by_name returns a codec whose name is the cassette's provider id."""
        assert wire.codec_by_name(name).name == name

    def test_codec_implements_every_protocol_method(self, name: str) -> None:
        """A codec has every method of the protocol with the protocol's parameters."""
        codec = wire.codec_by_name(name)
        for method in PROTOCOL_METHODS:
            expected = list(inspect.signature(getattr(Codec, method)).parameters)[1:]
            actual = list(inspect.signature(getattr(codec, method)).parameters)
            assert actual == expected, f"{name}.{method}"

    def test_error_text_reads_back_its_own_error_body(self, name: str) -> None:
        """error_text is the inverse of error_body; a body of another shape gives None."""
        codec = wire.codec_by_name(name)
        body = json.loads(codec.error_body(429, "slow down"))
        assert codec.error_text(body) == "slow down"
        assert codec.error_text({"choices": []}) is None

    def test_error_body_is_json_naming_the_message(self, name: str) -> None:
        """A provider-shaped error body carries the message flowproof wants the agent to see."""
        body = wire.codec_by_name(name).error_body(400, "flowproof replay diverged")
        assert b"flowproof replay diverged" in body


def test_protocol_lists_the_expected_methods() -> None:
    """The protocol covers detection, parsing (bytes and parsed bodies), rewriting, error bodies, the terminal
    event and path fields."""
    assert PROTOCOL_METHODS == sorted(
        [
            "error_body",
            "error_text",
            "is_stream_request",
            "is_terminal_event",
            "matches",
            "parse_events",
            "parse_request",
            "parse_response",
            "path_fields",
            "rewrite_tool_results",
            "view_request",
            "view_response",
        ]
    )


ODD_VALUES = [[1], {"a": 1}, None, 3]
ODD_BODIES = {
    "anthropic": lambda v: {"model": "m", "messages": [{"role": "user", "content": [{"type": v}]}]},
    "openai-chat": lambda v: {"model": "m", "messages": [{"role": v, "content": "x"}]},
    "openai-responses": lambda v: {"model": "m", "input": [{"type": v, "role": v, "call_id": "c"}]},
    "gemini": lambda v: {"contents": [{"role": v, "parts": [{"text": "x"}]}]},
}


@pytest.mark.parametrize("name", sorted(ODD_BODIES))
@pytest.mark.parametrize("value", ODD_VALUES, ids=repr)
def test_odd_discriminators_raise_only_wire_errors(name: str, value: object) -> None:
    """A list or object where a type or role string belongs is a WireError or accepted, never a crash."""
    import json

    from flowproof.errors import WireError

    codec = wire.codec_by_name(name)
    body = json.dumps(ODD_BODIES[name](value)).encode()
    for parse in (codec.parse_request, lambda b: codec.rewrite_tool_results(b, {"n": 1})):
        try:
            parse(body)
        except WireError:
            pass


@pytest.mark.parametrize("name", sorted(ODD_BODIES))
def test_absurd_nesting_is_a_wire_error(name: str) -> None:
    """JSON nested deeper than the parser's recursion limit is a WireError, not a RecursionError."""
    from flowproof.errors import WireError

    codec = wire.codec_by_name(name)
    for parse in (codec.parse_request, codec.parse_response):
        with pytest.raises(WireError):
            parse(b"[" * 100_000)


# Each API's terminal event and events that are not it (the same shapes the SDKs read).
TERMINAL_CASES = {
    "openai-chat": (
        [make_event("[DONE]")],
        [make_event('{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}'), make_event("")],
    ),
    "openai-responses": (
        [make_event('{"type":"response.completed","response":{}}', "response.completed"),
         make_event('{"type":"response.incomplete","response":{}}', "response.incomplete"),
         make_event('{"type":"response.failed","response":{}}'),
         make_event('{"type":"response.failed","response":{}}', "response.failed")],
        [make_event('{"type":"response.output_text.done"}', "response.output_text.done"),
         make_event('{"type":"response.created"}'), make_event("[DONE]")],
    ),
    "anthropic": (
        [make_event('{"type":"message_stop"}', "message_stop"), make_event('{"type":"message_stop"}')],
        [make_event('{"type":"message_delta","delta":{"stop_reason":"end_turn"}}', "message_delta"),
         make_event('{"type":"ping"}', "ping")],
    ),
    "gemini": (
        [make_event('{"candidates":[{"content":{"parts":[]},"finishReason":"STOP"}]}'),
         make_event('{"candidates":[{"finish_reason":"MAX_TOKENS"}]}')],
        [make_event('{"candidates":[{"content":{"parts":[{"text":"hi"}]}}]}'),
         make_event('{"usageMetadata":{}}'), make_event("not json")],
    ),
}


@pytest.mark.parametrize("name", sorted(TERMINAL_CASES))
def test_each_codec_names_its_terminal_event(name: str) -> None:
    """A call is complete once this event arrived; nothing else counts."""
    codec = wire.codec_by_name(name)
    terminal, other = TERMINAL_CASES[name]
    assert [codec.is_terminal_event(e) for e in terminal] == [True] * len(terminal)
    assert [codec.is_terminal_event(e) for e in other] == [False] * len(other)


@pytest.mark.parametrize("name", wire.CODEC_NAMES)
def test_only_gemini_names_a_request_field_in_the_path(name: str) -> None:
    codec = wire.codec_by_name(name)
    path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    expected = {"model": "gemini-2.5-flash"} if name == "gemini" else {}
    assert codec.path_fields(path) == expected
    assert codec.path_fields("/v1/chat/completions") == {}
