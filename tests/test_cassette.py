from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowproof.cassette import (
    CASSETTE_FORMAT,
    Cassette,
    RecordedRequest,
    RecordedResponse,
    RecordedTurn,
    dumps_cassette,
    load_cassette,
    loads_cassette,
    save_cassette,
)
from flowproof.errors import CassetteError, CassetteNotFoundError
from flowproof.request_key import body_sha256
from flowproof.wire.sse import SSEEvent, canonical_raw

CHAT_URL = "https://api.openai.com/v1/chat/completions"


def chat_body(text: str = "hi") -> dict:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}


def make_turn(index: int = 0, response: RecordedResponse | None = None, body: dict | None = None) -> RecordedTurn:
    body = chat_body() if body is None else body
    raw = json.dumps(body, separators=(",", ":")).encode()
    return RecordedTurn(
        index=index,
        provider="openai-chat",
        request=RecordedRequest("POST", CHAT_URL, {"content-type": "application/json"}, body_sha256(raw), body),
        response=response
        or RecordedResponse(
            200,
            {"content-type": "application/json"},
            body={
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "model": "gpt-4o",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "héllo"}, "finish_reason": "stop"}
                ],
            },
        ),
    )


def sse_response() -> RecordedResponse:
    events = (
        SSEEvent(raw=canonical_raw(None, '{"a":1}'), data='{"a":1}'),
        # Non-canonical framing (no space after the colon, CRLF): raw must be kept.
        SSEEvent(raw='data:{"b":2}\r\n\r\n', data='{"b":2}'),
        SSEEvent(raw="event: ping\nid: 7\nretry: 100\ndata: x\n\n", data="x", event="ping", id="7", retry=100),
        SSEEvent(raw=canonical_raw("message_stop", "line1\nline2"), data="line1\nline2", event="message_stop"),
    )
    return RecordedResponse(200, {"content-type": "text/event-stream"}, events=events)


class TestRecordedResponse:
    def test_content_of_events_is_the_exact_stream(self):
        """content() of an SSE response concatenates every event's raw text."""
        resp = sse_response()
        assert resp.is_stream
        assert resp.content() == "".join(e.raw for e in resp.events or ()).encode()

    def test_content_of_body_is_compact_json(self):
        """content() of a JSON response is compact JSON with non-ASCII kept as UTF-8."""
        resp = RecordedResponse(200, {}, body={"a": "é", "b": [1, 2]})
        assert not resp.is_stream
        assert resp.content() == '{"a":"é","b":[1,2]}'.encode()

    def test_content_of_text_is_utf8(self):
        """content() of a text response is its UTF-8 bytes, and an empty response is empty."""
        assert RecordedResponse(502, {}, text="bad gateway ü").content() == "bad gateway ü".encode()
        assert RecordedResponse(204, {}).content() == b""


