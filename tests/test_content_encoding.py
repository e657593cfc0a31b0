"""Decoding content-encodings with a cap (flowproof.content_encoding)."""

from __future__ import annotations

import gzip
import struct
import sys
import time
import tracemalloc
import zlib

import brotli
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowproof.content_encoding import DECODED_BODY_CAP, DecodedTooLargeError, decode_content, is_identity

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd


def gzip_bomb(mib: int) -> bytes:
    """A gzip file that decodes to ``mib`` MiB of zeros, built in well under a second: one
    fully flushed deflate block of a MiB repeated (each decodes alone), and the real trailer."""
    zeros = bytes(1 << 20)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    block = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(zeros, crc)
    trailer = struct.pack("<II", crc, (mib << 20) & 0xFFFFFFFF)
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + block * mib + b"\x03\x00" + trailer


ENCODERS = {
    "gzip": lambda b: gzip.compress(b, mtime=0),
    "deflate": zlib.compress,
    "br": brotli.compress,
    "zstd": zstd.compress,
}


class TestDecode:
    @given(body=st.binary(max_size=4096), encoding=st.sampled_from(sorted(ENCODERS)))
    def test_each_encoding_round_trips(self, body: bytes, encoding: str) -> None:
        assert decode_content(ENCODERS[encoding](body), encoding) == body

    def test_codings_are_undone_last_first(self) -> None:
        body = b'{"input":"hi"}'
        assert decode_content(brotli.compress(gzip.compress(body)), "gzip, br") == body

    def test_raw_deflate_gzip_members_and_zstd_frames(self) -> None:
        body = b"x" * 5000
        raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
        assert decode_content(raw.compress(body) + raw.flush(), "deflate") == body
        assert decode_content(gzip.compress(b"ab") + gzip.compress(b"cd"), "gzip") == b"abcd"
        assert decode_content(zstd.compress(b"ab") + zstd.compress(b"cd"), "zstd") == b"abcd"

    def test_identity_and_case(self) -> None:
        assert decode_content(b"plain", "identity") == b"plain"
        assert decode_content(gzip.compress(b"a"), " GZip ") == b"a"
        assert is_identity("") and is_identity("identity") and not is_identity("gzip")

    @pytest.mark.parametrize("encoding", sorted(ENCODERS))
    def test_truncated_or_corrupt_data_is_a_value_error(self, encoding: str) -> None:
        whole = ENCODERS[encoding](b"some body that compresses " * 50)
        with pytest.raises(ValueError, match=encoding):
            decode_content(whole[: len(whole) // 2], encoding)
        with pytest.raises(ValueError):
            decode_content(b"not compressed at all", encoding)

    def test_an_unknown_coding_is_a_value_error(self) -> None:
        with pytest.raises(ValueError, match="unknown content-encoding 'compress'"):
            decode_content(b"x", "compress")


class TestCap:
    @pytest.mark.parametrize("encoding", sorted(ENCODERS))
    def test_every_encoding_stops_at_the_cap(self, encoding: str) -> None:
        body = bytes(3 << 20)
        with pytest.raises(DecodedTooLargeError) as caught:
            decode_content(ENCODERS[encoding](body), encoding, cap=1 << 20)
        assert caught.value.cap == 1 << 20 and "1 MiB" in str(caught.value)
        assert decode_content(ENCODERS[encoding](body), encoding, cap=3 << 20) == body

    def test_a_gzip_bomb_is_refused_within_seconds_in_bounded_memory(self) -> None:
        """1.6 MB of gzip that expands to 1.5 GiB: refused at the 64 MiB cap, never expanded."""
        bomb = gzip_bomb(1536)
        assert 1_000_000 < len(bomb) < 2_000_000
        # The suite may be tracing already (FLOWPROOF_TEST_TRACEMALLOC): measure from here, and
        # leave its tracing on.
        tracing = tracemalloc.is_tracing()
        if not tracing:
            tracemalloc.start()
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        started = time.monotonic()
        try:
            with pytest.raises(DecodedTooLargeError) as caught:
                decode_content(bomb, "gzip")
            elapsed = time.monotonic() - started
            peak = tracemalloc.get_traced_memory()[1] - before
        finally:
            if not tracing:
                tracemalloc.stop()
        assert elapsed < 5
        assert peak < DECODED_BODY_CAP + (32 << 20)  # the cap plus a few steps, not 1.5 GiB
        assert f"{len(bomb):,} bytes" in str(caught.value) and "64 MiB" in str(caught.value)
