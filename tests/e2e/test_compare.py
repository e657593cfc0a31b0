"""Compare end to end: flowproof-run --compare -> real mitmdump -> an SDK agent -> the fake model.

Each test records a tool-using conversation, then compares a live run against it
whose model answers the way a live model does: fresh tool-call ids, argument keys
in another order, prose in other case and spacing. Pairing by place in the
conversation makes that equal; a changed argument, finish reason or wording is
drift (exit 4), reported once, and the cassette is never written.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest

from flowproof.testing import FakeModelServer, Reply, Script

from .conftest import AGENTS, Flowproof, InProcessFlowproof, Ran, fingerprint, write_spec


@pytest.fixture
def flowproof(in_process_flowproof: InProcessFlowproof) -> InProcessFlowproof:
    """These tests are about what a flow does, not the runner's process: each run is the
    command line in this process, on the worker's kept proxies (tests/e2e/conftest.py)."""
    return in_process_flowproof


APIS = ("openai-chat", "openai-responses", "anthropic", "gemini")
API_HOSTS = ("api.openai.com", "api.anthropic.com", "generativelanguage.googleapis.com")
TITLE_LANE = "five-word title"

RECORDED = [
    Reply.tool_call("book_flight", {"flight": "KQ311", "seats": 2}),
    Reply.text("You are booked on KQ311, reference B-1042."),
]


#: The fake model's live-like mode: fresh ids, reordered argument keys, recased and respaced prose.
LIVE_SEED = 7


def changed(index: int, reply: Reply) -> list[Reply]:
    """The recorded script with one reply changed."""
    replies = list(RECORDED)
    replies[index] = reply
    return replies


