"""Tests for the prose assertion lines: tool calls with where clauses, and reply lines."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowproof.errors import SpecError
from flowproof.spec import Location, Matcher, parse_tool_line
from flowproof.spec.clauses import compile_pattern, parse_reply_line, suggest
from flowproof.spec.patterns import BoundedPattern

LOC = Location("f.flow.yaml", 3, 10)


def one_clause(text):
    tool, clauses = parse_tool_line(text, LOC)
    assert len(clauses) == 1
    return tool, clauses[0]


def error_lines(text, **kwargs):
    with pytest.raises(SpecError) as info:
        parse_tool_line(text, LOC, **kwargs)
    return [str(p) for p in info.value.problems]


class TestToolName:
    def test_bare_tool(self):
        """A line with only a tool name has no clauses."""
        assert parse_tool_line("create_booking", LOC) == ("create_booking", ())

    def test_surrounding_whitespace(self):
        """Whitespace around the line is ignored."""
        assert parse_tool_line("  search  ", LOC) == ("search", ())

    def test_mcp_style_name(self):
        """Tool names may hold any non-space characters."""
        assert parse_tool_line("mcp__exports__run", LOC)[0] == "mcp__exports__run"

    def test_empty_line(self):
        """An empty line is an error that asks for a tool name."""
        assert error_lines("") == [
            "f.flow.yaml:3:10: `assert_tool_call` needs a tool name — write "
            "`assert_tool_call: <tool> where <path> <matcher> <value>`"
        ]

    def test_keyword_in_message(self):
        """The step keyword given appears in the message."""
        assert "`assert_no_tool_call` needs a tool name" in error_lines(
            " ", keyword="assert_no_tool_call")[0]

    def test_starts_with_where(self):
        """A line starting with `where` asks for the tool first."""
        assert error_lines("where a equals b")[0].startswith(
            "f.flow.yaml:3:10: the line starts with `where`")

    def test_missing_where(self):
        """A second word other than `where` is an error at its column."""
        assert error_lines("create booking")[0] == (
            "f.flow.yaml:3:17: expected `where` after the tool name, found `booking` — "
            "a tool name has no spaces; write `<tool> where <path> <matcher> <value>`"
        )

    def test_misspelt_where(self):
        """A near-miss of `where` gets a did-you-mean."""
        assert "did you mean `where`?" in error_lines("book wher a exists")[0]


class TestMatchers:
    def test_equals(self):
        """`equals` parses to EQUALS with its value."""
        tool, clause = one_clause("create_booking where flight.id equals KQ311")
        assert tool == "create_booking"
        assert (clause.path, clause.segments) == ("flight.id", ("flight", "id"))
        assert (clause.matcher, clause.value, clause.pattern) == (Matcher.EQUALS, "KQ311", None)

    def test_is_alias(self):
        """`is` is an alias of equals."""
        _, clause = one_clause("t where status is approved")
        assert (clause.matcher, clause.value) == (Matcher.EQUALS, "approved")

    def test_contains(self):
        """`contains` parses to CONTAINS."""
        _, clause = one_clause("t where passenger.name contains Casey")
        assert (clause.matcher, clause.value) == (Matcher.CONTAINS, "Casey")

    def test_matches_compiles(self):
        """`matches` compiles its pattern at parse time."""
        _, clause = one_clause("book_seat where seat matches [0-9]+[A-F]")
        assert clause.matcher is Matcher.MATCHES
        assert clause.pattern is not None and clause.pattern.pattern == "[0-9]+[A-F]"
        assert clause.pattern.search("12C")

    def test_exists(self):
        """`exists` takes no value."""
        _, clause = one_clause("t where idempotency_key exists")
        assert (clause.matcher, clause.value) == (Matcher.EXISTS, None)

    @pytest.mark.parametrize("word", ["absent", "missing"])
    def test_is_absent_and_missing(self, word):
        """`is absent` and `is missing` parse to ABSENT, not to equals."""
        _, clause = one_clause(f"t where coupon is {word}")
        assert (clause.matcher, clause.value) == (Matcher.ABSENT, None)

    def test_value_keeps_inner_spacing(self):
        """A value runs to the end of its clause and keeps its inner spaces."""
        _, clause = one_clause("t where note equals two  words here ")
        assert clause.value == "two  words here"

    def test_value_keeps_quotes(self):
        """Quote characters are part of an unquoted value."""
        _, clause = one_clause('t where id equals "KQ311"')
        assert clause.value == '"KQ311"'

    def test_array_index_path(self):
        """Digit segments stay in the path as text."""
        _, clause = one_clause("t where passengers.0.name equals Casey")
        assert clause.segments == ("passengers", "0", "name")

    def test_clause_location_points_at_path(self):
        """A clause's location is its path token's column."""
        _, clause = one_clause("book where flight.id equals KQ311")
        assert (clause.location.line, clause.location.col) == (3, 21)

    def test_offsets_off_keeps_line_start(self):
        """With offsets off every location is the line's own."""
        _, clauses = parse_tool_line("book where a equals b", LOC, offsets=False)
        assert clauses[0].location == LOC


