"""Tests for the YAML safety layer: limits, aliases and composing into located nodes."""

from __future__ import annotations

from pathlib import Path

import pytest
from yaml.nodes import MappingNode

from flowproof.errors import SpecError
from flowproof.spec.yamlsafe import MAX_ALIASES, MAX_SPEC_BYTES, compose, read_limited


def problem_of(text: str) -> str:
    with pytest.raises(SpecError) as info:
        compose(text, "s.yaml")
    assert len(info.value.problems) == 1
    return str(info.value.problems[0])


class TestCompose:
    def test_nodes_keep_their_position(self) -> None:
        root = compose("name: n\nagent:\n  command: a\n", "s.yaml")
        assert isinstance(root, MappingNode)
        key, value = root.value[1]
        assert (key.value, key.start_mark.line, value.start_mark.column) == ("agent", 1, 2)

    def test_empty_text_is_none(self) -> None:
        assert compose("", "s.yaml") is None
        assert compose("# only a comment\n", "s.yaml") is None

    def test_too_big_is_refused_before_parsing(self) -> None:
        assert "over the" in problem_of("a: " + "x" * (MAX_SPEC_BYTES + 1))

    def test_too_many_aliases_names_the_first_alias_past_the_limit(self) -> None:
        text = "a: &x 1\nb: [" + ", ".join(["*x"] * (MAX_ALIASES + 1)) + "]\n"
        found = problem_of(text)
        assert found.startswith("s.yaml:2:") and f"more than {MAX_ALIASES} YAML aliases" in found

    def test_an_alias_bomb_is_refused_before_it_is_expanded(self) -> None:
        levels = ["a: &a [" + ",".join(['"lol"'] * 9) + "]"]
        for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
            levels.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
        found = problem_of("\n".join(levels) + "\n")
        assert "alias bomb" in found

    def test_yaml_syntax_error_has_line_and_column(self) -> None:
        assert problem_of("a: [1\nb: 2\n").startswith("s.yaml:2:")

    def test_reader_error_has_line_and_column(self) -> None:
        assert problem_of("a: 1\nb: x\x07y\n").startswith("s.yaml:2:5: invalid YAML")

    def test_deep_nesting_is_a_spec_error(self) -> None:
        assert "nests too deeply" in problem_of("a: " + "[" * 5000 + "]" * 5000)


class TestReadLimited:
    def test_reads_utf8(self, tmp_path: Path) -> None:
        path = tmp_path / "s.yaml"
        path.write_text("name: ü\n", encoding="utf-8")
        assert read_limited(path) == "name: ü\n"

    def test_a_huge_file_is_refused_by_its_size(self, tmp_path: Path) -> None:
        path = tmp_path / "s.yaml"
        path.write_bytes(b"#" * (MAX_SPEC_BYTES + 1))
        with pytest.raises(SpecError, match="byte limit"):
            read_limited(path)

    @pytest.mark.parametrize(
        ("make", "message"),
        [
            (lambda p: None, "does not exist"),
            (lambda p: p.mkdir(), "is a directory"),
            (lambda p: p.write_bytes(b"\xff"), "not UTF-8"),
        ],
    )
    def test_unreadable_files(self, tmp_path: Path, make: object, message: str) -> None:
        path = tmp_path / "s.yaml"
        make(path)  # type: ignore[operator]
        with pytest.raises(SpecError, match=message):
            read_limited(path)
