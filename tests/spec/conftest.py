"""Fixtures for the flow-spec tests: write a spec into tmp_path and load it."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from flowproof.errors import SpecError
from flowproof.spec import FlowSpec, load_spec


@pytest.fixture
def write_spec(tmp_path: Path) -> Callable[..., Path]:
    """Write dedented YAML text to ``tmp_path/<name>`` and return the path."""

    def write(text: str, name: str = "t.flow.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


@pytest.fixture
def load(write_spec: Callable[..., Path]) -> Callable[..., FlowSpec]:
    """Write and load a spec in one call."""

    def do(text: str, name: str = "t.flow.yaml") -> FlowSpec:
        return load_spec(write_spec(text, name))

    return do


@pytest.fixture
def problems(write_spec: Callable[..., Path]) -> Callable[..., list[str]]:
    """Write a spec that must fail and return its problems as ``line:col: message — hint``."""

    def do(text: str, name: str = "t.flow.yaml") -> list[str]:
        path = write_spec(text, name)
        with pytest.raises(SpecError) as info:
            load_spec(path)
        prefix = f"{path}:"
        out = []
        for problem in info.value.problems:
            rendered = str(problem)
            assert rendered.startswith(prefix)
            out.append(rendered.removeprefix(prefix))
        return out

    return do
