"""The prose lines of a flow spec: tool-call assertions and reply assertions.

Grammar (``assert_tool_call:`` / ``assert_no_tool_call:``)::

    <tool> [where <clause> (and <clause>)*]
    <clause> := <path> equals|is|contains|matches <value>
              | <path> exists
              | <path> is absent|is missing

``is absent`` / ``is missing`` are recognised before ``is`` (so ``x is absent``
never means "equals the text absent"). A value runs unquoted to the end of its
clause, that is up to the next ``and`` word, and keeps its inner spacing and any
quote characters. ``matches`` patterns are compiled here (time-bounded, see
`flowproof.spec.patterns`), unless they hold a ``${VAR}`` (then ``resolve_variables`` compiles them).

Errors point at the offending token: ``location`` is where the line starts in
the file, and with ``offsets=True`` a token's column is ``location.col`` plus its
index in the line (exact for a one-line plain scalar).
"""

from __future__ import annotations

import difflib
import re
import warnings
from dataclasses import dataclass

from flowproof.errors import SpecError, SpecProblem
from flowproof.spec.paths import split_path
from flowproof.spec.patterns import BoundedPattern, compile_bounded
from flowproof.spec.types import Clause, Location, Matcher
from flowproof.spec.variables import VariableSyntaxError, check_variables

__all__ = ["compile_pattern", "parse_reply_line", "parse_tool_line", "suggest"]

_MATCHER_WORDS = ("equals", "is", "contains", "matches", "exists", "is absent", "is missing")
_VALUE_MATCHERS = {"equals": Matcher.EQUALS, "is": Matcher.EQUALS, "contains": Matcher.CONTAINS,
                   "matches": Matcher.MATCHES}
_CLAUSE_FORM = "<tool> where <path> <matcher> <value>"


def suggest(word: str, choices: list[str] | tuple[str, ...]) -> str:
    """A did-you-mean hint for ``word`` among ``choices`` (or the list of valid ones)."""
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if not close:
        close = difflib.get_close_matches(word.lower(), choices, n=1, cutoff=0.6)
    if close:
        return f"did you mean `{close[0]}`?"
    return "expected one of: " + ", ".join(f"`{c}`" for c in choices)


def compile_pattern(text: str) -> re.Pattern[str]:
    """Compile a ``matches`` / volatile regex; ValueError with the reason when it is broken."""
    try:
        # Some valid patterns warn (FutureWarning: possible nested set); a warning is not a
        # broken pattern, and must not turn into an error under `-W error`.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return re.compile(text)
    except re.error as e:
        where = f" at position {e.pos}" if e.pos is not None else ""
        raise ValueError(f"bad regular expression `{text}`: {e.msg}{where}") from None
    except (OverflowError, RecursionError, ValueError) as e:
        raise ValueError(f"bad regular expression `{text}`: {e}") from None


def _unescape(text: str) -> str:
    # Only called on text with no ${NAME} reference, where resolution is exactly this.
    return text.replace("$${", "${")


@dataclass(frozen=True, slots=True)
class _Token:
    text: str
    start: int
    end: int


class _Line:
    """One prose line and the machinery to point at its tokens."""

    def __init__(self, text: str, location: Location, offsets: bool) -> None:
        self.text = text
        self.location = location
        self.offsets = offsets
        self.tokens = [_Token(m.group(), m.start(), m.end()) for m in re.finditer(r"\S+", text)]
        self.problems: list[SpecProblem] = []

    def at(self, offset: int) -> Location:
        if not self.offsets:
            return self.location
        return Location(self.location.path, self.location.line, self.location.col + offset)

    def problem(self, offset: int, message: str, hint: str = "") -> None:
        loc = self.at(offset)
        self.problems.append(SpecProblem(loc.path, loc.line, loc.col, message, hint))

    def span(self, tokens: list[_Token]) -> str:
        return self.text[tokens[0].start : tokens[-1].end]

    def check_value(self, value: str, start: int) -> bool:
        """Check ``${`` syntax in a value; report and return False when malformed."""
        try:
            check_variables(value)
        except VariableSyntaxError as e:
            self.problem(start + e.offset, str(e), e.hint)
            return False
        return True

    def raise_if_problems(self) -> None:
        if self.problems:
            raise SpecError(self.problems)


