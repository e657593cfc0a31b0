"""Reading a file the user named: regular files only, and never more than a bound.

A spec or a cassette path may name anything: a FIFO (reading it waits for a
writer forever), ``/dev/zero`` (it never ends, so a plain read fills memory), a
``/proc`` file whose size says 0. `read_regular_file` opens without blocking,
refuses whatever is not a regular file before reading a byte, and reads at most
``limit + 1`` bytes whatever the size on record says, so the caller's size limit
holds for every file. The callers turn `UnreadableFileError` into their own
one-paragraph error (`flowproof.spec.loader.load_spec`,
`flowproof.cassette.load_cassette`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Generator
from pathlib import Path

__all__ = ["UnreadableFileError", "iter_regular_file", "read_regular_file"]

#: What a file that is not a regular one is, as a message says it.
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
_CHUNK = 1 << 20


class UnreadableFileError(ValueError):
    """The path is not a regular file (``kind`` says what it is), or it is over the limit
    (``size`` is what was seen: the recorded size, or the bytes read before stopping)."""

    def __init__(self, path: Path, *, kind: str | None = None, size: int | None = None) -> None:
        self.path = path
        self.kind = kind
        self.size = size
        super().__init__(f"{path}: {kind or 'over the size limit'}")


def read_regular_file(path: Path | str, limit: int) -> bytes:
    """The bytes of the regular file at ``path`` (links followed), at most ``limit`` of them.

    Raises `UnreadableFileError` for anything that is not a regular file and for a
    file over ``limit`` bytes, `OSError` when it cannot be opened or read.
    """
    # The first read asks for the whole recorded size (and a byte more), so a big file is
    # one read and no join: no second copy of it.
    chunks = list(_chunks(Path(path), limit, whole=True))
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def iter_regular_file(path: Path | str, limit: int, chunk_size: int = _CHUNK) -> Generator[bytes, None, None]:
    """The bytes of the regular file at ``path`` in pieces of at most ``chunk_size``, with
    `read_regular_file`'s checks and errors: for a caller that never needs the whole file
    in memory at once. The file is closed when the iterator ends or is closed."""
    return _chunks(Path(path), limit, chunk_size=chunk_size)


def _chunks(p: Path, limit: int, *, whole: bool = False, chunk_size: int = _CHUNK) -> Generator[bytes, None, None]:
    # O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused just below).
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _KINDS if test(info.st_mode)), "not a regular file")
            raise UnreadableFileError(p, kind=kind)
        if info.st_size > limit:
            raise UnreadableFileError(p, size=info.st_size)
        total = 0
        # The size on record may be wrong (a /proc file says 0, a file may grow): read to
        # one byte past the limit and no further.
        want = max(info.st_size + 1, chunk_size) if whole else chunk_size
        while chunk := os.read(fd, min(want, limit + 1 - total)):
            total += len(chunk)
            if total > limit:
                raise UnreadableFileError(p, size=total)
            yield chunk
            want = chunk_size
    finally:
        os.close(fd)