class TestAnd:
    def test_several_clauses(self):
        """Clauses joined with `and` parse in order, mixing matchers."""
        _, clauses = parse_tool_line(
            "book where flight.id equals KQ311 and seat matches [0-9]+A and coupon is absent "
            "and note exists", LOC)
        assert [c.matcher for c in clauses] == [
            Matcher.EQUALS, Matcher.MATCHES, Matcher.ABSENT, Matcher.EXISTS]
        assert clauses[0].value == "KQ311"

    def test_value_stops_at_and(self):
        """A value ends at the next `and` word."""
        _, clauses = parse_tool_line("t where a equals salt and b equals pepper", LOC)
        assert [c.value for c in clauses] == ["salt", "pepper"]

    def test_and_inside_a_word_is_kept(self):
        """Only the standalone word `and` splits clauses."""
        _, clause = one_clause("t where city equals Sandand Andorra")
        assert clause.value == "Sandand Andorra"

    def test_trailing_and(self):
        """A trailing `and` is an error at its column."""
        assert error_lines("t where a exists and")[0] == (
            "f.flow.yaml:3:27: `and` is not followed by a clause — "
            "write `<path> <matcher> [<value>]` after it, or remove it"
        )

    def test_empty_where(self):
        """`where` with nothing after it is an error."""
        assert "`where` is not followed by a clause" in error_lines("t where")[0]


class TestClauseErrors:
    def test_unknown_matcher(self):
        """An unknown matcher gets a did-you-mean at its column."""
        assert error_lines("book where a equal 3") == [
            "f.flow.yaml:3:23: unknown matcher `equal` — did you mean `equals`?"
        ]

    def test_missing_matcher(self):
        """A path alone is an error."""
        assert "`a` needs a matcher" in error_lines("t where a")[0]

    @pytest.mark.parametrize("matcher", ["equals", "is", "contains", "matches"])
    def test_value_matcher_without_value(self, matcher):
        """A value matcher without a value is an error."""
        assert f"`{matcher}` needs a value" in error_lines(f"t where a {matcher}")[0]

    def test_exists_with_value(self):
        """`exists` with a value is an error."""
        assert "`exists` takes no value, found `yes`" in error_lines("t where a exists yes")[0]

    def test_is_absent_with_value(self):
        """`is absent` followed by text suggests `equals`."""
        assert error_lines("t where a is absent today")[0].endswith(
            "to compare with the text, write `equals absent today`")

    def test_bad_regex_points_at_pattern(self):
        """A broken pattern is an error at the pattern's column."""
        assert error_lines("book where seat matches [0-9")[0] == (
            "f.flow.yaml:3:34: bad regular expression `[0-9`: unterminated character set "
            "at position 0 — fix the pattern (Python `re` syntax)"
        )

    def test_bad_path(self):
        """An empty path segment is an error at the path's column."""
        assert error_lines("t where a..b exists")[0].startswith("f.flow.yaml:3:18: the path `a..b`")

    def test_collects_every_clause_problem(self):
        """Problems in several clauses are all reported."""
        assert len(error_lines("t where a equal 1 and b exists x and c")) == 3

    def test_malformed_variable(self):
        """A `${` that is not `${NAME}` is an error at its column."""
        assert error_lines("t where a equals x${1}")[0].startswith(
            "f.flow.yaml:3:28: malformed variable reference `${1}`")