class TestSerialization:
    def test_round_trip_keeps_every_field(self):
        """A cassette with JSON, SSE and text responses loads back equal to what was dumped."""
        c = Cassette(
            (
                make_turn(0),
                make_turn(1, sse_response()),
                make_turn(2, RecordedResponse(500, {"content-type": "text/plain"}, text="oops")),
            ),
            route="base_url",
        )
        assert loads_cassette(dumps_cassette(c), "c.json") == c

    def test_stdio_mcp_sessions_round_trip_beside_the_turns(self):
        """``mcp_stdio`` is written only when there are sessions, after the turns; a bad one names itself."""
        from flowproof.mcp.stdio import StdioMessage, StdioSession

        session = StdioSession(0, "notes", (
            StdioMessage("client", message={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            StdioMessage("server", line="not json"),
        ))
        c = Cassette((make_turn(0),), mcp_stdio=(session,))
        text = dumps_cassette(c)
        assert list(json.loads(text)) == ["format", "generator", "route", "turns", "mcp_stdio"]
        assert loads_cassette(text, "c.json") == c
        assert "mcp_stdio" not in json.loads(dumps_cassette(Cassette((make_turn(0),))))
        broken = json.loads(text)
        broken["mcp_stdio"][0]["messages"][1] = {"from": "server"}
        with pytest.raises(CassetteError, match="mcp_stdio session 0, message 1: needs exactly one of"):
            loads_cassette(json.dumps(broken), "c.json")
        with pytest.raises(CassetteError, match="`mcp_stdio` should be an array"):
            loads_cassette(json.dumps({**broken, "mcp_stdio": {}}), "c.json")

    def test_layout_and_key_order_follow_the_format(self):
        """The text is two-space indented, ends with a newline and orders keys as documented."""
        text = dumps_cassette(Cassette((make_turn(0),)))
        assert text.endswith("}\n")
        doc = json.loads(text)
        assert list(doc) == ["format", "generator", "route", "turns"]
        # Format 1 while nothing needs more, so an older flowproof still reads it.
        assert doc["format"] == 1 and CASSETTE_FORMAT == 2
        assert doc["generator"].startswith("flowproof")
        turn = doc["turns"][0]
        assert list(turn) == ["index", "provider", "request", "response"]
        assert list(turn["request"]) == ["method", "url", "headers", "body_sha256", "body"]
        assert list(turn["response"]) == ["status", "headers", "body"]
        assert text.splitlines()[1] == '  "format": 1,'
        assert "héllo" in text

    def test_raw_is_stored_only_when_not_canonical(self):
        """An event keeps raw only when event/data re-emission would not give its bytes."""
        doc = json.loads(dumps_cassette(Cassette((make_turn(0, sse_response()),))))
        events = doc["turns"][0]["response"]["events"]
        assert events[0] == {"data": '{"a":1}'}
        assert events[1] == {"data": '{"b":2}', "raw": 'data:{"b":2}\r\n\r\n'}
        assert events[2] == {
            "event": "ping",
            "id": "7",
            "retry": 100,
            "data": "x",
            "raw": "event: ping\nid: 7\nretry: 100\ndata: x\n\n",
        }
        assert events[3] == {"event": "message_stop", "data": "line1\nline2"}

    def test_replayed_stream_bytes_survive_the_round_trip(self):
        """The bytes replay re-emits after save and load equal the bytes recorded."""
        original = sse_response()
        loaded = loads_cassette(dumps_cassette(Cassette((make_turn(0, original),))), "c.json")
        assert loaded.turns[0].response.content() == original.content()


class TestLoadErrors:
    def test_missing_file_says_how_to_record(self, tmp_path: Path):
        """A missing cassette raises CassetteNotFoundError naming the record command."""
        path = tmp_path / "booking.cassette.json"
        with pytest.raises(CassetteNotFoundError) as info:
            load_cassette(path, record_command="flowproof-run booking.flow.yaml --record")
        assert str(info.value) == (
            f"{path}: no cassette to replay — record one first with: flowproof-run booking.flow.yaml --record"
        )

    def test_truncated_file_names_line_and_column(self, tmp_path: Path):
        """A truncated cassette raises CassetteError with the JSON error's line:col and the fix."""
        path = tmp_path / "c.json"
        path.write_text(dumps_cassette(Cassette((make_turn(0),)))[:60])
        with pytest.raises(CassetteError) as info:
            load_cassette(path)
        message = str(info.value)
        assert message.startswith(f"{path}: not valid JSON at line ")
        assert "re-record it or restore it from version control" in message

    def test_empty_file_is_corrupt(self, tmp_path: Path):
        """An empty cassette file is reported as invalid JSON at line 1:1."""
        path = tmp_path / "c.json"
        path.write_text("")
        with pytest.raises(CassetteError, match=r"not valid JSON at line 1:1"):
            load_cassette(path)

    def test_absurd_nesting_is_a_cassette_error(self, tmp_path: Path):
        """A file nested past the parser's recursion limit is a clear CassetteError, not a crash."""
        path = tmp_path / "c.json"
        path.write_text("[" * 100_000)
        with pytest.raises(CassetteError, match="nested too deeply"):
            load_cassette(path)

    def test_newer_format_says_to_upgrade(self):
        """A cassette from a newer format asks the user to upgrade flowproof."""
        with pytest.raises(CassetteError) as info:
            loads_cassette('{"format": 3, "route": "proxy", "turns": []}', "c.json")
        assert str(info.value) == (
            "c.json: cassette format 3 is newer than this flowproof reads (format 2) — "
            "upgrade flowproof to replay it"
        )

    @pytest.mark.parametrize(
        ("mutate", "expected"),
        [
            pytest.param(
                lambda d: d["turns"][1]["request"].pop("body_sha256"),
                "turn 1 request: field 'body_sha256' is missing",
                id="missing-sha",
            ),
            pytest.param(
                lambda d: d["turns"][1]["response"].__setitem__("status", "200"),
                "turn 1 response: field 'status' should be an integer, not a string",
                id="status-string",
            ),
            pytest.param(
                lambda d: d["turns"][1].pop("provider"),
                "turn 1: field 'provider' is missing",
                id="missing-provider",
            ),
            pytest.param(
                lambda d: d["turns"][1]["response"].__setitem__("text", "x"),
                "turn 1 response: has body and text; a response holds exactly one of them",
                id="two-bodies",
            ),
            pytest.param(
                lambda d: d["turns"][1]["request"]["headers"].__setitem__("x", 1),
                "turn 1 request: header 'x' should be a string, not a number",
                id="header-number",
            ),
            pytest.param(
                lambda d: d.__setitem__("turns", {}),
                "top level: field 'turns' should be an array, not an object",
                id="turns-object",
            ),
            pytest.param(
                lambda d: d.__setitem__("route", "tunnel"),
                "top level: route 'tunnel' is not one of proxy, base_url",
                id="bad-route",
            ),
        ],
    )
    def test_bad_field_names_turn_and_field(self, mutate, expected):
        """A missing or mistyped field raises CassetteError naming the turn and the field."""
        doc = json.loads(dumps_cassette(Cassette((make_turn(0), make_turn(1)))))
        mutate(doc)
        with pytest.raises(CassetteError) as info:
            loads_cassette(json.dumps(doc), "c.json")
        assert str(info.value) == f"c.json: {expected} — re-record it or restore it from version control"

    def test_bad_event_names_the_event(self):
        """An SSE event without data names the turn and the event position."""
        doc = json.loads(dumps_cassette(Cassette((make_turn(0, sse_response()),))))
        del doc["turns"][0]["response"]["events"][2]["data"]
        with pytest.raises(CassetteError, match=r"turn 0 response event 2: field 'data' is missing"):
            loads_cassette(json.dumps(doc), "c.json")


    @pytest.mark.parametrize(("edit", "message"), [
        (lambda e: e.__setitem__("data", None), "field 'data' should be a string, not null"),
        (lambda e: e.__setitem__("event", 1), "field 'event' should be a string, not a number"),
        (lambda e: e.__setitem__("id", []), "field 'id' should be a string, not an array"),
        (lambda e: e.__setitem__("retry", True), "field 'retry' should be an integer, not a boolean"),
        (lambda e: e.__setitem__("raw", {}), "field 'raw' should be a string, not an object"),
    ])
    def test_a_mistyped_event_field_is_refused_at_load(self, edit, message):
        """Events are built only when read, but every one is still checked when the file is loaded."""
        doc = json.loads(dumps_cassette(Cassette((make_turn(0, sse_response()),))))
        edit(doc["turns"][0]["response"]["events"][1])
        with pytest.raises(CassetteError, match=f"turn 0 response event 1: {message}"):
            loads_cassette(json.dumps(doc), "c.json")


class TestLazyEvents:
    """Loading a cassette builds no SSE event: replay reads a stream's bytes, a view its events."""

    def test_loading_builds_no_event_and_replay_needs_none(self, monkeypatch: pytest.MonkeyPatch):
        import flowproof.cassette as cassette_module

        text = dumps_cassette(Cassette((make_turn(0, sse_response()),)))
        built: list[SSEEvent] = []

        def counting(**fields) -> SSEEvent:
            built.append(SSEEvent(**fields))
            return built[-1]

        monkeypatch.setattr(cassette_module, "SSEEvent", counting)
        loaded = loads_cassette(text, "c.json").turns[0].response
        assert loaded is not None and loaded.events is not None
        assert loaded.content() == sse_response().content() and built == []
        assert len(loaded.events) == 4 and built == []
        # Reading any event builds them all, once; they equal the recorded tuple.
        assert loaded.events[2].event == "ping" and len(built) == 4
        assert loaded == sse_response() and tuple(loaded.events) == sse_response().events and len(built) == 4
        assert loaded.content() == sse_response().content()

    def test_loaded_events_equal_and_differ_like_tuples(self):
        text = dumps_cassette(Cassette((make_turn(0, sse_response()),)))
        a = loads_cassette(text, "a.json").turns[0].response
        b = loads_cassette(text, "b.json").turns[0].response
        assert a is not None and b is not None and a.events == b.events and a.events is not b.events
        assert a.events is not None and a.events != sse_response().events[:3]  # type: ignore[index]
        assert a.events != list(sse_response().events or ())  # a tuple never equals a list either
        assert hash(a.events) == hash(sse_response().events)

    def test_the_collector_is_paused_while_loading_and_back_after(self, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch):
        """A big cassette's document starts the cyclic collector over and over: it waits."""
        import gc

        import flowproof.cassette as cassette_module

        seen: list[bool] = []
        by_turn, whole = cassette_module._parse_by_turn, cassette_module._parse
        monkeypatch.setattr(cassette_module, "_parse_by_turn", lambda p: seen.append(gc.isenabled()) or by_turn(p))
        monkeypatch.setattr(cassette_module, "_parse", lambda t, p: seen.append(gc.isenabled()) or whole(t, p))
        path = tmp_path / "c.json"
        save_cassette(Cassette((make_turn(0),)), path)
        load_cassette(path)
        path.write_text("{")
        with pytest.raises(CassetteError):
            load_cassette(path)
        # A saved file is parsed a turn at a time; a damaged one is tried so, then read whole.
        assert seen == [False, False, False] and gc.isenabled()


#: Any JSON value (the document's other keys, and turns the reader would refuse).
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
#: Ways a cassette may be laid out: save_cassette's own, compact, other indents.
layouts = st.sampled_from([{"indent": 2, "ensure_ascii": False}, {"separators": (",", ":")},
                           {"indent": 4}, {"indent": "\t", "ensure_ascii": False}, {}])


class TestParseByTurn:
    """A cassette file is read a megabyte and parsed a turn at a time: the same document as
    ``json.loads`` of the whole text, without the text and all of the parsed turns at once."""

    @pytest.fixture(autouse=True)
    def tiny_reads(self, monkeypatch: pytest.MonkeyPatch) -> None:
        # Reads of a few bytes: every value, number and UTF-8 sequence is cut by some read.
        import flowproof.cassette as cassette_module

        monkeypatch.setattr(cassette_module, "_STREAM_CHUNK", 5)

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(turns=st.lists(json_values, max_size=5), rest=st.dictionaries(st.text(max_size=8), json_values, max_size=3),
           layout=layouts, read=st.integers(1, 9))
    def test_any_layout_parses_as_json_loads_does(self, tmp_path: Path, turns: list, rest: dict, layout: dict,
                                                  read: int):
        from flowproof.cassette import MAX_CASSETTE_BYTES, _document, _TextStream
        from flowproof.files import iter_regular_file

        path = tmp_path / "c.json"
        text = json.dumps({**rest, "turns": turns}, **layout)
        path.write_text(text, encoding="utf-8")
        assert _document(_TextStream(iter_regular_file(path, MAX_CASSETTE_BYTES, read))) == json.loads(text)

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(text=st.text(alphabet=st.sampled_from(list('{}[],:" \n0123456789.e-tnrufals\\é')), max_size=40)
           .map(lambda t: '{"turns": [' + t))
    def test_text_json_refuses_is_refused(self, tmp_path: Path, text: str):
        """Whatever ``json.loads`` refuses (or finds not an object) gives None: the caller then
        reads the file whole and names the problem."""
        from flowproof.cassette import _parse_by_turn

        path = tmp_path / "c.json"
        path.write_text(text, encoding="utf-8")
        try:
            expected = json.loads(text)
        except ValueError:
            expected = None
        got = _parse_by_turn(path)
        assert got == (expected if isinstance(expected, dict) else None)

    def test_a_saved_cassette_round_trips_through_it(self, tmp_path: Path):
        from flowproof.cassette import _parse_by_turn

        path = tmp_path / "c.json"
        turns = (make_turn(0), make_turn(1, sse_response()), make_turn(2, body=chat_body("é\U0001f600")))
        save_cassette(Cassette(turns), path)
        assert _parse_by_turn(path) == json.loads(path.read_text(encoding="utf-8"))

    def test_a_stream_that_is_not_utf8_reads_as_the_whole_file_does(self, tmp_path: Path):
        from flowproof.cassette import _parse_by_turn, _read_text

        path = tmp_path / "c.json"
        path.write_bytes(b'{"turns": [{"raw": "\xff\xfe ok"}], "format": 1}')
        expected = {"turns": [{"raw": "\udcff\udcfe ok"}], "format": 1}
        assert _parse_by_turn(path) == json.loads(_read_text(path, "")) == expected

    def test_a_duplicate_turns_key_keeps_the_last_as_json_loads_does(self, tmp_path: Path):
        from flowproof.cassette import _parse_by_turn

        path = tmp_path / "c.json"
        text = '{"turns": [1, 2], "format": 1, "turns": [3]}'
        path.write_text(text)
        assert _parse_by_turn(path) == json.loads(text) == {"turns": [3], "format": 1}

    def test_the_whole_text_is_never_held(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
        """The text held at any moment is about one read and one turn, whatever the file's size."""
        import flowproof.cassette as cassette_module

        monkeypatch.setattr(cassette_module, "_STREAM_CHUNK", 4096)
        held: list[int] = []
        more = cassette_module._TextStream._more

        def watched(stream: cassette_module._TextStream) -> bool:
            grew = more(stream)
            held.append(len(stream._text))
            return grew

        monkeypatch.setattr(cassette_module._TextStream, "_more", watched)
        path = tmp_path / "c.json"
        turns = tuple(make_turn(i, body=chat_body(f"question {i} " + "x" * 1000)) for i in range(300))
        save_cassette(Cassette(turns), path)
        size = path.stat().st_size
        loaded = load_cassette(path)
        assert loaded.turns == turns
        turn_size = max(len(json.dumps(t)) for t in json.loads(path.read_text())["turns"])
        assert size > 100 * 4096 and max(held) <= 2 * (4096 + turn_size)

    def test_a_file_it_cannot_read_gives_none(self, tmp_path: Path):
        from flowproof.cassette import _parse_by_turn

        assert _parse_by_turn(tmp_path / "missing.json") is None
        assert _parse_by_turn(tmp_path) is None


class TestSave:
    def test_save_then_load_round_trips(self, tmp_path: Path):
        """save_cassette writes text that load_cassette reads back equal, with no temp file left."""
        path = tmp_path / "c.json"
        c = Cassette((make_turn(0), make_turn(1, sse_response())))
        save_cassette(c, path)
        assert load_cassette(path) == c
        assert path.read_text() == dumps_cassette(c)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json"]

    def test_failed_write_keeps_old_file_and_leaves_no_temp(self, tmp_path: Path, monkeypatch):
        """When the write fails the old cassette is byte-identical and no temp file remains."""
        path = tmp_path / "c.json"
        save_cassette(Cassette((make_turn(0),)), path)
        before = path.read_bytes()

        def boom(fd, data):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "write", boom)
        with pytest.raises(CassetteError, match="No space left on device"):
            save_cassette(Cassette((make_turn(0), make_turn(1))), path)
        monkeypatch.undo()
        assert path.read_bytes() == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json"]

    def test_failed_rename_leaves_no_temp(self, tmp_path: Path, monkeypatch):
        """When the final rename fails no temp file remains and the old file is unchanged."""
        path = tmp_path / "c.json"
        path.write_text("old")

        def boom(src, dst):
            raise OSError(13, "Permission denied")

        monkeypatch.setattr(os, "replace", boom)
        with pytest.raises(CassetteError, match="Permission denied"):
            save_cassette(Cassette((make_turn(0),)), path)
        monkeypatch.undo()
        assert path.read_text() == "old"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json"]

    def test_read_only_directory_keeps_old_file_and_leaves_no_temp(self, tmp_path: Path, monkeypatch):
        """A directory that refuses new files gives a CassetteError and leaves the old cassette alone."""
        import tempfile

        path = tmp_path / "c.json"
        save_cassette(Cassette((make_turn(0),)), path)
        before = path.read_bytes()

        def refuse(*args, **kwargs):
            raise OSError(30, "Read-only file system")

        monkeypatch.setattr(tempfile, "mkstemp", refuse)
        with pytest.raises(CassetteError, match="Read-only file system"):
            save_cassette(Cassette((make_turn(0), make_turn(1))), path)
        monkeypatch.undo()
        assert path.read_bytes() == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json"]

    def test_lone_surrogates_round_trip(self, tmp_path: Path):
        """Bodies with lone surrogates (a \\ud83d escape, a stream that is not UTF-8) save and load back equal."""
        path = tmp_path / "c.json"
        body = chat_body("cut emoji \ud83d")
        stream = RecordedResponse(200, {"content-type": "text/event-stream"},
                                  events=(SSEEvent(raw="data: caf\udce9\n\n", data="caf\udce9"),))
        c = Cassette((make_turn(0, body=body), make_turn(1, stream)))
        save_cassette(c, path)
        assert load_cassette(path) == c
        assert b"cut emoji \\ud83d" in path.read_bytes()
        assert load_cassette(path).turns[1].response.content() == b"data: caf\xe9\n\n"

    def test_save_keeps_a_readable_file_mode(self, tmp_path: Path):
        """A new cassette is not left with the temp file's private 0600 mode."""
        path = tmp_path / "c.json"
        save_cassette(Cassette(()), path)
        assert path.stat().st_mode & 0o777 == 0o644


class TestJsonContent:
    def test_lone_surrogate_json_response_is_sent_escaped(self):
        """A JSON answer holding a lone surrogate is re-emitted as valid JSON with the same value."""
        resp = RecordedResponse(400, {}, body={"error": {"message": "no low surrogate \ud83d"}})
        assert json.loads(resp.content()) == resp.body


class TestAbandonedTurns:
    def test_an_abandoned_turn_round_trips_with_its_partial_answer(self):
        partial = RecordedResponse(200, {"content-type": "text/event-stream"},
                                   events=(SSEEvent(raw=canonical_raw(None, '{"a":1}'), data='{"a":1}'),))
        turn = replace(make_turn(0, partial), abandoned=True)
        text = dumps_cassette(Cassette((turn,)))
        doc = json.loads(text)
        assert list(doc["turns"][0])[:3] == ["index", "provider", "abandoned"]
        assert loads_cassette(text, "c.json").turns == (turn,)

    def test_an_abandoned_turn_without_a_response_is_null(self):
        turn = RecordedTurn(0, "openai-chat", make_turn().request, None, abandoned=True)
        text = dumps_cassette(Cassette((turn,)))
        assert json.loads(text)["turns"][0]["response"] is None
        assert loads_cassette(text, "c.json").turns == (turn,)

    def test_a_complete_turn_is_written_as_before(self):
        """No `abandoned` key on a complete turn: older readers and older files agree."""
        text = dumps_cassette(Cassette((make_turn(),)))
        assert "abandoned" not in text
        assert loads_cassette(text, "c.json").turns[0].abandoned is False

    def test_only_an_abandoned_turn_may_lack_a_response(self):
        doc = json.loads(dumps_cassette(Cassette((make_turn(),))))
        doc["turns"][0]["response"] = None
        with pytest.raises(CassetteError, match="turn 0: field 'response' should be an object"):
            loads_cassette(json.dumps(doc), "c.json")

    def test_abandoned_must_be_a_boolean(self):
        doc = json.loads(dumps_cassette(Cassette((make_turn(),))))
        doc["turns"][0]["abandoned"] = "yes"
        with pytest.raises(CassetteError, match="field 'abandoned' should be true or false"):
            loads_cassette(json.dumps(doc), "c.json")


# --------------------------------------------------------------------------- WebSocket connections

from flowproof.cassette import (  # noqa: E402 — the WebSocket half of this file
    WEBSOCKET_METHOD,
    LooseFrame,
    RecordedConnection,
    TurnRef,
)
from flowproof.turns import FinishReason  # noqa: E402
from flowproof.views import turn_views  # noqa: E402
from flowproof.wire.base import Frame  # noqa: E402

WS_URL = "wss://api.openai.com/v1/responses"


def ws_turn(index: int, text: str = "Sunny.", *, connection: int = 0) -> RecordedTurn:
    body = {"type": "response.create", "model": "gpt-x", "input": "weather?"}
    raw = json.dumps(body, separators=(",", ":")).encode()
    done = {"type": "response.completed", "response": {
        "id": f"resp_{index}", "model": "gpt-x", "status": "completed",
        "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}]}}
    frames = (Frame(text='{"type":"response.created"}'), Frame(text=json.dumps(done)))
    return RecordedTurn(
        index=index, provider="openai-responses", connection=connection,
        request=RecordedRequest(WEBSOCKET_METHOD, WS_URL, {"openai-beta": "responses_websockets=2026-02-06"},
                                body_sha256(raw), body),
        response=RecordedResponse(101, {}, frames=frames),
    )


def ws_cassette() -> Cassette:
    connection = RecordedConnection(
        0, "openai-responses", WS_URL, {"openai-beta": "responses_websockets=2026-02-06"},
        (TurnRef(1), LooseFrame(False, Frame(text='{"type":"codex.rate_limits"}')), TurnRef(2),
         LooseFrame(True, Frame(data=b"\x01"))),
        closed_by="client", close_code=1000,
    )
    return Cassette((make_turn(0), ws_turn(1), ws_turn(2, "Rainy.")), connections=(connection,))


class TestWebSocketConnections:
    def test_a_websocket_cassette_round_trips_as_format_2(self):
        c = ws_cassette()
        text = dumps_cassette(c)
        doc = json.loads(text)
        assert doc["format"] == 2 and list(doc) == ["format", "generator", "route", "turns", "connections"]
        assert list(doc["turns"][1]) == ["index", "provider", "connection", "request", "response"]
        assert doc["turns"][1]["response"]["frames"][0] == {"text": '{"type":"response.created"}'}
        assert doc["connections"][0]["transcript"] == [
            {"turn": 1}, {"server": {"text": '{"type":"codex.rate_limits"}'}}, {"turn": 2},
            {"client": {"binary": "AQ=="}}]
        loaded = loads_cassette(text, "c.json")
        assert loaded == c and loaded.format == 2 and loaded.speaks_websocket
        # An HTTP-only cassette is still written as format 1.
        assert json.loads(dumps_cassette(Cassette((make_turn(0),))))["format"] == 1

    def test_a_websocket_turn_reads_like_an_http_one(self):
        view = turn_views(ws_turn(3, "Sunny."))
        assert view.response is not None and view.response.text == "Sunny."
        assert view.response.finish_reason is FinishReason.STOP
        frames = ws_turn(3).response.frames  # type: ignore[union-attr]
        assert frames is not None and ws_turn(3).response.content() == b"".join(f.content for f in frames)

    @pytest.mark.parametrize(("edit", "message"), [
        (lambda d: d["turns"][1].__setitem__("connection", "0"), "turn 1: field 'connection' should be an integer"),
        (lambda d: d["turns"][1]["response"]["frames"].append({"txt": "x"}), "turn 1 response frame 2: a frame is"),
        (lambda d: d["connections"][0]["transcript"].append({"turn": 9}), "names turn 9, but the cassette has 3"),
        (lambda d: d["connections"][0]["transcript"].append({"elsewhere": 1}), "transcript entry 4: should be one of"),
        (lambda d: d["connections"][0].__setitem__("closed_by", "nobody"), "'closed_by' should be client or server"),
        (lambda d: d.__setitem__("connections", {}), "`connections` should be an array"),
    ])
    def test_a_damaged_connection_names_the_field(self, edit, message):
        doc = json.loads(dumps_cassette(ws_cassette()))
        edit(doc)
        with pytest.raises(CassetteError, match=message.replace("(", r"\(")):
            loads_cassette(json.dumps(doc), "c.json")
