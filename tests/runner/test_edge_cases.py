"""Runner edge cases: verdicts, leftovers, interruption, hostile report text,
the heal diff's display, and killing agent children that left the process group."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from click.testing import CliRunner

from flowproof.errors import EXIT_AGENT, EXIT_OK, EXIT_USAGE
from flowproof.report.files import write_junit
from flowproof.report.json_report import render_json
from flowproof.report.junit import junit_xml
from flowproof.runner.agents import run_command_agent
from flowproof.runner.cli import run_command
from flowproof.runner.flow import Cancel, FlowResult, RunOptions, run_flow
from flowproof.runner.recording import rejected_path, staging_path

from .conftest import FAKE_ADDON, group_gone
from .helpers import BOOKING_TURNS, cassette_text, turn_events, write_script, write_spec

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}

NO_CALL_SPEC = """\
name: nothing to record
agent:
  command: "true"
steps:
  - prompt: hello
  - assert_no_tool_call: delete_everything
"""

HOSTILE = 'ctl \x00\x01\x07\x1b[31mred\x1b[0m ]]> <b>&amp; "dq" \'sq\' é 日本 ✓ \ufffe'


@pytest.fixture
def opts(ca_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """RunOptions factory using the stand-in addon and the session CA."""
    monkeypatch.setenv("FLOWPROOF_ADDON_SCRIPT", str(FAKE_ADDON))

    def make(script: dict | None = None, **kw) -> RunOptions:
        if script is not None:
            monkeypatch.setenv("FAKE_FLOWPROOF_SCRIPT", str(write_script(tmp_path / "script.json", **script)))
        return RunOptions(ca_dir=ca_dir, **kw)

    return make


@pytest.fixture
def fake_env(ca_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Point the CLI at the stand-in addon and the session CA; returns a script setter."""
    monkeypatch.setenv("FLOWPROOF_ADDON_SCRIPT", str(FAKE_ADDON))
    monkeypatch.setenv("FLOWPROOF_CA_DIR", str(ca_dir))
    monkeypatch.delenv("FLOWPROOF_UPSTREAM", raising=False)

    def set_script(**script) -> None:
        monkeypatch.setenv("FAKE_FLOWPROOF_SCRIPT", str(write_script(tmp_path / "script.json", **script)))

    return set_script


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_for_file(path: Path, timeout: float = 10.0) -> str:
    """The non-empty text of ``path`` once it appears."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.05)
    raise AssertionError(f"{path} did not appear within {timeout}s")


class TestRecordLeavesNothingBehind:
    def test_agent_not_found_leaves_no_staging_file(self, tmp_path: Path, opts) -> None:
        """A recording whose agent cannot start leaves no *.recording.json and the old cassette untouched."""
        spec = write_spec(tmp_path, command="no-such-agent-binary-xyz")
        cassette = tmp_path / "booking.cassette.json"
        cassette.write_text(cassette_text(BOOKING_TURNS))
        before = cassette.read_bytes()
        result = run_flow(spec, opts({"events": [], "cassette": cassette_text([])}, mode="record"))
        assert result.exit_code == EXIT_AGENT and "not found" in (result.error or "")
        assert not staging_path(cassette).exists()
        assert cassette.read_bytes() == before

    def test_missing_cwd_fails_before_the_proxy_starts(self, tmp_path: Path, opts) -> None:
        """An agent.cwd that does not exist is an agent error naming the spec line, with nothing staged."""
        spec = tmp_path / "cwd.flow.yaml"
        spec.write_text(NO_CALL_SPEC.replace('command: "true"', 'command: "true"\n  cwd: nowhere'))
        result = run_flow(spec, opts({"events": [], "cassette": cassette_text([])}, mode="record"))
        assert result.exit_code == EXIT_AGENT
        assert f"{spec}:" in (result.error or "") and "nowhere" in (result.error or "")
        assert result.startup_seconds is None
        assert not staging_path(tmp_path / "cwd.cassette.json").exists()

    def test_no_model_call_never_replaces_a_cassette(self, tmp_path: Path, opts) -> None:
        """A recording with no model call fails and keeps the old cassette byte-identical, even when every step passes."""  # noqa: E501
        spec = tmp_path / "nothing.flow.yaml"
        spec.write_text(NO_CALL_SPEC)
        cassette = tmp_path / "nothing.cassette.json"
        cassette.write_text(cassette_text(BOOKING_TURNS))
        before = cassette.read_bytes()
        result = run_flow(spec, opts({"events": [], "cassette": cassette_text([])}, mode="record"))
        assert result.exit_code == EXIT_AGENT and "no model call" in (result.error or "")
        assert cassette.read_bytes() == before
        assert not staging_path(cassette).exists()

    def test_interrupt_stops_agent_and_records_nothing(self, tmp_path: Path, opts) -> None:
        """A cancelled recording stops its agent group at once, exits 130 and leaves the cassette and no staging file."""  # noqa: E501
        pidfile = tmp_path / "agent.pid"
        spec = write_spec(tmp_path, command=f"echo $$ > {shlex.quote(str(pidfile))}; sleep 60", timeout=60)
        cassette = tmp_path / "booking.cassette.json"
        cassette.write_text(cassette_text(BOOKING_TURNS))
        before = cassette.read_bytes()
        cancel = Cancel()
        options = opts({"events": turn_events(BOOKING_TURNS), "cassette": cassette_text(BOOKING_TURNS)},
                       mode="record", cancel=cancel)
        timer = threading.Thread(target=lambda: (wait_for_file(pidfile), cancel.set(signal.SIGINT)))
        timer.start()
        started = time.monotonic()
        try:
            result = run_flow(spec, options)
        finally:
            timer.join()
        pgid = int(pidfile.read_text())
        assert result.exit_code == 130 and "SIGINT" in (result.error or "")
        assert time.monotonic() - started < 20
        assert group_gone(pgid)
        assert cassette.read_bytes() == before
        assert not staging_path(cassette).exists() and not rejected_path(cassette).exists()

    def test_cancelled_before_start_runs_nothing(self, tmp_path: Path, opts) -> None:
        """A flow whose run was already cancelled reports 128 + the signal and starts no agent."""
        marker = tmp_path / "ran"
        spec = write_spec(tmp_path, command=f"touch {shlex.quote(str(marker))}")
        cancel = Cancel()
        cancel.set(signal.SIGTERM)
        result = run_flow(spec, opts(mode="record", cancel=cancel))
        assert result.exit_code == 143 and "SIGTERM" in (result.error or "")
        assert not marker.exists()


class TestVerdict:
    def test_replay_without_done_event_fails(self, tmp_path: Path, opts) -> None:
        """A replay whose proxy never wrote `done` fails with exit 5: missing calls could not be checked."""
        spec = write_spec(tmp_path)
        (tmp_path / "booking.cassette.json").write_text(cassette_text(BOOKING_TURNS))
        result = run_flow(spec, opts({"events": turn_events(BOOKING_TURNS[:2]), "skip_done": True}))
        assert result.exit_code == EXIT_AGENT
        assert "`done`" in (result.error or "")

    def test_replay_with_done_event_still_passes(self, tmp_path: Path, opts) -> None:
        """A complete replay with its `done` event passes."""
        spec = write_spec(tmp_path)
        (tmp_path / "booking.cassette.json").write_text(cassette_text(BOOKING_TURNS))
        result = run_flow(spec, opts({"events": turn_events(BOOKING_TURNS)}))
        assert result.exit_code == EXIT_OK, result


class TestHostileReportText:
    def result(self) -> FlowResult:
        return FlowResult(
            spec_path=Path('weird "spec" é.flow.yaml'), name=f"name {HOSTILE}", mode="replay",
            exit_code=EXIT_AGENT, error=f"error {HOSTILE}", reply=f"reply {HOSTILE} \ud800",
            agent_stdout=f"out {HOSTILE}\n", agent_stderr=f"err {HOSTILE}\n",
        )

    def test_junit_parses_with_control_characters(self, tmp_path: Path) -> None:
        """JUnit XML with control characters, `]]>`, quotes and non-ASCII parses, and keeps the readable text."""
        path = tmp_path / "junit.xml"
        write_junit([self.result()], path)
        root = ET.parse(path).getroot()
        case = root.find("testcase")
        assert case is not None and "]]>" in (case.get("name") or "") and "日本" in (case.get("name") or "")
        error = case.find("error")
        assert error is not None and '"dq"' in (error.text or "") and "\\x1b[31mred" in (error.text or "")
        assert "✓" in (case.findtext("system-out") or "")

    def test_json_is_valid_with_lone_surrogates(self) -> None:
        """The JSON report encodes as UTF-8 and parses even with a lone surrogate in the reply."""
        doc = json.loads(render_json([self.result()]).encode("utf-8"))
        assert doc["flows"][0]["reply"].startswith("reply ctl \x00")
        assert "]]>" in doc["flows"][0]["error"]

    def test_junit_from_a_real_agent_run_parses(self, tmp_path: Path, fake_env) -> None:
        """A failing agent that prints colour codes and markup yields a JUnit file xml.etree can parse."""
        script = tmp_path / "noisy.py"
        script.write_text(f"import sys\nsys.stdout.write({HOSTILE!r})\nsys.stderr.write({HOSTILE!r})\nsys.exit(1)\n")
        spec = write_spec(tmp_path, command=f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}")
        (tmp_path / "booking.cassette.json").write_text(cassette_text(BOOKING_TURNS))
        fake_env(events=[])
        junit = tmp_path / "junit.xml"
        res = CliRunner().invoke(run_command, [str(spec), "--junit", str(junit), "--json"])
        assert res.exit_code == EXIT_AGENT, res.output
        assert json.loads(res.stdout)["flows"][0]["exit_code"] == EXIT_AGENT
        case = ET.parse(junit).getroot().find("testcase")
        assert case is not None and case.find("error") is not None
        assert "<b>&amp;" in (case.findtext("system-out") or "")

    def test_junit_counts_interrupted_flows_as_errors(self) -> None:
        """An interrupted flow is a JUnit error and the suite's error count says so."""
        result = FlowResult(spec_path=Path("a.flow.yaml"), name="a", mode="record", exit_code=130, error="interrupted")
        root = ET.fromstring(junit_xml([result]).encode("utf-8"))
        assert root.get("errors") == "1" and root.find("testcase/error") is not None


