"""Tests for flowproof.ports: a free port that is not one handed out and not yet bound."""

from __future__ import annotations

import socket

import pytest

from flowproof import ports
from flowproof.ports import free_port


def offering(monkeypatch: pytest.MonkeyPatch, *offers: int) -> None:
    """The kernel offers ``offers``, in turn, at each probe."""
    offered = iter(offers)
    monkeypatch.setattr(ports, "_probe", lambda: next(offered))


def test_a_port_in_avoid_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    offering(monkeypatch, 5001, 5002, 5001, 5003)
    assert free_port({5001, 5002}) == 5003


def test_after_every_offer_is_in_avoid_the_last_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller's bind (or mitmproxy) then refuses it with its own message; no endless loop."""
    offering(monkeypatch, *range(1, ports.PICKS + 1))
    assert free_port(range(1, 1000)) == ports.PICKS


def test_the_port_given_is_free() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
