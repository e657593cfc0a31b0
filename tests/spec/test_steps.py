"""Tests for the steps grammar: the new steps, `in:` scopes, pricing and their spec errors."""

from __future__ import annotations

import pytest

from flowproof.errors import SpecError
from flowproof.spec import (
    BudgetAssertion,
    CachePrefixAssertion,
    EgressAssertion,
    Metric,
    ParallelCallsAssertion,
    PromptScope,
    ReplyAssertion,
    ScopeStep,
    SecretLeakAssertion,
    SubagentAssertion,
    SubagentScope,
    ToolCallAssertion,
    resolve_variables,
)
from flowproof.spec.steps import step_kinds

HEAD = "name: n\nagent:\n  command: a\n"


def spec(steps: str, head: str = "") -> str:
    return f"{HEAD}{head}steps:\n  - prompt: hello\n{steps}"


ISSUE_EXAMPLE = """\
name: books after exploring
agent:
  command: python agent.py
pricing:                                   # USD per million tokens
  gpt-4o-mini: { input: 0.15, output: 0.60 }
steps:
  - prompt: Find the booking code in the repo and book that flight
  - assert_subagent: Explore
  - in: subagent Explore
    steps:
      - assert_tool_call: Grep where pattern contains KQ
      - assert: reply contains KQ311
  - assert_parallel_tool_calls: search_flights, search_hotels
  - assert_no_egress
  - assert_no_egress: except api.example.com, *.example.org
  - assert_no_secret_leak: ${CUSTOMER_TOKEN}
  - assert: model calls at most 6
  - assert: tokens at most 20000
  - assert: cost at most 0.05
  - assert: cache prefix stable
  - prompt: Actually, cancel that booking
  - in: prompt 2
    steps:
      - assert_no_tool_call: create_booking
      - assert_tool_call: cancel_booking where booking equals B-1042
"""


class TestTheIssuesSyntax:
    def test_every_step_of_the_example_loads(self, load) -> None:  # type: ignore[no-untyped-def]
        loaded = load(ISSUE_EXAMPLE)
        kinds = [type(s).__name__ for s in loaded.steps]
        assert kinds == [
            "PromptStep", "SubagentAssertion", "ScopeStep", "ParallelCallsAssertion",
            "EgressAssertion", "EgressAssertion", "SecretLeakAssertion", "BudgetAssertion",
            "BudgetAssertion", "BudgetAssertion", "CachePrefixAssertion", "PromptStep", "ScopeStep",
        ]
        sub = loaded.steps[2]
        assert isinstance(sub, ScopeStep) and sub.scope == SubagentScope("Explore")
        assert isinstance(sub.steps[0], ToolCallAssertion) and sub.steps[0].tool == "Grep"
        assert isinstance(sub.steps[1], ReplyAssertion) and sub.steps[1].text == "KQ311"
        parallel = loaded.steps[3]
        assert isinstance(parallel, ParallelCallsAssertion)
        assert [c.tool for c in parallel.calls] == ["search_flights", "search_hotels"]
        assert loaded.steps[4] == EgressAssertion((), "assert_no_egress", loaded.steps[4].location)
        assert loaded.steps[5].allowed == ("api.example.com", "*.example.org")  # type: ignore[union-attr]
        secret = loaded.steps[6]
        assert isinstance(secret, SecretLeakAssertion) and secret.label == "${CUSTOMER_TOKEN}"
        budgets = [s for s in loaded.steps if isinstance(s, BudgetAssertion)]
        assert [(b.metric, b.bound, b.limit) for b in budgets] == [
            (Metric.MODEL_CALLS, "at most", 6.0), (Metric.TOKENS, "at most", 20000.0),
            (Metric.COST, "at most", 0.05)]
        assert isinstance(loaded.steps[10], CachePrefixAssertion)
        last = loaded.steps[12]
        assert isinstance(last, ScopeStep) and last.scope == PromptScope(2)
        assert [s.negated for s in last.steps] == [True, False]  # type: ignore[union-attr]
        assert loaded.pricing[0].model == "gpt-4o-mini"
        assert (loaded.pricing[0].input, loaded.pricing[0].output) == (0.15, 0.6)
        assert loaded.pricing[0].cache_read is None

    def test_locations_point_at_the_step(self, load) -> None:  # type: ignore[no-untyped-def]
        loaded = load(ISSUE_EXAMPLE)
        assert (loaded.steps[1].location.line, loaded.steps[4].location.line) == (8, 14)
        inner = loaded.steps[2].steps[0]  # type: ignore[union-attr]
        assert (inner.location.line, inner.location.col) == (11, 9)

    def test_step_kinds_walks_into_scopes(self, load) -> None:  # type: ignore[no-untyped-def]
        loaded = load(ISSUE_EXAMPLE)
        assert len(step_kinds(loaded.steps)) == len(loaded.steps) + 4


