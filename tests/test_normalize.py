"""Tests for flowproof.normalize: identity, volatile rules, presets, portable paths, ids."""

from __future__ import annotations

import json
import re
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowproof.normalize import (
    PRESETS,
    Normalizer,
    VolatileTimeout,
    looks_like_per_run_id,
    placeholder,
    suggest_rule,
)
from flowproof.spec import volatile_refusal
from flowproof.spec.types import Location, VolatileRule

LOC = Location("flow.yaml", 3, 5)
HOME = "/home/casey"
CWD = "/home/casey/src/booking"


def rule(name: str, path: str, pattern: str | None = None) -> VolatileRule:
    return VolatileRule(
        name, path, tuple(path.split(".")), re.compile(pattern) if pattern else None, LOC
    )


def dumps(obj: object) -> bytes:
    return json.dumps(obj).encode()


def claude_body(user_id: str, cch: str, date: str, version: str = "2.1.197.a3f") -> bytes:
    return dumps(
        {
            "model": "claude-opus-4-8",
            "metadata": {"user_id": user_id},
            "system": [
                {
                    "type": "text",
                    "text": f"x-anthropic-billing-header: cc_version={version};"
                    f" cc_entrypoint=sdk-cli; cch={cch};",
                },
                {"type": "text", "text": "You are a Claude agent."},
            ],
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "text",
                            "text": f"<system-reminder># currentDate\nToday's date is {date}.\n"
                            "</system-reminder>",
                        },
                        {"type": "text", "text": "Run echo via Bash please."},
                    ],
                }
            ],
        }
    )


class TestIdentity:
    def test_no_rules_returns_same_bytes(self) -> None:
        """With nothing declared apply returns the very same bytes object."""
        body = b'{ "b": 1,  "a": "x" }'
        norm = Normalizer()
        assert norm.is_identity
        assert norm.apply(body) is body

    def test_no_rules_does_not_parse(self) -> None:
        """With nothing declared even invalid JSON passes through untouched."""
        body = b"\xff not json"
        assert Normalizer().apply(body) is body

    def test_rules_without_match_return_same_bytes(self) -> None:
        """Rules that match nothing keep the exact input bytes (no re-serialization)."""
        body = b'{"model": "gpt-4o",   "messages": []}'
        norm = Normalizer(PRESETS["claude-code"] + PRESETS["codex"])
        assert not norm.is_identity
        assert norm.apply(body) is body

    def test_paths_absent_from_body_skip_parsing(self) -> None:
        """With only cwd/home declared a body that does not mention them is not parsed."""
        body = b"\xff binary, not json"
        assert Normalizer(cwd=CWD, home=HOME).apply(body) is body

    def test_non_json_body_unchanged(self) -> None:
        """A body that is not JSON is returned unchanged even with rules."""
        body = b"data: hello /home/casey"
        assert Normalizer([rule("x", "a")], cwd=CWD, home=HOME).apply(body) is body

    @given(st.binary(max_size=200))
    def test_identity_on_any_bytes(self, body: bytes) -> None:
        """The empty normalizer is the identity on arbitrary bytes."""
        assert Normalizer().apply(body) == body


