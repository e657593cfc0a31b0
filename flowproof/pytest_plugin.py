"""The pytest plugin: every ``*.flow.yaml`` pytest is pointed at is one test.

Registered through the ``pytest11`` entry point, so installing flowproof is
enough: ``pytest specs/`` runs each flow as ``flowproof-run`` would, and a
failing flow's report is the failure text — no Python traceback. The flows of
one pytest process share one warm proxy (a session each, with its own listeners
on free ports), so under pytest-xdist each worker starts one proxy and
``pytest -n 4`` is safe. The mode is
``--flowproof-mode record|replay|compare`` (default replay).

Python tests that drive their agent themselves assert on a trajectory with the
same matchers: ``flowproof.assert_tool_call(trajectory, "…")`` (`flowproof.expect`).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flowproof.errors import FlowFailure, FlowproofError
from flowproof.runner.collect import FLOW_SUFFIX
from flowproof.runner.env import default_ca_dir, ensure_ca
from flowproof.runner.flow import MODES, RunOptions, run_flow
from flowproof.runner.report import render_flow, next_step
from flowproof.runner.warm import ProxyPool, warm_enabled
from flowproof.spec import load_spec

__all__ = ["FlowFile", "FlowItem"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("flowproof", "flowproof flow specs (*.flow.yaml)")
    group.addoption(
        "--flowproof-mode",
        choices=MODES,
        default="replay",
        help="How *.flow.yaml items run: replay the cassette strictly (default), record a "
        "new one (kept only if the flow passes), or compare live against it.",
    )


#: The warm proxies of this pytest process (one per xdist worker), closed at unconfigure.
_POOL = pytest.StashKey[ProxyPool]()


def proxy_pool(config: pytest.Config) -> ProxyPool:
    """This pytest process's warm proxies, created on the first flow."""
    pool = config.stash.get(_POOL, None)
    if pool is None:
        pool = config.stash[_POOL] = ProxyPool()
    return pool


def pytest_unconfigure(config: pytest.Config) -> None:
    pool = config.stash.get(_POOL, None)
    if pool is not None:
        pool.close()


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.name.endswith(FLOW_SUFFIX):
        flow_file: FlowFile = FlowFile.from_parent(parent, path=file_path)
        return flow_file
    return None


def flow_id(path: Path) -> str:
    """The item name ``pytest -v`` shows: the spec's ``name:``, or the file's stem when the
    spec does not load (the item then fails with the spec error)."""
    try:
        name = load_spec(path).name
    except FlowproofError:
        name = ""
    name = " ".join(name.split()) or path.name.removesuffix(FLOW_SUFFIX)
    # `::` separates the parts of a node id; `[`/`]` would read as parameters.
    return name.replace("::", ": ").replace("[", "(").replace("]", ")")


class FlowFile(pytest.File):
    """A spec file: one flow, so one item."""

    def collect(self) -> Iterator[pytest.Item]:
        item: FlowItem = FlowItem.from_parent(self, name=flow_id(self.path))
        yield item


class FlowItem(pytest.Item):
    """One flow, run as ``flowproof-run`` runs it; fails with flowproof's report."""

    def runtest(self) -> None:
        mode = str(self.config.getoption("flowproof_mode"))
        _shared_ca()
        pool = proxy_pool(self.config) if warm_enabled() else None
        result = run_flow(self.path, RunOptions(mode=mode, proxies=pool))
        report = render_flow(result) + "\n" + next_step(result)
        self.user_properties.append(("flowproof_exit_code", result.exit_code))
        # Which warm proxy served the flow (none when it needed one of its own): the proof
        # that a worker starts one proxy for all its flows.
        self.user_properties.append(("flowproof_proxy_pid", pool.pids[-1] if pool and pool.pids else 0))
        if not result.passed:
            raise FlowFailure(report, result.exit_code)
        # A pass has something to read too (the steps, a record's heal diff): `pytest -rP`.
        self.add_report_section("call", "flowproof", report)

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None
    ) -> str | Any:
        if isinstance(excinfo.value, FlowFailure):
            return excinfo.value.report
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"flow: {self.name}"


def _shared_ca() -> None:
    """Create the CA under a file lock: xdist workers start flows at the same moment, and two
    first-time CA creations racing would leave a proxy and a trust bundle that disagree."""
    ca_dir = default_ca_dir(os.environ)
    ca_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(ca_dir.parent / f".{ca_dir.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ensure_ca(ca_dir)