class TestScopes:
    @pytest.mark.parametrize(
        ("value", "scope"),
        [
            ('"subagent Explore #2"', SubagentScope("Explore", 2)),
            ("subagent Explore#2", SubagentScope("Explore", 2)),
            ("'subagent general-purpose #1'", SubagentScope("general-purpose", 1)),
            ("subagent Billing agent", SubagentScope("Billing agent")),
            ("prompt 1", PromptScope(1)),
        ],
    )
    def test_forms(self, load, value: str, scope: object) -> None:  # type: ignore[no-untyped-def]
        loaded = load(spec(f"  - in: {value}\n    steps:\n      - assert: reply contains x\n"))
        assert loaded.steps[1].scope == scope

    def test_an_unquoted_ordinal_is_refused_not_silently_dropped(self, problems) -> None:  # type: ignore[no-untyped-def]
        found = problems(spec("  - in: subagent Explore #2\n    steps:\n      - assert: reply contains x\n"))
        assert len(found) == 1
        assert found[0].startswith("6:9: YAML reads the ` #…` after `subagent Explore` as a comment")
        assert 'quote the value: `in: "subagent Explore #2"`' in found[0]

    def test_an_ordinary_comment_is_fine(self, load) -> None:  # type: ignore[no-untyped-def]
        loaded = load(spec("  - in: subagent Explore   # the search agent\n    steps:\n"
                           "      - assert: reply contains x\n"))
        assert loaded.steps[1].scope == SubagentScope("Explore")

    @pytest.mark.parametrize(
        ("steps", "message"),
        [
            ("  - in: subagent X\n", "an `in:` step has no `steps:`"),
            ("  - in: subagent X\n    steps: []\n", "the `steps` of `in:` is empty"),
            ("  - in: agent X\n    steps:\n      - assert: reply contains x\n", "unknown scope `agent`"),
            ("  - in: prompt two\n    steps:\n      - assert: reply contains x\n", "needs the prompt's number"),
            ("  - in: prompt 3\n    steps:\n      - assert: reply contains x\n",
             "names a prompt the flow does not have (it has 1)"),
            ("  - in: subagent X\n    steps:\n      - prompt: more\n", "a `prompt` step inside `in:`"),
            ("  - in: subagent X\n    steps:\n      - assert_no_egress\n", "`assert_no_egress` inside `in:`"),
            ("  - in: subagent X\n    steps:\n      - assert_no_secret_leak: ${T}\n",
             "`assert_no_secret_leak` inside `in:`"),
            ("  - in: subagent X\n    steps:\n      - in: prompt 1\n        steps:\n"
             "          - assert: reply contains x\n", "`in: prompt` inside another `in:`"),
            ("  - in: subagent X #0\n    steps:\n      - assert: reply contains x\n", "as a comment"),
            ('  - in: "subagent X #0"\n    steps:\n      - assert: reply contains x\n',
             "counted from #1"),
            ("  - in: subagent X\n    steps:\n      - assert: reply contains x\n    extra: 1\n",
             "unknown key `extra` in an `in:` step"),
        ],
    )
    def test_scope_errors(self, problems, steps: str, message: str) -> None:  # type: ignore[no-untyped-def]
        found = problems(spec(steps))
        assert any(message in f for f in found), found

    def test_nested_subagent_scopes_and_prompt_scope_holding_one(self, load) -> None:  # type: ignore[no-untyped-def]
        loaded = load(spec("  - in: prompt 1\n    steps:\n      - in: subagent A\n        steps:\n"
                           "          - in: subagent B\n            steps:\n"
                           "              - assert: reply contains x\n"))
        outer = loaded.steps[1]
        assert outer.scope == PromptScope(1)
        assert outer.steps[0].steps[0].scope == SubagentScope("B")

    def test_steps_key_outside_in(self, problems) -> None:  # type: ignore[no-untyped-def]
        found = problems(spec("  - assert: reply contains x\n    steps: []\n"))
        assert "`steps:` belongs to an `in:` step" in found[0]


