"""What real clients do to a call, end to end: flowproof-run -> mitmdump -> a Python agent -> the
fake model server behaving like a live one (bodies that end late, answers that come slowly).

- openai-python's sync stream stops at ``data: [DONE]`` and closes without reading the rest of
  the body: against a server that ends its bodies late, that is a complete call.
- goose fires its session-title call on its own system prompt and never awaits it: when the
  model is slow, the agent exits with the call in flight. The call is recorded as abandoned,
  replay holds it the same way, and the run is the main task's.
- A HOME set only in the spec's ``agent.env`` is the one made portable.
- Gemini names the model in the URL path: switching it is a divergence naming the model.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from flowproof.testing import FakeModelServer, Reply

from .conftest import Flowproof, fingerprint, write_spec

Fake = Callable[..., FakeModelServer]

# One run of twenty replays, and a record before it: slow on a loaded machine.
pytestmark = pytest.mark.timeout(900)

#: How many replays must pass: one flake in twenty would show.
REPLAYS = 20
#: Replays at once on the run's one warm proxy: more timing noise per replay, not less.
REPLAY_JOBS = 4
#: Seconds one flowproof-run may take on a loaded machine.
RUN_TIMEOUT = 120.0

SYNC_STREAM_AGENT = '''\
import os

import openai

client = openai.OpenAI()
stream = client.chat.completions.create(
    model="gpt-4o-mini", stream=True,
    messages=[{"role": "user", "content": os.environ["FLOWPROOF_PROMPT"]}],
)
print("".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices))
'''

TITLE_SYSTEM = "Write a short title for this session."
TASK_SYSTEM = "You are a careful assistant."

# goose's pattern: the title call runs beside the task on its own system prompt and is never
# awaited; the process exits as soon as the task's answer is printed.
GOOSE_AGENT = f'''\
import os
import threading

import openai

client = openai.OpenAI(max_retries=0)
prompt = os.environ["FLOWPROOF_PROMPT"]


def title():
    client.chat.completions.create(model="gpt-4o-mini", messages=[
        {{"role": "system", "content": {TITLE_SYSTEM!r}}}, {{"role": "user", "content": prompt}}])


threading.Thread(target=title, daemon=True).start()
answer = client.chat.completions.create(model="gpt-4o", messages=[
    {{"role": "system", "content": {TASK_SYSTEM!r}}}, {{"role": "user", "content": prompt}}])
print(answer.choices[0].message.content, flush=True)
os._exit(0)  # never waits for the title call, as goose does not
'''


def flow(folder: Path, agent: str, reply: str, *env: str) -> Path:
    (folder / "agent.py").write_text(agent, encoding="utf-8")
    lines = ["name: real traffic", "agent:", f"  command: {sys.executable} agent.py", "  timeout: 60"]
    if env:
        lines += ["  env:", *(f"    {line}" for line in env)]
    lines += ["steps:", "  - prompt: Say the word", f"  - assert: reply contains {reply}"]
    return write_spec(folder / "traffic.flow.yaml", "\n".join(lines) + "\n")


def replay_many(flowproof: Flowproof, spec: Path, times: int = REPLAYS) -> list[dict]:
    """``times`` replays of ``spec``'s cassette, each must pass; their JSON reports.

    Each replay is a flow of its own (a copy of the spec naming the same cassette), and one
    ``flowproof-run`` runs them all, ``REPLAY_JOBS`` at a time, as sessions on one warm proxy:
    every replay still starts its agent and opens its own session (replayer, hold server, event
    log), which is where a flake would be, without paying a mitmdump start twenty times.
    """
    text = spec.read_text(encoding="utf-8")
    cassette = f"cassette: {spec.name.replace('.flow.yaml', '.cassette.json')}\n"
    copies = [write_spec(spec.with_name(f"replay-{n:02d}.flow.yaml"),
                         text.replace("name: real traffic", f"name: replay {n:02d}") + cassette)
              for n in range(1, times + 1)]
    ran = flowproof.run(*copies, "--json", "-j", str(REPLAY_JOBS), timeout=RUN_TIMEOUT * 3)
    flows = ran.report()["flows"]
    assert sorted(f["name"] for f in flows) == [f"replay {n:02d}" for n in range(1, times + 1)], ran.output
    failed = [f["name"] for f in flows if f["exit_code"] != 0]
    assert not failed and ran.code == 0, f"{len(failed)} of {times} replays failed: {failed}\n{ran.output}"
    return list(flows)


class TestSyncStreamAgainstALateEnd:
    def test_records_and_replays_twenty_times(self, tmp_path: Path, flowproof: Flowproof) -> None:
        """The client leaves at [DONE] before the body ends: a complete turn, and replays pass."""
        spec = flow(tmp_path, SYNC_STREAM_AGENT, "abracadabra")
        with FakeModelServer([Reply.text("abracadabra")], end_delay=5.0) as server:
            recorded = flowproof.run(spec, "--record", "--upstream", f"api.openai.com={server.url}",
                                     keys=True, timeout=RUN_TIMEOUT)
            assert recorded.code == 0, recorded.output
            [exchange] = server.wait_settled()
        # The client really left before the end of the body: this is the case under test.
        assert exchange.outcome == "client-closed"
        cassette = json.loads((tmp_path / "traffic.cassette.json").read_text(encoding="utf-8"))
        [turn] = cassette["turns"]
        assert "abandoned" not in turn
        assert turn["response"]["events"][-1]["data"] == "[DONE]"
        before = fingerprint(tmp_path / "traffic.cassette.json")
        reports = replay_many(flowproof, spec)
        assert {r["reply"] for r in reports} == {"abracadabra"}
        assert fingerprint(tmp_path / "traffic.cassette.json") == before


class TestTitleCallLeftInFlight:
    def test_records_an_abandoned_title_call_and_replays_twenty_times(
        self, tmp_path: Path, flowproof: Flowproof
    ) -> None:
        """The title answer takes seconds; the agent exits first. Record keeps it as abandoned;
        every replay holds it the same way and passes with the task's reply."""
        spec = flow(tmp_path, GOOSE_AGENT, "Nairobi")
        lanes = {TITLE_SYSTEM: [Reply.text("Flight talk", first_byte_delay=8.0)]}
        # The task's answer waits a second: the title call, sent from a thread at the same
        # moment, must be in flight upstream when the agent exits (on a loaded machine it
        # could otherwise still be on its way and never reach the model).
        task = Reply.text("Nairobi it is.", first_byte_delay=1.0)
        with FakeModelServer([task], lanes=lanes) as server:
            recorded = flowproof.run(spec, "--record", "--json", "--upstream", f"api.openai.com={server.url}",
                                     keys=True, timeout=RUN_TIMEOUT)
            assert recorded.code == 0, recorded.output
            outcomes = sorted(e.outcome or "" for e in server.wait_settled(timeout=20))
        assert outcomes == ["client-closed", "ended"]
        assert recorded.report()["flows"][0]["reply"] == "Nairobi it is."
        cassette = json.loads((tmp_path / "traffic.cassette.json").read_text(encoding="utf-8"))
        by_system = {t["request"]["body"]["messages"][0]["content"]: t for t in cassette["turns"]}
        title, task = by_system[TITLE_SYSTEM], by_system[TASK_SYSTEM]
        assert title["abandoned"] is True and title["response"] is None
        assert "abandoned" not in task
        reports = replay_many(flowproof, spec)
        assert {r["reply"] for r in reports} == {"Nairobi it is."}
        assert all(not r["missing"] and not r["divergences"] for r in reports)

    def test_a_replay_that_never_asks_for_the_title_passes(self, tmp_path: Path, flowproof: Flowproof) -> None:
        """An abandoned turn never requested at replay is not a missing call."""
        spec = flow(tmp_path, GOOSE_AGENT, "Nairobi")
        lanes = {TITLE_SYSTEM: [Reply.text("Flight talk", first_byte_delay=8.0)]}
        with FakeModelServer([Reply.text("Nairobi it is.")], lanes=lanes) as server:
            recorded = flowproof.run(spec, "--record", "--upstream", f"api.openai.com={server.url}",
                                     keys=True, timeout=RUN_TIMEOUT)
            assert recorded.code == 0, recorded.output
        no_title = GOOSE_AGENT.replace("threading.Thread(target=title, daemon=True).start()", "")
        (tmp_path / "agent.py").write_text(no_title, encoding="utf-8")
        replayed = flowproof.run(spec, "--json", timeout=RUN_TIMEOUT)
        assert replayed.code == 0, replayed.output
        assert replayed.report()["flows"][0]["missing"] is None


