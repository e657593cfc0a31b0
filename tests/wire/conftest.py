"""Golden-file helpers for every codec's tests (tests/wire/data/<provider dir>/<case>.*).

A case is ``<case>.request.json`` or ``<case>.response.json`` / ``<case>.response.sse``
plus ``<case>.expected.json``: the expected `RequestView` or `ResponseView` as
JSON, with an optional ``"source"`` key citing where the payload's shape comes from.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flowproof.turns import RequestView, ResponseView
from flowproof.wire.base import Codec
from flowproof.wire.sse import SSEEvent, parse_sse

DATA_DIR = Path(__file__).parent / "data"


def view_to_json(view: RequestView | ResponseView) -> dict[str, Any]:
    """A view as plain JSON, in the shape of the ``*.expected.json`` files."""
    if isinstance(view, ResponseView):
        return {
            "text": view.text,
            "tool_calls": [
                {"name": c.name, "call_id": c.call_id, "arguments_raw": c.arguments_raw}
                for c in view.tool_calls
            ],
            "finish_reason": view.finish_reason.value,
            "raw_finish_reason": view.raw_finish_reason,
            "model": view.model,
            "usage": dataclasses.asdict(view.usage) if view.usage is not None else None,
            # Only where the API has one (Responses): the other providers' files do not list it.
            **({"response_id": view.response_id} if view.response_id is not None else {}),
        }
    out = dataclasses.asdict(view)
    if view.previous_response_id is None:
        out.pop("previous_response_id")
    out["tools"] = list(view.tools)
    out["roles"] = list(view.roles)
    out["tool_results"] = [dataclasses.asdict(r) for r in view.tool_results]
    return out


def view_of_file(codec: Codec, path: Path) -> dict[str, Any]:
    """Run ``codec`` on one golden input file (request, JSON response or SSE) as plain JSON."""
    body = path.read_bytes()
    if path.name.endswith(".request.json"):
        return view_to_json(codec.parse_request(body))
    if path.name.endswith(".response.json"):
        return view_to_json(codec.parse_response(body))
    return view_to_json(codec.parse_events(parse_sse(body)))


def golden_cases(directory: Path) -> list[Any]:
    """One ``pytest.param(source, expected, id=case)`` per ``<case>.expected.json`` in ``directory``."""
    cases = []
    for expected in sorted(directory.glob("*.expected.json")):
        case = expected.name.removesuffix(".expected.json")
        (source,) = [p for p in directory.glob(f"{case}.*") if p != expected]
        cases.append(pytest.param(source, expected, id=case))
    return cases


class Golden:
    """Reads the golden files of one provider directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, name: str) -> Path:
        """The path of ``name`` inside the provider directory (it must exist)."""
        path = self.directory / name
        assert path.is_file(), f"missing golden file {path.name} in {self.directory.name}"
        return path

    def bytes(self, name: str) -> bytes:
        """The exact bytes of a golden file."""
        return self.path(name).read_bytes()

    def json(self, name: str) -> Any:
        """A golden file parsed as JSON."""
        return json.loads(self.bytes(name))

    def events(self, name: str) -> list[SSEEvent]:
        """A ``.sse`` golden file decoded into events."""
        return parse_sse(self.bytes(name))

    def expected(self, case: str) -> dict[str, Any]:
        """``<case>.expected.json`` without its ``source`` note."""
        data = self.json(f"{case}.expected.json")
        data.pop("source", None)
        return data

    def cases(self, suffix: str) -> list[str]:
        """The case names having both ``<case><suffix>`` and ``<case>.expected.json``."""
        return sorted(
            p.name[: -len(suffix)]
            for p in self.directory.glob(f"*{suffix}")
            if (self.directory / f"{p.name[: -len(suffix)]}.expected.json").is_file()
        )

    def assert_view(self, view: RequestView | ResponseView, case: str) -> None:
        """Assert ``view`` equals ``<case>.expected.json`` (keys absent there are not compared)."""
        expected = self.expected(case)
        actual = {k: v for k, v in view_to_json(view).items() if k in expected}
        assert actual == expected


@pytest.fixture
def golden_dir() -> Iterator[Path]:
    """The root of the golden data (``tests/wire/data``)."""
    yield DATA_DIR


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Golden:
    """A `Golden` reader for the provider directory named by the test module's ``GOLDEN_DIR``."""
    directory = getattr(request.module, "GOLDEN_DIR", None)
    assert directory, (
        "set GOLDEN_DIR = '<provider dir>' in the test module to use the golden fixture"
    )
    return Golden(DATA_DIR / directory)