def parse_tool_line(
    text: str,
    location: Location,
    *,
    keyword: str = "assert_tool_call",
    offsets: bool = True,
) -> tuple[str, tuple[Clause, ...]]:
    """Parse ``<tool> [where <clause> (and <clause>)*]`` into the tool name and its clauses.

    ``keyword`` names the step in messages. Raises SpecError with every problem
    found in the line.

    >>> tool, clauses = parse_tool_line("book where flight.id equals KQ311", Location("f", 1, 1))
    >>> tool, clauses[0].segments, clauses[0].value
    ('book', ('flight', 'id'), 'KQ311')
    """
    line = _Line(text, location, offsets)
    if not line.tokens:
        line.problem(0, f"`{keyword}` needs a tool name", f"write `{keyword}: {_CLAUSE_FORM}`")
        line.raise_if_problems()
    first, rest = line.tokens[0], line.tokens[1:]
    if first.text == "where":
        line.problem(first.start, "the line starts with `where`",
                     f"name the tool first: `{_CLAUSE_FORM}`")
        line.raise_if_problems()
    if rest and rest[0].text != "where":
        hint = (
            "did you mean `where`?"
            if difflib.get_close_matches(rest[0].text.lower(), ["where"], cutoff=0.6)
            else f"a tool name has no spaces; write `{_CLAUSE_FORM}`"
        )
        line.problem(rest[0].start,
                     f"expected `where` after the tool name, found `{rest[0].text}`", hint)
        line.raise_if_problems()

    clauses: list[Clause] = []
    if rest:
        groups: list[tuple[_Token, list[_Token]]] = [(rest[0], [])]
        for token in rest[1:]:
            if token.text == "and":
                groups.append((token, []))
            else:
                groups[-1][1].append(token)
        for lead, group in groups:
            if not group:
                line.problem(
                    lead.start,
                    f"`{lead.text}` is not followed by a clause",
                    "write `<path> <matcher> [<value>]` after it, or remove it",
                )
                continue
            clause = _parse_clause(line, group)
            if clause is not None:
                clauses.append(clause)
    line.raise_if_problems()
    return first.text, tuple(clauses)


def _parse_clause(line: _Line, group: list[_Token]) -> Clause | None:
    path_token = group[0]
    ok = True
    segments: tuple[str, ...] = ()
    try:
        segments = split_path(path_token.text)
    except ValueError as e:
        line.problem(path_token.start, str(e), "write a dotted path such as `passengers.0.name`")
        ok = False
    if len(group) == 1:
        line.problem(
            path_token.end,
            f"`{path_token.text}` needs a matcher",
            "add one of: " + ", ".join(f"`{m}`" for m in _MATCHER_WORDS),
        )
        return None
    word = group[1]
    if word.text == "is" and len(group) >= 3 and group[2].text in ("absent", "missing"):
        matcher, name, values = Matcher.ABSENT, f"is {group[2].text}", group[3:]
    elif word.text in _VALUE_MATCHERS:
        matcher, name, values = _VALUE_MATCHERS[word.text], word.text, group[2:]
    elif word.text == "exists":
        matcher, name, values = Matcher.EXISTS, "exists", group[2:]
    else:
        line.problem(word.start, f"unknown matcher `{word.text}`",
                     suggest(word.text, _MATCHER_WORDS))
        return None

    value: str | None = None
    pattern: BoundedPattern | None = None
    if matcher in (Matcher.EXISTS, Matcher.ABSENT):
        if values:
            extra = line.span(values)
            hint = (
                f"to compare with the text, write `equals {name.removeprefix('is ')} {extra}`"
                if matcher is Matcher.ABSENT
                else "remove the value, or use `equals`"
            )
            line.problem(values[0].start, f"`{name}` takes no value, found `{extra}`", hint)
            return None
    else:
        if not values:
            line.problem(
                word.end,
                f"`{name}` needs a value",
                f"write `{path_token.text} {name} <value>`; "
                "use `exists` to only require the argument",
            )
            return None
        value = line.span(values)
        start = values[0].start
        if not line.check_value(value, start):
            return None
        if matcher is Matcher.MATCHES and not check_variables(value):
            try:
                pattern = compile_bounded(_unescape(value))
            except ValueError as e:
                line.problem(start, str(e), "fix the pattern (Python `re` syntax)")
                return None
    if not ok:
        return None
    return Clause(
        path=path_token.text,
        segments=segments,
        matcher=matcher,
        value=value,
        pattern=pattern,
        location=line.at(path_token.start),
    )


def parse_reply_line(text: str, location: Location, *, offsets: bool = True) -> str:
    """Parse ``reply contains <text>`` (or its alias ``reply is <text>``) into the text.

    Both forms mean a substring match on the final assistant message.
    Raises SpecError naming the column of the bad token.
    """
    line = _Line(text, location, offsets)
    form = "write `assert: reply contains <text>`"
    tokens = line.tokens
    if not tokens:
        line.problem(0, "`assert` needs a reply assertion", form)
    elif tokens[0].text != "reply":
        line.problem(
            tokens[0].start,
            f"`assert:` checks the reply, found `{tokens[0].text}`",
            form + "; for tool calls use `assert_tool_call:`",
        )
    elif len(tokens) == 1:
        line.problem(tokens[0].end, "`reply` needs `contains` or `is`", form)
    elif tokens[1].text not in ("contains", "is"):
        line.problem(
            tokens[1].start,
            f"unknown reply matcher `{tokens[1].text}`",
            suggest(tokens[1].text, ("contains", "is")),
        )
    elif len(tokens) == 2:
        line.problem(tokens[1].end, f"`reply {tokens[1].text}` needs the text to look for", form)
    else:
        value = line.span(tokens[2:])
        if line.check_value(value, tokens[2].start):
            return value
    line.raise_if_problems()
    raise AssertionError("unreachable")  # pragma: no cover
