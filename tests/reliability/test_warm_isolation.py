"""Issue 19 item 5: one flow's work cannot stall another flow on the same warm proxy.

Two flows run side by side (`-j 2`, so they share one warm mitmdump): one whose
`volatile` pattern backtracks catastrophically, or whose compare handler does not
return, and an ordinary one whose model call is in flight meanwhile. The ordinary
flow passes as if it ran alone; the other fails, and says why.
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flowproof.testing import FakeModelServer, Reply, Script
from tests.e2e.conftest import AGENTS, Flowproof, write_spec

#: What `re` needs about 80 s for (each `a` more is x1.6): a bound of seconds shows at once.
RUNAWAY = "a" * 40 + "!"
API_HOSTS = ("api.openai.com", "api.anthropic.com")
SLOW_HANDLER = """
import time


def on_compare(result):
    time.sleep(40)  # a handler that calls something slow, or hangs
"""


def replies(first_delay: float = 0.0) -> list[Reply]:
    first = Reply.tool_call("book_flight", {"flight": "KQ311", "seats": 2})
    if first_delay:
        from dataclasses import replace

        first = replace(first, first_chunk_delay=first_delay)
    return [first, Reply.text("You are booked on KQ311, reference B-1042.")]


def flow_spec(folder: Path, name: str, *, prompt: str = "Book KQ311 for two", timeout: float = 30,
              extra: tuple[str, ...] = ()) -> Path:
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(AGENTS / 'api_loop_agent.py'))}"
    return write_spec(folder / f"{name}.flow.yaml", "\n".join([
        f"name: {name}",
        "agent:",
        f"  command: {command}",
        f"  timeout: {timeout}",
        "  env:",
        "    FP_API: openai-chat",
        "    FP_STREAM: '0'",
        f"    FP_LANE: '{name}'",
        f"cassette: {name}.cassette.json",
        *extra,
        "steps:",
        f"  - prompt: '{prompt}'",
        "  - assert_tool_call: book_flight",
        "",
    ]))


@pytest.fixture
def lanes() -> Iterator[Any]:
    """A fake model answering each flow from its own lane (its name is in its system prompt)."""
    servers: list[FakeModelServer] = []

    def start(**by_flow: list[Reply]) -> list[str]:
        server = FakeModelServer(Script((), {f"[{name}]": tuple(r) for name, r in by_flow.items()}))
        server.start()
        servers.append(server)
        return [arg for host in API_HOSTS for arg in ("--upstream", f"{host}={server.url}")]

    yield start
    for server in servers:
        server.stop()


def flows(ran: Any) -> dict[str, dict[str, Any]]:
    return {Path(f["spec"]).name.split(".")[0]: f for f in ran.report()["flows"]}


class TestOneWarmProxyTwoFlows:
    def test_a_backtracking_volatile_pattern_stops_only_its_own_flow(
        self, tmp_path: Path, flowproof: Flowproof, lanes: Any
    ) -> None:
        hostile = flow_spec(tmp_path, "hostile", prompt=RUNAWAY, extra=(
            "volatile:", "  - name: runaway", "    path: messages.1.content", "    pattern: '(a|aa)+$'",
        ))
        ordinary = flow_spec(tmp_path, "ordinary")
        upstream = lanes(hostile=replies(), ordinary=replies(first_delay=2.0))
        started = time.monotonic()
        ran = flowproof.run(hostile, ordinary, "--record", "-j", "2", "--json", *upstream,
                            keys=True, timeout=150)
        took = time.monotonic() - started
        by_name = flows(ran)
        assert by_name["ordinary"]["exit_code"] == 0, ran.failure
        assert (tmp_path / "ordinary.cassette.json").exists()
        bad = by_name["hostile"]
        assert bad["exit_code"] != 0 and not (tmp_path / "hostile.cassette.json").exists()
        said = " ".join([bad["error"] or "", *bad["proxy_errors"]])
        assert "hostile.flow.yaml:" in said and "volatile rule `runaway` gave up: /(a|aa)+$/" in said, said
        assert took < 60, f"the run took {took:.0f}s"

    def test_a_compare_handler_that_does_not_return_stops_only_its_own_flow(
        self, tmp_path: Path, flowproof: Flowproof, lanes: Any
    ) -> None:
        (tmp_path / "slow_checks.py").write_text(SLOW_HANDLER)
        # On one shared event loop the handler's 40 s would outlast the ordinary agent's 15 s.
        slow = flow_spec(tmp_path, "slow", timeout=15, extra=("on_compare: slow_checks:on_compare",))
        ordinary = flow_spec(tmp_path, "ordinary", timeout=15)
        env = {"PYTHONPATH": str(tmp_path)}
        recorded = flowproof.run(slow, ordinary, "--record", "-j", "2",
                                 *lanes(slow=replies(), ordinary=replies()), keys=True, **env)
        assert recorded.code == 0, recorded.output
        ran = flowproof.run(slow, ordinary, "--compare", "-j", "2", "--json",
                            *lanes(slow=replies(), ordinary=replies(first_delay=3.0)),
                            keys=True, timeout=120, **env)
        by_name = flows(ran)
        assert by_name["ordinary"]["exit_code"] == 0, ran.failure
        bad = by_name["slow"]
        assert bad["exit_code"] != 0
        said = " ".join([bad["error"] or "", *bad["proxy_errors"]])
        assert "Compare.response hook was still running" in said, said
