"""End to end: a real mitmdump with the addon, real SDK clients, the fake model server.

The agent (sdk_agent.py) talks to https://api.openai.com / https://api.anthropic.com
through HTTPS_PROXY with the flowproof CA in SSL_CERT_FILE; in record mode the
addon maps those hosts to the fake model server on 127.0.0.1. Nothing leaves
the machine.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flowproof.cassette import load_cassette
from flowproof.divergence import Divergence
from flowproof.testing import (
    FakeModelServer,
    Reply,
    abandon,
    close_after_terminal,
    reset_after_terminal,
)

from .conftest import Mitmdump, run_agent, start_mitmdump

pytestmark = pytest.mark.timeout(180)


class Session:
    """Starts proxies for one test and stops every one of them."""

    def __init__(self, tmp: Path, ca: tuple[Path, Path]) -> None:
        self.tmp = tmp
        self.confdir, self.bundle = ca
        self.proxies: list[Mitmdump] = []

    def proxy(self, mode: str, cassette: Path, *options: str, args: tuple[str, ...] = ()) -> Mitmdump:
        p = start_mitmdump(self.tmp, self.confdir, f"flowproof_mode={mode}", f"flowproof_cassette={cassette}",
                           *options, name=f"{mode}{len(self.proxies)}", args=args)
        self.proxies.append(p)
        return p

    def agent(self, proxy: Mitmdump, **env: str) -> tuple[int, dict[str, Any]]:
        return run_agent(proxy.port, self.bundle, **env)

    def close(self) -> None:
        for p in self.proxies:
            p.kill()


@pytest.fixture
def session(tmp_path: Path, ca_bundle: tuple[Path, Path]) -> Iterator[Session]:
    s = Session(tmp_path, ca_bundle)
    try:
        yield s
    finally:
        s.close()


def record(session: Session, script: list[Reply], host: str, **env: str) -> tuple[Path, dict[str, Any], Mitmdump]:
    """Record one agent run against the fake server; returns (cassette, agent output, stopped proxy)."""
    cassette = session.tmp / "run.cassette.json"
    with FakeModelServer(script) as server:
        proxy = session.proxy("record", cassette, f"flowproof_upstream={host}={server.url}")
        rc, out = session.agent(proxy, **env)
        assert rc == 0, out
        assert proxy.stop() == 0
        assert len(server.model_requests) == len(script)
    return cassette, out, proxy


TOOL_SCRIPT = [Reply.tool_call("search_flights", {"dest": "NBO"}), Reply.text("Booked KQ311 to Nairobi.")]


@pytest.fixture(scope="module")
def recorded(
    tmp_path_factory: pytest.TempPathFactory, ca_bundle: tuple[Path, Path]
) -> Iterator[tuple[Path, dict[str, Any]]]:
    """One recorded two-turn openai conversation, shared by the replay tests (which never write it)."""
    s = Session(tmp_path_factory.mktemp("recorded"), ca_bundle)
    try:
        cassette, out, proxy = record(s, TOOL_SCRIPT, "api.openai.com")
        assert [e["turn"]["index"] for e in proxy.events("turn")] == [0, 1]
        yield cassette, out
    finally:
        s.close()


class TestRecordReplay:
    def test_record_then_replay_gives_identical_responses(self, session: Session, recorded):
        """A streamed two-turn tool conversation replays offline with the same text and arguments."""
        cassette, live = recorded
        assert live["turns"][0]["calls"][0]["name"] == "search_flights"
        assert json.loads(live["turns"][0]["calls"][0]["arguments"]) == {"dest": "NBO"}
        assert live["turns"][1]["text"] == "Booked KQ311 to Nairobi."
        raw = cassette.read_text()
        assert "sk-e2e-secret" not in raw
        assert [t.response.is_stream for t in load_cassette(cassette).turns] == [True, True]

        proxy = session.proxy("replay", cassette)
        rc, replayed = session.agent(proxy)
        assert (rc, replayed) == (0, live)
        assert proxy.stop() == 0
        assert proxy.events("divergence") == []
        assert proxy.events("done")[0]["unconsumed"] == []

    def test_anthropic_stream_records_and_replays(self, session: Session):
        """The anthropic SDK's streamed tool conversation replays identically."""
        cassette, live, _ = record(session, TOOL_SCRIPT, "api.anthropic.com", FP_PROVIDER="anthropic")
        assert live["turns"][0]["stop"] == "tool_use"
        proxy = session.proxy("replay", cassette)
        rc, replayed = session.agent(proxy, FP_PROVIDER="anthropic")
        assert (rc, replayed) == (0, live)

    def test_edited_system_prompt_gets_400_and_divergence(self, session: Session, recorded):
        """One changed word of the system prompt fails the agent with a 400 and the report names it."""
        cassette, _ = recorded
        proxy = session.proxy("replay", cassette)
        rc, out = session.agent(proxy, FP_SYSTEM="You are a booking assistant. Use the tools now.")
        assert (rc, out["error"]) == (3, 400)
        assert "flowproof replay diverged" in out["message"]
        (event,) = proxy.events("divergence")
        assert "Use the tools now." in Divergence.from_json(event["divergence"]).render()

    def test_changed_tool_argument_names_the_path(self, session: Session, recorded):
        """A tool argument sent back changed is reported at its path with both values."""
        cassette, _ = recorded
        proxy = session.proxy("replay", cassette)
        rc, out = session.agent(proxy, FP_TAMPER="1")
        assert (rc, out["error"]) == (3, 400)
        (event,) = proxy.events("divergence")
        text = Divergence.from_json(event["divergence"]).render()
        assert "dest" in text and "NBO" in text and "NBX" in text

    def test_extra_call_fails(self, session: Session, recorded):
        """A call beyond the recording is refused with a 400 and an extra-call divergence."""
        cassette, _ = recorded
        proxy = session.proxy("replay", cassette)
        rc, out = session.agent(proxy, FP_EXTRA="1")
        assert (rc, out["error"]) == (3, 400)
        assert proxy.events("divergence")[0]["divergence"]["kind"] == "extra"

    def test_missing_call_is_reported_at_done(self, session: Session, recorded):
        """A recorded turn the agent never requests is listed when mitmdump stops."""
        cassette, _ = recorded
        proxy = session.proxy("replay", cassette)
        rc, _out = session.agent(proxy, FP_MAX_TURNS="1")
        assert rc == 0
        assert proxy.stop() == 0
        (done,) = proxy.events("done")
        assert done == {"event": "done", "unconsumed": [1]}

    def test_compare_never_writes_and_reports(self, session: Session, recorded):
        """Compare against a server that answers differently reports drift and leaves the cassette alone."""
        cassette, _ = recorded
        before, mtime = cassette.read_bytes(), cassette.stat().st_mtime_ns
        script = [Reply.tool_call("search_flights", {"dest": "NBO"}), Reply.text("No flights today.")]
        with FakeModelServer(script) as server:
            proxy = session.proxy("compare", cassette, f"flowproof_upstream=api.openai.com={server.url}")
            rc, out = session.agent(proxy)
            assert rc == 0
            assert out["turns"][1]["text"] == "No flights today."
            assert proxy.stop() == 0
        assert [e["result"]["turn"] for e in proxy.events("compared")] == [0]
        assert [e["result"]["turn"] for e in proxy.events("drift")] == [1]
        assert cassette.read_bytes() == before
        assert cassette.stat().st_mtime_ns == mtime


