"""SSE framing: exact round-trips over arbitrary chunk boundaries."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowproof.wire.sse import (
    SSEDecoder,
    SSEEvent,
    canonical_raw,
    encode_events,
    make_event,
    parse_sse,
)


def decode_in_chunks(data: bytes, cuts: list[int]) -> list[SSEEvent]:
    """Feed ``data`` split at ``cuts`` (byte offsets) and close."""
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    start = 0
    for cut in sorted(set(cuts)):
        events += decoder.feed(data[start:cut])
        start = cut
    events += decoder.feed(data[start:])
    return events + decoder.close()


class TestSSEDecoder:
    def test_decodes_fields(self) -> None:
        """A block's event, data lines, id and retry are parsed per the SSE spec."""
        events = parse_sse(b"event: delta\nid: 7\nretry: 1500\ndata: a\ndata:b\n\n")
        assert events == [
            SSEEvent(
                raw="event: delta\nid: 7\nretry: 1500\ndata: a\ndata:b\n\n",
                data="a\nb",
                event="delta",
                id="7",
                retry=1500,
            )
        ]

    def test_strips_only_one_space_after_the_colon(self) -> None:
        """Only the first space after ``data:`` is dropped; the rest is data."""
        assert parse_sse(b"data:   x\n\n")[0].data == "  x"

    def test_field_without_colon_is_empty_value(self) -> None:
        """A bare ``data`` line adds an empty data line."""
        assert parse_sse(b"data\ndata: x\n\n")[0].data == "\nx"

    def test_invalid_retry_and_nul_id_are_ignored(self) -> None:
        """A non-numeric retry and an id holding NUL are ignored, as the spec says."""
        event = parse_sse(b"retry: soon\nid: a\x00b\ndata: x\n\n")[0]
        assert (event.retry, event.id) == (None, None)

    def test_comment_stays_in_its_block_raw(self) -> None:
        """A ``: ping`` comment inside a block is kept in that block's raw."""
        event = parse_sse(b": ping\ndata: x\n\n")[0]
        assert (event.raw, event.data) == (": ping\ndata: x\n\n", "x")

    def test_comment_only_block_is_an_event(self) -> None:
        """A block of only comments is an event with empty data and no name."""
        events = parse_sse(b": keep-alive\n\ndata: x\n\n")
        assert events[0] == SSEEvent(raw=": keep-alive\n\n", data="", event=None)
        assert len(events) == 2

    @pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
    def test_line_endings(self, eol: bytes) -> None:
        """LF, CRLF and CR all end lines and blocks."""
        data = b"event: e" + eol + b"data: 1" + eol + eol + b"data: 2" + eol + eol
        events = parse_sse(data)
        assert [(e.event, e.data) for e in events] == [("e", "1"), (None, "2")]
        assert encode_events(events) == data

    def test_crlf_split_between_chunks(self) -> None:
        """A CRLF cut between its two bytes is one line ending, not two."""
        data = b"data: a\r\n\r\ndata: b\r\n\r\n"
        for cut in range(1, len(data)):
            assert decode_in_chunks(data, [cut]) == parse_sse(data), cut

    def test_multibyte_character_split_between_chunks(self) -> None:
        """A UTF-8 character cut inside its bytes decodes whole."""
        data = "data: 晴れ ☀️\n\n".encode()
        for cut in range(1, len(data)):
            events = decode_in_chunks(data, [cut])
            assert [e.data for e in events] == ["晴れ ☀️"], cut

    def test_close_returns_unterminated_block(self) -> None:
        """close() returns a trailing block with no blank line, raw as it was."""
        decoder = SSEDecoder()
        assert decoder.feed(b"data: a\n\ndata: tail") == [SSEEvent(raw="data: a\n\n", data="a")]
        assert decoder.close() == [SSEEvent(raw="data: tail", data="tail")]

    def test_close_resolves_trailing_cr(self) -> None:
        """A final bare CR ends the stream's last blank line at close()."""
        decoder = SSEDecoder()
        assert decoder.feed(b"data: a\r\r") == []
        assert decoder.close() == [SSEEvent(raw="data: a\r\r", data="a")]

    def test_close_twice_and_empty_stream(self) -> None:
        """An empty stream yields nothing, and a second close() yields nothing."""
        decoder = SSEDecoder()
        assert decoder.close() == []
        assert decoder.close() == []

    def test_feed_after_close_raises(self) -> None:
        """Feeding a closed decoder is a programming error."""
        decoder = SSEDecoder()
        decoder.close()
        with pytest.raises(ValueError):
            decoder.feed(b"data: x\n\n")

    def test_stray_blank_lines_round_trip(self) -> None:
        """Extra blank lines between blocks are kept as empty events."""
        data = b"\n\ndata: x\n\n\n"
        events = parse_sse(data)
        assert [e.data for e in events] == ["", "", "x", ""]
        assert encode_events(events) == data

    def test_leading_bom_is_not_part_of_a_field(self) -> None:
        """A UTF-8 BOM before the first field is ignored in parsing but kept in raw."""
        data = "\ufeffevent: e\ndata: x\n\n".encode()
        events = parse_sse(data)
        assert events[0].event == "e"
        assert encode_events(events) == data

    def test_invalid_utf8_round_trips(self) -> None:
        """Bytes that are not UTF-8 still re-encode to the same bytes."""
        data = b"data: \xff\xfe\n\n"
        assert encode_events(parse_sse(data)) == data

    def test_buffer_holds_only_the_open_block(self) -> None:
        """Completed blocks are dropped from the buffer as they are emitted."""
        decoder = SSEDecoder()
        decoder.feed(b"data: x\n\n" * 1000 + b"data: par")
        assert len(decoder._buf) == len(b"data: par")

    def test_many_small_chunks_are_linear(self) -> None:
        """Decoding one long block fed byte by byte takes linear, not quadratic, time."""
        data = b"data: " + b"x" * 1_000_000 + b"\n\n"
        start = time.perf_counter()
        events = decode_in_chunks(data, list(range(1, len(data), 3)))
        assert time.perf_counter() - start < 5
        assert len(events[0].data) == 1_000_000