class TestRules:
    def test_whole_value_replaced(self) -> None:
        """A rule without a pattern replaces the whole value at its path."""
        out = Normalizer([rule("session", "meta.id")]).apply(dumps({"meta": {"id": 42}, "a": 1}))
        assert out == '{"meta":{"id":"«volatile:session»"},"a":1}'.encode()

    def test_pattern_replaces_only_the_span(self) -> None:
        """A rule with a pattern replaces each match inside the string."""
        norm = Normalizer([rule("hash", "s", r"(?<=h=)[0-9a-f]+")])
        assert json.loads(norm.apply(dumps({"s": "h=ab12; x h=ff00;"}))) == {
            "s": "h=«volatile:hash»; x h=«volatile:hash»;"
        }

    def test_pattern_on_non_string_is_ignored(self) -> None:
        """A pattern rule whose path holds a non-string changes nothing."""
        body = dumps({"s": [1, 2]})
        assert Normalizer([rule("x", "s", "1")]).apply(body) is body

    def test_star_covers_list_elements_and_mapping_values(self) -> None:
        """A * segment visits every list element and every mapping value."""
        body = dumps(
            {"input": [{"id": "a"}, {"id": "b"}, {"x": 1}], "m": {"p": {"id": 1}, "q": {"id": 2}}}
        )
        out = json.loads(Normalizer([rule("item", "input.*.id"), rule("m", "m.*.id")]).apply(body))
        assert out["input"] == [{"id": "«volatile:item»"}, {"id": "«volatile:item»"}, {"x": 1}]
        assert out["m"] == {"p": {"id": "«volatile:m»"}, "q": {"id": "«volatile:m»"}}

    def test_digit_segment_indexes_list_or_keys_mapping(self) -> None:
        """A digit segment indexes a list, is a key in a mapping, and out of range is no match."""
        body = dumps({"l": ["a", "b"], "d": {"1": "c"}})
        out = json.loads(
            Normalizer([rule("v", "l.1"), rule("w", "d.1"), rule("z", "l.9")]).apply(body)
        )
        assert out == {"l": ["a", "«volatile:v»"], "d": {"1": "«volatile:w»"}}

    def test_output_is_deterministic_compact_utf8(self) -> None:
        """The normalized body is compact JSON with non-ASCII kept as UTF-8."""
        out = Normalizer([rule("k", "k")]).apply('{"k": 1, "t": "café"}'.encode())
        assert out == '{"k":"«volatile:k»","t":"café"}'.encode()

    def test_idempotent(self) -> None:
        """Applying a normalizer twice gives the same bytes as once."""
        norm = Normalizer(PRESETS["claude-code"], cwd=CWD, home=HOME)
        once = norm.apply(claude_body("u1", "1a2b3", "2026-11-30"))
        assert norm.apply(once) == once

    def test_placeholder(self) -> None:
        """Placeholders are «volatile:<name>»."""
        assert placeholder("session_id") == "«volatile:session_id»"

    def test_a_pattern_that_backtracks_catastrophically_is_stopped_naming_the_rule(self) -> None:
        """`(a|aa)+$` against 34 `a` and a `!` would run for minutes in `re`, on the proxy's loop."""
        norm = Normalizer([rule("runaway", "messages.1.content", r"(a|aa)+$")])
        body = dumps({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "a" * 34 + "!"}]})
        started = time.monotonic()
        with pytest.raises(VolatileTimeout) as caught:
            norm.apply(body)
        assert time.monotonic() - started < 10
        message = str(caught.value)
        assert message.startswith("flow.yaml:3:5: volatile rule `runaway` gave up: /(a|aa)+$/")
        assert "35-character value at `messages.1.content`" in message

    def test_the_bounded_engine_replaces_as_re_does(self) -> None:
        """Lookarounds, flags and Unicode classes mean what they mean in `re`."""
        norm = Normalizer([rule("d", "s", r"(?i)(?<=date: )\w+-\d+")])
        assert json.loads(norm.apply(dumps({"s": "DATE: Déc-12 and date: x-1"}))) == {
            "s": "DATE: «volatile:d» and date: «volatile:d»"
        }


