"""One writer per cassette: a lock file held while a recording is made.

Two ``flowproof-run --record`` processes recording the same cassette would each
replace it with their own recording, and one of them would be silently lost. The
recorder holds an exclusive ``flock`` on ``<cassette>.lock`` from before the
proxy starts until the recording is kept or rejected; a second recorder is
refused at once with a clear message. ``flock`` is released by the kernel when
its holder dies, even by SIGKILL, so a crash never leaves a lock behind.

The lock file is created exclusively (``O_EXCL``) and opened without following a
link (``O_NOFOLLOW``): a symbolic link, or anything but a plain file of its own,
at the lock path is refused and left as it is, so its target is never truncated.
Creating the lock is also the first write into the cassette's folder: a folder
that is missing, read-only or full fails the flow here (`CassetteFolderError`,
exit 2), before the proxy or the agent starts.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from flowproof.errors import FlowproofError

__all__ = ["CassetteBusyError", "CassetteFolderError", "LockPathError", "cassette_lock", "lock_path"]

#: Open flags shared by creating and re-opening the lock: never a link, never the terminal.
_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC | os.O_NONBLOCK


class CassetteBusyError(FlowproofError):
    """Another process is recording this cassette right now (exit 2)."""

    def __init__(self, cassette: Path, holder: str) -> None:
        who = f"process {holder}" if holder else "another process"
        super().__init__(
            f"{cassette}: {who} is recording this cassette right now — wait for it to finish, "
            "or record into another cassette (`cassette:` in the spec, or --cassette)"
        )


class CassetteFolderError(FlowproofError):
    """The cassette's folder cannot take a recording: missing, not writable, or full (exit 2)."""

    def __init__(self, cassette: Path, error: OSError) -> None:
        folder = cassette.parent if str(cassette.parent) else Path(".")
        self.folder = folder
        reason, hint = _folder_problem(folder, error)
        super().__init__(f"cannot record {cassette.name} into {folder}: {reason} — {hint}")


class LockPathError(FlowproofError):
    """Something other than flowproof's own lock file sits at ``<cassette>.lock`` (exit 2)."""

    def __init__(self, path: Path, what: str) -> None:
        super().__init__(
            f"{path}: {what}; flowproof never writes through it — remove it (it is not "
            "flowproof's lock file), then record again"
        )


def _folder_problem(folder: Path, error: OSError) -> tuple[str, str]:
    code = error.errno
    if code == errno.ENOENT:
        return ("the folder does not exist",
                "create it, or point `cassette:` in the spec (or --cassette) at an existing folder")
    if code == errno.ENOTDIR:
        return ("it is not a folder",
                "point `cassette:` in the spec (or --cassette) at a file inside a folder")
    if code in (errno.EACCES, errno.EPERM, errno.EROFS):
        return (f"the folder is not writable ({error.strerror})",
                "make it writable, or record into another folder (`cassette:` or --cassette)")
    if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return (f"there is no room to write ({error.strerror})",
                "free some space, then record again; the old cassette, if any, is unchanged")
    return (f"writing there failed ({error.strerror or error})",
            "check the folder, then record again; the old cassette, if any, is unchanged")


def lock_path(cassette: Path) -> Path:
    """``x.cassette.json`` -> ``x.cassette.json.lock``."""
    return cassette.with_name(cassette.name + ".lock")


def _open_lock(cassette: Path, path: Path) -> int:
    """A descriptor of the plain lock file at ``path``, created here unless one is there."""
    while True:
        try:
            return os.open(path, _FLAGS | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            pass
        except OSError as e:
            raise CassetteFolderError(cassette, e) from None
        # One is there already (left by a holder that was killed, or held right now).
        try:
            fd = os.open(path, _FLAGS)
        except FileNotFoundError:
            continue  # its holder removed it in between: create it again
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise LockPathError(path, "is a symbolic link") from None
            raise CassetteFolderError(cassette, e) from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            os.close(fd)
            what = "is not a plain file" if not stat.S_ISREG(info.st_mode) else "is a hard link to another file"
            raise LockPathError(path, what)
        return fd


@contextmanager
def cassette_lock(cassette: Path) -> Iterator[None]:
    """Hold the cassette's lock for the block; `CassetteBusyError` if someone else holds it,
    `CassetteFolderError` when the folder cannot be written, `LockPathError` for a link."""
    path = lock_path(cassette)
    while True:
        fd = _open_lock(cassette, path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.read(fd, 32).decode("ascii", "replace").strip()
            finally:
                os.close(fd)
            raise CassetteBusyError(cassette, holder) from None
        # The previous holder may have removed the file between our open and our lock:
        # then we locked a deleted file, and must lock the one now at the path instead.
        if _is_at(path, fd):
            break
        os.close(fd)
    try:
        try:
            os.ftruncate(fd, 0)
            pid = memoryview(f"{os.getpid()}\n".encode("ascii"))
            while pid:  # a short write is what a nearly full disk gives: the rest then fails
                pid = pid[os.write(fd, pid):]
        except OSError as e:
            raise CassetteFolderError(cassette, e) from None
        yield
    finally:
        # Removed while still held, so nobody can lock the stale file after we let go; only
        # when the path still names our file (never a link put there meanwhile).
        if _is_at(path, fd):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        os.close(fd)


def _is_at(path: Path, fd: int) -> bool:
    """True when ``path`` itself (not a link's target) is the file open as ``fd``."""
    try:
        here = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)