class TestConcurrency:
    def test_identical_concurrent_calls_are_each_served_once(self, session: Session):
        """20 concurrent identical calls record 20 turns and replay each exactly once."""
        script = [Reply.text(f"title {i}") for i in range(20)]
        cassette, live, _ = record(session, script, "api.openai.com", FP_CONCURRENT="20")
        assert sorted(t["text"] for t in live["turns"]) == sorted(f"title {i}" for i in range(20))
        turns = load_cassette(cassette).turns
        assert len({t.request.body_sha256 for t in turns}) == 1 and len(turns) == 20

        proxy = session.proxy("replay", cassette)
        rc, replayed = session.agent(proxy, FP_CONCURRENT="20")
        assert rc == 0
        assert sorted(t["text"] for t in replayed["turns"]) == sorted(f"title {i}" for i in range(20))
        assert proxy.stop() == 0
        assert proxy.events("done")[0]["unconsumed"] == []

        extra = session.proxy("replay", cassette)
        rc, over = session.agent(extra, FP_CONCURRENT="21")
        assert [t["error"] for t in over["turns"] if "error" in t] == [400]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TestBaseUrlRoute:
    def reverse_port(self, proxy: Mitmdump) -> int:
        (ready,) = proxy.events("ready")
        (entry,) = [e for e in ready["listen"] if e["mode"].startswith("reverse:")]
        return int(entry["port"])

    def test_reverse_listener_records_and_replays(self, session: Session):
        """A client using OPENAI_BASE_URL on a reverse listener records under the real host and replays."""
        cassette = session.tmp / "base.cassette.json"
        args = ("--mode", "regular", "--mode", f"reverse:https://api.openai.com@{free_port()}")
        with FakeModelServer(TOOL_SCRIPT) as server:
            proxy = session.proxy("record", cassette, f"flowproof_upstream=api.openai.com={server.url}",
                                  "flowproof_route=base_url", args=args)
            base = f"http://127.0.0.1:{self.reverse_port(proxy)}/v1"
            rc, live = run_agent(None, session.bundle, OPENAI_BASE_URL=base)
            assert rc == 0, live
            assert proxy.stop() == 0
        recorded = load_cassette(cassette)
        assert recorded.route == "base_url"
        assert recorded.turns[0].request.url == "https://api.openai.com/v1/chat/completions"

        args = ("--mode", "regular", "--mode", f"reverse:https://api.openai.com@{free_port()}")
        proxy = session.proxy("replay", cassette, "flowproof_route=base_url", args=args)
        rc, replayed = run_agent(None, session.bundle, OPENAI_BASE_URL=f"http://127.0.0.1:{self.reverse_port(proxy)}/v1")
        assert (rc, replayed) == (0, live)

    def test_replay_refuses_the_other_route(self, session: Session, recorded):
        """A proxy-route cassette replayed on the base-URL route stops mitmdump at startup."""
        cassette, _ = recorded
        with pytest.raises(RuntimeError, match="route"):
            session.proxy("replay", cassette, "flowproof_route=base_url")