class TestPresets:
    def test_preset_names(self) -> None:
        """The presets for the agents flowproof knows exist and carry preset locations."""
        assert {"claude-code", "codex", "openai-agents"} <= set(PRESETS)
        for name, rules in PRESETS.items():
            assert rules
            assert all(r.location == Location(f"<preset {name}>", 0, 0) for r in rules)
            assert all(re.fullmatch(r"[a-z0-9_-]+", r.name) for r in rules), name

    def test_claude_code_runs_hash_equal(self) -> None:
        """Claude Code runs differing in session, cch and date normalize equal."""
        norm = Normalizer(PRESETS["claude-code"])
        a = claude_body('{"device_id":"aa","session_id":"1"}', "1a2b3", "2026-11-30")
        b = claude_body('{"device_id":"bb","session_id":"2"}', "9f8e7", "2026-12-01")
        assert a != b
        assert norm.apply(a) == norm.apply(b)
        text = norm.apply(a).decode()
        assert "cch=«volatile:cch»;" in text
        assert "Today's date is «volatile:current_date»." in text

    def test_claude_code_version_suffix_is_not_volatile(self) -> None:
        """cc_version's suffix repeats run after run, so a different one is a different request."""
        norm = Normalizer(PRESETS["claude-code"])
        a = claude_body("u", "1a2b3", "2026-11-30", "2.1.197.1ca")
        b = claude_body("u", "1a2b3", "2026-11-30", "2.1.197.e6a")
        assert norm.apply(a) != norm.apply(b)
        assert "cc_version=2.1.197.1ca;" in norm.apply(a).decode()

    def test_claude_code_project_dir_slug(self) -> None:
        """The memory path's project slug (the cwd with / as -) is a hole; HOME is «home»."""

        def body(home: str, slug: str) -> bytes:
            memory = f"memory at `{home}/.claude/projects/{slug}/memory/`. Write to it."
            return dumps({"system": [{"type": "text", "text": "x"}, {"type": "text", "text": memory}]})

        a = Normalizer(PRESETS["claude-code"], cwd="/builds/app", home="/root")
        b = Normalizer(PRESETS["claude-code"], cwd=CWD, home=HOME)
        left = a.apply(body("/root", "-builds-app"))
        assert left == b.apply(body(HOME, "-home-casey-src-booking"))
        assert "`«home»/.claude/projects/«volatile:project_dir»/memory/`. Write to it." in left.decode()
        # Only the slug between projects/ and /memory/: the sentence around it still counts.
        assert left != a.apply(body("/root", "-builds-app").replace(b"Write to it", b"Read it"))

    def test_claude_code_prompt_edit_still_differs(self) -> None:
        """An edited prompt still changes the normalized body under the preset."""
        norm = Normalizer(PRESETS["claude-code"])
        a = claude_body("u", "1a2b3", "2026-11-30")
        b = a.replace(b"Run echo via Bash please.", b"Run rm via Bash please.")
        assert norm.apply(a) != norm.apply(b)

    def test_claude_code_string_content_date(self) -> None:
        """The date rule also covers messages whose content is a plain string."""
        norm = Normalizer(PRESETS["claude-code"])
        body = dumps({"messages": [{"role": "user", "content": "Today's date is 2026-11-30. Hi"}]})
        assert b"Today's date is \xc2\xabvolatile:current_date\xc2\xbb. Hi" in norm.apply(body)

    def test_codex_runs_hash_equal(self) -> None:
        """Codex runs differing in cache key, metadata, item/chunk ids and date normalize equal."""

        def body(sid: str, item: str, chunk: str, date: str, wall: str) -> bytes:
            return dumps(
                {
                    "model": "gpt-6.2-sol",
                    "prompt_cache_key": sid,
                    "client_metadata": {"session_id": sid, "turn_id": item},
                    "input": [
                        {
                            "type": "message",
                            "role": "user",
                            "id": f"msg_{item}",
                            "content": [
                                {
                                    "type": "input_text",
                                    "text": f"<environment_context><current_date>{date}"
                                    "</current_date></environment_context>",
                                }
                            ],
                            "internal_chat_message_metadata_passthrough": {
                                "create_time": 1764460800.5 if sid == "s1" else 1764460900.1,
                                "turn_id": item,
                            },
                        },
                        {
                            "type": "function_call_output",
                            "id": f"fco_{item}",
                            "call_id": "call_1",
                            "output": f"Chunk ID: {chunk}\nWall time: {wall} seconds\n"
                            "flowproof-tool-ran",
                        },
                    ],
                }
            )

        norm = Normalizer(PRESETS["codex"])
        a = body("s1", "0190aaaa", "a1b2c3", "2026-11-30", "0.0123")
        b = body("s2", "0190bbbb", "ffee01", "2026-12-01", "0.0456")
        assert norm.apply(a) == norm.apply(b)
        assert b"flowproof-tool-ran" in norm.apply(a)

    def test_openai_agents_keeps_prefix(self) -> None:
        """The openai-agents rule hides the run id but keeps the agents-sdk prefix."""
        norm = Normalizer(PRESETS["openai-agents"])
        out = norm.apply(dumps({"prompt_cache_key": "agents-sdk:run:" + "ab12" * 8}))
        assert json.loads(out) == {"prompt_cache_key": "agents-sdk:run:«volatile:run_id»"}