class TestVariablesInClauses:
    def test_matches_with_variable_compiles_later(self):
        """A `matches` value holding ${VAR} is not compiled yet."""
        _, clause = one_clause("t where id matches ^${PREFIX}[0-9]+$")
        assert clause.pattern is None and clause.value == "^${PREFIX}[0-9]+$"

    def test_escaped_dollar_compiles_now(self):
        """`$${` is a literal `${`, so the pattern compiles at parse time."""
        _, clause = one_clause("t where id matches x$${y}")
        assert clause.pattern is not None and clause.pattern.pattern == "x${y}"
        assert clause.value == "x$${y}"


class TestReplyLine:
    @pytest.mark.parametrize("word", ["contains", "is"])
    def test_contains_and_is(self, word):
        """`reply contains` and its alias `reply is` give the text."""
        assert parse_reply_line(f"reply {word} booked B-1042", LOC) == "booked B-1042"

    def test_not_reply(self):
        """Anything but `reply` first is an error."""
        with pytest.raises(SpecError, match="`assert:` checks the reply, found `output`"):
            parse_reply_line("output contains x", LOC)

    def test_unknown_matcher(self):
        """An unknown reply matcher suggests a valid one at its column."""
        with pytest.raises(SpecError) as info:
            parse_reply_line("reply contain x", LOC)
        assert str(info.value) == (
            "f.flow.yaml:3:16: unknown reply matcher `contain` — did you mean `contains`?")

    @pytest.mark.parametrize("text", ["", "reply", "reply contains", "reply is  "])
    def test_incomplete(self, text):
        """An incomplete reply line is an error."""
        with pytest.raises(SpecError):
            parse_reply_line(text, LOC)


class TestHelpers:
    def test_suggest_lists_choices_when_nothing_is_close(self):
        """With no close match the hint lists the valid choices."""
        assert suggest("zzz", ("a", "b")) == "expected one of: `a`, `b`"

    def test_compile_pattern_ignores_future_warnings(self):
        """A pattern Python only warns about compiles without raising."""
        assert compile_pattern("[[a]").pattern == "[[a]"

    def test_compile_pattern_huge_repeat(self):
        """An out-of-range repeat count is a ValueError, not an OverflowError."""
        with pytest.raises(ValueError, match="bad regular expression"):
            compile_pattern("a{99999999999999999999}")


WORDS = st.sampled_from(["where", "and", "equals", "is", "absent", "missing", "contains",
                         "matches", "exists", "a.b", "x..y", "0", "${A}", "${", "$${", "[", "(",
                         "\\", "*", "book"])


class TestFuzz:
    @settings(max_examples=300, deadline=None)
    @given(st.text())
    def test_arbitrary_text_raises_only_spec_error(self, text):
        """Arbitrary text either parses or raises SpecError."""
        try:
            tool, clauses = parse_tool_line(text, LOC)
        except SpecError as e:
            assert e.problems
        else:
            assert tool and " " not in tool
            for clause in clauses:
                if clause.matcher is Matcher.MATCHES and clause.pattern is not None:
                    assert isinstance(clause.pattern, BoundedPattern)

    @settings(max_examples=300, deadline=None)
    @given(st.lists(WORDS | st.text(min_size=1, max_size=4), max_size=10))
    def test_keyword_soup_raises_only_spec_error(self, words):
        """Sequences of grammar words either parse or raise SpecError."""
        text = " ".join(words)
        for parse in (lambda: parse_tool_line(text, LOC), lambda: parse_reply_line(text, LOC)):
            try:
                parse()
            except SpecError as e:
                assert all(p.line == 3 and p.col >= 10 for p in e.problems)


class TestBracketPath:
    def test_bracket_index_in_a_clause_is_a_spec_error(self):
        """A bracket-indexed path fails at its column instead of silently never matching."""
        assert error_lines("issue_refund where items[0].status equals approved") == [
            (
                "f.flow.yaml:3:29: the path `items[0].status` indexes a list with brackets;"
                " write `items.0.status` — write a dotted path such as `passengers.0.name`"
            )
        ]
