"""Suite-wide isolation."""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Iterator

import pytest
import structlog

import flowproof.log
from tests.cassette_schema import cassette_problems


def pytest_collection_finish(session: pytest.Session) -> None:
    """``FLOWPROOF_TEST_TRACEMALLOC=N`` traces allocations (N frames) while the tests run, in
    the test processes only (not in the agents and proxies they start, as PYTHONTRACEMALLOC
    would; nor while collecting, which it slows tenfold), so a leaked socket's
    ResourceWarning says where the socket was made."""
    frames = os.environ.get("FLOWPROOF_TEST_TRACEMALLOC", "")
    if frames.isdigit() and int(frames) > 0:
        tracemalloc.start(int(frames))


@pytest.fixture(autouse=True)
def _structlog_defaults() -> Iterator[None]:
    """structlog's configuration is process-wide, and an in-process ``flowproof-run`` (click's
    CliRunner) configures it with the run's level: a ``-q`` run would otherwise filter out the
    lines a later test captures."""
    yield
    structlog.reset_defaults()
    flowproof.log.reset()


@pytest.fixture(scope="session", autouse=True)
def _every_cassette_matches_the_shipped_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """At the end of the session, every cassette the tests left in their temporary folders
    (recorded through the real addon by tests/e2e, written by the runner, or by a test) that
    flowproof reads must match flowproof/schemas/cassette.schema.json: the schema users
    validate against can never refuse a cassette flowproof wrote or reads."""
    yield
    _checked, problems = cassette_problems(tmp_path_factory.getbasetemp().rglob("*.json"))
    if problems:
        pytest.fail("cassettes that flowproof reads but its cassette schema refuses (update "
                    "flowproof/schemas/cassette.schema.json with the format):\n" + "\n".join(problems[:20]),
                    pytrace=False)
