from __future__ import annotations

import copy
import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from flowproof.cassette import Cassette, RecordedRequest, RecordedResponse, RecordedTurn
from flowproof.divergence import (
    ABSENT,
    MAX_FIELDS,
    Divergence,
    FieldChange,
    diff_fields,
    envelope_changes,
    explain_miss,
    format_pair,
    format_value,
)
from flowproof.spec.paths import resolve_path
from flowproof.turns import RequestView

SYSTEM = "You are a booking assistant. Always confirm before booking."
TOOL = {"type": "function", "function": {"name": "search_flights", "parameters": {"type": "object"}}}


def body(
    system: str = SYSTEM,
    model: str = "gpt-4o",
    arguments: str = '{"flight":{"id":"KQ311"},"seats":1}',
    tools: list | None = None,
) -> dict:
    return {
        "model": model,
        "messages": [
            {"role": "system", "content": system},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "book", "arguments": arguments}}
                ],
            },
        ],
        "tools": [TOOL] if tools is None else tools,
    }


def view_of(b: dict) -> RequestView:
    """A RequestView built by hand, the way the openai-chat codec would (no codec dependency)."""
    msgs = b["messages"]
    return RequestView(
        provider="openai-chat",
        model=b.get("model"),
        system="\n".join(m["content"] for m in msgs if m["role"] == "system"),
        tools=tuple(t["function"]["name"] for t in b.get("tools", [])),
        roles=tuple(m["role"] for m in msgs),
        tool_results=(),
        stream=False,
        text_size=len(json.dumps(b)),
    )


def rec_turn(index: int, b: dict) -> RecordedTurn:
    return RecordedTurn(
        index=index,
        provider="openai-chat",
        request=RecordedRequest("POST", "https://api.openai.com/v1/chat/completions", {}, f"{index:064x}", b),
        response=RecordedResponse(200, {}, body={}),
    )


def views(turn: RecordedTurn) -> RequestView:
    return view_of(turn.request.body)


def explain(recorded: list[dict], replayed: dict, consumed=(), number: int = 3) -> Divergence:
    cassette = Cassette(tuple(rec_turn(i, b) for i, b in enumerate(recorded)))
    return explain_miss(replayed, view_of(replayed), cassette, set(consumed), views, request_number=number)


CMD = "flowproof-run booking.flow.yaml --record"


