"""The ``steps:`` grammar of a flow spec: prompts, assertions and ``in:`` scopes.

`StepWalker` reads the ``steps:`` list (a `flowproof.spec.nodes.NodeWalker`
with the step kinds); `check_context` then checks what a step needs from the
rest of the spec (``assert_no_egress`` needs the proxy route, ``cost`` needs
``pricing:``, ``in: prompt K`` needs K prompts). The meaning of every step is in
docs/spec.md.

YAML strips an unquoted `` #2`` as a comment, so ``in: subagent Explore #2``
would silently widen the scope to every Explore sub-agent; the walker reads the
rest of the source line after the value and refuses exactly that comment.

Pure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from yaml.nodes import Node, ScalarNode, SequenceNode

from flowproof.errors import SpecError, SpecProblem
from flowproof.spec.clauses import parse_reply_line, parse_tool_line, suggest
from flowproof.spec.nodes import NULL, NodeWalker, kind_of
from flowproof.spec.types import (
    BudgetAssertion,
    CachePrefixAssertion,
    EgressAssertion,
    Location,
    Metric,
    ParallelCallsAssertion,
    PromptScope,
    PromptStep,
    ReplyAssertion,
    ScopeStep,
    SecretLeakAssertion,
    Step,
    SubagentAssertion,
    SubagentScope,
    ToolCallAssertion,
    ToolPattern,
)

__all__ = ["SCOPE_KEYS", "STEP_KEYS", "StepWalker", "check_context", "step_kinds"]

STEP_KEYS = (
    "prompt",
    "assert_tool_call",
    "assert_no_tool_call",
    "assert",
    "assert_subagent",
    "assert_parallel_tool_calls",
    "assert_no_egress",
    "assert_no_secret_leak",
    "in",
)
#: The keys of an ``in:`` step (the scope and its own steps).
SCOPE_KEYS = ("in", "steps")
#: Steps about the whole run, never about a part of it: they may not sit inside ``in:``.
_RUN_WIDE = ("assert_no_egress", "assert_no_secret_leak")
#: A step written as a bare word (``- assert_no_egress``).
_BARE = ("assert_no_egress",)

_NUMBER = re.compile(r"\$?(\d+(?:\.\d+)?)")
_ORDINAL = re.compile(r"(.*?)\s*#\s*(\d+)")
_COMMENT_ORDINAL = re.compile(r"[ \t]+#[ \t]*\d+[ \t]*(?:$|\n)")
_HOST = re.compile(r"[a-z0-9*?.\-\[\]]+(:\d+)?")
_SINGLE_VARIABLE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")
_METRICS = {m.value: m for m in Metric}
_COUNTS = (Metric.MODEL_CALLS, Metric.TOOL_CALLS, Metric.TOKENS, Metric.INPUT_TOKENS,
           Metric.OUTPUT_TOKENS)
_ASSERT_FORMS = ("`reply contains <text>`", "`model calls at most <n>`", "`tokens at most <n>`",
                 "`cost at most <usd>`", "`cache prefix stable`")


def step_kinds(steps: Sequence[Step]) -> list[Step]:
    """Every step, depth first: the steps inside each ``in:`` follow it."""
    out: list[Step] = []
    for step in steps:
        out.append(step)
        if isinstance(step, ScopeStep):
            out.extend(step_kinds(step.steps))
    return out


class StepWalker(NodeWalker):
    """Reads ``steps:`` lists (also inside ``in:``) into `Step` values."""

    def __init__(self, display: str) -> None:
        super().__init__(display)
        self.saw_prompt = False

    def steps(self, key: Node, node: Node, declared: set[str]) -> tuple[Step, ...]:
        items = self.sequence(node, "`steps`")
        if items is None:
            return ()
        if not items:
            self.problem(node if isinstance(node, SequenceNode) else key,
                         "`steps` is empty", "add a `- prompt: …` step and its assertions")
            return ()
        steps, failed = self._step_list(items, declared, ())
        # A step that failed to parse may have been meant as the prompt: say only that.
        if not self.saw_prompt and not failed:
            self.problem(key, "the flow has no `prompt` step",
                         "add `- prompt: <what the user says to the agent>`")
        return tuple(steps)

    def _step_list(self, items: list[Node], declared: set[str],
                   scopes: tuple[str, ...]) -> tuple[list[Step], bool]:
        steps: list[Step] = []
        failed = False
        for item in items:
            step = self.step(item, declared, scopes)
            if step is not None:
                steps.append(step)
            failed = failed or step is None
        return steps, failed

    def step(self, item: Node, declared: set[str], scopes: tuple[str, ...] = ()) -> Step | None:
        if isinstance(item, ScalarNode) and item.tag != NULL and item.value in _BARE:
            return self._egress(item, item, None, scopes)
        if isinstance(item, ScalarNode):
            self.problem(item, f"a step must be `<kind>: <text>`, found {kind_of(item)}",
                         "e.g. `- prompt: …` or `- assert_tool_call: <tool>`")
            return None
        entries = self.mapping(item, "a step")
        if entries is None:
            return None
        if not entries:
            self.problem(item, "a step is empty", "e.g. `- prompt: …`")
            return None
        (kind, (key, value)), *others = entries.items()
        if kind == "in":
            return self._scope(item, entries, declared, scopes)
        for other, (other_key, _) in others:
            hint = ("`steps:` belongs to an `in:` step" if other == "steps"
                    else "start each step on its own `- ` line")
            self.problem(other_key, f"a step has one key, found `{kind}` and `{other}`", hint)
        if kind not in STEP_KEYS:
            self.problem(key, f"unknown step `{kind}`", suggest(kind, STEP_KEYS))
            return None
        if kind == "prompt":
            if scopes:
                self.problem(key, "a `prompt` step inside `in:`",
                             "prompts are what the user says, in order: move it out of the scope")
                return None
            self.saw_prompt = True
            text = self.template(value, "`prompt`")
            return None if text is None else PromptStep(text=text, location=self.loc(key))
        if kind == "assert_no_egress":
            return self._egress(key, value, value, scopes)
        if kind in _RUN_WIDE and scopes:
            self.problem(key, f"`{kind}` inside `in:`",
                         "it is about every request of the run: move it out of the scope")
            return None
        if kind == "assert_parallel_tool_calls" and isinstance(value, SequenceNode):
            return self._parallel_list(key, value, declared)
        line = self.text(value, f"`{kind}`")
        if line is None:
            return None
        assert isinstance(value, ScalarNode)
        origin, exact = self.text_origin(value)
        if kind == "assert":
            return self._assert(key, line, origin, exact)
        if kind == "assert_subagent":
            return SubagentAssertion(name=line.strip(), source=line, location=self.loc(key))
        if kind == "assert_no_secret_leak":
            return self._secret(key, value, line)
        if kind == "assert_parallel_tool_calls":
            return self._parallel_line(key, value, line, origin, exact, declared)
        pattern = self._tool_pattern(value, line, origin, exact, kind, declared)
        if pattern is None:
            return None
        return ToolCallAssertion(tool=pattern.tool, clauses=pattern.clauses,
                                 negated=kind == "assert_no_tool_call", source=line,
                                 location=self.loc(key))

    # -- tool lines --------------------------------------------------------------

    def _tool_pattern(self, node: Node, line: str, origin: Location, exact: bool, kind: str,
                      declared: set[str]) -> ToolPattern | None:
        try:
            tool, clauses = parse_tool_line(line, origin, keyword=kind, offsets=exact)
        except SpecError as e:
            self.absorb(e)
            return None
        if declared and tool not in declared:
            offset = origin.col - self.loc(node).col + (len(line) - len(line.lstrip()))
            self.problem(node, f"`{tool}` is not a declared tool",
                         suggest(tool, sorted(declared)) + " (declare it under `tools:` or "
                         "`mcp:`; an entry without `result:` only declares it)",
                         offset if origin.line == self.loc(node).line else 0)
            return None
        return ToolPattern(tool=tool, clauses=clauses, source=line.strip())

    def _parallel_line(self, key: Node, value: ScalarNode, line: str, origin: Location,
                       exact: bool, declared: set[str]) -> ParallelCallsAssertion | None:
        patterns: list[ToolPattern] = []
        start, ok = 0, True
        for piece in line.split(","):
            at = Location(origin.path, origin.line, origin.col + start) if exact else origin
            start += len(piece) + 1
            if not piece.strip():
                self.problem(value, "`assert_parallel_tool_calls` has an empty entry",
                             "write tool names separated by commas: `search_flights, search_hotels`")
                ok = False
                continue
            pattern = self._tool_pattern(value, piece, at, exact, "assert_parallel_tool_calls",
                                         declared)
            ok = ok and pattern is not None
            if pattern is not None:
                patterns.append(pattern)
        return self._parallel(key, value, patterns, ok, line)

    def _parallel_list(self, key: Node, value: SequenceNode,
                       declared: set[str]) -> ParallelCallsAssertion | None:
        patterns: list[ToolPattern] = []
        ok = True
        for item in value.value:
            line = self.text(item, "an `assert_parallel_tool_calls` entry")
            if line is None:
                ok = False
                continue
            assert isinstance(item, ScalarNode)
            origin, exact = self.text_origin(item)
            pattern = self._tool_pattern(item, line, origin, exact, "assert_parallel_tool_calls",
                                         declared)
            ok = ok and pattern is not None
            if pattern is not None:
                patterns.append(pattern)
        return self._parallel(key, value, patterns, ok, ", ".join(p.source for p in patterns))

    def _parallel(self, key: Node, value: Node, patterns: list[ToolPattern], ok: bool,
                  source: str) -> ParallelCallsAssertion | None:
        if ok and len(patterns) < 2:
            self.problem(value, "`assert_parallel_tool_calls` needs at least two calls",
                         "list the calls one model turn must make together: `a, b`; for one "
                         "call use `assert_tool_call:`")
            return None
        if not ok:
            return None
        return ParallelCallsAssertion(calls=tuple(patterns), source=source, location=self.loc(key))

    # -- assert: reply, budgets, cache -------------------------------------------

    def _assert(self, key: Node, line: str, origin: Location,
                exact: bool) -> ReplyAssertion | BudgetAssertion | CachePrefixAssertion | None:
        words = line.split()
        if words and words[0] == "reply":
            try:
                reply = parse_reply_line(line, origin, offsets=exact)
            except SpecError as e:
                self.absorb(e)
                return None
            return ReplyAssertion(text=reply, source=line, location=self.loc(key))
        text = " ".join(words)
        if text == "cache prefix stable":
            return CachePrefixAssertion(source=text, location=self.loc(key))
        for name, metric in sorted(_METRICS.items(), key=lambda kv: -len(kv[0])):
            if text == name or text.startswith(name + " "):
                return self._budget(key, metric, text[len(name):].split(), text)
        if words and words[0] == "cache":
            self.problem(key, f"unknown cache assertion `{text}`", "write `assert: cache prefix stable`")
            return None
        first = words[0] if words else ""
        self.problem(key, f"`assert:` checks the reply, a budget or the cache prefix, found `{first}`",
                     "write one of " + ", ".join(_ASSERT_FORMS) + "; for tool calls use "
                     "`assert_tool_call:`")
        return None

    def _budget(self, key: Node, metric: Metric, rest: list[str], text: str) -> BudgetAssertion | None:
        form = f"write `assert: {metric.value} at most <{'usd' if metric is Metric.COST else 'n'}>`"
        bound = " ".join(rest[:2])
        if bound not in ("at most", "at least") or len(rest) != 3:
            self.problem(key, f"`{text}` is not a budget", form + " (or `at least`)")
            return None
        number = _NUMBER.fullmatch(rest[2])
        if number is None:
            self.problem(key, f"`{rest[2]}` is not a number in `{text}`", form)
            return None
        limit = float(number.group(1))
        if metric in _COUNTS and not limit.is_integer():
            self.problem(key, f"{metric.value} are counted in whole numbers, found `{rest[2]}`", form)
            return None
        return BudgetAssertion(metric=metric, bound="at most" if bound == "at most" else "at least",
                               limit=limit, source=text, location=self.loc(key))

    # -- egress and secrets --------------------------------------------------------

    def _egress(self, key: Node, node: Node, value: Node | None,
                scopes: tuple[str, ...]) -> EgressAssertion | None:
        if scopes:
            self.problem(key, "`assert_no_egress` inside `in:`",
                         "it is about every host the run reached: move it out of the scope")
            return None
        if value is None or (isinstance(value, ScalarNode) and value.tag == NULL):
            return EgressAssertion(allowed=(), source="assert_no_egress", location=self.loc(key))
        line = self.text(value, "`assert_no_egress`")
        if line is None:
            return None
        words = line.split(None, 1)
        if words[0] != "except" or len(words) < 2:
            self.problem(value, f"`assert_no_egress` takes `except <hosts>`, found `{line}`",
                         "write `assert_no_egress` alone, or `assert_no_egress: except api.example.com, "
                         "*.example.org`")
            return None
        hosts: list[str] = []
        for piece in words[1].split(","):
            host = piece.strip().lower()
            if not _HOST.fullmatch(host):
                self.problem(value, f"`{piece.strip()}` is not a host name or pattern",
                             "write host names, optionally with `*` (e.g. `*.example.org`); no "
                             "scheme, no path")
                return None
            hosts.append(host)
        return EgressAssertion(allowed=tuple(hosts), source=f"assert_no_egress: {line}",
                               location=self.loc(key))

    def _secret(self, key: Node, value: Node, line: str) -> SecretLeakAssertion | None:
        if not self.check_variable_syntax(value, line):
            return None
        written = line.strip()
        loc = self.loc(key)
        # The value itself is never shown: a reference names it, a literal is named by its place.
        label = written if _SINGLE_VARIABLE.fullmatch(written) else f"the secret at line {loc.line}"
        return SecretLeakAssertion(value=written, label=label, source=f"no leak of {label}",
                                   location=loc)

    # -- in: scopes ----------------------------------------------------------------

    def _scope(self, item: Node, entries: dict[str, tuple[ScalarNode, Node]], declared: set[str],
               scopes: tuple[str, ...]) -> ScopeStep | None:
        self.check_keys(entries, SCOPE_KEYS, "an `in:` step")
        key, value = entries["in"]
        line = self.text(value, "`in`")
        scope: SubagentScope | PromptScope | None = None
        if line is not None:
            assert isinstance(value, ScalarNode)
            scope = self._scope_line(key, value, line, scopes)
        if "steps" not in entries:
            self.problem(key, "an `in:` step has no `steps:`",
                         "add `steps:` below it with the assertions the scope must pass")
            return None
        items = self.sequence(entries["steps"][1], "the `steps` of `in:`")
        if items is None:
            return None
        if not items:
            self.problem(entries["steps"][1], "the `steps` of `in:` is empty",
                         "list the assertions the scope must pass")
            return None
        kind = "prompt" if isinstance(scope, PromptScope) else "subagent"
        steps, _ = self._step_list(items, declared, (*scopes, kind))
        if scope is None:
            return None
        return ScopeStep(scope=scope, steps=tuple(steps), source=f"in {' '.join(line.split())}"
                         if line else "in", location=self.loc(key))

    def _scope_line(self, key: Node, value: ScalarNode, line: str,
                    scopes: tuple[str, ...]) -> SubagentScope | PromptScope | None:
        words = line.split()
        form = "write `in: subagent <name>`, `in: \"subagent <name> #2\"` or `in: prompt <n>`"
        if words[0] == "prompt":
            if len(words) != 2 or not words[1].isdigit() or int(words[1]) < 1:
                self.problem(value, f"`in: {line}` needs the prompt's number", "e.g. `in: prompt 2`")
                return None
            if scopes:
                self.problem(key, "`in: prompt` inside another `in:`",
                             "a prompt scope holds sub-agent scopes, not the other way round: "
                             "put `in: prompt` at the top of `steps:`")
                return None
            return PromptScope(number=int(words[1]))
        if words[0] != "subagent":
            self.problem(value, f"unknown scope `{words[0]}`", suggest(words[0], ("subagent", "prompt"))
                         + f"; {form}")
            return None
        rest = " ".join(words[1:])
        ordinal: int | None = None
        match = _ORDINAL.fullmatch(rest)
        if match is not None:
            rest, ordinal = match.group(1), int(match.group(2))
            if ordinal < 1:
                self.problem(value, "sub-agents are counted from #1", form)
                return None
        if not rest:
            self.problem(value, "`in: subagent` needs the sub-agent's name", form)
            return None
        if value.style is None and self._comment_ordinal(value):
            self.problem(value, f"YAML reads the ` #…` after `{line}` as a comment, so this scope "
                         f"would apply to every sub-agent named {rest}",
                         f'quote the value: `in: "subagent {rest} #2"`, or write `subagent {rest}#2`')
            return None
        return SubagentScope(name=rest, ordinal=ordinal)

    @staticmethod
    def _comment_ordinal(value: ScalarNode) -> bool:
        """True when the source line goes on after the plain value with ``#<digits>``: a comment
        YAML dropped, which the author most likely meant as the ordinal."""
        buffer = getattr(value.end_mark, "buffer", None)
        if not isinstance(buffer, str):
            return False
        return _COMMENT_ORDINAL.match(buffer, value.end_mark.index) is not None


def check_context(walker: NodeWalker, steps: Sequence[Step], *, route: str | None,
                  priced: bool, prompts: int, pricing_hint: str) -> None:
    """Record a problem for each step that the rest of the spec cannot support."""
    for step in step_kinds(steps):
        loc = getattr(step, "location", None)
        if loc is None:  # pragma: no cover — every step has one
            continue
        if isinstance(step, EgressAssertion) and route == "base_url":
            _problem(walker, loc, "`assert_no_egress` needs `agent.route: proxy`",
                     "on the base-URL route the agent talks to flowproof's local listener and "
                     "reaches every other host directly, so the proxy cannot see where it goes; "
                     "use the proxy route for this flow")
        if isinstance(step, BudgetAssertion) and step.metric is Metric.COST and not priced:
            _problem(walker, loc, "`cost` needs prices: the spec has no `pricing:`", pricing_hint)
        if isinstance(step, ScopeStep) and isinstance(step.scope, PromptScope):
            if step.scope.number > prompts:
                _problem(walker, loc, f"`in: prompt {step.scope.number}` names a prompt the flow "
                         f"does not have (it has {prompts})", "count the `- prompt:` steps from 1")


def _problem(walker: NodeWalker, loc: Location, message: str, hint: str) -> None:
    walker.problems.append(SpecProblem(loc.path, loc.line, loc.col, message, hint))