@pytest.fixture
def model(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Starts fake model servers (replies plus a title lane); each is stopped after the test."""
    servers: list[FakeModelServer] = []

    def start(
        replies: list[Reply],
        title: list[Reply] | None = None,
        lanes: dict[str, list[Reply]] | None = None,
        live: int | None = None,
    ) -> FakeModelServer:
        all_lanes = {key: tuple(r) for key, r in (lanes or {}).items()}
        if title:
            all_lanes[TITLE_LANE] = tuple(title)
        server = FakeModelServer(Script(tuple(replies), all_lanes), live=live)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def spec(
    folder: Path, api: str, stream: bool, *, title: bool = False, handler: str | None = None, lane: str = ""
) -> Path:
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(AGENTS / 'api_loop_agent.py'))}"
    lines = [
        f"name: compare {api}{' streamed' if stream else ''}",
        "agent:",
        f"  command: {command}",
        "  timeout: 60",
        "  env:",
        f"    FP_API: {api}",
        f"    FP_STREAM: '{1 if stream else 0}'",
        f"    FP_TITLE: '{1 if title else 0}'",
        f"    FP_LANE: '{lane}'",
        "cassette: run.cassette.json",
    ]
    if handler:
        lines.append(f"on_compare: {handler}")
    lines += [
        "steps:",
        "  - prompt: Book KQ311 for two",
        "  - assert_tool_call: book_flight",
        "  - assert: reply contains 1042",  # digits: the live-like prose recases the letters
    ]
    return write_spec(folder / "run.flow.yaml", "\n".join(lines) + "\n")


def upstream(server: FakeModelServer) -> list[str]:
    return [arg for host in API_HOSTS for arg in ("--upstream", f"{host}={server.url}")]


def record(
    flowproof: Flowproof, model: Any, path: Path, title: list[Reply] | None = None, **env: str
) -> None:
    server = model(RECORDED, title)
    ran = flowproof.run(path, *upstream(server), "--record", keys=True, **env)
    assert ran.code == 0, ran.failure
    server.stop()


def compare(flowproof: Flowproof, server: FakeModelServer, path: Path, *extra: str, **env: str) -> Ran:
    cassette = path.with_name("run.cassette.json")
    before = fingerprint(cassette)
    ran = flowproof.run(path, *upstream(server), "--compare", *extra, keys=True, **env)
    # Compare never writes: not the bytes, not even the mtime, and no staging file either.
    assert fingerprint(cassette) == before
    assert sorted(p.name for p in path.parent.glob("run.cassette*")) == ["run.cassette.json"]
    return ran


def results(ran: Ran) -> list[dict[str, Any]]:
    flow = ran.report()["flows"][0]
    out: list[dict[str, Any]] = flow["compare"]["results"]
    return out


@pytest.mark.timeout(600)  # eight agents recorded, then compared: slow on a loaded machine
def test_an_unchanged_agent_against_a_live_like_model_is_equal_for_every_api(
    tmp_path: Path, flowproof: Flowproof, model: Any
) -> None:
    """Fresh ids, reordered argument keys and case/whitespace prose: every pair equal, exit 0.

    Every API, streamed and not: eight flows, recorded in one run and compared in
    another (``-j`` runs them side by side, each with its own proxy and fake model).
    """
    flows = [(api, stream) for api in APIS for stream in (True, False)]
    specs, lanes = [], []
    for api, stream in flows:
        lane = f"{api}-{'streamed' if stream else 'json'}"
        (tmp_path / lane).mkdir()
        specs.append(spec(tmp_path / lane, api, stream, lane=lane))
        lanes.append(f"[{lane}]")
    recorder = model([], lanes={lane: RECORDED for lane in lanes})
    ran = flowproof.run(*specs, *upstream(recorder), "--record", "-j", "4", keys=True, timeout=240)
    assert ran.code == 0, ran.failure
    recorder.stop()
    before = [fingerprint(p.with_name("run.cassette.json")) for p in specs]

    live = model([], lanes={lane: RECORDED for lane in lanes}, live=LIVE_SEED)
    ran = flowproof.run(*specs, *upstream(live), "--compare", "--json", "-j", "4", keys=True, timeout=240)
    assert ran.code == 0, ran.failure
    report = ran.report()["flows"]
    assert sorted(f["name"] for f in report) == sorted(f"compare {a}{' streamed' if s else ''}" for a, s in flows)
    for flow in report:
        got = [(r["kind"], r["turn"], r["equal"], r["text"]["status"]) for r in flow["compare"]["results"]]
        assert got == [("paired", 0, True, "exact"), ("paired", 1, True, "normalized")], flow["name"]
    assert [fingerprint(p.with_name("run.cassette.json")) for p in specs] == before


class TestDrift:
    def test_a_changed_argument_names_the_path_and_both_values(
        self, tmp_path: Path, flowproof: Flowproof, model: Any
    ) -> None:
        """One changed argument: exit 4, the first drift names the path, recorded and live value."""
        path = spec(tmp_path, "openai-chat", True)
        record(flowproof, model, path)
        live = changed(0, RECORDED[0].with_argument("flight", "KQ999"))
        ran = compare(flowproof, model(live, live=LIVE_SEED), path)
        assert ran.code == 4, ran.output
        assert "- tool_calls.0.arguments.flight: recorded KQ311, live KQ999" in ran.stdout
        assert "turn 1 | thread 0 | depth 4 | equal true | finish reason stop | text normalized" in ran.stdout
        assert ran.stdout.count("first drift:") == 1
        assert "replayed" not in ran.stdout and "later drift" not in ran.stdout

    def test_a_changed_finish_reason_is_drift(self, tmp_path: Path, flowproof: Flowproof, model: Any) -> None:
        """The same reply cut off at the token limit: exit 4 on the finish reason."""
        path = spec(tmp_path, "anthropic", True)
        record(flowproof, model, path)
        cut = changed(1, RECORDED[1].with_finish("length"))
        ran = compare(flowproof, model(cut, live=LIVE_SEED), path, "--json")
        assert ran.code == 4, ran.output
        last = results(ran)[1]
        assert last["differences"] == [{"path": "finish_reason", "recorded": "stop", "live": "length"}]
        assert last["text"]["status"] == "normalized"

    def test_reworded_text_is_different(self, tmp_path: Path, flowproof: Flowproof, model: Any) -> None:
        """Reworded prose is `different`: exit 4, in text, JSON and JUnit."""
        path = spec(tmp_path, "openai-responses", False)
        record(flowproof, model, path)
        reworded = changed(1, RECORDED[1].reworded("Done: two seats on KQ311, booking B-1042."))
        junit = tmp_path / "junit.xml"
        ran = compare(flowproof, model(reworded, live=LIVE_SEED), path, "--json", "--junit", str(junit))
        assert ran.code == 4, ran.output
        assert [r["text"]["status"] for r in results(ran)] == ["exact", "different"]
        suite = ET.parse(junit).getroot()
        name = "compare openai-responses [compare] turn 1 (thread 0, depth 3) [paired]"
        failure = suite.find(f"testcase[@name='{name}']/failure")
        assert failure is not None
        assert "booking b-1042" in (failure.text or "").lower()  # the live wording, recased


class TestTitleThread:
    @pytest.mark.parametrize("title_last", [True, False], ids=["title-last", "title-first"])
    def test_a_concurrent_title_call_pairs_in_its_own_thread(
        self, tmp_path: Path, flowproof: Flowproof, model: Any, title_last: bool
    ) -> None:
        """The title call pairs with its recorded turn whether it completes first or last."""
        path = spec(tmp_path, "openai-chat", True, title=True)
        record(flowproof, model, path, title=[Reply.text("Booking KQ311 for two")])
        # A delay on one side decides which call completes first.
        title = Reply.text("Booking KQ311 for two", first_chunk_delay=1.5 if title_last else 0.0)
        first = replace(RECORDED[0], first_chunk_delay=0.0 if title_last else 1.5)
        server = model([first, RECORDED[1]], title=[title], live=LIVE_SEED)
        ran = compare(flowproof, server, path, "--json")
        assert ran.code == 0, ran.failure
        by_thread = {(r["thread"], r["depth"]): (r["kind"], r["equal"]) for r in results(ran)}
        title_thread = next(r["thread"] for r in results(ran) if "kq311 for two" in r["text"]["live"].lower())
        assert by_thread[(title_thread, 2)] == ("paired", True)
        assert len(by_thread) == 3 and all(v == ("paired", True) for v in by_thread.values())
        order = [r["thread"] for r in results(ran)]
        assert (order[-1] == title_thread) is title_last


HANDLER = '''
import json
from pathlib import Path


def on_compare(result):
    with open(Path(__file__).with_name("seen.jsonl"), "a", encoding="utf-8") as fh:
        fh.write(json.dumps(result.to_json()) + "\\n")
'''


def test_a_handler_receives_every_result_and_decides(tmp_path: Path, flowproof: Flowproof, model: Any) -> None:
    """Equal, drifted, extra and missing results all reach the handler, which accepts them: exit 0.

    The handler is on the run's PYTHONPATH only, and the worker's kept proxy may have been
    started by an earlier test: it is imported from the folders the run names."""
    (tmp_path / "compare_checks.py").write_text(HANDLER)
    seen = tmp_path / "seen.jsonl"
    path = spec(tmp_path, "openai-chat", False, title=True, handler="compare_checks:on_compare")
    record(flowproof, model, path, title=[Reply.text("Booking KQ311 for two")], PYTHONPATH=str(tmp_path))
    assert not seen.exists()  # a record compares nothing
    # Live: no title call this time (missing), and one more tool round (drift, then extra).
    path.write_text(path.read_text().replace("FP_TITLE: '1'", "FP_TITLE: '0'"))
    server = model([RECORDED[0], RECORDED[0], RECORDED[1]], live=LIVE_SEED)
    ran = compare(flowproof, server, path, "--json", PYTHONPATH=str(tmp_path))
    assert ran.code == 0, ran.failure
    got = [json.loads(line) for line in seen.read_text().splitlines()]
    assert [(r["kind"], r["equal"]) for r in got] == [
        ("paired", True), ("paired", False), ("extra", False), ("missing", False),
    ]
    assert got == results(ran)