_line_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=12
)
_field = st.one_of(
    st.builds(lambda v: f"data: {v}", _line_text),
    st.builds(lambda v: f"data:{v}", _line_text),
    st.builds(lambda v: f"event: {v}", _line_text),
    st.builds(lambda v: f"id: {v}", _line_text),
    st.builds(lambda v: f"retry: {v}", st.integers(0, 10_000)),
    st.builds(lambda v: f": {v}", _line_text),
    st.just("data"),
)
_eol = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def _streams(draw: st.DrawFn) -> bytes:
    parts: list[str] = []
    for _ in range(draw(st.integers(0, 6))):
        for line in draw(st.lists(_field, max_size=4)):
            parts.append(line + draw(_eol))
        parts.append(draw(_eol))
    if draw(st.booleans()):  # an unterminated tail
        parts.extend(draw(st.lists(_field, max_size=2)))
    return "".join(parts).encode()


class TestSSERoundTrip:
    @settings(max_examples=300, deadline=None)
    @given(data=_streams(), cuts=st.lists(st.integers(0, 400), max_size=12))
    def test_any_split_round_trips(self, data: bytes, cuts: list[int]) -> None:
        """Any stream cut anywhere re-encodes byte for byte, with the same events as uncut."""
        cuts = [c for c in cuts if c <= len(data)]
        events = decode_in_chunks(data, cuts)
        assert encode_events(events) == data
        assert events == parse_sse(data)

    @settings(max_examples=200, deadline=None)
    @given(data=st.binary(max_size=80), cuts=st.lists(st.integers(0, 80), max_size=8))
    def test_arbitrary_bytes_round_trip(self, data: bytes, cuts: list[int]) -> None:
        """Even random bytes decode and re-encode losslessly under any split."""
        events = decode_in_chunks(data, [c for c in cuts if c <= len(data)])
        assert encode_events(events) == data
        assert events == parse_sse(data)


class TestCanonical:
    def test_canonical_raw_shape(self) -> None:
        """The canonical form is ``event:``, one ``data:`` line per line, then a blank line."""
        assert (
            canonical_raw("message_start", "a\nb") == "event: message_start\ndata: a\ndata: b\n\n"
        )
        assert canonical_raw(None, "[DONE]") == "data: [DONE]\n\n"

    @given(event=st.one_of(st.none(), st.text()), data=st.text())
    def test_one_data_line_per_line_of_the_data_whatever_the_text(self, event: str | None, data: str) -> None:
        head = "" if event is None else f"event: {event}\n"
        assert canonical_raw(event, data) == head + "".join(f"data: {line}\n" for line in data.split("\n")) + "\n"

    @given(
        event=st.one_of(st.none(), _line_text),
        data=st.lists(_line_text, min_size=1, max_size=3).map("\n".join),
    )
    def test_make_event_parses_back(self, event: str | None, data: str) -> None:
        """A canonical event decodes to the same event."""
        made = make_event(data, event)
        assert parse_sse(made.raw.encode()) == [made]