class TestPortablePaths:
    def test_cwd_and_home_become_placeholders(self) -> None:
        """cwd wins over home (longest first) and other home paths become «home»."""
        norm = Normalizer(cwd=CWD, home=HOME)
        body = dumps({"s": f"cwd {CWD}/app.py, memory {HOME}/.claude/x, other /home/caseyx"})
        assert json.loads(norm.apply(body)) == {
            "s": "cwd «cwd»/app.py, memory «home»/.claude/x, other /home/caseyx"
        }

    def test_path_prefix_of_longer_name_is_kept(self) -> None:
        """A sibling directory that merely starts with cwd is not replaced."""
        norm = Normalizer(cwd=CWD)
        body = dumps({"s": f"{CWD}2/x and {CWD}-old and {CWD}."})
        assert json.loads(norm.apply(body)) == {"s": f"{CWD}2/x and {CWD}-old and «cwd»."}

    def test_keys_are_rewritten_too(self) -> None:
        """Paths used as mapping keys become placeholders, keeping key order."""
        norm = Normalizer(cwd=CWD)
        body = dumps({"z": 1, CWD: {"a": CWD}, "b": 2})
        assert norm.apply(body) == '{"z":1,"«cwd»":{"a":"«cwd»"},"b":2}'.encode()

    def test_restore_round_trips(self) -> None:
        """restore puts the run's paths back and portable takes them out again."""
        norm = Normalizer(cwd=CWD, home=HOME)
        recorded = 'data: {"text":"see «cwd»/a.py and «home»/notes"}\n\n'.encode()
        restored = norm.restore(recorded)
        assert restored == f'data: {{"text":"see {CWD}/a.py and {HOME}/notes"}}\n\n'.encode()
        assert norm.portable(restored) == recorded

    def test_restore_escapes_for_json(self) -> None:
        """A path with a backslash is restored in its JSON-escaped form."""
        norm = Normalizer(cwd="C:\\Users\\casey\\proj")
        restored = norm.restore('{"p":"«cwd»\\\\x"}'.encode())
        assert json.loads(restored) == {"p": "C:\\Users\\casey\\proj\\x"}

    def test_root_paths_are_ignored(self) -> None:
        """A cwd of / or an empty HOME would replace every slash, so it is ignored."""
        assert Normalizer(cwd="/", home="").is_identity

    def test_escaped_slashes_are_found(self) -> None:
        """A body that escapes slashes (\\/) is still normalized."""
        norm = Normalizer(cwd=CWD)
        body = b'{"p":"' + CWD.replace("/", "\\/").encode() + b'"}'
        assert json.loads(norm.apply(body)) == {"p": "«cwd»"}


class TestRefusal:
    def test_presets_pass_the_spec_refusal_rule(self) -> None:
        """Every preset rule is one the spec loader would accept."""
        for rules in PRESETS.values():
            for r in rules:
                assert volatile_refusal(r.segments, r.pattern is not None) is None, r.path

    def test_empty_matching_pattern_adds_no_holes(self) -> None:
        """A pattern that can match the empty string only replaces non-empty spans."""
        norm = Normalizer([rule("n", "s", "[0-9]*")])
        assert json.loads(norm.apply(dumps({"s": "ab12c"}))) == {"s": "ab«volatile:n»c"}