class TestParallel:
    def test_where_clauses_per_name(self, load) -> None:  # type: ignore[no-untyped-def]
        loaded = load(spec("  - assert_parallel_tool_calls: a where x equals 1 and y exists, b\n"))
        step = loaded.steps[1]
        assert [(c.tool, len(c.clauses)) for c in step.calls] == [("a", 2), ("b", 0)]
        assert step.calls[0].clauses[0].value == "1"

    def test_list_form(self, load) -> None:  # type: ignore[no-untyped-def]
        loaded = load(spec("  - assert_parallel_tool_calls:\n      - a where note equals x, y\n      - b\n"))
        step = loaded.steps[1]
        assert step.calls[0].clauses[0].value == "x, y"  # a list entry may hold a comma
        assert step.source == "a where note equals x, y, b"

    def test_clause_error_column_in_the_second_entry(self, problems) -> None:  # type: ignore[no-untyped-def]
        found = problems(spec("  - assert_parallel_tool_calls: a, b where x bogus 1\n"))
        assert len(found) == 1 and found[0].startswith("6:46: unknown matcher `bogus`")

    @pytest.mark.parametrize(
        ("value", "message"),
        [("a", "needs at least two calls"), ("a, , b", "has an empty entry"), ("a, b c", "expected `where`")],
    )
    def test_errors(self, problems, value: str, message: str) -> None:  # type: ignore[no-untyped-def]
        assert any(message in f for f in problems(spec(f"  - assert_parallel_tool_calls: {value}\n")))

    def test_undeclared_tool(self, problems) -> None:  # type: ignore[no-untyped-def]
        head = "tools:\n  - name: a\n  - name: b\n"
        found = problems(spec("  - assert_parallel_tool_calls: a, c\n", head))
        assert "`c` is not a declared tool" in found[0]


class TestAssertLines:
    @pytest.mark.parametrize(
        ("line", "metric", "bound", "limit"),
        [
            ("model calls at most 6", Metric.MODEL_CALLS, "at most", 6),
            ("tool calls at least 1", Metric.TOOL_CALLS, "at least", 1),
            ("input tokens at most 100", Metric.INPUT_TOKENS, "at most", 100),
            ("output   tokens at most 5", Metric.OUTPUT_TOKENS, "at most", 5),
            ("cost at most $0.25", Metric.COST, "at most", 0.25),
        ],
    )
    def test_budgets(self, load, line: str, metric: Metric, bound: str, limit: float) -> None:  # type: ignore[no-untyped-def]
        head = "pricing:\n  m: {input: 1, output: 2}\n"
        step = load(spec(f"  - assert: {line}\n", head)).steps[1]
        assert (step.metric, step.bound, step.limit) == (metric, bound, limit)

    @pytest.mark.parametrize(
        ("line", "message"),
        [
            ("tokens below 5", "`tokens below 5` is not a budget"),
            ("tokens at most many", "`many` is not a number"),
            ("model calls at most 2.5", "counted in whole numbers"),
            ("cache prefix broken", "unknown cache assertion"),
            ("output contains booked", "`assert:` checks the reply, a budget or the cache prefix, found `output`"),
        ],
    )
    def test_errors(self, problems, line: str, message: str) -> None:  # type: ignore[no-untyped-def]
        found = problems(spec(f"  - assert: {line}\n"))
        assert any(message in f for f in found), found

    def test_cost_needs_pricing(self, problems) -> None:  # type: ignore[no-untyped-def]
        found = problems(spec("  - assert: cost at most 1\n"))
        assert found[0].startswith("6:5: `cost` needs prices: the spec has no `pricing:`")


