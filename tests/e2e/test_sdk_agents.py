"""Injection beyond the plain Python SDKs: an `openai-agents` agent through the proxy (with
its trace upload), and a Node agent on the npm `openai` package in base-URL mode."""

from __future__ import annotations

import json
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flowproof.testing import FakeModelServer, Reply

from .conftest import AGENTS, Flowproof, upstream_args, write_spec

Fake = Callable[..., FakeModelServer]

WEATHER_SCRIPT = [
    Reply.tool_call("get_weather", {"city": "Nairobi"}),
    Reply.text("It is sunny in Nairobi, 26 degrees."),
]


def weather_spec(folder: Path, command: str, *extra: str) -> Path:
    """A flow: the agent must call get_weather for Nairobi and relay the mocked sunny weather."""
    return write_spec(folder / "weather.flow.yaml", "\n".join([
        "name: weather agent relays the mocked weather",
        "agent:",
        f"  command: {command}",
        *extra,
        "tools:",
        "  - name: get_weather",
        "    result: { city: Nairobi, sky: sunny, celsius: 26 }",
        "steps:",
        "  - prompt: What is the weather in Nairobi?",
        "  - assert_tool_call: get_weather where city equals Nairobi",
        "  - assert: reply contains sunny",
    ]) + "\n")


def record_and_replay(
    folder: Path, spec: Path, flowproof: Flowproof, fake_model: Fake, **record_env: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Record against the fake model, stop it, replay; returns the cassette and the replay's flow report."""
    server = fake_model(WEATHER_SCRIPT)
    recorded = flowproof.run(spec, *upstream_args(server), "--record", keys=True, **record_env)
    assert recorded.code == 0, recorded.output
    assert len(server.model_requests) == 2
    server.stop()
    cassette = folder / "weather.cassette.json"
    before = cassette.read_bytes()

    replayed = flowproof.run(spec, "--json")
    assert replayed.code == 0, replayed.output
    flow = replayed.report()["flows"][0]
    assert (flow["turns"], flow["tool_calls"], flow["reply"]) == (
        2, ["get_weather"], "It is sunny in Nairobi, 26 degrees.")
    assert cassette.read_bytes() == before
    document: dict[str, Any] = json.loads(before)
    return document, flow


class TestOpenAIAgentsSDK:
    def test_runner_run_records_and_replays_through_the_proxy(
        self, tmp_path: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        """An openai-agents Runner.run agent records and replays; its trace upload is neither recorded nor fatal."""
        shutil.copy(AGENTS / "agents_sdk_agent.py", tmp_path)
        # prompt_cache_key is a new UUID every run: the openai-agents preset declares it.
        spec = weather_spec(tmp_path, "python agents_sdk_agent.py")
        spec.write_text(spec.read_text().replace("tools:\n", "volatile:\n  - openai-agents\ntools:\n", 1))

        # Recording with tracing on would upload to the real api.openai.com (not the fake
        # model), and offline the SDK retries that for ~4 s; replay keeps tracing on.
        cassette, flow = record_and_replay(
            tmp_path, spec, flowproof, fake_model, OPENAI_AGENTS_DISABLE_TRACING="1")
        # The trace upload happened in replay, was answered locally, and did not fail the run.
        assert "Tracing" in flow["agent"]["stderr"]
        assert cassette["route"] == "proxy"
        urls = [t["request"]["url"] for t in cassette["turns"]]
        assert urls == ["https://api.openai.com/v1/responses"] * 2
        assert "«volatile:" in cassette["turns"][0]["request"]["body"]["prompt_cache_key"]
        # The mocked tool result is what the model was told on the second call.
        told = json.dumps(cassette["turns"][1]["request"]["body"]["input"])
        assert "sunny" in told and "overcast" not in told


class TestNodeAgent:
    def test_node_openai_package_records_and_replays_in_base_url_mode(
        self, tmp_path: Path, node_agent: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        """A Node 20 agent on the npm openai package, which ignores HTTPS_PROXY, records and replays via OPENAI_BASE_URL."""  # noqa: E501
        command = f"node {shlex.quote(str(node_agent / 'agent.mjs'))}"
        spec = weather_spec(tmp_path, command, "  route: base_url")

        cassette, _ = record_and_replay(tmp_path, spec, flowproof, fake_model)
        assert cassette["route"] == "base_url"
        assert [t["request"]["url"] for t in cassette["turns"]] == [
            "https://api.openai.com/v1/chat/completions"] * 2
        assert cassette["turns"][0]["request"]["body"]["model"] == "gpt-4o-mini"