class TestPerRunIds:
    @pytest.mark.parametrize(
        ("recorded", "replayed", "kind"),
        [
            pytest.param(
                "session 3f2b8c1e-1d2a-4b7c-9e0f-123456789abc end",
                "session 9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d end",
                "a UUID",
                id="uuid",
            ),
            pytest.param(
                "msg_0190aaaa-bbbb-7ccc-8ddd-eeeeffff0000",
                "msg_0190aaaa-bbbb-7ccc-8ddd-eeeeffff0001",
                "a UUID",
                id="prefixed-uuid",
            ),
            pytest.param("cch=1a2b3;", "cch=9f8e7;", "a long hex id", id="hex"),
            pytest.param(
                "agents-sdk:run:" + "ab12" * 8,
                "agents-sdk:run:" + "cd34" * 8,
                "a long hex id",
                id="uuid-hex",
            ),
            pytest.param(
                "Today's date is 2026-11-30.",
                "Today's date is 2026-12-01.",
                "a timestamp",
                id="date",
            ),
            pytest.param(
                "at 2026-11-30T10:00:00Z", "at 2026-11-30T11:02:03.5+01:00", "a timestamp", id="iso"
            ),
            pytest.param('{"t":1764460800123}', '{"t":1764460999000}', "a timestamp", id="unix-ms"),
        ],
    )
    def test_detects_kind(self, recorded: str, replayed: str, kind: str) -> None:
        """Strings that differ only in one kind of per-run id are recognised."""
        assert looks_like_per_run_id(recorded, replayed) == kind

    @pytest.mark.parametrize(
        ("recorded", "replayed"),
        [
            pytest.param("same", "same", id="equal"),
            pytest.param("Book a flight", "Book a hotel", id="prose"),
            pytest.param("id 1a2b3 to Nairobi", "id 9f8e7 to Mombasa", id="id-plus-prose"),
            pytest.param("a facade", "a decade", id="hex-looking-words"),
        ],
    )
    def test_real_edits_are_not_ids(self, recorded: str, replayed: str) -> None:
        """A real edit, or no difference, is not reported as a per-run id."""
        assert looks_like_per_run_id(recorded, replayed) is None

    def test_suggest_rule(self) -> None:
        """The suggested rule names the field, keeps the path and gives the kind's pattern."""
        assert suggest_rule("metadata.session_id", "a UUID") == (
            "volatile:\n"
            "  - name: session_id\n"
            "    path: metadata.session_id\n"
            "    pattern: '[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}"
            "-[0-9a-fA-F]{12}'\n"
        )

    def test_suggested_pattern_covers_the_difference(self) -> None:
        """Applying the suggested pattern as a rule makes the two bodies normalize equal."""
        cases = {
            "a UUID": (
                "x 3f2b8c1e-1d2a-4b7c-9e0f-123456789abc",
                "x 9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d",
            ),
            "a long hex id": ("cch=1a2b3;", "cch=9f8e7;"),
            "a timestamp": ("on 2026-11-30T10:00:00Z", "on 2026-12-01T11:02:03Z"),
        }
        for kind, (old, new) in cases.items():
            assert looks_like_per_run_id(old, new) == kind
            a = dumps({"messages": [{"content": old}]})
            b = dumps({"messages": [{"content": new}]})
            pattern = suggest_rule("messages.0.content", kind).split("pattern: '")[1].split("'")[0]
            norm = Normalizer([rule("id", "messages.0.content", pattern)])
            assert norm.apply(a) == norm.apply(b), kind


# Text around embedded paths: anything but the placeholder guillemets, lone surrogates included.
_AROUND = st.text(st.characters(exclude_characters="«»", exclude_categories=()), max_size=8)
_NON_ASCII_HOME = "/home/jörg"
_NON_ASCII_CWD = "/home/jörg/src/böoking"


@st.composite
def _texts_with_paths(draw: st.DrawFn) -> str:
    """A string with the cwd/home paths (and siblings like «cwd»2, «cwd»-old) embedded."""
    parts = draw(st.lists(st.tuples(_AROUND, st.sampled_from(
        [CWD, HOME, _NON_ASCII_CWD, _NON_ASCII_HOME, CWD + "2", CWD + "-old", CWD + ".bak", HOME + "x"]
    )), max_size=4))
    return "".join(a + p for a, p in parts) + draw(_AROUND)


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | _texts_with_paths(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_texts_with_paths(), inner, max_size=3),
    max_leaves=8,
)