class TestExplainMissReports:
    def test_one_word_system_prompt_edit(self):
        """A one-word system prompt edit names messages.0.content with both values."""
        edited = body(system=SYSTEM.replace("Always", "Never"))
        d = explain([body()], edited, number=1)
        assert d.render(CMD) == "\n".join(
            [
                "request 1 matches no recorded turn; closest is turn 0 (the closest unconsumed turn: "
                "same API, model, tools and depth; none shares this request's system prompt)",
                '- messages.0.content: recorded "You are a booking assistant. Always confirm before booking.", '
                'replayed "You are a booking assistant. Never confirm before booking."',
                f"If this change is intended, re-record the cassette: {CMD}",
            ]
        )

    def test_changed_tool_argument_is_diffed_inside_the_json(self):
        """A changed tool-call argument reads as the path inside the arguments with both values."""
        d = explain([body()], body(arguments='{"flight":{"id":"KQ999"},"seats":1}'))
        assert d.render(CMD).splitlines() == [
            "request 3 matches no recorded turn; closest is turn 0 (same conversation)",
            "- messages.1.tool_calls.0.function.arguments → flight.id: recorded KQ311, replayed KQ999",
            f"If this change is intended, re-record the cassette: {CMD}",
        ]
        assert d.fields == (
            FieldChange("messages.1.tool_calls.0.function.arguments", "KQ311", "KQ999", inner="flight.id"),
        )

    def test_added_tool_is_one_envelope_line(self):
        """An added tool gives the one-line envelope message before any field change."""
        refund = {"type": "function", "function": {"name": "refund", "parameters": {"type": "object"}}}
        d = explain([body()], body(tools=[TOOL, refund]))
        lines = d.render(CMD).splitlines()
        assert lines[1] == "- you added a tool: refund"
        assert d.envelope == ("you added a tool: refund",)
        assert lines[2].startswith("- tools.1: recorded (absent), replayed {")

    def test_removed_tool_and_model_change(self):
        """A removed tool and a changed model are envelope lines, and the model is not repeated as a field."""
        d = explain([body()], body(model="gpt-4.1", tools=[]))
        assert d.envelope == ("model: recorded gpt-4o, replayed gpt-4.1", "you removed a tool: search_flights")
        assert [f.path for f in d.fields] == ["tools.0"]

    def test_non_json_arguments_show_the_whole_payload(self):
        """When either side's arguments are not valid JSON the whole payload is shown."""
        d = explain([body()], body(arguments='{"flight":{"id":"KQ999"'))
        assert d.render(CMD).splitlines()[1] == (
            "- messages.1.tool_calls.0.function.arguments: not valid JSON on one side or both, "
            'so the whole payload: recorded "{\\"flight\\":{\\"id\\":\\"KQ311\\"},\\"seats\\":1}", '
            'replayed "{\\"flight\\":{\\"id\\":\\"KQ999\\""'
        )
        assert d.fields[0].whole

    def test_roles_sequence_change(self):
        """A changed message role sequence is reported as an envelope line."""
        replayed = body()
        replayed["messages"].append({"role": "tool", "tool_call_id": "call_1", "content": "ok"})
        d = explain([body()], replayed)
        assert d.envelope == ("message roles changed: recorded system, assistant; replayed system, assistant, tool",)
        assert d.fields[0].render() == (
            'messages.2: recorded (absent), replayed {"role":"tool","tool_call_id":"call_1","content":"ok"}'
        )

    def test_same_json_different_bytes_is_said(self):
        """Bodies equal once parsed get a note that only bytes (key order, spacing) moved."""
        d = explain([body()], body())
        assert d.fields == () and d.envelope == ()
        assert "the parsed bodies are equal" in d.summary()


class TestCandidate:
    def test_prefers_same_conversation_over_earlier_turn(self):
        """The candidate is the earliest unconsumed turn with the same system prompt."""
        side = body(system="Name this session.")
        d = explain([side, body(), body()], body(arguments='{"x":1}'))
        assert d.closest_index == 1
        assert d.note == "same conversation"

    def test_skips_consumed_turns(self):
        """Consumed turns are never chosen as the candidate."""
        d = explain([body(), body()], body(arguments='{"x":1}'), consumed={0})
        assert d.closest_index == 1

    def test_without_a_turn_of_the_same_conversation_the_closest_shape_is_chosen(self):
        """No turn shares the system prompt: the unconsumed turn of the same API, model, tools
        and depth is the candidate, and the note says what it shares."""
        d = explain([body(system="A"), body(system="B")], body(system="C"), consumed={0})
        assert d.closest_index == 1
        assert d.note == (
            "the closest unconsumed turn: same API, model, tools and depth; "
            "none shares this request's system prompt"
        )

    def test_no_turn_left_is_an_extra_call(self):
        """When every turn was consumed the request is an extra call with no candidate."""
        d = explain([body()], body(system="C"), consumed={0}, number=2)
        assert d.kind == "extra" and d.closest_index is None
        assert d.render(CMD).splitlines() == [
            "request 2 matches no recorded turn, and every recorded turn was already served: "
            "the agent made more calls than recorded",
            f"If the extra call is intended, re-record the cassette: {CMD}",
        ]

    def test_without_views_compares_fields_only(self):
        """Without request views the earliest unconsumed turn is used and no envelope is reported."""
        cassette = Cassette((rec_turn(0, body()),))
        d = explain_miss(body(model="gpt-4.1"), None, cassette, set())
        assert d.closest_index == 0 and d.envelope == ()
        assert d.fields == (FieldChange("model", "gpt-4o", "gpt-4.1"),)
        assert d.summary() == (
            "a request matches no recorded turn; closest is turn 0 (the closest unconsumed turn: same tools and depth)"
        )

    def test_a_failing_view_function_only_drops_the_envelope(self):
        """A views callable that raises degrades the report instead of failing it."""

        def broken(turn):
            raise RuntimeError("no codec")

        cassette = Cassette((rec_turn(0, body()),))
        d = explain_miss(body(model="x"), view_of(body(model="x")), cassette, set(), broken)
        assert d.closest_index == 0 and d.envelope == ()
        assert d.fields[0].path == "model"


