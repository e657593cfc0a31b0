"""Recording staging: keep, reject, discard."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowproof.cassette import loads_cassette
from flowproof.errors import AgentError, ProxyError
from flowproof.runner.recording import Staging, rejected_path, staging_path

from .helpers import BOOKING_TURNS, cassette_text, chat_turn


def staged(tmp_path: Path, turns: list[dict]) -> Staging:
    staging = Staging(tmp_path / "booking.cassette.json")
    staging.path.write_text(cassette_text(turns))
    return staging


class TestPaths:
    def test_names_sit_beside_the_cassette(self, tmp_path: Path):
        """Staging and rejected files are siblings named after the cassette."""
        cassette = tmp_path / "booking.cassette.json"
        assert staging_path(cassette).name == "booking.cassette.recording.json"
        assert rejected_path(cassette).name == "booking.cassette.rejected.json"


class TestStaging:
    def test_keep_replaces_the_cassette_and_returns_the_heal_diff(self, tmp_path: Path):
        """A kept recording becomes the cassette; the diff names what changed."""
        staging = staged(tmp_path, [*BOOKING_TURNS[:2], chat_turn(2, text="Booked!")])
        old = loads_cassette(cassette_text(BOOKING_TURNS), "old")
        heal = staging.keep(3, old)
        assert heal is not None and "turn 2: text:" in heal
        assert not staging.path.exists() and staging.cassette.exists()

    def test_keep_without_an_old_cassette_has_no_diff(self, tmp_path: Path):
        """A first recording has no heal diff."""
        assert staged(tmp_path, BOOKING_TURNS).keep(3, None) is None

    def test_an_empty_recording_is_never_kept(self, tmp_path: Path):
        """No model call: AgentError, and the staging file is not moved."""
        staging = staged(tmp_path, [])
        with pytest.raises(AgentError, match="no model call"):
            staging.keep(0, None)
        assert not staging.cassette.exists()

    def test_keep_without_a_staging_file_is_a_proxy_error(self, tmp_path: Path):
        """The proxy wrote nothing: ProxyError."""
        with pytest.raises(ProxyError, match="did not write"):
            Staging(tmp_path / "c.json").keep(1, None)

    def test_reject_and_discard(self, tmp_path: Path):
        """Reject keeps the recording aside; discard removes it; both are safe when there is none."""
        staging = staged(tmp_path, BOOKING_TURNS)
        assert staging.reject() == rejected_path(staging.cassette)
        assert staging.reject() is None
        staging.path.write_text("x")
        staging.discard()
        staging.discard()
        assert not staging.path.exists()