class TestUpstreamFailures:
    def test_stream_cut_midway_records_no_turn_and_logs_an_error(self, session: Session):
        """A stream the model server cuts mid-way becomes an error event, never a recorded half turn."""
        cassette = session.tmp / "cut.cassette.json"
        with FakeModelServer([Reply.text("Booked KQ311 to Nairobi.", cut_after=1)]) as server:
            proxy = session.proxy("record", cassette, f"flowproof_upstream=api.openai.com={server.url}")
            rc, out = session.agent(proxy)
            assert rc == 4, out
            assert proxy.stop() == 0
        assert proxy.events("turn") == []
        (error,) = proxy.events("error")
        assert error["id"] == proxy.events("request_started")[0]["id"]
        assert load_cassette(cassette).turns == ()

    def test_refused_upstream_connection_logs_an_error(self, session: Session):
        """A model server that refuses the connection gives the agent an error and the runner an error event."""
        cassette = session.tmp / "refused.cassette.json"
        port = free_port()
        proxy = session.proxy("record", cassette, f"flowproof_upstream=api.openai.com=http://127.0.0.1:{port}")
        rc, out = session.agent(proxy)
        assert rc in (3, 4), out
        assert proxy.stop() == 0
        assert proxy.events("turn") == []
        (error,) = proxy.events("error")
        # The proxy never reached the upstream: the error says so, naming where it dialled.
        assert error["kind"] == "upstream_unreachable", error
        assert (error["address"], error["host"]) == (f"127.0.0.1:{port}", "api.openai.com"), error
        assert "connection refused" in error["text"], error
        assert load_cassette(cassette).turns == ()

    def test_recorded_server_error_replays_as_recorded(self, session: Session):
        """A 500 from the model server is recorded as a turn and replayed with the same status and body."""
        cassette = session.tmp / "err.cassette.json"
        with FakeModelServer([Reply.error(500, "upstream exploded")]) as server:
            proxy = session.proxy("record", cassette, f"flowproof_upstream=api.openai.com={server.url}")
            rc, live = session.agent(proxy)
            assert proxy.stop() == 0
        assert (rc, live["error"]) == (3, 500), live
        (turn,) = load_cassette(cassette).turns
        assert turn.response.status == 500
        replay = session.proxy("replay", cassette)
        rc, replayed = session.agent(replay)
        assert (rc, replayed) == (3, live)
        assert replay.stop() == 0
        assert replay.events("divergence") == []

    def test_client_disconnect_midstream_records_an_abandoned_turn(self, session: Session):
        """A client that hangs up mid-stream abandoned the call: a turn marked abandoned, no error."""
        cassette = session.tmp / "hangup.cassette.json"
        port = free_port()
        args = ("--mode", f"reverse:https://api.openai.com@{port}")
        script = [Reply.text("one two three four five six seven eight", chunk_delay=0.3)]
        with FakeModelServer(script) as server:
            proxy = session.proxy("record", cassette, f"flowproof_upstream=api.openai.com={server.url}",
                                  "flowproof_route=base_url", args=args)
            body = json.dumps({"model": "gpt-4o", "stream": True,
                               "messages": [{"role": "user", "content": "hi"}]}).encode()
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: api.openai.com\r\n"
                             b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                assert sock.recv(65536)  # the headers (and maybe the first event) arrive
            deadline = time.monotonic() + 10
            while not proxy.events("turn") and time.monotonic() < deadline:
                time.sleep(0.05)
            assert proxy.stop() == 0
        assert proxy.events("error") == []
        (turn,) = proxy.events("turn")
        assert turn["id"] == proxy.events("request_started")[0]["id"]
        assert turn["turn"]["abandoned"] is True
        (recorded,) = load_cassette(cassette).turns
        assert recorded.abandoned and recorded.response is not None
        # Only what reached the client: never the terminal event the server sent later.
        assert all(e.data != "[DONE]" for e in recorded.response.events or ())


