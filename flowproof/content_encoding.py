"""Decoding a ``content-encoding`` with a cap on what it may expand to.

Agents may compress request bodies (gzip, deflate, br, zstd). flowproof matches,
diffs and stores what the agent meant, so it decodes them, but a body that
decodes without limit is a memory bomb: 1.6 MB of gzip can expand to 1.5 GiB.
`decode_content` therefore decodes incrementally and stops as soon as the output
passes the cap, before it is held in memory, raising `DecodedTooLargeError`.

Several codings apply in the order listed (``Content-Encoding: gzip, br`` is
gzip first, then br), so they are undone from the last. Pure: the standard
library's zlib, Brotli and zstd (the stdlib module from Python 3.14, else the
backport mitmproxy uses).
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Callable

import brotli  # type: ignore[import-untyped]  # ships no type information

from flowproof.errors import FlowproofError

if sys.version_info >= (3, 14):
    from compression import zstd
else:  # pragma: no cover - the backport on older Pythons
    from backports import zstd

__all__ = ["DECODED_BODY_CAP", "ENCODINGS", "DecodedTooLargeError", "decode_content", "is_identity"]

#: The most a request or buffered response body may decode to (64 MiB). Model requests are
#: kilobytes to a few megabytes (images travel base64); anything past this is refused.
DECODED_BODY_CAP = 64 * 1024 * 1024

#: The codings `decode_content` undoes.
ENCODINGS = ("gzip", "x-gzip", "deflate", "br", "zstd", "identity")

# Output produced per step: small enough that the cap is checked long before memory matters.
_STEP = 1 << 20


class DecodedTooLargeError(FlowproofError):
    """A body decodes to more than the cap; nothing past the cap was decoded."""

    def __init__(self, encoding: str, cap: int, compressed: int) -> None:
        self.encoding = encoding
        self.cap = cap
        self.compressed = compressed
        super().__init__(
            f"its {encoding}-encoded body ({compressed:,} bytes) expands past the cap of "
            f"{_size(cap)} when decoded; flowproof stopped decoding there"
        )


def _size(n: int) -> str:
    return f"{n // (1024 * 1024)} MiB" if n % (1024 * 1024) == 0 else f"{n:,} bytes"


def is_identity(encoding: str) -> bool:
    """True when ``encoding`` (a header value, possibly empty) leaves the body as it is."""
    return all(c.strip().lower() in ("", "identity") for c in encoding.split(","))


def decode_content(data: bytes, encoding: str, cap: int = DECODED_BODY_CAP) -> bytes:
    """``data`` with every coding of ``encoding`` undone, at most ``cap`` bytes of it.

    Raises `DecodedTooLargeError` once the output would pass ``cap`` (before holding
    more than about a megabyte over it), and ValueError when the data is not what the
    encoding says (truncated, corrupt) or the coding is unknown.
    """
    for coding in reversed([c.strip().lower() for c in encoding.split(",") if c.strip()]):
        decoder = _DECODERS.get(coding)
        if decoder is None:
            raise ValueError(f"unknown content-encoding {coding!r}")
        try:
            data = decoder(data, cap)
        except DecodedTooLargeError:
            raise
        except (zlib.error, brotli.error, zstd.ZstdError, EOFError, ValueError) as e:
            raise ValueError(f"the body is not valid {coding}: {e}") from None
        if len(data) > cap:
            raise DecodedTooLargeError(encoding, cap, len(data))
    return data


def _check(out: bytearray, encoding: str, cap: int, compressed: int) -> None:
    if len(out) > cap:
        raise DecodedTooLargeError(encoding, cap, compressed)


def _inflate(data: bytes, wbits: int, coding: str, cap: int) -> bytes:
    decoder = zlib.decompressobj(wbits)
    out = bytearray()
    pending = data
    while True:
        chunk = decoder.decompress(pending, _STEP)
        out += chunk
        _check(out, coding, cap, len(data))
        pending = decoder.unconsumed_tail
        if decoder.eof:
            if decoder.unused_data and coding == "gzip":
                # A gzip file may hold several members, each its own stream.
                rest = _inflate(decoder.unused_data, wbits, coding, cap - len(out))
                out += rest
            return bytes(out)
        if not pending and len(chunk) < _STEP:
            raise ValueError("the compressed data ends before its stream does")


def _gunzip(data: bytes, cap: int) -> bytes:
    return _inflate(data, 16 + zlib.MAX_WBITS, "gzip", cap)


def _deflate(data: bytes, cap: int) -> bytes:
    # RFC 9110's deflate is zlib-wrapped; some clients send raw DEFLATE instead.
    try:
        return _inflate(data, zlib.MAX_WBITS, "deflate", cap)
    except zlib.error:
        return _inflate(data, -zlib.MAX_WBITS, "deflate", cap)


def _unbrotli(data: bytes, cap: int) -> bytes:
    decoder = brotli.Decompressor()
    out = bytearray(decoder.process(data, output_buffer_limit=_STEP))
    _check(out, "br", cap, len(data))
    while not decoder.is_finished():
        chunk = decoder.process(b"", output_buffer_limit=_STEP)
        if not chunk and decoder.can_accept_more_data():
            raise ValueError("the compressed data ends before its stream does")
        out += chunk
        _check(out, "br", cap, len(data))
    return bytes(out)


def _unzstd(data: bytes, cap: int) -> bytes:
    out = bytearray()
    pending = data
    while pending:
        decoder = zstd.ZstdDecompressor()
        out += decoder.decompress(pending, max_length=_STEP)
        _check(out, "zstd", cap, len(data))
        while not decoder.eof:
            if decoder.needs_input:
                raise ValueError("the compressed data ends before its frame does")
            out += decoder.decompress(b"", max_length=_STEP)
            _check(out, "zstd", cap, len(data))
        pending = decoder.unused_data  # concatenated frames decode one after another
    return bytes(out)


def _identity(data: bytes, cap: int) -> bytes:
    return data


_DECODERS: dict[str, Callable[[bytes, int], bytes]] = {
    "gzip": _gunzip,
    "x-gzip": _gunzip,
    "deflate": _deflate,
    "br": _unbrotli,
    "zstd": _unzstd,
    "identity": _identity,
}