HOME_AGENT = '''\
import os

import openai

client = openai.OpenAI()
answer = client.chat.completions.create(model="gpt-4o", messages=[
    {"role": "system", "content": "Memory lives in " + os.path.join(os.environ["HOME"], ".agent")},
    {"role": "user", "content": os.environ["FLOWPROOF_PROMPT"]}])
print(answer.choices[0].message.content)
'''


class TestHomeFromTheSpec:
    def test_a_home_set_only_in_agent_env_is_made_portable(self, tmp_path: Path, flowproof: Flowproof) -> None:
        """The agent's HOME comes from `agent.env`: the cassette holds «home», and a replay with
        another HOME there matches."""
        record_home, replay_home = tmp_path / "home-a", tmp_path / "home-b"
        record_home.mkdir()
        replay_home.mkdir()
        spec = flow(tmp_path, HOME_AGENT, "remembered", f"HOME: {record_home}")
        with FakeModelServer([Reply.text("remembered")]) as server:
            recorded = flowproof.run(spec, "--record", "--upstream", f"api.openai.com={server.url}",
                                     keys=True, timeout=RUN_TIMEOUT)
        assert recorded.code == 0, recorded.output
        text = (tmp_path / "traffic.cassette.json").read_text(encoding="utf-8")
        assert "Memory lives in «home»/.agent" in text
        assert str(record_home) not in text
        spec.write_text(spec.read_text(encoding="utf-8").replace(str(record_home), str(replay_home)),
                        encoding="utf-8")
        replayed = flowproof.run(spec, timeout=RUN_TIMEOUT)
        assert replayed.code == 0, replayed.output