TITLE = {"model": "gpt-4o-mini", "messages": [
    {"role": "system", "content": "Write a five-word title for this conversation."},
    {"role": "user", "content": "Book me a flight to Nairobi"}]}


def main_call(system: str = SYSTEM, *more: dict) -> dict:
    return {"model": "gpt-4o", "tools": [TOOL], "messages": [
        {"role": "system", "content": system}, {"role": "user", "content": "Book me a flight to Nairobi"}, *more]}


class TestClosestByWhatItShares:
    def test_a_system_prompt_edit_is_explained_against_its_own_call_not_the_concurrent_title_call(self):
        """The title call was recorded first (it is the earliest unconsumed turn), yet the main
        call shares the request's API, model, tools and depth: the edited word is named."""
        edited = main_call(SYSTEM.replace("Always", "Never"))
        for title_model in ("gpt-4o-mini", "gpt-4o"):  # Claude Code titles with its main model too
            d = explain([{**TITLE, "model": title_model}, main_call()], edited, number=1)
            assert d.closest_index == 1
            assert d.fields == (FieldChange("messages.0.content", SYSTEM, SYSTEM.replace("Always", "Never")),)

    def test_the_model_outranks_the_tools_and_the_depth(self):
        other_model = {**main_call(), "model": "gpt-4.1", "tools": []}
        d = explain([main_call(), other_model], {**main_call("x"), "model": "gpt-4.1"})
        assert d.closest_index == 1

    def test_the_depth_picks_the_turn_at_the_request_s_place_in_the_conversation(self):
        step = {"role": "assistant", "content": "Searching."}
        recorded = [main_call(), main_call(SYSTEM, step, {"role": "user", "content": "KQ311 please"})]
        d = explain(recorded, main_call("edited", step, {"role": "user", "content": "KQ311 please"}))
        assert d.closest_index == 1 and [f.path for f in d.fields] == ["messages.0.content"]

    def test_among_equal_shapes_the_most_shared_text_wins(self):
        long = "Read the policy first. " * 40
        recorded = [main_call("Short system prompt."), main_call(long + "Then book.")]
        d = explain(recorded, main_call(long + "Then book!"))
        assert d.closest_index == 1
        assert d.note.startswith("the closest unconsumed turn: same API, model, tools and depth")

    def test_only_the_request_and_the_chosen_turn_are_viewed(self):
        """Ranking 500 turns builds no view of them: the report views the one it chose."""
        viewed: list[int] = []

        def counting(turn: RecordedTurn) -> RequestView:
            viewed.append(turn.index)
            return view_of(turn.request.body)

        recorded = [main_call(f"thread {i}") for i in range(499)] + [main_call()]
        cassette = Cassette(tuple(rec_turn(i, b) for i, b in enumerate(recorded)))
        edited = main_call(SYSTEM + " Be brief.")
        d = explain_miss(edited, view_of(edited), cassette, set(), counting, request_number=1)
        assert viewed == [d.closest_index] == [499]

    @given(st.sets(st.integers(0, 5)), st.integers(0, 5))
    def test_never_a_served_turn(self, consumed: set[int], target: int):
        recorded = [main_call(f"s{i}") for i in range(6)]
        d = explain(recorded, main_call(f"s{target}", {"role": "user", "content": "more"}), consumed=consumed)
        if len(consumed) == 6:
            assert d.kind == "extra"
        else:
            assert d.closest_index not in consumed


