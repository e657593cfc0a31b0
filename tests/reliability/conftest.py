"""The reliability tests drive real ``flowproof-run`` processes, like the end-to-end tests:
they share that suite's fixtures (a session CA, private example copies, fake model
servers, and the check that no process is left behind)."""

from __future__ import annotations

from tests.e2e.conftest import (  # noqa: F401  (fixtures are found by name)
    examples,
    fake_model,
    flowproof,
    flowproof_ca,
    no_process_left_behind,
)
