"""The JSON-lines event log."""

from __future__ import annotations

import json
from pathlib import Path

from flowproof.addon.eventlog import EventLog


class TestEventLog:
    def test_appends_one_flushed_line_per_event(self, tmp_path: Path):
        """Each event is a complete JSON line on disk before close."""
        path = tmp_path / "e.jsonl"
        path.write_text('{"event": "earlier"}\n')
        log = EventLog(path)
        log.write("ready", listen=[{"mode": "regular", "host": "127.0.0.1", "port": 1}])
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        log.close()
        assert [e["event"] for e in lines] == ["earlier", "ready"]
        assert lines[1]["listen"][0]["port"] == 1

    def test_no_path_writes_nothing(self, tmp_path: Path):
        """Without a path, writing is a no-op."""
        log = EventLog(None)
        log.write("ready")
        assert list(tmp_path.iterdir()) == []

    def test_lone_surrogates_stay_valid_json(self, tmp_path: Path):
        """A string holding lone surrogates is logged as JSON escapes that load back to the same string."""
        path = tmp_path / "e.jsonl"
        log = EventLog(path)
        text = "not utf-8 \udcff\udcfe, cut emoji \ud83d, fine é"
        log.write("turn", text=text)
        log.write("done")
        log.close()
        lines = path.read_text(encoding="utf-8").splitlines()
        assert [json.loads(x)["event"] for x in lines] == ["turn", "done"]
        assert json.loads(lines[0])["text"] == text
