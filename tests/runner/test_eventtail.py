"""The incremental event-log reader: the same events as a full read, each line parsed once."""

from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

from flowproof.runner import eventtail
from flowproof.runner.eventtail import EventTail
from flowproof.runner.proxy import read_events


def line(obj: object) -> bytes:
    return json.dumps(obj).encode() + b"\n"


class TestEventTail:
    def test_missing_file_is_no_events(self, tmp_path: Path) -> None:
        assert EventTail(tmp_path / "absent.jsonl").read() == []

    def test_returns_what_a_full_read_returns_as_the_log_grows(self, tmp_path: Path) -> None:
        log = tmp_path / "events.jsonl"
        tail = EventTail(log)
        chunks = [
            line({"event": "ready"}),
            line({"event": "request_started", "id": "a"}) + b"not json\n" + b"[1, 2]\n",
            b'{"event": "turn", "id": "a"',  # the line is still being written
            b', "mode": "replay"}\n' + line({"event": "done"}),
        ]
        with log.open("ab") as fh:
            for chunk in chunks:
                fh.write(chunk)
                fh.flush()
                assert tail.read() == read_events(log)
        assert [e["event"] for e in tail.read()] == ["ready", "request_started", "turn", "done"]

    def test_a_complete_last_line_without_newline_is_returned_but_read_again(self, tmp_path: Path) -> None:
        log = tmp_path / "events.jsonl"
        log.write_bytes(line({"event": "ready"}) + b'{"event": "done"}')
        tail = EventTail(log)
        assert [e["event"] for e in tail.read()] == ["ready", "done"]
        with log.open("ab") as fh:
            fh.write(b"\n" + line({"event": "late"}))
        assert [e["event"] for e in tail.read()] == ["ready", "done", "late"]

    def test_each_line_is_parsed_once(self, tmp_path: Path) -> None:
        log = tmp_path / "events.jsonl"
        log.write_bytes(line({"event": "ready"}) + line({"event": "turn"}))
        tail = EventTail(log)
        tail.read()
        with log.open("ab") as fh:
            fh.write(line({"event": "done"}))
        with mock.patch.object(eventtail.json, "loads", wraps=json.loads) as loads:
            events = tail.read()
        assert [e["event"] for e in events] == ["ready", "turn", "done"]
        assert loads.call_count == 1  # only the new line

    def test_a_shorter_file_is_read_from_the_start(self, tmp_path: Path) -> None:
        log = tmp_path / "events.jsonl"
        log.write_bytes(line({"event": "ready", "pad": "x" * 100}) + line({"event": "done"}))
        tail = EventTail(log)
        assert len(tail.read()) == 2
        log.write_bytes(line({"event": "fresh"}))
        assert [e["event"] for e in tail.read()] == ["fresh"]
