"""What teams now prove, end to end: flowproof-run -> real mitmdump -> an agent on the official
SDKs -> the fake model, recorded, then replayed offline.

- a two-prompt booking flow: parallel calls, ``in: prompt K``, budgets from the responses'
  usage and the spec's prices, the cache prefix, egress, and mock coverage with
  ``--strict-mocks``;
- an agent whose system prompt names the time: the cache-prefix rule names the field and the
  byte, at record and at replay;
- an agent that sends a customer token to a non-model host: caught by ``assert_no_egress``
  and ``assert_no_secret_leak`` at record and at replay, and the token is in no file;
- an openai-agents handoff: ``assert_subagent`` and ``in: subagent`` on the handed-off agent.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from flowproof.testing import FakeModelServer, Reply

from .conftest import AGENTS, Flowproof, InProcessFlowproof, Ran, upstream_args, write_spec


@pytest.fixture
def flowproof(in_process_flowproof: InProcessFlowproof) -> InProcessFlowproof:
    """These tests are about what a flow does, not the runner's process: each run is the
    command line in this process, on the worker's kept proxies (tests/e2e/conftest.py)."""
    return in_process_flowproof


Fake = Callable[..., FakeModelServer]

TOKEN = "cust-tok-5c1e9a3f77"


def booking_script() -> list[Reply]:
    return [
        Reply.tool_calls([("search_flights", {"to": "NBO"}), ("search_hotels", {"city": "Nairobi"})]),
        Reply.tool_call("create_booking", {"flight": "KQ311"}),
        Reply.text("Booked KQ311: booking B-1042, and the Tamarind has rooms."),
        Reply.tool_call("cancel_booking", {"booking": "B-1042"}),
        Reply.text("Cancelled booking B-1042."),
    ]


def booking_spec(folder: Path, extra: str = "", head: str = "", name: str = "booking.flow.yaml") -> Path:
    shutil.copy(AGENTS / "prove_agent.py", folder / "prove_agent.py")
    return write_spec(folder / name, f"""\
name: books a flight, then cancels it
agent:
  command: python prove_agent.py
tools:
  - name: search_flights
    result: {{flights: [{{id: KQ311, to: NBO}}]}}
  - name: search_hotels
  - name: create_booking
    result: {{booking: B-1042}}
  - name: cancel_booking
  - name: search_cars
    result: {{cars: []}}
pricing:
  gpt-4o-mini: {{input: 0.15, output: 0.60}}
{head}steps:
  - prompt: Find a flight and a hotel in Nairobi and book the flight
  - assert_parallel_tool_calls: search_flights where to equals NBO, search_hotels
  - assert_tool_call: create_booking where flight equals KQ311
  - prompt: Actually, cancel that booking
  - in: prompt 1
    steps:
      - assert_no_tool_call: cancel_booking
      - assert: reply contains Booked KQ311
  - in: prompt 2
    steps:
      - assert_no_tool_call: create_booking
      - assert_tool_call: cancel_booking where booking equals B-1042
      - assert: reply contains Cancelled
      - assert: model calls at most 2
  - assert: model calls at most 5
  - assert: tokens at most 5000
  - assert: cost at most 0.01
  - assert: cache prefix stable
  - assert_no_egress
{extra}""")


def flow_of(ran: Ran) -> dict[str, Any]:
    flow: dict[str, Any] = ran.report()["flows"][0]
    return flow


def failed(flow: dict[str, Any]) -> list[str]:
    return [s["source"] for s in flow["steps"] if not s["passed"]]


@pytest.fixture
def booked(tmp_path: Path, flowproof: Flowproof, fake_model: Fake) -> Path:
    """The booking flow recorded once against the fake model; returns its spec."""
    spec = booking_spec(tmp_path)
    server = fake_model(booking_script())
    ran = flowproof.run(spec, *upstream_args(server), "--record", "--json", keys=True)
    assert ran.code == 0, ran.failure
    assert server.remaining == 0 and len(server.model_requests) == 5
    return spec


