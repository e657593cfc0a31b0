"""Agent drivers: start a ``command:`` agent or reach a ``url:`` agent, and deliver the prompts.

A command runs through ``/bin/sh -c`` (so ``npm run assistant``, ``cd x && ./y`` and
``$VAR`` work as they do in a terminal) in its own session, so a timeout kills
the whole process group and nothing the agent spawned survives. The prompt goes
into a ``{prompt}`` placeholder (shell-quoted) or else on stdin. The agent's
stdout/stderr are captured (bounded) for the report only: the reply always
comes from the model traffic.
"""

from __future__ import annotations

import json
import os
import select
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flowproof.errors import AgentError, FlowproofError
from flowproof.log_events import ReplayedTurnEvent, TurnEvent, parse_event
from flowproof.turns import Turn
from flowproof.views import turn_views

#: Bytes of stdout/stderr kept per stream (the tail: errors are printed last).
OUTPUT_LIMIT = 64 * 1024
#: How long an agent may keep running after a replay divergence (it got a 4xx).
DIVERGENCE_GRACE = 5.0
PLACEHOLDER = "{prompt}"
#: The exit code /bin/sh uses for "command not found".
_NOT_FOUND = 127

EventSource = Callable[[], list[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class AgentRun:
    """What happened to the agent process (or url agent) during a flow."""

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    duration: float
    #: Why the runner ended the agent early ("divergence"), if it did.
    stopped_early: str | None = None


class _Tail:
    """Reads a pipe to EOF on a thread, keeping only the last ``limit`` bytes."""

    def __init__(self, stream: Any, limit: int = OUTPUT_LIMIT) -> None:
        self._stream = stream
        self._limit = limit
        self._data = bytearray()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while chunk := self._stream.read1(65536):
                self._data += chunk
                if len(self._data) > 2 * self._limit:
                    del self._data[: len(self._data) - self._limit]
        except (OSError, ValueError):
            pass
        finally:
            # The reader owns the pipe: closed at EOF, not by the garbage collector (a
            # ResourceWarning for each agent a long-lived process such as pytest runs).
            self._stream.close()

    def text(self, timeout: float = 2.0) -> str:
        self._thread.join(timeout)
        return bytes(self._data[-self._limit :]).decode("utf-8", "replace")


def _close_quietly(stream: Any) -> None:
    """Close a pipe whose reader may be gone. A failed flush still closes the file, and a
    pipe left open is a ResourceWarning when it is collected (the agent exited first)."""
    try:
        stream.close()
    except OSError:
        pass


def render_command(command: str, prompt: str | None) -> tuple[str, bool]:
    """Substitute ``{prompt}`` (shell-quoted); returns the command and whether it was used."""
    if prompt is not None and PLACEHOLDER in command:
        return command.replace(PLACEHOLDER, shlex.quote(prompt)), True
    return command, False


def answer_complete(
    events: Sequence[dict[str, Any]], turns_before: int, replayed: Sequence[Turn] = ()
) -> bool:
    """True when the agent has answered the last prompt: no model call in flight, at least
    one new turn since ``turns_before``, and the newest turn is not a tool call.

    Judged on the raw event log (cheap: only the newest turn is viewed); a replayed turn
    is named by its place in the cassette, whose views are ``replayed``.
    """
    started = sum(1 for e in events if e.get("event") == "request_started")
    finished_ids = {
        e.get("id") for e in events if e.get("event") in ("turn", "divergence", "error")
    }
    turns = [e for e in events if e.get("event") == "turn"]
    if started > len(finished_ids) or len(turns) <= turns_before:
        return False
    return not _ends_in_tool_call(turns[-1], replayed)


def _ends_in_tool_call(event: dict[str, Any], replayed: Sequence[Turn]) -> bool:
    try:
        parsed = parse_event(event)
        if isinstance(parsed, ReplayedTurnEvent):
            turn = replayed[parsed.index] if parsed.index < len(replayed) else None
        else:
            turn = turn_views(parsed.turn) if isinstance(parsed, TurnEvent) else None
    except FlowproofError:  # an unreadable turn is judged complete; the flow reports it
        return False
    return bool(turn is not None and turn.response is not None and turn.response.tool_calls)


def _count(events: Sequence[dict[str, Any]], kind: str) -> int:
    return sum(1 for e in events if e.get("event") == kind)


def _descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid``, found through the parent chain in ``/proc`` (Linux;
    elsewhere none): a child that left the agent's process group with ``setsid`` is still one."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields and fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(name))
    found: list[int] = []
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def _kill_group(pid: int) -> None:
    """SIGTERM, then SIGKILL, the agent's process group and every descendant that left it
    (``setsid``). A daemon whose parent already exited (a double fork) is no longer a
    descendant and cannot be found: that is the limit (docs/runner.md)."""
    strays = _descendants(pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        group_gone = False
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            group_gone = True
        except PermissionError:
            return
        for child in strays:
            try:
                os.kill(child, sig)
            except (ProcessLookupError, PermissionError):
                pass
        if group_gone and not strays:
            return
        if sig is signal.SIGTERM:
            time.sleep(0.2)
            # Children forked meanwhile (their parents are still alive until SIGKILL).
            strays = list(dict.fromkeys(strays + _descendants(pid)))


class _ExitWatch:
    """Sleeps between the runner's looks at the event log, waking at once when the agent
    exits: a pidfd on Linux, so a flow's end is seen when it happens rather than up to one
    poll interval (50 ms) later; elsewhere a plain sleep."""

    def __init__(self, pid: int) -> None:
        try:
            self._fd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self._fd = None

    def sleep(self, seconds: float) -> None:
        if self._fd is None:
            time.sleep(seconds)
            return
        try:
            select.select([self._fd], [], [], seconds)
        except (OSError, ValueError):
            time.sleep(seconds)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def run_command_agent(
    command: str,
    *,
    prompts: Sequence[str],
    env: Mapping[str, str],
    cwd: Path | None,
    timeout: float,
    events: EventSource = list,
    poll: float = 0.05,
    cancelled: Callable[[], bool] | None = None,
    replayed: Sequence[Turn] = (),
) -> AgentRun:
    """Run ``command`` and feed it ``prompts``; return when it exits or the timeout hits.

    The first prompt fills ``{prompt}`` when the command has one, else it is written
    to stdin. Every later prompt goes to stdin once the previous answer is complete
    (see `answer_complete`); stdin is closed after the last one. On timeout the whole
    process group is killed and ``timed_out`` is set (the caller decides the error,
    since a divergence may explain it). When ``cancelled()`` turns true (flowproof-run got
    SIGINT/SIGTERM) the agent is stopped at once and ``stopped_early`` is ``"interrupted"``.
    ``replayed`` holds the views of the replayed cassette's turns (`answer_complete`).
    """
    if cwd is not None and not cwd.is_dir():
        raise AgentError(f"the agent's working directory {cwd} does not exist — fix `agent.cwd` in the spec")
    rendered, used_placeholder = render_command(command, prompts[0] if prompts else None)
    stdin_prompts = list(prompts[1:] if used_placeholder else prompts)
    started = time.monotonic()
    try:
        process = subprocess.Popen(
            ["/bin/sh", "-c", rendered],
            cwd=str(cwd) if cwd else None,
            env=dict(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as e:
        raise AgentError(f"could not start the agent `{command}`: {e.strerror or e}") from None
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    out, err = _Tail(process.stdout), _Tail(process.stderr)
    deadline = started + timeout
    timed_out = False
    stopped_early: str | None = None
    stdin_open = True
    turns_before = 0

    def send(text: str) -> None:
        nonlocal stdin_open
        try:
            process.stdin.write(text.encode("utf-8") + b"\n")  # type: ignore[union-attr]
            process.stdin.flush()  # type: ignore[union-attr]
        except (BrokenPipeError, OSError):
            stdin_open = False
            _close_quietly(process.stdin)

    def close_stdin() -> None:
        nonlocal stdin_open
        if stdin_open:
            _close_quietly(process.stdin)
            stdin_open = False

    watch = _ExitWatch(process.pid)
    try:
        pending = list(stdin_prompts)
        if pending and not used_placeholder:
            send(pending.pop(0))
        if not pending:
            close_stdin()
        grace_end: float | None = None
        while process.poll() is None:
            now = time.monotonic()
            if cancelled is not None and cancelled():
                stopped_early = "interrupted"
                break
            if grace_end is not None and now >= grace_end:
                stopped_early = "divergence"
                break
            if now >= deadline:
                timed_out = True
                break
            log = events()
            if grace_end is None and (_count(log, "divergence") or _count(log, "mcp_divergence")):
                # The agent got a 4xx for an unmatched call; let it exit on its own, briefly.
                grace_end = now + DIVERGENCE_GRACE
            if pending and stdin_open and answer_complete(log, turns_before, replayed):
                turns_before = _count(log, "turn")
                send(pending.pop(0))
                if not pending:
                    close_stdin()
            watch.sleep(poll)
    finally:
        watch.close()
        # Whatever the agent spawned dies with its group, even after a clean exit.
        _kill_group(process.pid)
        close_stdin()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL was sent
            pass
    stdout, stderr = out.text(), err.text()
    if process.returncode == _NOT_FOUND and "not found" in stderr:
        raise AgentError(
            f"the agent command was not found: `{command}` ({stderr.strip().splitlines()[-1]}) — "
            "check `agent.command` in the spec and that the program is installed"
        )
    return AgentRun(
        returncode=process.returncode,
        stdout=stdout,
        stderr=stderr,
        timed_out=timed_out,
        duration=time.monotonic() - started,
        stopped_early=stopped_early,
    )


def run_url_agent(
    url: str,
    *,
    prompts: Sequence[str],
    timeout: float,
    events: EventSource = list,
    settle: float = 0.3,
) -> AgentRun:
    """POST each prompt as ``{"prompt": ...}`` JSON to a running agent service.

    The service was started by the user with the exports of ``flowproof env``; the
    runner's own proxy variables are bypassed for this request.
    """
    started = time.monotonic()
    deadline = started + timeout
    # Imported here: urllib.request (with http.client and email) is 15-35 ms of every run's
    # start (python -X importtime), and only an agent already running as a service uses it.
    import urllib.error
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    bodies: list[str] = []
    for prompt in prompts:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return AgentRun(None, "\n".join(bodies), "", True, time.monotonic() - started)
        request = urllib.request.Request(
            url,
            data=json.dumps({"prompt": prompt}).encode("utf-8"),
            headers={"content-type": "application/json"},
            method="POST",
        )
        try:
            with opener.open(request, timeout=remaining) as response:
                bodies.append(response.read(OUTPUT_LIMIT).decode("utf-8", "replace"))
        except urllib.error.HTTPError as e:
            detail = e.read(2000).decode("utf-8", "replace")
            return AgentRun(e.code, "\n".join(bodies), detail, False, time.monotonic() - started)
        except TimeoutError:
            return AgentRun(None, "\n".join(bodies), "", True, time.monotonic() - started)
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            if isinstance(reason, TimeoutError):
                return AgentRun(None, "\n".join(bodies), "", True, time.monotonic() - started)
            raise AgentError(
                f"the agent at {url} could not be reached ({reason}) — start it first with the "
                "exports of `flowproof env --proxy-port N` and pass the same --proxy-port"
            ) from None
    # A service may answer before its last model call completes; wait for quiet.
    while time.monotonic() < deadline:
        log = events()
        started_n = _count(log, "request_started")
        done_n = len({e.get("id") for e in log if e.get("event") in ("turn", "divergence", "error")})
        if started_n <= done_n:
            break
        time.sleep(0.05)
    time.sleep(min(settle, max(0.0, deadline - time.monotonic())))
    return AgentRun(0, "\n".join(bodies), "", False, time.monotonic() - started)
