"""The ``flowproof_proxy`` fixture end to end, through pytest's own pytester.

The test file pytester runs builds a real ``openai.OpenAI()`` client in the test function:
at record it reaches the scripted fake model through the proxy's upstream mapping (the
client believes it talks to https://api.openai.com, trusting the flowproof CA from its
environment); at replay there is no upstream at all.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flowproof.runner.env import ensure_ca
from flowproof.testing import FakeModelServer, Reply

pytest_plugins = ("pytester",)

#: The test file the inner pytest runs: an in-process agent loop on the official SDK.
AGENT_TEST = '''
import os

import openai
import pytest

import flowproof

TOOLS = [{"type": "function", "function": {"name": "create_booking", "parameters": {
    "type": "object", "properties": {"flight": {"type": "object"}}}}}]


def run_agent(prompt):
    # The pytest running this file is in the outer test's process: the client is closed, not
    # left with its socket to the garbage collector.
    with openai.OpenAI(max_retries=0) as client:
        # The client believes it talks to the real provider over HTTPS.
        assert str(client.base_url).startswith("https://api.openai.com/")
        messages = [{"role": "user", "content": prompt}]
        first = client.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS)
        call = first.choices[0].message.tool_calls[0]
        messages.append(first.choices[0].message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": '{"booking": "B-1042"}'})
        second = client.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS)
        return second.choices[0].message.content


def test_books(flowproof_proxy):
    flowproof_proxy.session("cassettes/booking.json")
    run_agent(os.environ.get("FP_PROMPT", "Book KQ311"))
    trajectory = flowproof_proxy.trajectory()
    flight = os.environ.get("FP_EXPECT_FLIGHT", "KQ311")
    flowproof.assert_tool_call(trajectory, f"create_booking where flight.id equals {flight}")
    flowproof.assert_reply(trajectory, "Booked")
    if os.environ.get("FP_FAIL_AFTER"):
        pytest.fail("the test failed after the agent ran")
'''

SECOND_TEST = '''

def test_books_twice(flowproof_proxy):
    first = flowproof_proxy.session("cassettes/booking.json")
    run_agent("Book KQ311")
    second = flowproof_proxy.session("cassettes/booking.json")  # ends and judges the first
    assert first.result is not None and first.result.passed and first.result.turns == 2
    assert os.environ["HTTPS_PROXY"] == second.proxy_url
    with second:
        run_agent("Book KQ311")
    assert "HTTPS_PROXY" not in os.environ
    flowproof.assert_tool_call(flowproof_proxy.trajectory(), "create_booking")
'''

SCRIPT = [
    Reply.tool_call("create_booking", {"flight": {"id": "KQ311"}}),
    Reply.text("Booked KQ311 for you: booking B-1042."),
]
SCRUBBED = (
    "OPENAI_API_KEY", "OPENAI_BASE_URL", "FLOWPROOF_UPSTREAM", "FLOWPROOF_ADDON_SCRIPT",
    "HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY", "all_proxy",
    "SSL_CERT_FILE", "FP_PROMPT", "FP_FAIL_AFTER", "FP_EXPECT_FLIGHT",
)


@pytest.fixture(scope="module")
def ca_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One CA, created in this process (not inside a pytester run: see test_pytest_plugin)."""
    ca_dir = tmp_path_factory.mktemp("ca") / "ca"
    ensure_ca(ca_dir)
    return ca_dir


@pytest.fixture(scope="module", autouse=True)
def _sdk_stack_loaded_outside_pytester() -> None:
    """Load the SDK's HTTP stack in this process before any in-process pytester run.

    pytester drops every module first imported during its run. openai imports its transport
    (httpcore2, h11, its chat resources) on the first request, so when that request happened
    inside a run, later tests in this process got a second copy whose exceptions the first
    copy's handlers no longer map (tests/testing saw raw httpcore errors instead of
    APIConnectionError, and only after this file had run)."""
    import openai

    with FakeModelServer([Reply.text("warm"), Reply.text("cut here", cut_after=1)]) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-test-fake-model", max_retries=0)
        messages: list = [{"role": "user", "content": "hi"}]
        list(client.chat.completions.create(model="m", messages=messages, stream=True))
        with pytest.raises(openai.APIConnectionError):
            list(client.chat.completions.create(model="m", messages=messages, stream=True))
        client.close()


