"""One writer per cassette: a lock file held while a recording is made.

Two ``flowproof-run --record`` processes recording the same cassette would each
replace it with their own recording, and one of them would be silently lost. The
recorder holds an exclusive ``flock`` on ``<cassette>.lock`` from before the
proxy starts until the recording is kept or rejected; a second recorder is
refused at once with a clear message. ``flock`` is released by the kernel when
its holder dies, even by SIGKILL, so a crash never leaves a lock behind.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from flowproof.errors import FlowproofError

__all__ = ["CassetteBusyError", "cassette_lock", "lock_path"]


class CassetteBusyError(FlowproofError):
    """Another process is recording this cassette right now (exit 2)."""

    def __init__(self, cassette: Path, holder: str) -> None:
        who = f"process {holder}" if holder else "another process"
        super().__init__(
            f"{cassette}: {who} is recording this cassette right now — wait for it to finish, "
            "or record into another cassette (`cassette:` in the spec, or --cassette)"
        )


def lock_path(cassette: Path) -> Path:
    """``x.cassette.json`` -> ``x.cassette.json.lock``."""
    return cassette.with_name(cassette.name + ".lock")


@contextmanager
def cassette_lock(cassette: Path) -> Iterator[None]:
    """Hold the cassette's lock for the block; `CassetteBusyError` if someone else holds it."""
    path = lock_path(cassette)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
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
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode("ascii"))
        yield
    finally:
        # Removed while still held, so nobody can lock the stale file after we let go.
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        os.close(fd)