CHAT = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
RESPONSES = {"model": "gpt-4o", "stream": True, "input": "hi"}


class TestClientsThatLeave:
    """The rude clients of flowproof.testing through a real mitmdump: leaving after the terminal
    event is a complete turn; leaving before it, an abandoned one; neither is an error."""

    def test_http1_close_at_done_records_a_complete_turn(self, session: Session):
        """openai-python's sync stream: it closes at [DONE], the body would end 5 s later."""
        cassette = session.tmp / "close.cassette.json"
        with FakeModelServer([Reply.text("all of it")], end_delay=5.0) as server:
            proxy = session.proxy("record", cassette, f"flowproof_upstream=api.openai.com={server.url}")
            result = close_after_terminal("https://api.openai.com/v1/chat/completions", CHAT,
                                          proxy=proxy.url, verify=session.bundle)
            assert result.saw_terminal and not result.saw_end
            assert proxy.stop() == 0
        assert proxy.events("error") == []
        (turn,) = load_cassette(cassette).turns
        assert not turn.abandoned and turn.response is not None
        assert turn.response.events is not None and turn.response.events[-1].data == "[DONE]"
        # The same client replays the complete answer.
        replay = session.proxy("replay", cassette)
        again = close_after_terminal("https://api.openai.com/v1/chat/completions", CHAT,
                                     proxy=replay.url, verify=session.bundle)
        assert replay.stop() == 0
        assert again.events == result.events
        assert replay.events("divergence") == [] and replay.events("done")[0]["unconsumed"] == []

    def test_http2_cancel_after_completed_records_a_complete_turn(self, session: Session):
        """Codex CLI's reset: RST_STREAM(CANCEL) right after response.completed."""
        cassette = session.tmp / "reset.cassette.json"
        with FakeModelServer([Reply.text("all of it")], end_delay=5.0) as server:
            proxy = session.proxy("record", cassette, f"flowproof_upstream=api.openai.com={server.url}")
            result = reset_after_terminal("https://api.openai.com/v1/responses", RESPONSES,
                                          proxy=proxy.url, verify=session.bundle)
            assert result.http_version == "HTTP/2" and result.saw_terminal and not result.saw_end
            assert proxy.stop() == 0
        assert proxy.events("error") == []
        (turn,) = load_cassette(cassette).turns
        assert not turn.abandoned
        assert turn.response is not None and turn.response.events is not None
        assert turn.response.events[-1].event == "response.completed"

    def test_leaving_before_the_terminal_event_records_an_abandoned_turn(self, session: Session):
        """A client that leaves after two events abandoned the call: recorded with those events;
        replay sends the same two and holds the body open, and a replay without it misses nothing."""
        cassette = session.tmp / "abandon.cassette.json"
        url = "https://api.openai.com/v1/chat/completions"
        script = [Reply.text("one two three four five six", chunk_delay=0.5)]
        with FakeModelServer(script) as server:
            proxy = session.proxy("record", cassette, f"flowproof_upstream=api.openai.com={server.url}")
            left = abandon(url, CHAT, after_events=2, proxy=proxy.url, verify=session.bundle)
            assert not left.saw_terminal
            deadline = time.monotonic() + 10
            while not proxy.events("turn") and time.monotonic() < deadline:
                time.sleep(0.05)
            assert proxy.stop() == 0
        assert proxy.events("error") == []
        (turn,) = load_cassette(cassette).turns
        assert turn.abandoned and turn.response is not None and turn.response.status == 200
        assert turn.response.events is not None and len(turn.response.events) >= 2
        assert all(e.data != "[DONE]" for e in turn.response.events)

        recorded_events = [e.raw.encode() for e in turn.response.events]
        replay = session.proxy("replay", cassette)
        again = abandon(url, CHAT, after_events=len(recorded_events), proxy=replay.url, verify=session.bundle)
        assert again.status == 200 and not again.saw_end and not again.saw_terminal
        assert [e.strip() for e in again.events] == [e.strip() for e in recorded_events]
        assert replay.stop() == 0
        assert replay.events("divergence") == [] and replay.events("error") == []
        # Cut where the recording stopped: a client that waits for more gets nothing, not even the end.
        waiting = session.proxy("replay", cassette)
        with pytest.raises(TimeoutError):
            abandon(url, CHAT, after_events=len(recorded_events) + 1, proxy=waiting.url,
                    verify=session.bundle, timeout=2.0)
        assert waiting.stop() == 0
        assert waiting.events("divergence") == [] and waiting.events("error") == []

        untouched = session.proxy("replay", cassette)
        assert untouched.stop() == 0
        (done,) = untouched.events("done")
        assert done == {"event": "done", "unconsumed": []}

    def test_a_client_gone_before_any_byte_records_an_abandoned_turn_without_response(self, session: Session):
        """goose's title call: nothing arrives within a second and the client leaves."""
        cassette = session.tmp / "gone.cassette.json"
        with FakeModelServer([Reply.text("late title", first_byte_delay=5.0)]) as server:
            proxy = session.proxy("record", cassette, f"flowproof_upstream=api.openai.com={server.url}")
            left = abandon("https://api.openai.com/v1/chat/completions", CHAT, after_seconds=1.0,
                           proxy=proxy.url, verify=session.bundle)
            assert left.status is None
            assert proxy.stop() == 0
        assert proxy.events("error") == []
        (turn,) = load_cassette(cassette).turns
        assert turn.abandoned and turn.response is None
