"""Tests for flowproof.runner.session, with the stand-in addon: the environment a session
sets and puts back, its verdict, and the recording it keeps or leaves alone. The real proxy
and a real SDK client are exercised in tests/test_pytest_fixture.py."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from flowproof.compare import compare_responses
from flowproof.divergence import Divergence
from flowproof.errors import (
    EXIT_AGENT,
    EXIT_DIVERGENCE,
    CassetteNotFoundError,
    FlowFailure,
    FlowproofError,
)
from flowproof.runner.env import PLACEHOLDER_KEY, CAFiles
from flowproof.runner.session import ProxySession, session_report
from flowproof.turns import FinishReason, ResponseView

from .conftest import FAKE_ADDON
from .helpers import BOOKING_TURNS, cassette_text, turn_events, write_script

#: An unequal compare result, as the comparing addon logs it.
DRIFT = compare_responses(ResponseView("Booked.", (), FinishReason.STOP), ResponseView("Sorry.", (), FinishReason.STOP),
                          turn=2, live_call=2, thread=0, depth=3).to_json()


@pytest.fixture(autouse=True)
def stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOWPROOF_ADDON_SCRIPT", str(FAKE_ADDON))
    for name in ("OPENAI_API_KEY", "HTTPS_PROXY", "https_proxy", "FLOWPROOF_UPSTREAM", "FLOWPROOF_EXTRA_HOSTS",
                 "FAKE_FLOWPROOF_SCRIPT", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)


def script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **content: object) -> None:
    monkeypatch.setenv("FAKE_FLOWPROOF_SCRIPT", str(write_script(tmp_path / "script.json", **content)))


def scripted_events_written(session: ProxySession, count: int) -> None:
    """Wait until the stand-in addon has written its ``count`` scripted events (it writes them
    just after ``ready``, so they may still be coming when `start` returns)."""
    deadline = time.monotonic() + 10
    while len(session.events()) < count + 1 and time.monotonic() < deadline:
        time.sleep(0.02)


def test_the_environment_points_at_the_proxy_and_is_put_back(
    tmp_path: Path, ca_files: CAFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    cassette = tmp_path / "c.json"
    cassette.write_text(cassette_text(BOOKING_TURNS))
    script(tmp_path, monkeypatch, events=turn_events(BOOKING_TURNS))
    monkeypatch.setenv("SSL_CERT_FILE", "/elsewhere.pem")
    before = dict(os.environ)
    session = ProxySession(cassette, ca=ca_files).start()
    try:
        assert os.environ["HTTPS_PROXY"] == session.proxy_url
        assert os.environ["SSL_CERT_FILE"] == str(ca_files.bundle)
        # Replay: no request reaches a provider, so an SDK that insists on a key gets a placeholder.
        assert os.environ["OPENAI_API_KEY"] == PLACEHOLDER_KEY
        scripted_events_written(session, len(turn_events(BOOKING_TURNS)))
        assert [c.name for c in session.trajectory().tool_calls] == ["search_flights", "create_booking"]
    finally:
        result = session.close()
    assert dict(os.environ) == before
    assert result.passed, result.error
    assert result.turns == 3 and result.tool_calls == ("search_flights", "create_booking")
    assert len(session.trajectory().tool_calls) == 2  # still readable once closed


def test_the_environment_settings_are_flowproof_runs(
    tmp_path: Path, ca_files: CAFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FLOWPROOF_EXTRA_HOSTS reaches the session as it reaches flowproof-run: the gateway is
    kept out of NO_PROXY, so its calls go through the proxy (the session used to read only
    FLOWPROOF_UPSTREAM, and the agent's NO_PROXY sent a gateway's calls straight past it)."""
    cassette = tmp_path / "c.json"
    cassette.write_text(cassette_text(BOOKING_TURNS))
    monkeypatch.setenv("NO_PROXY", "gw.internal,example.org")
    monkeypatch.setenv("FLOWPROOF_EXTRA_HOSTS", "gw.internal")
    monkeypatch.setenv("FLOWPROOF_UPSTREAM", "api.openai.com=http://127.0.0.1:9")
    session = ProxySession(cassette, ca=ca_files, upstream=["api.anthropic.com=http://127.0.0.1:8"]).start()
    try:
        no_proxy = os.environ["NO_PROXY"].split(",")
        assert "gw.internal" not in no_proxy and "example.org" in no_proxy
    finally:
        session.close()
    assert list(session.upstream) == ["api.openai.com", "api.anthropic.com"]
    assert session.extra_hosts == ("gw.internal",)