class TestBookingFlow:
    def test_record_passes_every_step_and_reports_hosts_usage_and_unused_mocks(
        self, tmp_path: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        spec = booking_spec(tmp_path)
        server = fake_model(booking_script())
        ran = flowproof.run(spec, *upstream_args(server), "--record", "--json", keys=True)
        assert ran.code == 0, ran.failure
        flow = flow_of(ran)
        assert failed(flow) == []
        scoped = [s["source"] for s in flow["steps"] if s["scope"]]
        assert "in prompt 2: no call to create_booking" in scoped
        assert "in prompt 2: cancel_booking where booking equals B-1042" in scoped
        assert [(e["host"], e["role"]) for e in flow["egress"]] == [("api.openai.com", "model")]
        assert [m["name"] for m in flow["unused_mocks"]] == ["search_cars"]
        # The fake model reports usage on every non-streamed answer.
        assert flow["usage"]["turns_without_usage"] == [] and flow["usage"]["input_tokens"] > 0

    def test_replay_offline_passes_and_strict_mocks_fails_on_the_unused_mock(
        self, booked: Path, flowproof: Flowproof
    ) -> None:
        replayed = flowproof.run(booked, "--json")
        assert replayed.code == 0, replayed.output
        assert [e["host"] for e in flow_of(replayed)["egress"]] == ["api.openai.com"]
        strict = flowproof.run(booked, "--strict-mocks")
        assert strict.code == 1, strict.output
        assert "✗ strict mocks" in strict.stdout
        assert "booking.flow.yaml:11:5): no request carried its result" in strict.stdout
        assert "  - search_cars (tools:, " in strict.stdout
        assert "hosts contacted: api.openai.com:443 (model)" in strict.stdout

    def test_budgets_fail_with_what_the_run_used_and_an_unpriced_model_is_exit_2(
        self, booked: Path, flowproof: Flowproof
    ) -> None:
        text = booked.read_text()
        tight = write_spec(booked.with_name("tight.flow.yaml"), text.replace("tokens at most 5000", "tokens at most 10")
                           .replace("model calls at most 5", "model calls at most 4"))
        ran = flowproof.run(tight, "--cassette", booked.with_name("booking.cassette.json"), "--json")
        assert ran.code == 1, ran.output
        flow = flow_of(ran)
        assert failed(flow) == ["model calls at most 4", "tokens at most 10"]
        messages = {s["source"]: s["message"] for s in flow["steps"]}
        assert "the run used 5" in messages["model calls at most 4"]
        unpriced = write_spec(booked.with_name("unpriced.flow.yaml"), text.replace("gpt-4o-mini: {", "gpt-4o: {"))
        ran = flowproof.run(unpriced, "--cassette", booked.with_name("booking.cassette.json"))
        assert ran.code == 2, ran.output
        assert "turn 0 called model gpt-4o-mini, which has no price" in ran.stdout

    def test_parallel_calls_split_across_turns_show_the_split(
        self, tmp_path: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        spec = booking_spec(tmp_path)
        script = booking_script()
        split = [Reply.tool_call("search_flights", {"to": "NBO"}), Reply.tool_call("search_hotels", {"city": "x"}),
                 *script[1:]]
        server = fake_model(split)
        ran = flowproof.run(spec, *upstream_args(server), "--record", keys=True)
        assert ran.code == 1, ran.output
        split_lines = ("the calls were split across turns:\n"
                       "      - turn 0: search_flights\n      - turn 1: search_hotels")
        assert split_lines in ran.stdout


class TestCachePrefix:
    def test_a_clock_in_the_system_prompt_is_named_at_record_and_at_replay(
        self, tmp_path: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        spec = booking_spec(tmp_path)
        spec.write_text(spec.read_text().replace("  command: python prove_agent.py\n",
                                                 "  command: python prove_agent.py\n  env:\n    FP_CLOCK: '1'\n"))
        server = fake_model(booking_script())
        recorded = flowproof.run(spec, *upstream_args(server), "--record", "--json", keys=True)
        assert recorded.code == 1, recorded.output
        (step,) = [s for s in flow_of(recorded)["steps"] if not s["passed"]]
        assert step["source"] == "cache prefix stable"
        assert ("conversation 0: turn 1 does not keep turn 0's prefix: messages.0.content differs at byte "
                f"{len('You are a travel assistant. Search, then book or cancel as asked. Current time: 10:00:0')}"
                ) in step["message"]
        assert '10:00:01."' in step["message"] and '10:00:02."' in step["message"]
        # A reviewer keeps the recording anyway: the replay proves the same, offline.
        rejected = spec.with_name("booking.cassette.rejected.json")
        shutil.copy(rejected, spec.with_name("booking.cassette.json"))
        replayed = flowproof.run(spec, "--json")
        assert replayed.code == 1, replayed.output
        assert [s["source"] for s in flow_of(replayed)["steps"] if not s["passed"]] == ["cache prefix stable"]


EXFIL_SPEC = """\
name: the agent keeps the customer's token to itself
agent:
  command: python prove_agent.py
  env:
    FP_EXFIL: '1'
steps:
  - prompt: Find a flight and a hotel in Nairobi and book the flight
  - assert_no_egress
  - assert_no_egress: except exfil.example.test
  - assert_no_secret_leak: ${CUSTOMER_TOKEN}
"""


class TestWitness:
    def test_a_token_sent_to_another_host_is_caught_at_record_and_at_replay(
        self, tmp_path: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        shutil.copy(AGENTS / "prove_agent.py", tmp_path / "prove_agent.py")
        spec = write_spec(tmp_path / "exfil.flow.yaml", EXFIL_SPEC)
        server = fake_model(booking_script()[:3])
        upstream = [*upstream_args(server), "--upstream", f"exfil.example.test={server.url}"]
        recorded = flowproof.run(spec, *upstream, "--record", "--json", keys=True, CUSTOMER_TOKEN=TOKEN)
        assert recorded.code == 1, recorded.output
        # The token really left: the collector received it.
        (collected,) = [r for r in server.requests if r.path == "/collect"]
        assert TOKEN in collected.body.decode()
        self.assert_caught(flow_of(recorded))
        rejected = spec.with_name("exfil.cassette.rejected.json")
        assert "«secret:CUSTOMER_TOKEN»" in rejected.read_text()
        for text in (rejected.read_text(), recorded.stdout, recorded.stderr):
            assert TOKEN not in text

        # Kept as the cassette, the recording replays (the masked body still matches), offline
        # for the model, and the proxy catches the same egress and the same leak again.
        shutil.copy(rejected, spec.with_name("exfil.cassette.json"))
        model_calls = len(server.model_requests)
        replayed = flowproof.run(spec, "--upstream", f"exfil.example.test={server.url}", "--json",
                                 CUSTOMER_TOKEN=TOKEN)
        assert replayed.code == 1, replayed.output
        assert len(server.model_requests) == model_calls
        self.assert_caught(flow_of(replayed))
        assert TOKEN not in replayed.stdout + replayed.stderr

    @staticmethod
    def assert_caught(flow: dict[str, Any]) -> None:
        assert failed(flow) == ["assert_no_egress", "no leak of ${CUSTOMER_TOKEN}"]
        messages = {s["source"]: s["message"] for s in flow["steps"]}
        assert "  - exfil.example.test:443 (CONNECT)" in messages["assert_no_egress"]
        leak = messages["no leak of ${CUSTOMER_TOKEN}"]
        assert "${CUSTOMER_TOKEN} went to exfil.example.test: request POST" in leak
        assert "in the body at customer.token" in leak and "in header x-customer" in leak
        assert "went to api.openai.com: model call POST" in leak  # the agent told the model too
        assert {(e["host"], e["role"]) for e in flow["egress"]} == {("api.openai.com", "model"),
                                                                    ("exfil.example.test", "other")}
        assert {leak["where"] for leak in flow["secret_leaks"]} == {"body", "header"}


HANDOFF_SPEC = """\
name: triage hands a billing question to the billing agent
agent:
  command: python handoff_agent.py
  env:
    OPENAI_AGENTS_DISABLE_TRACING: '1'
volatile:
  - openai-agents
steps:
  - prompt: Why was I charged twice on invoice INV-1?
  - assert_subagent: billing agent
  - in: subagent billing_agent
    steps:
      - assert_tool_call: lookup_invoice where id equals INV-1
      - assert: reply contains Refunded
  - assert: reply contains Refunded
"""


def handoff_flow(folder: Path, fake_model: Fake) -> tuple[Path, FakeModelServer]:
    """The handoff agent and its spec in ``folder``, and the fake model that answers it."""
    shutil.copy(AGENTS / "handoff_agent.py", folder / "handoff_agent.py")
    spec = write_spec(folder / "handoff.flow.yaml", HANDOFF_SPEC)
    server = fake_model([
        Reply.tool_call("transfer_to_billing_agent", {}),
        Reply.tool_call("lookup_invoice", {"id": "INV-1"}),
        Reply.text("Refunded the duplicate 42.00 charge on INV-1."),
    ])
    return spec, server


class TestHandoff:
    def test_a_handoff_is_a_sub_agent_at_record_and_at_replay(
        self, tmp_path: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        spec, server = handoff_flow(tmp_path, fake_model)
        recorded = flowproof.run(spec, *upstream_args(server), "--record", "--json", keys=True)
        assert recorded.code == 0, recorded.output
        for ran in (recorded, flowproof.run(spec, "--json")):
            assert ran.code == 0, ran.failure
            flow = flow_of(ran)
            (billing,) = flow["subagents"]
            assert (billing["name"], billing["family"], billing["parent"]) == ("billing_agent", "openai-agents", None)
            assert billing["turns"] == [1, 2] and billing["result_turn"] == 2
            assert "in subagent billing_agent #1: lookup_invoice where id equals INV-1" in [
                s["source"] for s in flow["steps"]]
        shown = json.dumps(flow_of(recorded)["steps"])
        assert "spawned in turn 0, ran in turns 1, 2, its result reached the parent in turn 2" in shown
