"""Tests for flowproof.testing.script: replies, script files and their errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowproof.errors import FlowproofError
from flowproof.testing import (
    Reply,
    ScriptedCall,
    ScriptError,
    load_script,
    script_from_data,
)


class TestReply:
    def test_text_factory_sets_content_only(self) -> None:
        """Reply.text carries the text and no calls."""
        reply = Reply.text("hello", chunk_delay=0.1)
        assert (reply.content, reply.calls, reply.chunk_delay, reply.is_error) == ("hello", (), 0.1, False)

    def test_tool_call_dumps_dict_arguments_compactly(self) -> None:
        """A dict argument becomes compact JSON; a string argument is kept verbatim."""
        assert Reply.tool_call("f", {"a": 1, "b": "é"}).calls[0].arguments == '{"a":1,"b":"é"}'
        assert Reply.tool_call("f", '{ "raw" : 1 ').calls[0].arguments == '{ "raw" : 1 '

    def test_tool_calls_accepts_tuples_and_call_ids(self) -> None:
        """Reply.tool_calls builds parallel calls from tuples with an optional id."""
        reply = Reply.tool_calls([("a", {}), ("b", {"x": 1}, "my-id")], text="hm")
        assert reply.calls == (ScriptedCall("a", "{}"), ScriptedCall("b", '{"x":1}', "my-id"))
        assert reply.content == "hm"

    def test_error_needs_an_error_status(self) -> None:
        """Reply.error refuses a status below 400 with a ScriptError."""
        with pytest.raises(ScriptError, match="status must be >= 400"):
            Reply.error(200)

    def test_script_error_is_a_flowproof_error(self) -> None:
        """A malformed reply raises an error the CLI can print."""
        with pytest.raises(FlowproofError, match="cut_after must be >= 0"):
            Reply.text("x", cut_after=-1)

    def test_from_dict_reads_every_kind(self) -> None:
        """Reply.from_dict reads text, tool calls, errors and fault options."""
        assert Reply.from_dict({"text": "hi", "cut_after": 2}) == Reply.text("hi", cut_after=2)
        assert Reply.from_dict({"tool_calls": [{"name": "f", "arguments": {"a": 1}, "id": "c1"}]}) == (
            Reply.tool_call("f", {"a": 1}, call_id="c1")
        )
        assert Reply.from_dict({"error": {"status": 429, "retry_after": 2}}).retry_after == 2

    def test_from_dict_names_the_bad_key(self) -> None:
        """An unknown key is reported with where it is."""
        with pytest.raises(ScriptError, match=r"replies\[1\]: unknown keys \['txt'\]"):
            script_from_data([{"text": "ok"}, {"txt": "typo"}])

    def test_from_dict_rejects_wrong_types(self) -> None:
        """A fault option of the wrong type is refused, not crashed on."""
        with pytest.raises(ScriptError, match="chunk_delay has the wrong type"):
            Reply.from_dict({"text": "x", "chunk_delay": "slow"})

    def test_load_script_reads_lanes(self, tmp_path: Path) -> None:
        """A script file with replies and lanes loads into a Script."""
        path = tmp_path / "s.json"
        path.write_text(json.dumps({"replies": [{"text": "a"}], "lanes": {"title": [{"text": "T"}]}}))
        script = load_script(path)
        assert script.replies == (Reply.text("a"),)
        assert script.lanes == {"title": (Reply.text("T"),)}

    def test_load_script_reports_invalid_json(self, tmp_path: Path) -> None:
        """A broken JSON file names the file in the error."""
        path = tmp_path / "broken.json"
        path.write_text("[{")
        with pytest.raises(ScriptError, match="broken.json: not valid JSON"):
            load_script(path)

