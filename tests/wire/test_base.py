"""Every registered codec provides the whole Codec protocol."""

from __future__ import annotations

import inspect

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

    def test_error_body_is_json_naming_the_message(self, name: str) -> None:
        """A provider-shaped error body carries the message flowproof wants the agent to see."""
        body = wire.codec_by_name(name).error_body(400, "flowproof replay diverged")
        assert b"flowproof replay diverged" in body


def test_protocol_lists_the_expected_methods() -> None:
    """The protocol covers detection, parsing, rewriting and error bodies."""
    assert PROTOCOL_METHODS == sorted(
        [
            "error_body",
            "is_stream_request",
            "matches",
            "parse_events",
            "parse_request",
            "parse_response",
            "rewrite_tool_results",
        ]
    )
