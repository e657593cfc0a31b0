"""Suite-wide isolation."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import structlog


@pytest.fixture(autouse=True)
def _structlog_defaults() -> Iterator[None]:
    """structlog's configuration is process-wide, and an in-process ``flowproof-run`` (click's
    CliRunner) configures it with the run's level: a ``-q`` run would otherwise filter out the
    lines a later test captures."""
    yield
    structlog.reset_defaults()