class TestFieldDiff:
    def test_paths_use_dotted_syntax(self):
        """deepdiff paths are converted to the spec's dotted syntax, in body order."""
        changes = diff_fields(
            {"a": {"b": [1, {"c": "x"}]}, "gone": 1},
            {"a": {"b": [1, {"c": "y", "d": True}]}, "new": None},
        )
        assert [(c.path, c.recorded, c.replayed) for c in changes] == [
            ("a.b.1.c", "x", "y"),
            ("a.b.1.d", ABSENT, True),
            ("gone", 1, ABSENT),
            ("new", ABSENT, None),
        ]

    def test_json_string_fields_are_diffed_inside(self):
        """Any string that is a JSON object on both sides is diffed inside, like tool results."""
        changes = diff_fields({"content": '{"booking":"B-1"}'}, {"content": '{"booking":"B-2"}'})
        assert changes == [FieldChange("content", "B-1", "B-2", inner="booking")]

    def test_reordered_argument_keys_show_both_raw_strings(self):
        """Arguments equal as JSON but with moved keys show both raw strings: the bytes are pinned."""
        changes = diff_fields({"arguments": '{"a":1,"b":2}'}, {"arguments": '{"b":2,"a":1}'})
        assert changes == [FieldChange("arguments", '{"a":1,"b":2}', '{"b":2,"a":1}')]

    def test_plain_strings_that_are_not_arguments_are_not_whole(self):
        """A non-JSON string outside tool arguments is an ordinary trimmed change."""
        changes = diff_fields({"content": "{oops"}, {"content": "{oopsie"})
        assert changes == [FieldChange("content", "{oops", "{oopsie")]

    def test_long_strings_are_trimmed_around_the_first_difference(self):
        """Long values are cut to a window around where they first differ."""
        rec = "x" * 200 + " alpha " + "y" * 200
        rep = "x" * 200 + " omega " + "y" * 200
        line = FieldChange("system", rec, rep).render()
        assert line.startswith('system: recorded "…xxx')
        assert ' alpha yyy' in line and line.endswith('yyy…"')
        assert "alpha" in line and "omega" in line
        assert len(line) < 220

    def test_values_are_shown_short_and_unambiguous(self):
        """Simple strings are bare; strings that read as other types, and non-strings, are JSON."""
        assert format_value("KQ311") == "KQ311"
        assert format_value("311") == '"311"'
        assert format_value(311) == "311"
        assert format_value("") == '""'
        assert format_value(None) == "null"
        assert format_value(ABSENT) == "(absent)"
        assert format_value("a" * 200).endswith("…") and len(format_value("a" * 200)) == 80

    def test_many_changes_are_capped(self):
        """A report lists at most MAX_FIELDS changes and then says how many more."""
        rec = {f"k{i:02}": i for i in range(20)}
        rep = {f"k{i:02}": i + 1 for i in range(20)}
        cassette = Cassette((rec_turn(0, rec),))
        text = explain_miss(rep, None, cassette, set()).render(CMD)
        bullets = [line for line in text.splitlines() if line.startswith("- ")]
        assert len(bullets) == MAX_FIELDS + 1
        assert bullets[-1] == f"- and {20 - MAX_FIELDS} more field changes"


class TestEnvelope:
    def test_tool_order_change(self):
        """Reordered tools with the same names are reported as an order change."""
        a = RequestView("openai-chat", "m", "", ("a", "b"), ("user",), (), False, 0)
        b = RequestView("openai-chat", "m", "", ("b", "a"), ("user",), (), False, 0)
        assert envelope_changes(a, b) == ["tool order changed: recorded a, b; replayed b, a"]

    def test_several_added_tools(self):
        """Several added tools are named together in one line."""
        a = RequestView("openai-chat", "m", "", (), ("user",), (), False, 0)
        b = RequestView("openai-chat", "m", "", ("x", "y"), ("user",), (), False, 0)
        assert envelope_changes(a, b) == ["you added tools: x, y"]

    def test_other_side_is_named_by_the_caller(self):
        """Compare names the side it sets against the recording "live", never "replayed"."""
        a = RequestView("openai-chat", "m1", "", ("a", "b"), ("user",), (), False, 0)
        b = RequestView("openai-chat", "m2", "", ("b", "a"), ("user", "tool"), (), False, 0)
        assert envelope_changes(a, b, other="live") == [
            "model: recorded m1, live m2",
            "tool order changed: recorded a, b; live b, a",
            "message roles changed: recorded user; live user, tool",
        ]


