"""Assertion results as data: mismatches serialize as findings expect them."""

from __future__ import annotations

from flowproof.outcome import MISMATCH_KINDS, AssertionResult, Mismatch, excerpt, quote, show


def test_turn_is_written_only_when_set() -> None:
    assert "turn" not in Mismatch("equals", "a", "1", "2").to_json()
    assert Mismatch("cache prefix", "system.0.text", turn=4).to_json()["turn"] == 4


def test_every_new_kind_is_listed() -> None:
    for kind in ("subagent", "parallel", "scope", "egress", "secret leak", "budget", "usage", "price",
                 "cache prefix", "unused mock"):
        assert kind in MISMATCH_KINDS


def test_defaults() -> None:
    result = AssertionResult(None, True, "ok", None)
    assert (result.scope, result.spec_error, result.mismatches) == ("", False, ())


def test_text_helpers() -> None:
    assert quote('a "b"') == '"a \\"b\\""'
    assert excerpt("x" * 500).endswith("…") and len(excerpt("x" * 500)) == 160
    assert show({"a": [1]}) == '{"a":[1]}'
