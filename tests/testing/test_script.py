"""Tests for flowproof.testing.script: replies, script files and their errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flowproof.errors import FlowproofError
from flowproof.testing import (
    FakeModelServer,
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



class TestNewOptions:
    def test_from_dict_reads_the_timing_and_finish_options(self) -> None:
        """first_byte_delay, end_delay and finish are script keys like the others."""
        reply = Reply.from_dict({"text": "x", "first_byte_delay": 2, "end_delay": 0.5, "finish": "length"})
        assert (reply.first_byte_delay, reply.end_delay, reply.finish) == (2, 0.5, "length")
        assert reply.finish_reason == "length"

    @pytest.mark.parametrize(("options", "message"), [
        ({"end_delay": -1}, "delays must be >= 0"),
        ({"first_byte_delay": -0.1}, "delays must be >= 0"),
        ({"finish": "done"}, "finish must be one of"),
        ({"max_tokens": True, "finish": "stop"}, "max_tokens ends the turn"),
    ])
    def test_bad_options_are_refused(self, options: dict[str, Any], message: str) -> None:
        """Each new option is checked when the reply is made."""
        with pytest.raises(ScriptError, match=message):
            Reply.text("x", **options)

    def test_finish_reason_defaults_from_the_content(self) -> None:
        """Without finish, a tool call ends with tool_calls, max_tokens with length, else stop."""
        assert Reply.tool_call("f", {}).finish_reason == "tool_calls"
        assert Reply.text("x", max_tokens=True).finish_reason == "length"
        assert Reply.text("x").finish_reason == "stop"

    def test_end_delay_is_checked_on_the_server_too(self) -> None:
        """A negative server end_delay is refused."""
        with pytest.raises(ScriptError, match="end_delay must be >= 0"):
            FakeModelServer(end_delay=-1)


class TestCompareKnobs:
    def test_with_argument_changes_one_value_and_keeps_the_rest(self) -> None:
        """with_argument sets one (dotted) key of one call; order, name, id and other calls stay."""
        reply = Reply.tool_calls([("book", {"trip": {"to": "NBO", "from": "LHR"}, "seats": 2}, "c1"), ("n", {})])
        changed = reply.with_argument("trip.to", "MBA")
        assert changed.calls[0] == ScriptedCall("book", '{"trip":{"to":"MBA","from":"LHR"},"seats":2}', "c1")
        assert changed.calls[1] == reply.calls[1] and reply.calls[0].arguments.count("NBO") == 1
        assert reply.with_argument("seats", 3, call=0).calls[0].arguments.endswith('"seats":3}')

    @pytest.mark.parametrize(("call", "key", "message"), [
        (1, "seats", "no call 1"), (0, "seats.x", "'seats' is not an object")])
    def test_with_argument_names_what_is_wrong(self, call: int, key: str, message: str) -> None:
        """A missing call or a path through a non-object is refused."""
        with pytest.raises(ScriptError, match=message):
            Reply.tool_call("book", {"seats": 2}).with_argument(key, 1, call=call)

    def test_with_argument_needs_object_arguments(self) -> None:
        """Raw non-JSON arguments cannot be edited by key."""
        with pytest.raises(ScriptError, match="no JSON object arguments"):
            Reply.tool_call("f", "raw").with_argument("a", 1)

    def test_with_finish_changes_only_the_finish(self) -> None:
        """with_finish keeps the content and calls."""
        reply = Reply.tool_call("f", {"a": 1}, text="t")
        assert reply.with_finish("length").finish_reason == "length"
        assert reply.with_finish("stop").calls == reply.calls
        assert Reply.text("x", max_tokens=True).with_finish("stop").max_tokens is False

    def test_reworded_changes_the_words(self) -> None:
        """reworded gives other words; the same words in another case or spacing are refused."""
        assert Reply.text("Booked.").reworded().content == "In other words: Booked."
        assert Reply.text("Booked.").reworded("Reserved.").content == "Reserved."
        with pytest.raises(ScriptError, match="same words"):
            Reply.text("Booked  it").reworded("Booked it")