class TestFormatPair:
    def test_long_values_are_cut_around_their_first_difference(self):
        """Both sides show the differing part, not two identical openings."""
        rec, live = format_pair("x" * 200 + "KQ311", "x" * 200 + "KQ999")
        assert rec.endswith('xKQ311"') and live.endswith('xKQ999"')

    def test_absent_side(self):
        """An absent side reads (absent)."""
        assert format_pair(ABSENT, 3) == ("(absent)", "3")


class TestPerRunHint:
    def test_uuid_only_difference_suggests_a_volatile_rule(self):
        """When only a UUID differs the hint says so and shows the rule that would cover it."""
        rec = {"metadata": {"user_id": "session 0b0c9a4e-5f3a-4c1e-9a1b-3f2d6c7e8a90"}}
        rep = {"metadata": {"user_id": "session 7d1e2f3a-4b5c-4d6e-8f70-112233445566"}}
        d = explain_miss(rep, None, Cassette((rec_turn(0, rec),)), set())
        assert d.hint is not None
        assert d.hint.startswith("hint: every difference looks like a per-run id (a UUID at metadata.user_id)")
        assert "path: metadata.user_id" in d.hint
        assert d.hint in d.render(CMD)

    def test_real_edit_gets_no_hint(self):
        """A difference that is not a per-run id gets no volatile hint."""
        d = explain_miss({"a": "booked"}, None, Cassette((rec_turn(0, {"a": "cancelled"}),)), set())
        assert d.hint is None


class TestDivergenceData:
    def test_to_json_is_serializable_and_complete(self):
        """to_json gives every field in JSON-ready form, leaving absent sides out."""
        d = explain([body()], body(arguments='{"flight":{"id":"KQ999"},"seats":1,"x":2}'))
        data = json.loads(json.dumps(d.to_json()))
        assert data["kind"] == "unmatched"
        assert data["request_number"] == 3
        assert data["closest_index"] == 0
        assert data["fields"] == [
            {"path": "messages.1.tool_calls.0.function.arguments", "inner": "flight.id",
             "recorded": "KQ311", "replayed": "KQ999"},
            {"path": "messages.1.tool_calls.0.function.arguments", "inner": "x", "replayed": 2},
        ]

    def test_from_json_reads_back_what_to_json_wrote(self):
        """A divergence that crossed the event log as JSON is the same divergence, and renders
        the same report (an absent side stays absent, not null)."""
        d = explain([body()], body(arguments='{"flight":{"id":"KQ999"},"seats":1,"x":2}'))
        back = Divergence.from_json(json.loads(json.dumps(d.to_json())))
        assert back == d and back.render(CMD) == d.render(CMD)
        whole = Divergence("extra", 2, 0, envelope=("model: recorded a, replayed b",),
                           fields=(FieldChange("p", "{", "}", whole=True),), note="n", hint="h")
        assert Divergence.from_json(whole.to_json()) == whole

    @given(st.sampled_from(["unmatched", "extra", "missing", "after-failure"]),
           st.none() | st.integers(0, 99), st.none() | st.text(max_size=20))
    def test_from_json_round_trips_any_divergence(self, kind, closest, note):
        d = Divergence(kind, 1, closest, fields=(FieldChange("a.b", ABSENT, note),), note=note, hint=note)
        assert Divergence.from_json(json.loads(json.dumps(d.to_json()))) == d

    def test_from_json_refuses_what_is_not_a_divergence(self):
        with pytest.raises(ValueError, match="not a divergence kind"):
            Divergence.from_json({"kind": "drift"})
        with pytest.raises(KeyError):
            Divergence.from_json({})

    def test_explain_does_not_mutate_inputs(self):
        """explain_miss leaves the replayed body and the cassette bodies untouched."""
        replayed = body(arguments='{"x":1}')
        snapshot = copy.deepcopy(replayed)
        explain([body()], replayed)
        assert replayed == snapshot

    def test_after_failure_and_missing_summaries(self):
        """after-failure and missing divergences render their notes as the first line."""
        after = Divergence("after-failure", 5, None, note="the replay already diverged at request 2")
        assert after.render(CMD).splitlines() == [
            "request 5 was not matched: the replay already diverged at request 2",
            "Fix the first divergence; the requests after it follow from it.",
        ]
        missing = Divergence("missing", None, 4, note="1 recorded turn was never requested: turn 4")
        assert missing.render(CMD).splitlines()[-1] == (
            f"If the agent now makes fewer calls on purpose, re-record the cassette: {CMD}"
        )