def clean_environment(ca_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED and k != "PYTEST_CURRENT_TEST"}
    env["FLOWPROOF_CA_DIR"] = str(ca_dir)
    return env


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, ca_dir: Path) -> tuple[Path, int]:
    """The agent test recorded once for the module (a pytest subprocess in record mode against
    the fake model): its cassette, and how many requests the model got."""
    folder = tmp_path_factory.mktemp("recorded")
    (folder / "test_agent.py").write_text(AGENT_TEST)
    (folder / "tox.ini").write_text("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    with FakeModelServer(SCRIPT) as server:
        env = clean_environment(ca_dir)
        env.update(FLOWPROOF_UPSTREAM=f"api.openai.com={server.url}", OPENAI_API_KEY="sk-test-fake-model")
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--flowproof-mode", "record"],
            check=False, cwd=folder, env=env, capture_output=True, text=True, timeout=300,
        )
        requests = len(server.requests)
    assert done.returncode == 0, done.stdout + done.stderr
    return folder / "cassettes" / "booking.json", requests


@pytest.fixture
def agent_tests(pytester: pytest.Pytester, ca_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The agent test file in a clean environment; returns where its cassette goes."""
    for name in SCRUBBED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FLOWPROOF_CA_DIR", str(ca_dir))
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_agent=AGENT_TEST)
    return pytester.path / "cassettes" / "booking.json"


def copy_cassette(recorded: tuple[Path, int], cassette: Path) -> bytes:
    cassette.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(recorded[0], cassette)
    return cassette.read_bytes()


def environment() -> dict[str, str]:
    """This process's environment, but for the variable pytest itself sets per phase."""
    return {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}


class TestRecordThenReplay:
    def test_record_keeps_the_cassette_of_a_passing_test(self, recorded: tuple[Path, int]) -> None:
        cassette, requests = recorded
        assert requests == 2
        text = cassette.read_text()
        assert len(json.loads(text)["turns"]) == 2
        assert "sk-test-fake-model" not in text
        assert not cassette.with_name("booking.recording.json").exists()

    def test_replay_without_upstream_passes_and_puts_the_environment_back(
        self, pytester: pytest.Pytester, agent_tests: Path, recorded: tuple[Path, int]
    ) -> None:
        """Replay (the default) serves the cassette with no upstream and no key; the trajectory
        assertions pass; every variable the session set is put back."""
        copy_cassette(recorded, agent_tests)
        before = environment()
        res = pytester.runpytest("-v", "-rP")
        res.assert_outcomes(passed=1)
        assert environment() == before
        # A passing session's report is there to read with -rP.
        assert "✓ test_agent.py::test_books [replay] — passed" in res.stdout.str()

    def test_a_changed_prompt_fails_with_the_divergence_not_the_sdk_traceback(
        self, pytester: pytest.Pytester, agent_tests: Path, recorded: tuple[Path, int],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        kept = copy_cassette(recorded, agent_tests)
        monkeypatch.setenv("FP_PROMPT", "Book KQ999")
        # On CI pytest prints the short summary unabridged: it must stay the report's headline.
        monkeypatch.setenv("CI", "true")
        res = pytester.runpytest()
        res.assert_outcomes(failed=1)
        text = res.stdout.str()
        assert "replay divergence" in text
        summary = text.split("short test summary info", 1)[1].splitlines()[1]
        assert summary == "FAILED test_agent.py::test_books - ✗ test_agent.py::test_books [replay] — replay divergence"
        assert 'recorded "Book KQ311", replayed "Book KQ999"' in text
        # The advice is the pytest command that records this test, not a bare mitmdump line.
        assert "re-record with: pytest test_agent.py::test_books --flowproof-mode record" in text
        assert text.count("--flowproof-mode record") == 1  # given once, on the report's last line
        assert "mitmdump" not in text
        # The SDK error the divergence caused is named, but no traceback is shown.
        assert "the test then failed with: BadRequestError" in text
        assert "Traceback" not in text and "site-packages" not in text
        assert agent_tests.read_bytes() == kept

    def test_a_failed_trajectory_assertion_is_not_reported_as_passed(
        self, pytester: pytest.Pytester, agent_tests: Path, recorded: tuple[Path, int],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """The replay matched, then flowproof.assert_tool_call failed: the test's flowproof
        section says the test failed and why, never "passed" or "Nothing to do"."""
        copy_cassette(recorded, agent_tests)
        monkeypatch.setenv("FP_EXPECT_FLIGHT", "KQ999")
        res = pytester.runpytest()
        res.assert_outcomes(failed=1)
        text = res.stdout.str()
        assert "expected create_booking where flight.id equals KQ999" in text
        section = text[text.index("Captured flowproof call"):]
        assert "— passed" not in section and "Nothing to do" not in section
        assert "✗ test_agent.py::test_books [replay] — the test failed" in section
        said = "the test failed with: TrajectoryAssertionError: expected create_booking where flight.id equals KQ999"
        assert said in section
        assert "tool calls: create_booking" in section  # what the agent did, to compare with the assertion

    def test_record_of_a_failing_test_leaves_the_old_cassette_byte_identical(
        self, pytester: pytest.Pytester, agent_tests: Path, recorded: tuple[Path, int],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        kept = copy_cassette(recorded, agent_tests)
        monkeypatch.setenv("FP_FAIL_AFTER", "1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-fake-model")
        with FakeModelServer(SCRIPT) as server:
            monkeypatch.setenv("FLOWPROOF_UPSTREAM", f"api.openai.com={server.url}")
            res = pytester.runpytest("--flowproof-mode", "record")
            assert len(server.requests) == 2  # the agent really ran against the model
        res.assert_outcomes(failed=1)
        assert "the test failed after the agent ran" in res.stdout.str()
        section = res.stdout.str()[res.stdout.str().index("Captured flowproof call"):]
        assert "— passed" not in section
        assert "Nothing was recorded (the recording is in " in section and "the test failed; fix" in section
        assert agent_tests.read_bytes() == kept
        assert agent_tests.with_name("booking.rejected.json").is_file()
        assert not agent_tests.with_name("booking.recording.json").exists()

    def test_replay_without_a_cassette_names_the_record_command(
        self, pytester: pytest.Pytester, agent_tests: Path
    ) -> None:
        """A flowproof error in the test reads as flowproof's paragraph, not a traceback."""
        (pytester.path / "test_agent.py").write_text(
            'def test_books(flowproof_proxy):\n    flowproof_proxy.session("cassettes/booking.json")\n'
        )
        res = pytester.runpytest()
        res.assert_outcomes(failed=1)
        text = res.stdout.str()
        assert "no cassette to replay" in text
        assert "record one first with: pytest test_agent.py::test_books --flowproof-mode record" in text
        assert "Traceback" not in text

    def test_under_xdist(
        self, pytester: pytest.Pytester, agent_tests: Path, recorded: tuple[Path, int]
    ) -> None:
        """Two tests replay the same cassette on two xdist workers, each with its own proxy
        (the second runs two sessions one after the other, the second as a `with` block)."""
        copy_cassette(recorded, agent_tests)
        (pytester.path / "test_agent.py").write_text(AGENT_TEST + SECOND_TEST)
        res = pytester.runpytest("-n", "2", "-v")
        res.assert_outcomes(passed=2)
        assert "[gw0]" in res.stdout.str() and "[gw1]" in res.stdout.str()


#: Two more tests for one run: another test recording test_books's cassette, and a test
#: recording one cassette in two sessions.
SAME_CASSETTE_TESTS = '''

def test_books_again(flowproof_proxy):
    flowproof_proxy.session("cassettes/booking.json")
    run_agent("Book KQ311")


def test_twice(flowproof_proxy):
    flowproof_proxy.session("cassettes/twice.json")
    run_agent("Book KQ311")
    flowproof_proxy.session("cassettes/twice.json")
    run_agent("Book KQ311")
'''


class TestOneWriterPerCassette:
    def test_a_second_test_recording_a_cassette_fails_naming_the_first_before_it_starts(
        self, pytester: pytest.Pytester, agent_tests: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """In one pytest run, the first test to record a cassette claims it: a later test
        recording it fails before its session starts, naming the first test, and the first
        test's recording stays the cassette; a test that opens a second session on its
        cassette fails the same way and keeps neither recording (the test failed)."""
        (pytester.path / "test_agent.py").write_text(AGENT_TEST + SAME_CASSETTE_TESTS)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-fake-model")
        # Enough answers for every agent run, so only the refusal can fail a test.
        with FakeModelServer(SCRIPT * 4) as server:
            monkeypatch.setenv("FLOWPROOF_UPSTREAM", f"api.openai.com={server.url}")
            res = pytester.runpytest("--flowproof-mode", "record")
            requests = len(server.requests)
        res.assert_outcomes(passed=1, failed=2)
        text = res.stdout.str()
        assert ("test_agent.py::test_books and test_agent.py::test_books_again both record cassettes/booking.json, "
                "so one recording would be lost — give each test its own cassette, or record them in separate "
                "runs") in text
        assert ("test_agent.py::test_twice records cassettes/twice.json in two sessions, so one recording would "
                "be lost — give each session its own cassette") in text
        assert "Traceback" not in text
        # test_books and the first session of test_twice reached the model; nothing else did.
        assert requests == 4
        assert len(json.loads(agent_tests.read_text())["turns"]) == 2
        assert not agent_tests.with_name("twice.json").exists()
        assert agent_tests.with_name("twice.rejected.json").is_file()


class TestOtel:
    """--flowproof-otel reaches the fixture's sessions: their spans are built as a flow's are,
    from the run record and the trajectory the one judge read (`runner.otel.flow_spans`)."""

    def spans_of(self, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str):  # type: ignore[no-untyped-def]
        from .runner.otlp_receiver import OtlpReceiver

        for name in ("OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED",
                     "OTEL_SERVICE_NAME", "TRACEPARENT"):
            monkeypatch.delenv(name, raising=False)
        with OtlpReceiver() as receiver:
            monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
            res = pytester.runpytest("--flowproof-otel", *args)
        return res, {s.name: s for s in receiver.spans}, receiver.spans

    def test_a_replayed_session_sends_its_agent_chat_and_tool_spans(
        self, pytester: pytest.Pytester, agent_tests: Path, recorded: tuple[Path, int],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        copy_cassette(recorded, agent_tests)
        res, named, spans = self.spans_of(pytester, monkeypatch)
        res.assert_outcomes(passed=1)
        root = named["invoke_agent test_agent.py::test_books"]
        assert root.attributes["flowproof.mode"] == "replay" and root.status == "unset"
        chats = sorted((s for s in spans if s.name == "chat gpt-4o"), key=lambda s: s.start_ns)
        assert [c.attributes["flowproof.turn"] for c in chats] == [0, 1]
        assert all(root.start_ns <= c.start_ns <= c.end_ns <= root.end_ns for c in chats)
        booking = named["execute_tool create_booking"]
        # The agent's own result (no spec mocks it), carried by the second call's request.
        assert booking.attributes["flowproof.tool.result"] == "real"
        assert (booking.start_ns, booking.end_ns) == (chats[0].end_ns, chats[1].start_ns)
        assert chats[0].attributes["server.address"] == "api.openai.com"

    def test_a_diverged_session_is_an_error_span_and_a_failed_root(
        self, pytester: pytest.Pytester, agent_tests: Path, recorded: tuple[Path, int],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        copy_cassette(recorded, agent_tests)
        monkeypatch.setenv("FP_PROMPT", "Book KQ999")
        res, named, spans = self.spans_of(pytester, monkeypatch)
        res.assert_outcomes(failed=1)
        root = named["invoke_agent test_agent.py::test_books"]
        assert (root.status, root.attributes["error.type"]) == ("error", "exit_3")
        (diverged,) = [s for s in spans if s.attributes.get("error.type") == "replay_divergence"]
        assert diverged.parent_span_id == root.span_id and diverged.attributes["gen_ai.request.model"] == "gpt-4o"
