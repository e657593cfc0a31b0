"""The agent drivers end to end: an interactive stdin agent fed two prompts in turn, and a
`url:` agent service reached over HTTP, each recorded against the fake model and replayed."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flowproof.runner.proxy import free_port
from flowproof.testing import FakeModelServer, Reply

from .conftest import AGENTS, BIN, Flowproof, kill_group, upstream_args, write_spec

Fake = Callable[..., FakeModelServer]

FIRST = "What is the weather in Nairobi?"
SECOND = "Should I pack an umbrella?"
FIRST_ANSWER = "It is sunny in Nairobi, 26 degrees."
SECOND_ANSWER = "No umbrella needed: it stays sunny and dry."
INTERACTIVE_SCRIPT = [
    Reply.tool_call("get_weather", {"city": "Nairobi"}),
    Reply.text(FIRST_ANSWER),
    Reply.text(SECOND_ANSWER),
]


def interactive_spec(folder: Path) -> Path:
    """Two prompts to the interactive agent: a tool round for the first, plain text for the second."""
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(AGENTS / 'interactive_agent.py'))}"
    return write_spec(folder / "chat.flow.yaml", "\n".join([
        "name: interactive agent answers two prompts in turn",
        "agent:",
        f"  command: {command}",
        "  timeout: 30",
        "tools:",
        "  - name: get_weather",
        "    result: { city: Nairobi, sky: sunny, celsius: 26 }",
        "steps:",
        f"  - prompt: {FIRST}",
        "  - assert_tool_call: get_weather where city equals Nairobi",
        f"  - prompt: {SECOND}",
        "  - assert_no_tool_call: get_weather where city equals London",
        "  - assert: reply contains umbrella",
    ]) + "\n")


def user_messages(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


class TestInteractiveAgent:
    def test_two_prompts_record_and_replay_each_after_the_previous_answer(
        self, tmp_path: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        """A stdin agent gets its second prompt only once the first answer is complete, and the flow replays offline."""
        spec = interactive_spec(tmp_path)
        server = fake_model(INTERACTIVE_SCRIPT)
        recorded = flowproof.run(spec, *upstream_args(server), "--record", "--json", keys=True)
        assert recorded.code == 0, recorded.output
        assert server.remaining == 0

        bodies = [r.json for r in server.model_requests]
        assert [user_messages(b) for b in bodies] == [[FIRST], [FIRST], [FIRST, SECOND]]
        # The request carrying the second prompt already holds the complete first answer,
        # right before it: the runner waited past the tool round for the final text.
        last = bodies[2]["messages"]
        assert last[-2:] == [{"role": "assistant", "content": FIRST_ANSWER}, {"role": "user", "content": SECOND}]
        assert [m["role"] for m in last] == ["system", "user", "assistant", "tool", "assistant", "user"]
        assert json.loads(last[3]["content"])["sky"] == "sunny"  # the spec's mock, not the agent's tool
        flow = recorded.report()["flows"][0]
        assert flow["agent"]["stdout"].splitlines() == [FIRST_ANSWER, SECOND_ANSWER]
        server.stop()

        cassette = tmp_path / "chat.cassette.json"
        before = cassette.read_bytes()
        replayed = flowproof.run(spec, "--json")
        assert replayed.code == 0, replayed.output
        flow = replayed.report()["flows"][0]
        assert (flow["turns"], flow["tool_calls"], flow["reply"]) == (3, ["get_weather"], SECOND_ANSWER)
        assert [s["passed"] for s in flow["steps"]] == [True, True, True]
        assert flow["agent"]["stdout"].splitlines() == [FIRST_ANSWER, SECOND_ANSWER]
        assert cassette.read_bytes() == before


# --------------------------------------------------------------------------- url agents


def flowproof_env(flowproof: Flowproof, port: int) -> dict[str, str]:
    """The variables ``flowproof env --proxy-port PORT`` exports (as `eval "$(...)"` would set them)."""
    done = subprocess.run(
        [str(BIN / "flowproof"), "env", "--proxy-port", str(port)],
        env=flowproof.env(), capture_output=True, text=True, timeout=30, check=True,
    )
    exports: dict[str, str] = {}
    for line in done.stdout.splitlines():
        words = shlex.split(line)
        assert words[0] == "export", line
        name, _, value = words[1].partition("=")
        exports[name] = value
    return exports


@pytest.fixture
def url_agent(flowproof: Flowproof) -> Iterator[Callable[[int], str]]:
    """Starts tests/e2e/agents/url_agent.py with the exports for a proxy port; returns its URL. Stopped after the test."""  # noqa: E501
    started: list[subprocess.Popen[str]] = []

    def start(proxy_port: int) -> str:
        env = {**flowproof.env(keys=True), **flowproof_env(flowproof, proxy_port)}
        process = subprocess.Popen(
            [sys.executable, str(AGENTS / "url_agent.py")], env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
        )
        started.append(process)
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("listening on http://127.0.0.1:"), first
        return first.split()[-1]

    yield start
    for process in started:
        kill_group(process.pid)
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()  # left to the collector, it is a ResourceWarning


class TestUrlAgent:
    def test_a_running_service_records_and_replays_through_a_fixed_proxy_port(
        self, tmp_path: Path, flowproof: Flowproof, fake_model: Fake, url_agent: Callable[[int], str]
    ) -> None:
        """A service started with `flowproof env --proxy-port N` records and replays under `flowproof-run --proxy-port N`."""  # noqa: E501
        port = free_port()
        url = url_agent(port)
        spec = write_spec(tmp_path / "support.flow.yaml", "\n".join([
            "name: url agent answers over HTTP",
            "agent:",
            f"  url: {url}/ask",
            "  timeout: 30",
            "steps:",
            "  - prompt: Can I change my flight to Friday?",
            "  - assert: reply contains Friday",
        ]) + "\n")
        server = fake_model([Reply.text("Yes: Friday's KQ311 has seats; the change is free.")])

        recorded = flowproof.run(spec, *upstream_args(server), "--record", "--proxy-port", str(port), "--json")
        assert recorded.code == 0, recorded.output
        (request,) = server.model_requests
        assert user_messages(request.json) == ["Can I change my flight to Friday?"]
        flow = recorded.report()["flows"][0]
        assert flow["agent"]["stdout"] == "Yes: Friday's KQ311 has seats; the change is free."
        server.stop()

        cassette = tmp_path / "support.cassette.json"
        turns = json.loads(cassette.read_text(encoding="utf-8"))["turns"]
        assert [t["request"]["url"] for t in turns] == ["https://api.openai.com/v1/chat/completions"]
        replayed = flowproof.run(spec, "--proxy-port", str(port), "--json")
        assert replayed.code == 0, replayed.output
        flow = replayed.report()["flows"][0]
        assert (flow["turns"], flow["reply"]) == (1, "Yes: Friday's KQ311 has seats; the change is free.")
        assert flow["agent"]["stdout"] == flow["reply"]
