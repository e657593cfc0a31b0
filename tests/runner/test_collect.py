"""Tests for flowproof.runner.collect: files, directories and globs become one list of specs."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowproof.errors import FlowproofError
from flowproof.runner.collect import collect_specs


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("name: x\n", encoding="utf-8")
    return path


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    touch(tmp_path / "a.flow.yaml")
    touch(tmp_path / "nested" / "deeper" / "b.flow.yaml")
    touch(tmp_path / "nested" / "c.flow.yaml")
    touch(tmp_path / "nested" / "notes.yaml")  # not a flow: wrong suffix
    touch(tmp_path / ".hidden" / "h.flow.yaml")
    touch(tmp_path / "node_modules" / "pkg" / "n.flow.yaml")
    return tmp_path


def names(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


class TestCollect:
    def test_directory_is_every_flow_below_it_sorted(self, tree: Path) -> None:
        """A directory means its *.flow.yaml files, recursively, sorted by path, without hidden dirs or node_modules."""
        assert names(collect_specs([tree])) == ["a.flow.yaml", "c.flow.yaml", "b.flow.yaml"]

    def test_file_is_itself_whatever_its_name(self, tree: Path) -> None:
        """A file named on the command line is a spec even without the .flow.yaml suffix."""
        assert collect_specs([tree / "nested" / "notes.yaml"]) == [tree / "nested" / "notes.yaml"]

    def test_glob_is_expanded_recursively(self, tree: Path) -> None:
        """A quoted glob with ** matches at any depth."""
        assert names(collect_specs([f"{tree}/nested/**/*.flow.yaml"])) == ["c.flow.yaml", "b.flow.yaml"]

    def test_each_spec_once_in_argument_order(self, tree: Path) -> None:
        """A spec named twice (as a file and through its directory) runs once, where first named."""
        specs = collect_specs([tree / "nested" / "c.flow.yaml", tree / "nested", f"{tree}/*.flow.yaml"])
        assert names(specs) == ["c.flow.yaml", "b.flow.yaml", "a.flow.yaml"]

    @pytest.mark.parametrize(
        ("argument", "words"),
        [
            ("missing.flow.yaml", "no such spec file"),
            ("*.nothing.yaml", "matches no spec file"),
            ("empty", "no *.flow.yaml file"),
        ],
    )
    def test_an_argument_that_names_nothing_is_a_usage_error(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argument: str, words: str
    ) -> None:
        """Naming nothing is one paragraph naming the argument, not an empty run."""
        (tmp_path / "empty").mkdir()
        monkeypatch.chdir(tmp_path)
        with pytest.raises(FlowproofError, match=r"^.*" + argument.replace("*", r"\*")) as info:
            collect_specs([argument])
        assert words in str(info.value) and info.value.exit_code == 2
