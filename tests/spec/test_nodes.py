"""Tests for the located-node walker: each reader reports a problem at the node, never raises."""

from __future__ import annotations

import pytest
from yaml.nodes import Node

from flowproof.spec.nodes import NodeWalker, kind_of
from flowproof.spec.yamlsafe import compose


def node(text: str) -> Node:
    root = compose(text, "s.yaml")
    assert root is not None
    return root


@pytest.fixture
def walker() -> NodeWalker:
    return NodeWalker("s.yaml")


def rendered(walker: NodeWalker) -> list[str]:
    return [str(p) for p in walker.problems]


class TestReaders:
    def test_mapping_reports_duplicates_and_merge_keys(self, walker: NodeWalker) -> None:
        entries = walker.mapping(node("a: 1\nb: 2\na: 3\n"), "the thing")
        assert entries is not None and list(entries) == ["a", "b"]
        assert rendered(walker) == ["s.yaml:3:1: `a` appears twice in the thing — keep only one"]

    def test_mapping_of_a_list(self, walker: NodeWalker) -> None:
        assert walker.mapping(node("- a\n"), "`x`") is None
        assert "`x` must be a mapping, found a list" in rendered(walker)[0]

    def test_check_keys_suggests(self, walker: NodeWalker) -> None:
        entries = walker.mapping(node("nmae: 1\n"), "`x`")
        assert entries is not None
        walker.check_keys(entries, ("name",), "`x`")
        assert rendered(walker) == ["s.yaml:1:1: unknown key `nmae` in `x` — did you mean `name`?"]

    def test_sequence_null_is_empty(self, walker: NodeWalker) -> None:
        root = node("a:\n")
        assert walker.sequence(root.value[0][1], "`a`") == []
        assert walker.problems == []

    def test_text_keeps_what_was_written(self, walker: NodeWalker) -> None:
        root = node("a: 8080\nb: ''\n")
        assert walker.text(root.value[0][1], "`a`") == "8080"
        assert walker.text(root.value[1][1], "`b`") is None
        assert walker.text(root.value[1][1], "`b`", allow_empty=True) == ""

    def test_template_checks_variable_syntax_at_its_column(self, walker: NodeWalker) -> None:
        root = node("a: go ${BAD-NAME}\n")
        assert walker.template(root.value[0][1], "`a`") is None
        assert rendered(walker)[0].startswith("s.yaml:1:7:")

    def test_boolean_and_number(self, walker: NodeWalker) -> None:
        root = node("a: true\nb: 'true'\nc: 2.5\nd: -1\n")
        values = [v for _k, v in root.value]
        assert walker.boolean(values[0], "`a`") is True
        assert walker.boolean(values[1], "`b`") is None
        assert walker.number(values[2], "`c`") == 2.5
        assert walker.number(values[3], "`d`") is None
        assert len(walker.problems) == 2

    def test_result_is_plain_data(self, walker: NodeWalker) -> None:
        root = node("a: {x: [1, 2.5, true, null, text, 2026-01-01]}\n")
        assert walker.result(root.value[0][1]) == {"x": [1, 2.5, True, None, "text", "2026-01-01"]}

    def test_a_self_referring_alias_is_a_problem(self, walker: NodeWalker) -> None:
        root = node("a: &x [*x]\n")
        assert walker.result(root.value[0][1]) is None
        assert "refers to itself" in rendered(walker)[0]

    def test_kind_of(self) -> None:
        root = node("a: ~\nb: [1]\nc: {}\nd: " + "x" * 50 + "\n")
        kinds = [kind_of(v) for _k, v in root.value]
        assert kinds[:3] == ["nothing", "a list", "a mapping"]
        assert kinds[3].endswith("...`")
