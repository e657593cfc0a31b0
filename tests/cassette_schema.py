"""The shipped cassette JSON Schema (flowproof/schemas/cassette.schema.json) against cassettes.

The schema must accept every cassette flowproof accepts: `tests/conftest.py` checks every
cassette the suite leaves in its temporary folders at the end of the session, and
tests/test_schemas.py the example cassettes, flowproof's own writer and the refusals.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from flowproof.cassette import loads_cassette
from flowproof.cassette_check import check_cassette
from flowproof.errors import FlowproofError

#: A file this large is not one of the suite's cassettes (and reading it would cost the session).
_TOO_BIG = 64 * 1024 * 1024


@cache
def cassette_validator() -> jsonschema.Draft202012Validator:
    text = resources.files("flowproof").joinpath("schemas/cassette.schema.json").read_text(encoding="utf-8")
    schema = json.loads(text)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def schema_errors(doc: Any) -> list[str]:
    """Every place ``doc`` breaks the cassette schema, as ``$.path: message``."""
    return [f"{e.json_path}: {e.message}" for e in cassette_validator().iter_errors(doc)]


def accepted_by_flowproof(text: str, path: Path | str) -> bool:
    """True when flowproof reads ``text`` as a cassette it can replay (the loader and the checks)."""
    try:
        check_cassette(loads_cassette(text, path), path)
    except FlowproofError:
        return False
    return True


def cassette_problems(paths: Iterable[Path]) -> tuple[int, list[str]]:
    """(cassettes checked, problems) over the JSON files in ``paths`` that are cassettes
    flowproof accepts; a file that is not one (a script, a deliberately broken cassette) is
    skipped: what flowproof refuses is tested against the schema case by case."""
    checked, problems = 0, []
    for path in paths:
        try:
            if not path.is_file() or path.stat().st_size > _TOO_BIG:
                continue
            text = path.read_text(encoding="utf-8", errors="surrogateescape")
            doc = json.loads(text)
        except (OSError, ValueError, RecursionError):
            continue
        if not (isinstance(doc, dict) and "turns" in doc and "format" in doc):
            continue
        if not accepted_by_flowproof(text, path):
            continue
        checked += 1
        problems += [f"{path}: {error}" for error in schema_errors(doc)]
    return checked, problems
