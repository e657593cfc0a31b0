"""Tests for flowproof.runner.agents: command and url drivers."""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
import time
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from flowproof.cassette import loads_cassette
from flowproof.cassette_check import check_cassette
from flowproof.errors import AgentError
from flowproof.runner.agents import (
    answer_complete,
    render_command,
    run_command_agent,
    run_url_agent,
)

from .helpers import BOOKING_TURNS, cassette_text, turn_events

#: The views of the cassette the replayed events name (the runner's cassette check builds them).
VIEWS = check_cassette(loads_cassette(cassette_text(BOOKING_TURNS), "c.json"), "c.json")

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")


class TestRenderCommand:
    def test_placeholder_is_shell_quoted(self) -> None:
        """The prompt replaces {prompt} as one shell-quoted word."""
        command, used = render_command("agent --ask {prompt}", "it's $HOME")
        assert used and command == "agent --ask 'it'\"'\"'s $HOME'"

    def test_no_placeholder(self) -> None:
        """Without {prompt} the command is unchanged and the prompt goes to stdin."""
        assert render_command("agent", "hi") == ("agent", False)


class TestCommandAgent:
    def test_placeholder_reaches_agent_verbatim(self, tmp_path: Path) -> None:
        """A prompt with quotes and dollars arrives byte-exact as one argument."""
        out = tmp_path / "out.txt"
        prompt = 'Book "KQ311" for $USER; it\'s `urgent` & now'
        run = run_command_agent(f"printf %s {{prompt}} > {out}", prompts=[prompt], env=ENV, cwd=tmp_path, timeout=10)
        assert run.returncode == 0
        assert out.read_text() == prompt

    def test_stdin_prompt_then_eof(self, tmp_path: Path) -> None:
        """Without a placeholder the prompt is written to stdin, which is then closed."""
        run = run_command_agent("cat", prompts=["hello agent"], env=ENV, cwd=tmp_path, timeout=10)
        assert run.returncode == 0 and run.stdout == "hello agent\n"

    def test_the_agents_pipes_are_closed_when_it_returns(self, tmp_path: Path) -> None:
        """stdout and stderr are closed once read to the end, never left to the garbage collector
        (each would be a ResourceWarning in a process that runs many agents, such as pytest)."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            run = run_command_agent("echo out; echo err >&2", prompts=[], env=ENV, cwd=tmp_path, timeout=10)
            gc.collect()
        assert (run.stdout, run.stderr) == ("out\n", "err\n")
        assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []

    def test_the_agents_exit_is_seen_when_it_happens_not_at_the_next_poll(self, tmp_path: Path) -> None:
        """Between its looks at the event log the runner waits on the agent itself: an agent
        that exits after 0.2 s is done after about 0.2 s even with a 5-second poll interval."""
        run = run_command_agent("sleep 0.2", prompts=[], env=ENV, cwd=tmp_path, timeout=30, poll=5.0)
        assert run.returncode == 0 and run.duration < 2.0

    def test_timeout_kills_whole_group(self, tmp_path: Path) -> None:
        """On timeout the agent and its background children are killed."""
        pidfile = tmp_path / "child.pid"
        started = time.monotonic()
        run = run_command_agent(
            f"sleep 100 & echo $! > {pidfile}; wait", prompts=[], env=ENV, cwd=tmp_path, timeout=0.7
        )
        assert run.timed_out
        assert time.monotonic() - started < 5
        child = int(pidfile.read_text())
        assert not alive(child)

    def test_leftover_children_die_after_clean_exit(self, tmp_path: Path) -> None:
        """A child the agent leaves behind is killed when the agent exits."""
        pidfile = tmp_path / "child.pid"
        run = run_command_agent(
            f"sleep 100 > /dev/null 2>&1 & echo $! > {pidfile}", prompts=[], env=ENV, cwd=tmp_path, timeout=10
        )
        assert run.returncode == 0
        assert not alive(int(pidfile.read_text()))

    def test_not_found(self, tmp_path: Path) -> None:
        """A command that does not exist raises AgentError."""
        with pytest.raises(AgentError, match="not found"):
            run_command_agent("definitely-not-a-program-xyz", prompts=["x"], env=ENV, cwd=tmp_path, timeout=10)

    def test_missing_cwd(self, tmp_path: Path) -> None:
        """A working directory that does not exist raises AgentError naming it."""
        with pytest.raises(AgentError, match="does not exist"):
            run_command_agent("true", prompts=[], env=ENV, cwd=tmp_path / "nope", timeout=10)

    def test_output_is_bounded(self, tmp_path: Path) -> None:
        """Huge output is captured only as a bounded tail."""
        code = "import sys; sys.stdout.write('x' * 1_000_000 + 'END')"
        run = run_command_agent(f"{sys.executable} -c \"{code}\"", prompts=[], env=ENV, cwd=tmp_path, timeout=20)
        assert run.stdout.endswith("END") and len(run.stdout) <= 64 * 1024

    def test_second_prompt_waits_for_answer(self, tmp_path: Path) -> None:
        """The second prompt is sent only once the log shows a complete answer to the first."""
        log: list[dict] = []
        script = (
            "import sys,time\n"
            "for line in sys.stdin:\n"
            "    print('got', line.strip(), time.monotonic(), flush=True)\n"
        )
        agent = tmp_path / "agent.py"
        agent.write_text(script)

        def complete_later() -> None:
            time.sleep(0.6)
            log.extend(turn_events(BOOKING_TURNS))

        threading.Thread(target=complete_later, daemon=True).start()
        started = time.monotonic()
        run = run_command_agent(f"{sys.executable} {agent}", prompts=["one", "two"], env=ENV, cwd=tmp_path,
                                timeout=10, events=lambda: list(log))
        lines = run.stdout.splitlines()
        assert [line.split()[1] for line in lines] == ["one", "two"]
        assert float(lines[1].split()[2]) - started >= 0.5

    def test_divergence_ends_agent_after_grace(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """An agent still running after a divergence is stopped early, not at the timeout."""
        from flowproof.runner import agents

        monkeypatch.setattr(agents, "DIVERGENCE_GRACE", 0.3)
        events = [{"event": "divergence", "id": "1", "divergence": {"kind": "unmatched"}}]
        run = run_command_agent("sleep 30", prompts=[], env=ENV, cwd=tmp_path, timeout=20, events=lambda: events)
        assert run.stopped_early == "divergence" and not run.timed_out
        assert run.duration < 5


class TestAnswerComplete:
    def test_in_flight_call_is_not_complete(self) -> None:
        """A request without its turn means the answer is still coming."""
        events = turn_events(BOOKING_TURNS) + [{"event": "request_started", "id": "9"}]
        assert not answer_complete(events, 0, VIEWS)

    def test_tool_call_turn_is_not_complete(self) -> None:
        """A newest turn that asks for a tool is not a final answer: a replayed turn is read from
        the cassette's views, a live one from the turn the log holds."""
        assert not answer_complete(turn_events(BOOKING_TURNS[:1]), 0, VIEWS)
        assert not answer_complete(turn_events(BOOKING_TURNS[:1], "record"), 0)

    def test_final_text_is_complete(self) -> None:
        """A newest text turn with nothing in flight completes the answer."""
        assert answer_complete(turn_events(BOOKING_TURNS), 0, VIEWS)
        assert not answer_complete(turn_events(BOOKING_TURNS), 3, VIEWS)
        assert answer_complete(turn_events(BOOKING_TURNS, "compare"), 0)


class _Handler(BaseHTTPRequestHandler):
    received: list[dict] = []

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        type(self).received.append(body)
        data = b'{"ok": true}'
        self.send_response(200)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class TestUrlAgent:
    def test_posts_each_prompt(self) -> None:
        """Each prompt is POSTed as {"prompt": ...} JSON."""
        _Handler.received = []
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            url = f"http://127.0.0.1:{server.server_address[1]}/run"
            run = run_url_agent(url, prompts=["a", "b"], timeout=10, settle=0)
        finally:
            server.shutdown()
            server.server_close()
            thread.join(5)
        assert _Handler.received == [{"prompt": "a"}, {"prompt": "b"}]
        assert run.returncode == 0 and '"ok"' in run.stdout

    def test_unreachable_agent(self) -> None:
        """A url agent that is not running raises AgentError saying how to start it."""
        from flowproof.runner.proxy import free_port

        with pytest.raises(AgentError, match="flowproof env"):
            run_url_agent(f"http://127.0.0.1:{free_port()}/", prompts=["a"], timeout=5)
