"""Server-sent events: framing over arbitrary chunk boundaries, and exact re-emission.

`SSEDecoder` splits a byte stream into event blocks without trusting chunk
boundaries (mitmproxy: packet boundaries are not relied upon): a multi-byte
UTF-8 character or a ``\\r\\n`` may be split across two chunks, and the event
list is the same however the stream was cut. Every block keeps its exact text
in ``SSEEvent.raw``, so ``encode_events(decoder output) == input bytes``::

    >>> d = SSEDecoder()
    >>> d.feed(b"event: ping\\ndata: {}\\n") + d.feed(b"\\n")
    [SSEEvent(raw='event: ping\\ndata: {}\\n\\n', data='{}', event='ping', id=None, retry=None)]

Parsing follows the WHATWG SSE rules (``data:`` with or without the space,
multi-line data, ``event:``, ``id:``, ``retry:``, ``:`` comments, ``\\n``,
``\\r\\n`` and ``\\r`` line endings), with two lossless departures a recorder
needs: a block of only comments (or a stray blank line) is still an event with
``data == ""``, and `SSEDecoder.close` returns an unterminated trailing block.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One SSE event block.

    ``raw`` is the block's exact text including its terminating blank line, so
    ``b"".join(e.raw.encode() for e in events)`` reproduces the stream byte for
    byte. ``data`` joins the block's ``data:`` lines with ``\\n`` as the SSE spec says.
    """

    raw: str
    data: str
    event: str | None = None
    id: str | None = None
    retry: int | None = None


# SSE streams are UTF-8 by definition; surrogateescape keeps even invalid bytes
# lossless (they round-trip through raw) instead of failing a recording.
_ENCODING = "utf-8"
_ERRORS = "surrogateescape"
_EOL = re.compile(rb"\r\n|\r|\n")
_BOM = "\ufeff"


class _Block:
    """The fields of the block being read (reset after each event)."""

    __slots__ = ("data", "event", "id", "retry")

    def __init__(self) -> None:
        self.data: list[str] = []
        self.event: str | None = None
        self.id: str | None = None
        self.retry: int | None = None

    def add_line(self, line: str) -> None:
        if line.startswith(":"):
            return  # a comment: kept in raw only
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self.data.append(value)
        elif name == "event":
            self.event = value
        elif name == "id" and "\x00" not in value:  # the SSE spec ignores ids holding NUL
            self.id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self.retry = int(value)
        # any other field name is ignored, as the SSE spec says

    def to_event(self, raw: str) -> SSEEvent:
        return SSEEvent(
            raw=raw, data="\n".join(self.data), event=self.event, id=self.id, retry=self.retry
        )


class SSEDecoder:
    """Incremental SSE decoder: `feed` chunks as they arrive, then `close` once.

    Work is linear in the stream length: only bytes not scanned before are
    searched, and the buffer holds at most the block still being read.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._scan = 0  # start of the line being read (earlier lines are parsed)
        self._search = 0  # no line ending lies between _scan and here: resume searching here
        self._block = _Block()
        self._first_line = True
        self._closed = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Add ``chunk`` and return the events whose blocks it completed (maybe none)."""
        if self._closed:
            raise ValueError("SSEDecoder.feed() called after close()")
        if not chunk:
            return []
        self._buf += chunk
        return self._drain(final=False)

    def close(self) -> list[SSEEvent]:
        """End the stream: return a trailing unterminated block, if any, so nothing is lost."""
        if self._closed:
            return []
        events = self._drain(final=True)
        self._closed = True
        if self._buf:
            if self._scan < len(self._buf):  # the last line has no terminator
                self._add_line(bytes(self._buf[self._scan :]))
            raw = self._buf.decode(_ENCODING, _ERRORS)
            events.append(self._block.to_event(raw))
            self._buf.clear()
            self._scan = self._search = 0
            self._block = _Block()
        return events

    def _add_line(self, line_bytes: bytes) -> None:
        line = line_bytes.decode(_ENCODING, _ERRORS)
        if self._first_line:
            self._first_line = False
            if line.startswith(_BOM):
                line = line[1:]  # a leading BOM is not part of the first field name
        self._block.add_line(line)

    def _drain(self, *, final: bool) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        buf = self._buf
        size = len(buf)
        block_start = 0  # where the block being read starts in buf
        pos = self._scan  # start of the line being read (lines before it are parsed)
        search = max(pos, self._search)
        while (m := _EOL.search(buf, search)) is not None:
            if not final and m.end() == size and buf[m.start() :] == b"\r":
                # A "\r" at the very end may be the first half of "\r\n": wait for the next chunk.
                search = m.start()
                break
            if m.start() == pos:
                # A blank line ends the block (even a block of only comments, or of nothing).
                raw = bytes(buf[block_start : m.end()]).decode(_ENCODING, _ERRORS)
                events.append(self._block.to_event(raw))
                self._block = _Block()
                self._first_line = False
                block_start = m.end()
            else:
                self._add_line(bytes(buf[pos : m.start()]))
            pos = search = m.end()
        else:
            search = size  # only bytes fed later can end the open line
        if block_start:
            # Keep only the unfinished block: the buffer never grows with the stream.
            del buf[:block_start]
            pos -= block_start
            search -= block_start
        self._scan = pos
        self._search = search
        return events


def encode_events(events: Iterable[SSEEvent]) -> bytes:
    """The exact bytes of ``events``: the concatenation of their ``raw`` texts."""
    return "".join(e.raw for e in events).encode(_ENCODING, _ERRORS)


def canonical_raw(event: str | None, data: str) -> str:
    """The canonical text of an event: ``event: X\\n`` (when set), one ``data:`` line per line, a blank line.

    The cassette stores ``raw`` only when it differs from this.
    """
    head = f"event: {event}\n" if event is not None else ""
    # One ``data:`` line per line of ``data``, without a string per line: replay joins a
    # stream's events at every call.
    return head + "data: " + data.replace("\n", "\ndata: ") + "\n\n"


def make_event(data: str, event: str | None = None) -> SSEEvent:
    """An event with its canonical ``raw`` (what a recorder stores when ``raw`` is omitted)."""
    return SSEEvent(raw=canonical_raw(event, data), data=data, event=event)


def parse_sse(body: bytes) -> list[SSEEvent]:
    """Every event of a complete stream, the trailing unterminated block included."""
    decoder = SSEDecoder()
    return decoder.feed(body) + decoder.close()