class TestEgressAndSecrets:
    def test_egress_needs_the_proxy_route(self, problems) -> None:  # type: ignore[no-untyped-def]
        text = "name: n\nagent:\n  command: a\n  route: base_url\nsteps:\n  - prompt: hi\n  - assert_no_egress\n"
        found = problems(text)
        assert found[0].startswith("7:5: `assert_no_egress` needs `agent.route: proxy`")
        assert "the proxy cannot see where it goes" in found[0]

    @pytest.mark.parametrize(
        ("value", "message"),
        [("api.example.com", "takes `except <hosts>`"), ("except https://x.org/a", "not a host name")],
    )
    def test_egress_errors(self, problems, value: str, message: str) -> None:  # type: ignore[no-untyped-def]
        assert message in problems(spec(f"  - assert_no_egress: {value}\n"))[0]

    def test_null_egress_value_is_the_bare_form(self, load) -> None:  # type: ignore[no-untyped-def]
        assert load(spec("  - assert_no_egress:\n")).steps[1].allowed == ()

    def test_a_literal_secret_is_never_its_own_label(self, load) -> None:  # type: ignore[no-untyped-def]
        step = load(spec("  - assert_no_secret_leak: CANARY-9f2e41\n")).steps[1]
        assert step.label == "the secret at line 6" and "CANARY" not in step.source
        assert step.value == "CANARY-9f2e41"

    def test_secret_resolution_and_minimum_length(self, load) -> None:  # type: ignore[no-untyped-def]
        loaded = load(spec("  - assert_no_secret_leak: ${TOKEN}\n"))
        assert resolve_variables(loaded, {"TOKEN": "tok-12345678"}).secrets[0].value == "tok-12345678"
        with pytest.raises(SpecError) as info:
            resolve_variables(loaded, {"TOKEN": "abc"})
        text = str(info.value)
        assert "${TOKEN} is 3 characters long" in text and "abc" not in text

    def test_where_values_inside_scopes_are_resolved(self, load) -> None:  # type: ignore[no-untyped-def]
        loaded = load(spec("  - in: subagent X\n    steps:\n      - assert_tool_call: t where a equals ${V}\n"
                           "  - assert_parallel_tool_calls: a where b equals ${V}, c\n"))
        resolved = resolve_variables(loaded, {"V": "42"})
        assert resolved.steps[1].steps[0].clauses[0].value == "42"  # type: ignore[union-attr]
        assert resolved.steps[2].calls[0].clauses[0].value == "42"  # type: ignore[union-attr]


class TestPricingAndStrictMocks:
    def test_cache_prices_and_zero(self, load) -> None:  # type: ignore[no-untyped-def]
        head = "pricing:\n  m: {input: 3, output: 15, cache_read: 0.3, cache_write: 0}\n"
        price = load(spec("", head)).pricing[0]
        assert (price.cache_read, price.cache_write) == (0.3, 0.0)

    @pytest.mark.parametrize(
        ("head", "message"),
        [
            ("pricing:\n  m: {input: 1}\n", "the price of `m` has no `output`"),
            ("pricing:\n  m: {input: -1, output: 1}\n", "must be a number of at least 0"),
            ("pricing:\n  m: {input: 1, output: 1, cached: 1}\n", "unknown key `cached`"),
            ("pricing: [m]\n", "`pricing` must be a mapping"),
            ("strict_mocks: yes please\n", "`strict_mocks` must be true or false"),
        ],
    )
    def test_errors(self, problems, head: str, message: str) -> None:  # type: ignore[no-untyped-def]
        assert any(message in f for f in problems(spec("", head)))

    def test_strict_mocks(self, load) -> None:  # type: ignore[no-untyped-def]
        assert load(spec("", "strict_mocks: true\n")).strict_mocks is True
        assert load(spec("")).strict_mocks is False


def test_subagent_name_is_stripped(load) -> None:  # type: ignore[no-untyped-def]
    step = load(spec("  - assert_subagent:   Explore  \n")).steps[1]
    assert isinstance(step, SubagentAssertion) and step.name == "Explore"