GEMINI_AGENT = '''\
import os

from google import genai

client = genai.Client()
text = "".join(chunk.text or "" for chunk in client.models.generate_content_stream(
    model=os.environ.get("GEMINI_MODEL", "gemini-2.5-flash"), contents=os.environ["FLOWPROOF_PROMPT"]))
print(text)
'''


class TestGeminiModelInThePath:
    def test_a_changed_model_diverges_naming_it(self, tmp_path: Path, flowproof: Flowproof) -> None:
        """gemini-2.5-flash -> gemini-2.5-flash-lite: the body is the same, the path is not: exit 3
        with the model named in the report, and the cassette untouched."""
        spec = flow(tmp_path, GEMINI_AGENT, "hello")
        with FakeModelServer([Reply.text("hello from gemini")]) as server:
            recorded = flowproof.run(spec, "--record", "--upstream",
                                     f"generativelanguage.googleapis.com={server.url}",
                                     GEMINI_API_KEY="AIza-e2e-fake", timeout=RUN_TIMEOUT)
        assert recorded.code == 0, recorded.output
        assert flowproof.run(spec, timeout=RUN_TIMEOUT).code == 0
        before = fingerprint(tmp_path / "traffic.cassette.json")
        switched = flowproof.run(spec, timeout=RUN_TIMEOUT, GEMINI_MODEL="gemini-2.5-flash-lite")
        assert switched.code == 3, switched.output
        assert "model: recorded gemini-2.5-flash, replayed gemini-2.5-flash-lite" in switched.output
        assert fingerprint(tmp_path / "traffic.cassette.json") == before