class TestPortableProperties:
    @given(value=_JSON_VALUES)
    def test_apply_then_restore_gives_the_body_back(self, value: object) -> None:
        """restore(apply(body)) parses to the original value for any JSON with embedded paths."""
        for norm in (Normalizer(cwd=CWD, home=HOME), Normalizer(cwd=_NON_ASCII_CWD, home=_NON_ASCII_HOME)):
            body = json.dumps(value).encode()
            assert json.loads(norm.restore(norm.apply(body))) == value

    @given(value=_JSON_VALUES, ensure_ascii=st.booleans(), escape_slashes=st.booleans())
    def test_portable_agrees_with_apply(self, value: object, ensure_ascii: bool, escape_slashes: bool) -> None:
        """A response made portable holds the same placeholders as the request normalization would."""
        for norm in (Normalizer(cwd=CWD, home=HOME), Normalizer(cwd=_NON_ASCII_CWD, home=_NON_ASCII_HOME)):
            raw = json.dumps(value, ensure_ascii=ensure_ascii)
            if escape_slashes:
                raw = raw.replace("/", "\\/")
            body = raw.encode("utf-8", "surrogatepass")
            assert json.loads(norm.portable(body)) == json.loads(norm.apply(body))

    @given(value=_JSON_VALUES)
    def test_sse_portable_then_restore_is_byte_identical(self, value: object) -> None:
        """An SSE stream of JSON events made portable and restored again is the same bytes."""
        norm = Normalizer(cwd=CWD, home=HOME)
        data = json.dumps(value, ensure_ascii=False)
        stream = f"event: delta\ndata: {data}\n\ndata: [DONE]\n\n".encode("utf-8", "surrogatepass")
        assert norm.restore(norm.portable(stream)) == stream

    def test_lone_surrogate_body_is_normalized(self) -> None:
        """A body with a lone \\ud83d escape (a JS agent's cut emoji) is normalized, not crashed on."""
        norm = Normalizer(cwd=CWD)
        body = b'{"s":"' + CWD.encode() + b'/a \\ud83d"}'
        assert json.loads(norm.apply(body)) == {"s": "«cwd»/a \ud83d"}

    def test_sibling_directory_in_a_response_is_kept(self) -> None:
        """A response path that merely starts with cwd stays as it is, as in requests."""
        norm = Normalizer(cwd=CWD)
        raw = f'data: {{"p":"{CWD}2/x {CWD}-old {CWD}/a"}}\n\n'.encode()
        assert norm.portable(raw) == f'data: {{"p":"{CWD}2/x {CWD}-old «cwd»/a"}}\n\n'.encode()

    def test_ascii_escaped_path_in_a_response_is_found(self) -> None:
        """A response that escapes non-ASCII (\\u00f6) still has its home made portable."""
        norm = Normalizer(home=_NON_ASCII_HOME)
        raw = json.dumps({"p": _NON_ASCII_HOME + "/notes"}).encode()
        assert json.loads(norm.portable(raw)) == {"p": "«home»/notes"}


class TestSecrets:
    """A declared secret is masked before hashing and in recorded responses, and put back at replay."""

    TOKEN = "cust-tok-9f2e41a7"
    NORMALIZER = Normalizer(secrets=[(TOKEN, "«secret:CUSTOMER_TOKEN»")])

    def test_masked_in_a_json_body_so_the_hash_is_the_same_for_any_value(self) -> None:
        body = json.dumps({"messages": [{"role": "user", "content": f"my token is {self.TOKEN}"}]}).encode()
        masked = self.NORMALIZER.apply(body)
        assert self.TOKEN.encode() not in masked and "«secret:CUSTOMER_TOKEN»".encode() in masked
        other = Normalizer(secrets=[("another-tok-123", "«secret:CUSTOMER_TOKEN»")])
        assert other.apply(body.replace(self.TOKEN.encode(), b"another-tok-123")) == masked

    def test_masked_in_a_body_that_is_not_json_and_percent_encoded(self) -> None:
        assert self.NORMALIZER.apply(f"t={self.TOKEN}".encode()) == "t=«secret:CUSTOMER_TOKEN»".encode()
        spaced = Normalizer(secrets=[("a secret+value", "«secret:S»")])
        body = json.dumps({"url": "https://x.test/?q=a%20secret%2Bvalue"}).encode()
        assert b"secret%2B" not in spaced.apply(body)

    def test_a_body_without_it_is_untouched(self) -> None:
        body = b'{"a": "b"}'
        assert self.NORMALIZER.apply(body) is body
        assert not self.NORMALIZER.is_identity

    def test_responses_round_trip(self) -> None:
        recorded = f'data: {{"text": "your token {self.TOKEN}"}}\n\n'.encode()
        portable = self.NORMALIZER.portable(recorded)
        assert self.TOKEN.encode() not in portable
        assert self.NORMALIZER.restore(portable) == recorded

    def test_a_json_escaped_value_is_masked_and_restored_escaped(self) -> None:
        value = 'tok"en\\value'
        normalizer = Normalizer(secrets=[(value, "«secret:S»")])
        raw = json.dumps({"t": value}).encode()
        assert normalizer.portable(raw) == b'{"t": "\xc2\xabsecret:S\xc2\xbb"}'
        assert json.loads(normalizer.restore(normalizer.portable(raw))) == {"t": value}

    def test_mask_text(self) -> None:
        masked = self.NORMALIZER.mask_text(f"https://x.test/?k={self.TOKEN}")
        assert masked == "https://x.test/?k=«secret:CUSTOMER_TOKEN»"
