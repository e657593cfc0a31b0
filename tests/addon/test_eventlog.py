"""The JSON-lines event log."""

from __future__ import annotations

import json
from pathlib import Path

from flowproof.addon.eventlog import EventLog
from flowproof.log_events import DoneEvent, ErrorEvent, ErrorKind, Listener, ReadyEvent


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
        log.write(DoneEvent((3,)))
        log.close()
        assert [json.loads(x)["unconsumed"] for x in path.read_text().splitlines()] == [[], [3]]
