"""Every registered codec provides the whole Codec protocol."""

from __future__ import annotations

import inspect
import json

import pytest

from flowproof import wire
from flowproof.wire.base import Codec

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
    """The protocol covers detection, parsing, rewriting and error bodies."""
    assert PROTOCOL_METHODS == sorted(
        [
            "error_body",
            "error_text",
            "is_stream_request",
            "matches",
            "parse_events",
            "parse_request",
            "parse_response",
            "rewrite_tool_results",
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
