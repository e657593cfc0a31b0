"""Recording staging: keep, reject, discard."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from flowproof.cassette import loads_cassette
from flowproof.errors import AgentError, ProxyError
from flowproof.runner import recording
from flowproof.runner.lock import CassetteFolderError
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

    def test_a_recording_that_never_reached_the_model_leaves_no_rejected_file(self, tmp_path: Path):
        """No turn and no MCP exchange: nothing to inspect, so nothing is kept aside."""
        staging = staged(tmp_path, [])
        assert staging.reject() is None
        assert not staging.path.exists() and not rejected_path(staging.cassette).exists()

    def test_an_unreadable_recording_is_still_kept_aside(self, tmp_path: Path):
        staging = Staging(tmp_path / "booking.cassette.json")
        staging.path.write_text('{"format": 1, "turns": [')
        assert staging.reject() == rejected_path(staging.cassette)


class TestTheFolderRefuses:
    def test_a_rename_the_folder_refuses_names_the_folder(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
        """The folder turned read-only (or full) after the lock: exit 2 naming it, never an OSError."""
        staging = staged(tmp_path, BOOKING_TURNS)

        def refuse(src: object, dst: object) -> None:
            raise PermissionError(errno.EACCES, "Permission denied", str(src))

        monkeypatch.setattr(recording.os, "replace", refuse)
        for attempt in (lambda: staging.keep(3, None), staging.reject):
            with pytest.raises(CassetteFolderError, match="not writable") as caught:
                attempt()
            assert str(tmp_path) in str(caught.value) and caught.value.exit_code == 2
        assert staging.path.exists() and not staging.cassette.exists()
