"""The cassette lock: one holder at a time, released on exit and on the holder's death."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flowproof.runner.lock import CassetteBusyError, CassetteFolderError, LockPathError, cassette_lock, lock_path


class TestCassetteLock:
    def test_second_holder_is_refused_then_admitted(self, tmp_path: Path) -> None:
        cassette = tmp_path / "x.cassette.json"
        with cassette_lock(cassette):
            with pytest.raises(CassetteBusyError, match="is recording this cassette right now"):
                with cassette_lock(cassette):
                    pass
        assert not lock_path(cassette).exists()
        with cassette_lock(cassette):
            pass

    def test_a_killed_holder_does_not_leave_the_cassette_locked(self, tmp_path: Path) -> None:
        """flock dies with its process: a SIGKILLed recorder blocks nobody."""
        cassette = tmp_path / "x.cassette.json"
        code = (
            "import sys, time\nfrom pathlib import Path\nfrom flowproof.runner.lock import cassette_lock\n"
            "with cassette_lock(Path(sys.argv[1])):\n    print('held', flush=True)\n    time.sleep(60)\n"
        )
        holder = subprocess.Popen([sys.executable, "-c", code, str(cassette)], stdout=subprocess.PIPE)
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
            with pytest.raises(CassetteBusyError, match=f"process {holder.pid}"):
                with cassette_lock(cassette):
                    pass
        finally:
            holder.kill()
            holder.wait()
            holder.stdout.close()  # type: ignore[union-attr]
        with cassette_lock(cassette):
            pass


def _fsize_limited_lock(cassette: Path) -> subprocess.CompletedProcess[str]:
    """Take the lock in a child whose files may not grow past 2 bytes (RLIMIT_FSIZE): the
    kernel cuts the pid's write short and then refuses the rest, as a disk that fills up
    would (EFBIG; Python ignores SIGXFSZ)."""
    code = (
        "import resource, sys\nfrom pathlib import Path\n"
        "from flowproof.runner.lock import cassette_lock\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (2, 2))\n"
        "try:\n    with cassette_lock(Path(sys.argv[1])):\n        print('held')\n"
        "except Exception as e:\n    print(type(e).__name__, e)\n"
    )
    return subprocess.run([sys.executable, "-c", code, str(cassette)], capture_output=True, text=True,
                          timeout=60, check=False)


class TestNeverThroughALink:
    def test_a_symlink_at_the_lock_path_is_refused_and_its_target_kept(self, tmp_path: Path) -> None:
        """The lock never follows a link: the target stays byte-identical, the link stays."""
        cassette = tmp_path / "x.cassette.json"
        target = tmp_path / "precious"
        target.write_bytes(b"keep me\n")
        lock_path(cassette).symlink_to(target)
        with pytest.raises(LockPathError, match="is a symbolic link"):
            with cassette_lock(cassette):
                pass
        assert target.read_bytes() == b"keep me\n" and lock_path(cassette).is_symlink()

    def test_a_dangling_symlink_is_not_created_through(self, tmp_path: Path) -> None:
        """A link to a file that does not exist yet: nothing is created at its target."""
        cassette = tmp_path / "x.cassette.json"
        lock_path(cassette).symlink_to(tmp_path / "made-through-the-link")
        with pytest.raises(LockPathError, match="is a symbolic link"):
            with cassette_lock(cassette):
                pass
        assert not (tmp_path / "made-through-the-link").exists()

    def test_a_fifo_or_a_hard_link_at_the_lock_path_is_refused(self, tmp_path: Path) -> None:
        cassette = tmp_path / "x.cassette.json"
        os.mkfifo(lock_path(cassette))
        with pytest.raises(LockPathError, match="is not a plain file"):
            with cassette_lock(cassette):
                pass
        lock_path(cassette).unlink()
        other = tmp_path / "other"
        other.write_bytes(b"other\n")
        os.link(other, lock_path(cassette))
        with pytest.raises(LockPathError, match="hard link"):
            with cassette_lock(cassette):
                pass
        assert other.read_bytes() == b"other\n"

    def test_a_lock_file_left_by_a_killed_holder_is_taken_over(self, tmp_path: Path) -> None:
        cassette = tmp_path / "x.cassette.json"
        lock_path(cassette).write_text("12345\n")
        with cassette_lock(cassette):
            assert lock_path(cassette).read_text() == f"{os.getpid()}\n"
        assert not lock_path(cassette).exists()


class TestTheFolderCannotTakeARecording:
    def test_a_missing_folder_is_named(self, tmp_path: Path) -> None:
        cassette = tmp_path / "nowhere" / "x.cassette.json"
        with pytest.raises(CassetteFolderError, match="the folder does not exist") as caught:
            with cassette_lock(cassette):
                pass
        assert str(tmp_path / "nowhere") in str(caught.value) and caught.value.exit_code == 2

    def test_a_file_where_the_folder_should_be(self, tmp_path: Path) -> None:
        (tmp_path / "file").write_text("")
        with pytest.raises(CassetteFolderError, match="is not a folder"):
            with cassette_lock(tmp_path / "file" / "x.cassette.json"):
                pass

    def test_a_read_only_folder_is_named(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Root ignores file modes, so the refusal is the kernel's answer injected at the seam."""
        cassette = tmp_path / "x.cassette.json"
        real_open = os.open

        def refusing(path, flags, *args):  # type: ignore[no-untyped-def]
            if str(path) == str(lock_path(cassette)):
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return real_open(path, flags, *args)

        monkeypatch.setattr(os, "open", refusing)
        with pytest.raises(CassetteFolderError, match=r"the folder is not writable \(Permission denied\)") as e:
            with cassette_lock(cassette):
                pass
        assert str(tmp_path) in str(e.value)

    @pytest.mark.skipif(os.geteuid() == 0, reason="file permissions do not bind root")
    def test_a_read_only_folder_really(self, tmp_path: Path) -> None:
        tmp_path.chmod(0o555)
        try:
            with pytest.raises(CassetteFolderError, match="not writable"):
                with cassette_lock(tmp_path / "x.cassette.json"):
                    pass
        finally:
            tmp_path.chmod(0o755)

    def test_a_full_folder_is_named_and_leaves_no_lock_file(self, tmp_path: Path) -> None:
        cassette = tmp_path / "x.cassette.json"
        done = _fsize_limited_lock(cassette)
        assert done.stdout.startswith("CassetteFolderError"), done.stdout + done.stderr
        assert "there is no room to write (File too large)" in done.stdout
        assert str(tmp_path) in done.stdout
        assert not lock_path(cassette).exists()
