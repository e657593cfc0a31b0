"""flowproof.files: regular files only, and never more than the bound, whatever the size says."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flowproof.cassette import load_cassette
from flowproof.errors import CassetteError, SpecError
from flowproof.files import UnreadableFileError, iter_regular_file, read_regular_file
from flowproof.spec import load_spec


class TestReadRegularFile:
    def test_a_regular_file_within_the_bound_is_read_whole(self, tmp_path: Path) -> None:
        path = tmp_path / "f"
        path.write_bytes(b"x" * 10)
        assert read_regular_file(path, 10) == b"x" * 10

    def test_a_big_file_is_one_read(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A cassette of tens of MB is read in one call, not joined from 1 MB chunks (a second copy)."""
        path = tmp_path / "f"
        path.write_bytes(b"x" * (3 << 20))
        reads: list[int] = []
        real = os.read

        def counting(fd: int, n: int) -> bytes:
            reads.append(n)
            return real(fd, n)

        monkeypatch.setattr(os, "read", counting)
        assert read_regular_file(path, 10 << 20) == b"x" * (3 << 20)
        assert len(reads) == 2  # the whole file, then the end

    def test_a_file_over_the_bound_is_refused_from_its_size(self, tmp_path: Path) -> None:
        path = tmp_path / "f"
        path.write_bytes(b"x" * 11)
        with pytest.raises(UnreadableFileError) as caught:
            read_regular_file(path, 10)
        assert caught.value.kind is None and caught.value.size == 11

    def test_a_size_on_record_that_lies_does_not_lift_the_bound(self) -> None:
        """/proc files say 0 bytes and hold more: the read stops one byte past the bound."""
        status = Path("/proc/self/status")
        assert status.stat().st_size == 0
        with pytest.raises(UnreadableFileError) as caught:
            read_regular_file(status, 100)
        assert caught.value.size == 101

    @pytest.mark.parametrize(("make", "kind"), [
        (lambda p: os.mkfifo(p), "a FIFO (named pipe)"),
        (lambda p: p.mkdir(), "a directory"),
        (lambda p: p.symlink_to("/dev/zero"), "a character device"),
    ])
    def test_anything_but_a_regular_file_is_refused_unread(self, tmp_path: Path, make, kind: str) -> None:
        path = tmp_path / "thing"
        make(path)
        with pytest.raises(UnreadableFileError) as caught:
            read_regular_file(path, 10)
        assert caught.value.kind == kind

    def test_a_missing_file_is_the_os_error(self, tmp_path: Path) -> None:
        with pytest.raises(FileNotFoundError):
            read_regular_file(tmp_path / "none", 10)


class TestIterRegularFile:
    def test_the_pieces_are_the_file_and_none_is_over_the_size(self, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
        path = tmp_path / "f"
        path.write_bytes(bytes(range(256)) * 40)
        reads: list[int] = []
        real = os.read
        monkeypatch.setattr(os, "read", lambda fd, n: reads.append(n) or real(fd, n))
        pieces = list(iter_regular_file(path, 1 << 20, 1000))
        assert b"".join(pieces) == path.read_bytes() and max(map(len, pieces)) == 1000
        assert max(reads) == 1000

    def test_it_checks_as_read_regular_file_does(self, tmp_path: Path) -> None:
        os.mkfifo(tmp_path / "fifo")
        with pytest.raises(UnreadableFileError) as caught:
            next(iter_regular_file(tmp_path / "fifo", 10))
        assert caught.value.kind == "a FIFO (named pipe)"
        with pytest.raises(UnreadableFileError) as caught:
            list(iter_regular_file(Path("/proc/self/status"), 100, 7))
        assert caught.value.size is not None and caught.value.size <= 101

    def test_closing_it_early_closes_the_file(self, tmp_path: Path) -> None:
        path = tmp_path / "f"
        path.write_bytes(b"x" * 100)
        before = len(os.listdir("/proc/self/fd"))
        pieces = iter_regular_file(path, 1000, 10)
        next(pieces)
        assert len(os.listdir("/proc/self/fd")) == before + 1
        pieces.close()
        assert len(os.listdir("/proc/self/fd")) == before


class TestTheCallersSayWhichFile:
    def test_load_spec(self, tmp_path: Path) -> None:
        fifo = tmp_path / "a.flow.yaml"
        os.mkfifo(fifo)
        with pytest.raises(SpecError, match="the spec path is a FIFO") as caught:
            load_spec(fifo)
        assert caught.value.path == str(fifo)

    def test_a_crlf_spec_still_reads_as_before(self, tmp_path: Path) -> None:
        spec = tmp_path / "crlf.flow.yaml"
        spec.write_bytes(b"name: crlf\r\nagent:\r\n  command: 'true'\r\nsteps:\r\n  - prompt: hi\r\n")
        assert load_spec(spec).name == "crlf"

    def test_load_cassette(self, tmp_path: Path) -> None:
        cassette = tmp_path / "c.cassette.json"
        cassette.symlink_to("/dev/zero")
        with pytest.raises(CassetteError, match="is a character device, not a regular file") as caught:
            load_cassette(cassette)
        assert caught.value.path == cassette