class TestFieldDiffEdges:
    def test_nan_on_both_sides_is_not_a_change(self):
        """NaN, which Python's json accepts, is not reported as changed against itself."""
        changes = diff_fields({"t": float("nan"), "n": 1}, {"t": float("nan"), "n": 2})
        assert [c.render() for c in changes] == ["n: recorded 1, replayed 2"]

    def test_json_scalar_arguments_are_not_called_invalid(self):
        """Arguments that are valid JSON scalars show both strings without the not-valid-JSON claim."""
        (change,) = diff_fields({"arguments": "5"}, {"arguments": "6"})
        assert not change.whole
        assert change.render() == 'arguments: recorded "5", replayed "6"'

    def test_items_paired_at_different_indices_are_named_on_each_side(self):
        """A value deepdiff pairs across indices is shown removed at one and added at the other."""
        changes = diff_fields([False, None, None, None], [None, None, False])
        assert [(c.path, c.recorded, c.replayed) for c in changes] == [
            ("0", False, ABSENT), ("2", ABSENT, False), ("3", None, ABSENT)
        ]

    def test_root_type_change_names_the_body(self):
        """A body whose root changed type is named as the body, not an empty path."""
        (change,) = diff_fields({"a": 1}, [1])
        assert change.render() == 'the body: recorded {"a":1}, replayed [1]'


_DIFF_KEYS = st.text(alphabet=st.characters(blacklist_characters="."), min_size=1, max_size=6) | (
    st.sampled_from(["root", "root['a']", "x[0]", "[", "]", "'", "0", "a b"])
)
_DIFF_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.text(min_size=100, max_size=3000)
)
_DIFF_JSON = st.recursive(
    _DIFF_LEAVES,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(_DIFF_KEYS, c, max_size=4),
    max_leaves=20,
)


class TestDiffProperties:
    @settings(max_examples=200, deadline=None)
    @given(_DIFF_JSON, _DIFF_JSON)
    # deepdiff pairs recorded[3] with replayed[2]: one path cannot name both sides.
    @example(recorded=[False, None, None, None], replayed=[None, None, False])
    def test_paths_are_dotted_and_resolve_on_their_side(self, recorded, replayed):
        """Every changed path is the spec's dotted path to the value shown, never a deepdiff root[...]."""
        for change in diff_fields(recorded, replayed):
            segments = tuple(change.path.split(".")) if change.path else ()
            for side, shown in ((recorded, change.recorded), (replayed, change.replayed)):
                if shown is ABSENT:
                    # Added or removed: the container holding it exists on this side.
                    assert segments and resolve_path(side, segments[:-1])[0]
                elif segments:
                    assert resolve_path(side, segments) == (True, shown)
                else:
                    assert side == shown

    @settings(max_examples=150, deadline=None)
    @given(_DIFF_JSON, _DIFF_JSON)
    def test_explain_miss_renders_bounded(self, recorded, replayed):
        """A report on arbitrary bodies renders, serializes, and stays a bounded size."""
        cassette = Cassette((rec_turn(0, {"body": recorded}),))
        divergence = explain_miss({"body": replayed}, None, cassette, set(), request_number=1)
        rendered = divergence.render(CMD)
        json.dumps(divergence.to_json())
        assert rendered.splitlines()[0].startswith("request 1 matches no recorded turn")
        assert len(rendered) < (MAX_FIELDS + 1) * 400 + 500
