"""The JSON-lines event log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowproof.addon.eventlog import EventLog, spliceable_json
from flowproof.cassette import RecordedRequest, RecordedResponse, RecordedTurn
from flowproof.events import DoneEvent, ErrorEvent, ErrorKind, Listener, ReadyEvent, TurnEvent


class TestEventLog:
    def test_appends_one_flushed_line_per_event(self, tmp_path: Path):
        """Each event is a complete JSON line on disk before close."""
        path = tmp_path / "e.jsonl"
        path.write_text('{"event": "earlier"}\n')
        log = EventLog(path)
        log.write(ReadyEvent((Listener("regular", "127.0.0.1", 1),), "replay"))
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        log.close()
        assert [e["event"] for e in lines] == ["earlier", "ready"]
        assert lines[1]["listen"][0]["port"] == 1

    def test_an_unflushed_line_reaches_the_file_with_the_next_flushed_one(self, tmp_path: Path):
        """flush=False holds a line back until the next flushed write; no line is ever cut."""
        path = tmp_path / "e.jsonl"
        log = EventLog(path)
        log.write(ReadyEvent((), "replay"))
        log.write(ErrorEvent("held back", ErrorKind.OTHER), flush=False)
        assert [json.loads(x)["event"] for x in path.read_text().splitlines()] == ["ready"]
        log.write(DoneEvent())
        assert [json.loads(x)["event"] for x in path.read_text().splitlines()] == ["ready", "error", "done"]
        log.close()

    def test_close_writes_an_unflushed_line(self, tmp_path: Path):
        path = tmp_path / "e.jsonl"
        log = EventLog(path)
        log.write(ErrorEvent("last", ErrorKind.OTHER), flush=False)
        log.close()
        assert [json.loads(x)["event"] for x in path.read_text().splitlines()] == ["error"]

    def test_no_path_writes_nothing(self, tmp_path: Path):
        """Without a path, writing is a no-op."""
        log = EventLog(None)
        log.write(DoneEvent())
        assert list(tmp_path.iterdir()) == []

    def test_lone_surrogates_stay_valid_json(self, tmp_path: Path):
        """A string holding lone surrogates is logged as JSON escapes that load back to the same string."""
        path = tmp_path / "e.jsonl"
        log = EventLog(path)
        text = "not utf-8 \udcff\udcfe, cut emoji \ud83d, fine é"
        log.write(ErrorEvent(text, ErrorKind.OTHER))
        log.write(DoneEvent())
        log.close()
        lines = path.read_text(encoding="utf-8").splitlines()
        assert [json.loads(x)["event"] for x in lines] == ["error", "done"]
        assert json.loads(lines[0])["text"] == text

    def test_done_hook_closes_the_file(self, tmp_path: Path):
        """mitmproxy's done hook closes the log; a later write reopens it and appends."""
        path = tmp_path / "e.jsonl"
        log = EventLog(path)
        log.write(DoneEvent())
        log.done()
        log.write(DoneEvent(text="again"))
        log.close()
        assert [json.loads(x)["text"] for x in path.read_text().splitlines()] == ["", "again"]


class TestSplicedRequestBody:
    @pytest.mark.parametrize(
        ("data", "expected"),
        [
            (b'{"a":1}', '{"a":1}'),
            (b'[1,"\\u00e9"]', '[1,"\\u00e9"]'),
            ('{"a":"Zürich"}'.encode(), '{"a":"Zürich"}'),
            (b'{\n "a": 1\n}', None),  # a line break would cut the line
            (b'{"a":1}\r', None),
            (b' {"a":1}', None),  # not an object or array at its first byte
            (b'"text"', None),
            (b'{"a":"\xff"}', None),  # not UTF-8
            (b"", None),
        ],
    )
    def test_only_one_line_utf8_objects_and_arrays_are_spliced(self, data: bytes, expected: str | None):
        assert spliceable_json(data) == expected

    def test_the_spliced_body_replaces_only_the_request_body(self, tmp_path: Path):
        """The other fields are serialized as usual; the line parses to the turn with the body given."""
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        turn = RecordedTurn(0, "openai-chat", RecordedRequest("POST", "https://x/v1", {}, "ab" * 32, body),
                            RecordedResponse(200, {}, body={"echo": body}))
        path = tmp_path / "e.jsonl"
        log = EventLog(path)
        log.write(TurnEvent("f1", "replay", turn), request_json=json.dumps(body, separators=(",", ":")))
        log.close()
        (line,) = path.read_text(encoding="utf-8").splitlines()
        assert json.dumps(body, separators=(",", ":")) in line  # written as given, not re-serialized
        assert json.loads(line) == TurnEvent("f1", "replay", turn).to_json()