class TestCliEdges:
    def test_empty_shard_prints_valid_json_and_junit(self, tmp_path: Path, fake_env) -> None:
        """An empty shard with --json prints a JSON document with no flows and still writes the JUnit file."""
        junit = tmp_path / "junit.xml"
        res = CliRunner().invoke(run_command, [str(write_spec(tmp_path)), "--shard", "2/2", "--json",
                                               "--junit", str(junit)])
        assert res.exit_code == EXIT_OK, res.output
        assert json.loads(res.stdout) == {"exit_code": 0, "passed": 0, "failed": 0, "flows": []}
        assert ET.parse(junit).getroot().get("tests") == "0"

    def test_unwritable_junit_path_is_one_line_error(self, tmp_path: Path, fake_env) -> None:
        """A --junit path that cannot be written is a usage error with no traceback, after the report."""
        blocker = tmp_path / "file"
        blocker.write_text("x")
        spec = write_spec(tmp_path)
        res = CliRunner().invoke(run_command, [str(spec), "--junit", str(blocker / "junit.xml")])
        assert res.exit_code == EXIT_USAGE
        assert res.exception is None or isinstance(res.exception, SystemExit)
        assert "cannot write the JUnit report" in res.output and "Traceback" not in res.output
        assert "flow(s) passed" in res.output

    def test_j2_with_shards_runs_each_spec_once(self, tmp_path: Path, fake_env) -> None:
        """-j 2 with --shard runs only the shard's specs, in parallel, each in its own flow."""
        specs = [write_spec(tmp_path, name=n) for n in ("a", "b", "c", "d")]
        for n in ("a", "b", "c", "d"):
            (tmp_path / f"{n}.cassette.json").write_text(cassette_text(BOOKING_TURNS))
        fake_env(events=turn_events(BOOKING_TURNS))
        res = CliRunner().invoke(run_command, [*map(str, reversed(specs)), "-j", "2", "--shard", "2/2", "--json"])
        assert res.exit_code == EXIT_OK, res.output
        doc = json.loads(res.stdout)
        assert [Path(f["spec"]).name for f in doc["flows"]] == ["b.flow.yaml", "d.flow.yaml"]
        assert doc["passed"] == 2


