"""A cassette as a readable conversation (``flowproof show``).

Pure: a `Cassette` in, text out.
"""

from __future__ import annotations

from pathlib import Path

from flowproof.cassette import Cassette
from flowproof.errors import FlowproofError
from flowproof.heal import readable_turns, short_text
from flowproof.printable import printable
from flowproof.report.text import indent
from flowproof.trajectory import Trajectory, build_trajectory

__all__ = ["cassette_threads", "show_cassette"]


def cassette_threads(trajectory: Trajectory) -> dict[int, int]:
    """Turn index -> thread number, threads numbered by their first turn (as compare
    numbers them); a turn no codec reads has no thread."""
    threads = sorted(trajectory.threads, key=lambda t: t.first_index)
    return {turn.index: number for number, thread in enumerate(threads) for turn in thread.turns}


def show_cassette(
    cassette: Cassette,
    path: Path | str = "",
    *,
    thread: int | None = None,
    turn: int | None = None,
) -> str:
    """A cassette as a readable conversation: per turn the provider, model, thread, roles,
    the newest user text, tool calls with arguments and the reply text. ``thread`` and
    ``turn`` keep only that thread's turns, or that one turn (`FlowproofError` naming
    what exists when there is none)."""
    header = f"{path}: " if path else ""
    lines = [f"{header}{len(cassette.turns)} turn(s), route {cassette.route}, format {cassette.format}"]
    trajectory = build_trajectory([v for _rt, v, _e in readable_turns(cassette) if v is not None])
    numbers = cassette_threads(trajectory)
    agents = trajectory.agents
    if agents.subagents and turn is None and thread is None:
        lines.extend(agents.lines())
    where = f"{path} " if path else "the cassette "
    if turn is not None and turn not in {rt.index for rt in cassette.turns}:
        indexes = ", ".join(str(rt.index) for rt in cassette.turns) or "none"
        raise FlowproofError(f"{where}has no turn {turn} — its turns are: {indexes}")
    if thread is not None and thread not in numbers.values():
        known = ", ".join(str(n) for n in sorted(set(numbers.values()))) or "none"
        raise FlowproofError(f"{where}has no thread {thread} — its threads are: {known}")
    shown = [
        item
        for item in readable_turns(cassette)
        if (turn is None or item[0].index == turn)
        and (thread is None or numbers.get(item[0].index) == thread)
    ]
    if thread is not None:
        lines.append(f"thread {thread}: turn(s) {', '.join(str(rt.index) for rt, _v, _e in shown)}")
    for rt, view, err in shown:
        req = rt.request
        lines.append("")
        status = f"status {rt.response.status}" if rt.response is not None else "no response"
        abandoned = " — abandoned by the client" if rt.abandoned else ""
        lines.append(f"turn {rt.index} — {rt.provider} — {req.method} {req.url} — {status}{abandoned}")
        if view is None:
            lines.append(f"  (cannot be read: {err})")
            continue
        lines.append(f"  model: {view.request.model or '?'}")
        lines.append(f"  thread: {numbers.get(rt.index, '?')}")
        agent = agents.label_of(rt.index)
        if agent is not None:
            lines.append(f"  sub-agent: {agent}")
        lines.append(f"  roles: {' '.join(view.request.roles) or '-'}")
        if view.request.tools:
            lines.append(f"  tools offered: {', '.join(view.request.tools)}")
        if view.request.system:
            lines.append(f"  system: {short_text(view.request.system, 120)}")
        if view.request.prompt:
            lines.append(f"  user: {short_text(view.request.prompt, 300)}")
        for result in view.request.tool_results:
            lines.append(f"  tool result ({result.name or result.call_id}): {short_text(result.content, 200)}")
        response = view.response
        if response is None:
            continue
        for call in response.tool_calls:
            lines.append(f"  → tool call {call.name} {call.canonical_arguments()}")
        if response.text:
            lines.append("  assistant:")
            lines.append(indent(response.text.rstrip()))
        lines.append(f"  finish: {response.finish_reason}")
    # A recorded reply's escape sequences (a title, OSC 52, cursor movement) are shown, not obeyed.
    return printable("\n".join(lines))