def test_a_bad_environment_upstream_is_refused_before_anything_starts(
    tmp_path: Path, ca_files: CAFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one parser refuses a mapping with a password (the addon used to drop it silently)."""
    monkeypatch.setenv("FLOWPROOF_UPSTREAM", "api.openai.com=http://user:hunter2-secret@127.0.0.1:9")
    with pytest.raises(FlowproofError, match="FLOWPROOF_UPSTREAM .*user name or password") as caught:
        ProxySession(tmp_path / "c.json", ca=ca_files)
    assert "hunter2-secret" not in str(caught.value)
    assert "HTTPS_PROXY" not in os.environ


def test_replay_without_a_cassette_says_how_to_record(tmp_path: Path, ca_files: CAFiles) -> None:
    session = ProxySession(tmp_path / "none.json", ca=ca_files, rerecord="pytest t.py::x --flowproof-mode record")
    with pytest.raises(CassetteNotFoundError, match=r"record one first with: pytest t.py::x --flowproof-mode record"):
        session.start()
    assert "HTTPS_PROXY" not in os.environ


def test_a_divergence_fails_the_block_with_the_report(
    tmp_path: Path, ca_files: CAFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    cassette = tmp_path / "c.json"
    cassette.write_text(cassette_text(BOOKING_TURNS))
    divergence = {"event": "divergence", "id": "f1", "divergence": Divergence("unmatched", 1, None).to_json()}
    script(tmp_path, monkeypatch, events=[divergence])
    session = ProxySession(cassette, ca=ca_files, name="t.py::x", rerecord="pytest t.py::x --flowproof-mode record")
    with pytest.raises(FlowFailure) as failure, session:
        raise RuntimeError("Error code: 400 - flowproof replay diverged. The full report is in /tmp/x")
    assert failure.value.exit_code == EXIT_DIVERGENCE
    report = failure.value.report
    assert "replay divergence" in report and "request 1 matches no recorded turn" in report
    assert "the test then failed with: RuntimeError: Error code: 400 - flowproof replay diverged\n" in report
    assert report.endswith("otherwise fix the agent.")
    # The record command is data the report is rendered with: the pytest one, given once, at the end.
    assert report.count("pytest t.py::x --flowproof-mode record") == 1
    assert "re-record with: pytest t.py::x --flowproof-mode record — then" in report
    assert "flowproof_cassette=" not in report
    assert "HTTPS_PROXY" not in os.environ


def test_record_keeps_only_when_the_test_passed(
    tmp_path: Path, ca_files: CAFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    cassette = tmp_path / "cassettes" / "c.json"
    script(tmp_path, monkeypatch, events=turn_events(BOOKING_TURNS, "record"), cassette=cassette_text(BOOKING_TURNS))
    failed = ProxySession(cassette, mode="record", ca=ca_files).start().close(failed=True)
    assert not cassette.exists() and failed.rejected is not None and failed.rejected.exists()
    kept = ProxySession(cassette, mode="record", ca=ca_files).start().close()
    assert kept.passed and cassette.read_text() == cassette_text(BOOKING_TURNS)
    assert not cassette.with_name("c.recording.json").exists()


def test_record_without_a_model_call_keeps_nothing_and_says_why(
    tmp_path: Path, ca_files: CAFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    cassette = tmp_path / "c.json"
    old = cassette_text(BOOKING_TURNS[:1]).encode()
    cassette.write_bytes(old)
    script(tmp_path, monkeypatch, cassette=cassette_text(BOOKING_TURNS))
    result = ProxySession(cassette, mode="record", ca=ca_files).start().close()
    assert result.exit_code == EXIT_AGENT
    assert result.error is not None and "build the SDK client after the session starts" in result.error
    assert cassette.read_bytes() == old
    assert "build the SDK client" in session_report(ProxySession(cassette), result)


def test_an_unknown_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FlowproofError, match="unknown mode `replya`"):
        ProxySession(tmp_path / "c.json", mode="replya")


@pytest.mark.parametrize(
    ("mode", "script_done", "events", "expected"),
    [
        ("replay", {"unconsumed": [2]}, [], "1 recorded turn was never requested: turn 2"),
        ("replay", {}, [{"event": "error", "kind": "upstream", "text": "upstream refused the connection"}],
         "upstream refused the connection"),
        ("compare", {}, [{"event": "drift", "id": "1", "text": "turn 2: the text differs", "result": DRIFT}],
         "The live run differs from the recording"),
    ],
    ids=["missing calls", "proxy error", "compare drift"],
)
def test_missing_calls_proxy_errors_and_drift_fail_the_session(
    tmp_path: Path, ca_files: CAFiles, monkeypatch: pytest.MonkeyPatch,
    mode: str, script_done: dict[str, object], events: list[dict[str, object]], expected: str,
) -> None:
    cassette = tmp_path / "c.json"
    cassette.write_text(cassette_text(BOOKING_TURNS))
    script(tmp_path, monkeypatch, events=events, done=script_done)
    session = ProxySession(cassette, mode=mode, ca=ca_files, rerecord="pytest t.py::x --flowproof-mode record")
    result = session.start().close()
    assert not result.passed
    report = session_report(session, result)
    assert expected in report
    if script_done or mode == "compare":  # what to do names the session's record command
        assert "pytest t.py::x --flowproof-mode record" in report
    if mode == "compare":
        assert "compare: 1 result(s), 0 equal, 1 drifted" in report
        assert cassette.read_text() == cassette_text(BOOKING_TURNS)  # compare never writes


def test_base_url_route_sets_the_sdk_base_urls(
    tmp_path: Path, ca_files: CAFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    cassette = tmp_path / "c.json"
    cassette.write_text(cassette_text(BOOKING_TURNS, route="base_url"))
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    session = ProxySession(cassette, ca=ca_files, route="base_url").start()
    try:
        assert os.environ["OPENAI_BASE_URL"].startswith("http://127.0.0.1:")
        assert os.environ["OPENAI_BASE_URL"].rstrip("/").endswith("/v1")
    finally:
        session.close()
    assert "OPENAI_BASE_URL" not in os.environ


def test_trajectory_waits_for_a_call_in_flight_then_gives_what_it_has(
    tmp_path: Path, ca_files: CAFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    cassette = tmp_path / "c.json"
    cassette.write_text(cassette_text(BOOKING_TURNS))
    events = [*turn_events(BOOKING_TURNS[:1]), {"event": "request_started", "id": "never-ends"}]
    script(tmp_path, monkeypatch, events=events)
    monkeypatch.setattr("flowproof.runner.session.SETTLE_SECONDS", 0.5)
    session = ProxySession(cassette, ca=ca_files).start()
    try:
        scripted_events_written(session, len(events))
        started = time.monotonic()
        calls = session.trajectory().tool_calls
        assert time.monotonic() - started >= 0.5
        assert [c.name for c in calls] == ["search_flights"]
    finally:
        session.close()


def test_the_trajectory_holds_the_mcp_calls_as_a_flow_runs(
    tmp_path: Path, ca_files: CAFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session is judged as a flow is: an MCP call crossing the boundary is in its trajectory,
    placed after the model turn before it, open or closed."""
    cassette = tmp_path / "c.json"
    cassette.write_text(cassette_text(BOOKING_TURNS))
    mcp_call = {"event": "mcp_call", "server": "crm", "name": "lookup_order", "arguments": "{}", "answered": True}
    events = [*turn_events(BOOKING_TURNS[:2]), mcp_call, *turn_events(BOOKING_TURNS[2:])]
    script(tmp_path, monkeypatch, events=events)
    session = ProxySession(cassette, ca=ca_files).start()
    try:
        scripted_events_written(session, len(events))
        open_calls = [c.name for c in session.trajectory().tool_calls]
    finally:
        result = session.close()
    assert open_calls == ["search_flights", "create_booking", "lookup_order"]
    assert [c.name for c in session.trajectory().tool_calls] == open_calls
    assert result.passed and result.tool_calls == ("search_flights", "create_booking", "lookup_order (mcp)")


def test_with_otel_the_judged_session_carries_its_spans(
    tmp_path: Path, ca_files: CAFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``otel=True``: the verdict carries the session's GenAI spans, timed by the proxy's log
    (each call's ``request_started.at`` and its turn's ``ms``), as a flow's are."""
    cassette = tmp_path / "c.json"
    cassette.write_text(cassette_text(BOOKING_TURNS))
    events = turn_events(BOOKING_TURNS)
    started = [e for e in events if e["event"] == "request_started"]
    now = time.time()
    for number, event in enumerate(started):
        event["at"] = now + number
    for event in events:
        if event["event"] == "turn":
            event["ms"] = 250.0
    script(tmp_path, monkeypatch, events=events)
    for otel in (True, False):
        session = ProxySession(cassette, ca=ca_files, name="t.py::x", otel=otel).start()
        scripted_events_written(session, len(events))
        result = session.close()
        assert result.passed, result.error
        if not otel:
            assert result.spans == ()
            continue
        spans = {s.key: s for s in result.spans}
        assert spans["agent"].name == "invoke_agent t.py::x" and spans["agent"].attributes["flowproof.mode"] == "replay"
        chats = [spans[f"chat/{i}"] for i in range(3)]
        assert [(c.start, c.end - c.start) for c in chats] == [
            (round((now + i) * 1e9), 250_000_000) for i in range(3)]
        assert all(spans["agent"].start <= c.start and c.end <= spans["agent"].end for c in chats)