class TestKillTree:
    def test_timeout_kills_a_child_that_called_setsid(self, tmp_path: Path) -> None:
        """On timeout a descendant that left the agent's process group with setsid is killed too."""
        pidfile = tmp_path / "daemon.pid"
        code = (f"import os, time; os.setsid(); open({str(pidfile)!r}, 'w').write(str(os.getpid())); "
                "time.sleep(100)")
        command = f"{shlex.quote(sys.executable)} -c {shlex.quote(code)} & wait"
        child = None
        try:
            run = run_command_agent(command, prompts=[], env=ENV, cwd=tmp_path, timeout=1.5)
            child = int(wait_for_file(pidfile))
            assert run.timed_out
            deadline = time.monotonic() + 3
            while pid_alive(child) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not pid_alive(child)
        finally:
            if child is not None and pid_alive(child):
                os.kill(child, signal.SIGKILL)


class TestEnvEval:
    def test_exports_survive_eval_with_hostile_paths(self, tmp_path: Path) -> None:
        """`eval "$(flowproof env)"` in /bin/sh yields the exact CA paths even with spaces, quotes and `$`."""
        ca = tmp_path / "ca dir 'single' \"double\" $HOME `x`"
        flowproof = Path(sys.executable).parent / "flowproof"
        script = 'eval "$("$FP" env --proxy-port 9123)" && printf "%s\\n" "$SSL_CERT_FILE" "$HTTPS_PROXY" "$NO_PROXY"'
        env = {**ENV, "FP": str(flowproof), "FLOWPROOF_CA_DIR": str(ca), "NO_PROXY": "a b,'c'", "HOME": str(tmp_path)}
        done = subprocess.run(
            ["/bin/sh", "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [
            str(ca / "flowproof-ca-bundle.pem"), "http://127.0.0.1:9123", "a b,'c',localhost,127.0.0.1,::1"]
