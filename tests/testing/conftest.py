"""Fixtures for the fake model server's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .helpers import close_clients


@pytest.fixture(autouse=True)
def _close_sdk_clients() -> Iterator[None]:
    """The SDK clients a test made through the helpers are closed when it ends."""
    yield
    close_clients()
