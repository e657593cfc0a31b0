"""The HTML report: one self-contained page for a whole run (``flowproof-run --html PATH``).

Plain data in, one HTML string out (docs/report.md). `html_report` makes the
input from the flows: the ``--json`` document (`flowproof.report.json_report`)
with, per flow, a ``conversation`` built by `conversation_json` from the
trajectory the flow was judged on and the run's MCP calls. The page
shows a summary of every flow, then per flow: the first bad turn as a side-by-side
diff (recorded against replayed or live), the checks, the guard evidence, and each
thread as a conversation — prompts, the tool results as the model was told them,
tool calls with their arguments, MCP calls and the reply.

Everything on the page comes from model text, tool arguments, agent output and
spec files, none of which is trusted: every value goes through `_text`, which
escapes markup and makes control characters visible. The page loads nothing: no
script, no image, no font, no stylesheet but its own inline one, and a Content
Security Policy (``default-src 'none'``) that would refuse a request if any markup
ever slipped through.

Pure: no I/O.
"""

from __future__ import annotations

import difflib
import html
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from flowproof.mcp import McpCall
from flowproof.redact import redact_data
from flowproof.report.json_report import render_json_doc
from flowproof.trajectory import Trajectory
from flowproof.turns import ToolCall, Turn
from flowproof.verdict import FlowResult

__all__ = ["CSP", "conversation_json", "first_bad_turn", "flow_conversation", "html_report", "render_html"]

#: The page may load nothing at all; only its own inline stylesheet applies.
CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"

#: C0 controls but tab/LF/CR, DEL and C1 controls, lone surrogates, non-characters: shown
#: as ``\xNN`` / ``\uNNNN`` (agent output carries ANSI colour codes; HTML cannot show them).
_INVISIBLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")

_PASS, _FAIL = "✓", "✗"

#: Words, runs of space, single other characters: the units the side-by-side diff marks.
_TOKEN = re.compile(r"\w+|\s+|[^\w\s]", re.DOTALL)
#: Above this many tokens (both sides) a word diff could take seconds; the prefix/suffix rule
#: takes a single pass.
_WORD_DIFF_LIMIT = 4000

# --------------------------------------------------------------------------- data


def conversation_json(
    trajectory: Trajectory, mcp_calls: Sequence[McpCall] = (), mocked: Iterable[str] = ()
) -> dict[str, Any]:
    """A trajectory as the page shows it: threads (numbered by their first turn, as
    ``flowproof show`` numbers them; ``main`` marks the one the reply comes from) of
    turns, each with what was new in its request — the prompt when it changed, the tool
    results not yet shown in the thread (``mocked`` when the tool is one of the spec's
    ``tools:`` mocks, so the model read the spec's result) — and the response; MCP calls
    after the turn that preceded them; abandoned turns aside."""
    mocked_tools = frozenset(mocked)
    ordered = trajectory.turns
    after: dict[int, list[dict[str, Any]]] = {}
    for call in mcp_calls:
        # `after_turns` counts the turns done before the call crossed (the trajectory's rule).
        anchor = (
            ordered[min(call.after_turns, len(ordered)) - 1].index
            if call.after_turns and ordered
            else -1
        )
        after.setdefault(anchor, []).append(
            {
                "server": call.server,
                "name": call.name,
                "arguments": _arguments(ToolCall(call.name, call.arguments_raw)),
                "answered": call.answered,
            }
        )
    threads = []
    for number, thread in enumerate(sorted(trajectory.threads, key=lambda t: t.first_index)):
        seen_results: set[tuple[str | None, str | None, str]] = set()
        last_prompt = ""
        turns = []
        for turn in thread.turns:
            item = _turn_json(turn, seen_results, last_prompt, mocked_tools)
            last_prompt = turn.request.prompt or last_prompt
            item["mcp_calls"] = after.get(turn.index, [])
            item["agent"] = trajectory.agents.label_of(turn.index)
            turns.append(item)
        threads.append(
            {
                "number": number,
                "main": thread is trajectory.main,
                "system": thread.system,
                "turns": turns,
            }
        )
    return {
        "threads": threads,
        "subagents": [s.to_json() for s in trajectory.agents.subagents],
        "mcp_calls_before": after.get(-1, []),
        "abandoned": [_turn_json(t, set(), "", mocked_tools) for t in trajectory.abandoned],
        "reply": trajectory.reply,
        "reply_absent_reason": trajectory.reply_absent_reason,
    }


def _turn_json(
    turn: Turn, seen: set[tuple[str | None, str | None, str]], last_prompt: str, mocked: frozenset[str]
) -> dict[str, Any]:
    request = turn.request
    results = []
    for result in request.tool_results:
        key = (result.call_id, result.name, result.content)
        if key not in seen:
            seen.add(key)
            results.append(
                {"name": result.name, "call_id": result.call_id, "content": result.content,
                 "mocked": result.name in mocked}
            )
    response = turn.response
    return {
        "index": turn.index,
        "provider": request.provider,
        "model": request.model,
        "tools_offered": list(request.tools),
        "prompt": request.prompt if request.prompt and request.prompt != last_prompt else "",
        "tool_results": results,
        "abandoned": turn.abandoned,
        "response": None
        if response is None
        else {
            "text": response.text,
            "finish_reason": str(response.finish_reason),
            "tool_calls": [
                {"name": c.name, "call_id": c.call_id, "arguments": _arguments(c)}
                for c in response.tool_calls
            ],
        },
    }


def _arguments(call: ToolCall) -> str:
    """Arguments as indented JSON, or the raw string when they are not JSON (shown as sent)."""
    if not call.is_json:
        return call.arguments_raw
    return json.dumps(call.arguments, indent=2, ensure_ascii=False, sort_keys=False)


def first_bad_turn(flow: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The findings at the flow's first bad place: the first divergence or drift finding
    and every one that shares its kind, turn and thread (a divergence with several
    differing fields is one finding per field); empty when there is none."""
    found = [
        f for f in flow.get("findings") or () if f.get("kind") in ("divergence", "drift", "missing")
    ]
    if not found:
        return []
    first = found[0]
    place = (first.get("kind"), first.get("turn"), first.get("thread"), first.get("message"))
    return [
        f
        for f in found
        if (f.get("kind"), f.get("turn"), f.get("thread"), f.get("message")) == place
    ]


def flow_conversation(result: FlowResult) -> dict[str, Any] | None:
    """The flow's conversation (`conversation_json`), or None when no model call was seen
    (a spec error, a missing cassette, an agent that never started)."""
    trajectory, mcp_calls = result.trajectory, result.run.mcp_calls
    if trajectory is None or (not trajectory.turns and not trajectory.abandoned and not mcp_calls):
        return None
    return conversation_json(trajectory, mcp_calls, result.mocked_tools)


def html_report(
    results: Sequence[FlowResult], *, shown_path: Callable[[Path], str] = str, secrets: Iterable[str] = ()
) -> str:
    """The page for a run of ``results`` (in run order); ``shown_path`` writes a cassette's path
    as the page shows it; every value of ``secrets`` is masked in the page's data
    (`flowproof.redact.redact_data`), conversation included."""
    doc = render_json_doc(results)
    for flow, result in zip(doc["flows"], results, strict=True):
        flow["conversation"] = flow_conversation(result)
        if result.cassette is not None:
            flow["cassette"] = shown_path(result.cassette)
    return render_html(redact_data(doc, secrets))


# --------------------------------------------------------------------------- HTML


def render_html(report: Mapping[str, Any], *, title: str = "flowproof report") -> str:
    """The whole page for a run: ``report`` is the ``--json`` document whose flows may carry
    a ``conversation`` (`conversation_json`)."""
    flows = list(report.get("flows") or ())
    passed = sum(1 for f in flows if f.get("passed"))
    state = "ok" if passed == len(flows) else "bad"
    counts = f"{passed} of {len(flows)} flow(s) passed · exit code {report.get('exit_code', 0)}"
    body = [
        f"<header><h1>{_text(title)}</h1>",
        f'<p class="verdict {state}">{_text(counts)}</p>',
        _summary(flows),
        "</header>",
    ]
    body.extend(_flow(number, flow) for number, flow in enumerate(flows, 1))
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_text(CSP)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_text(title)}</title><style>{_STYLE}</style></head>\n"
        "<body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def _summary(flows: Sequence[Mapping[str, Any]]) -> str:
    if not flows:
        return '<p class="empty">No flow ran.</p>'
    rows = "".join(
        f'<tr class="{_state(f)}"><td>{_mark(f.get("passed"))} {_text(f.get("verdict", ""))}</td>'
        f"<td>{_text(f.get('mode', ''))}</td><td>{_seconds(f.get('duration_seconds'))}</td>"
        f'<td><a href="#flow-{n}">{_text(f.get("name", ""))}</a></td><td class="path">{_text(f.get("spec", ""))}</td></tr>'
        for n, f in enumerate(flows, 1)
    )
    return (
        '<table class="summary"><thead><tr><th>verdict</th><th>mode</th><th>time</th>'
        f"<th>flow</th><th>spec</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _flow(number: int, flow: Mapping[str, Any]) -> str:
    # Every id on the page carries its flow's number: several flows each have a first bad
    # turn and a turn 0, and a link must open its own flow's.
    ids = f"flow-{number}-"
    parts = [
        f'<section class="flow {_state(flow)}" id="flow-{number}">',
        f"<h2>{_mark(flow.get('passed'))} {_text(flow.get('name', ''))}</h2>",
        '<p class="meta">'
        + " · ".join(
            _text(x)
            for x in (
                f"{flow.get('verdict', '')} [{flow.get('mode', '')}]",
                f"spec {flow.get('spec', '')}",
                f"cassette {flow.get('cassette')}" if flow.get("cassette") else "",
                _seconds(flow.get("duration_seconds")),
            )
            if x
        )
        + "</p>",
    ]
    if flow.get("error"):
        parts.append(f'<pre class="error">{_text(flow["error"])}</pre>')
    bad = first_bad_turn(flow)
    compare = flow.get("compare") or {}
    if compare.get("first_drift") is not None:
        # Compare: the two responses are the diff (the findings name the same parts).
        parts.append(_compare_pair(compare["results"][compare["first_drift"]], bad, ids))
    elif bad:
        parts.append(_diff(bad, ids))
    if not flow.get("passed") and flow.get("next"):
        parts.append(f'<p class="next">{_text(flow["next"])}</p>')
    parts.append(_steps(flow.get("steps") or ()) or _checks_not_run(flow))
    parts.append(_guards(flow.get("guards") or ()))
    parts.append(_witness(flow))
    parts.append(_conversation(flow.get("conversation"), bad, flow.get("guards") or (), ids))
    later = [f for f in flow.get("findings") or () if f not in bad and f.get("kind") != "assertion"]
    if later:
        parts.append(
            f"<details><summary>{len(later)} more finding(s)</summary>"
            + "".join(f'<pre class="finding">{_text(f.get("message", ""))}</pre>' for f in later)
            + "</details>"
        )
    for label, key in (
        ("notes", "notes"),
        ("proxy errors", "proxy_errors"),
        ("warnings", "warnings"),
    ):
        items = flow.get(key) or ()
        if items:
            parts.append(
                f"<h3>{label}</h3><ul>" + "".join(f"<li>{_text(i)}</li>" for i in items) + "</ul>"
            )
    if flow.get("heal_diff") is not None:
        parts.append(
            "<details><summary>heal diff (old cassette → new recording)</summary>"
            f"<pre>{_text(flow['heal_diff'] or 'no change')}</pre></details>"
        )
    agent = flow.get("agent") or {}
    for stream in ("stdout", "stderr"):
        if (agent.get(stream) or "").strip():
            parts.append(
                f"<details><summary>agent {stream} (last lines)</summary><pre>{_text(agent[stream])}</pre></details>"
            )
    parts.append("</section>")
    return "\n".join(p for p in parts if p)


def _diff(findings: Sequence[Mapping[str, Any]], ids: str) -> str:
    """The first bad turn, side by side: one row per differing field."""
    first = findings[0]
    other = "live" if first.get("kind") == "drift" else "replayed"
    where = []
    if first.get("turn") is not None:
        where.append(f"recorded turn {first['turn']}")
    if first.get("thread") is not None:
        where.append(f"thread {first['thread']}")
    head = f"first bad turn: {first.get('kind')}" + (f" at {', '.join(where)}" if where else "")
    rows = []
    for f in findings:
        if not f.get("path"):
            continue
        left, right = _highlight(_value(f.get("recorded")), _value(f.get(other)))
        rows.append(
            f'<tr><td class="path">{_text(f["path"])}</td>'
            f'<td class="side recorded"><pre>{left}</pre></td><td class="side other"><pre>{right}</pre></td></tr>'
        )
    table = (
        f'<table class="diff"><thead><tr><th>field</th><th>recorded</th><th>{other}</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
        if rows
        else ""
    )
    message = str(first.get("message") or "")
    return (
        f'<div class="firstbad" id="{ids}first-bad"><h3>{_text(head)}</h3>{table}'
        + (f'<pre class="finding">{_text(message)}</pre>' if not rows else "")
        + (
            f"<details><summary>the text report's words</summary><pre>{_text(message)}</pre></details>"
            if rows
            else ""
        )
        + "</div>"
    )


def _compare_pair(result: Mapping[str, Any], findings: Sequence[Mapping[str, Any]], ids: str) -> str:
    """A compare drift's two responses side by side: tool calls, finish reason, text, then any
    finer path the findings name (inside the tool calls' arguments)."""
    calls = result.get("tool_calls") or {}
    text = result.get("text") or {}
    finish = result.get("finish_reason") or {}

    def side(name: str) -> str:
        return (
            "\n".join(f"{c.get('name')} {c.get('arguments')}" for c in calls.get(name) or ())
            or "(none)"
        )

    pairs = [
        ("tool calls", side("recorded"), side("live")),
        ("finish reason", _value(finish.get("recorded")), _value(finish.get("live"))),
        ("text", _value(text.get("recorded")), _value(text.get("live"))),
    ]
    pairs += [
        (str(f["path"]), _value(f.get("recorded")), _value(f.get("live")))
        for f in findings
        if f.get("path") and f["path"] not in ("tool_calls", "finish_reason", "text")
    ]
    rows = []
    for label, rec, live in pairs:
        left, right = _highlight(rec, live)
        rows.append(
            f'<tr><td class="path">{_text(label)}</td><td class="side recorded"><pre>{left}</pre></td>'
            f'<td class="side other"><pre>{right}</pre></td></tr>'
        )
    where = (
        f"recorded turn {result.get('turn')}"
        if result.get("turn") is not None
        else f"live call {result.get('live_call')}"
    )
    head = f"first bad turn: drift at {where}, thread {result.get('thread')} ({result.get('kind')})"
    return (
        f'<div class="firstbad" id="{ids}first-bad"><h3>{_text(head)}</h3><table class="diff"><thead><tr>'
        "<th>part</th><th>recorded</th><th>live</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _steps(steps: Iterable[Mapping[str, Any]]) -> str:
    items = []
    for s in steps:
        where = (
            f' <span class="where">{_text(s["location"])}</span>'
            if s.get("location") and not s.get("passed")
            else ""
        )
        message = (
            "" if s.get("passed") else f'<pre class="finding">{_text(s.get("message", ""))}</pre>'
        )
        items.append(
            f'<li class="{"ok" if s.get("passed") else "bad"}">{_mark(s.get("passed"))} {_text(s.get("source", ""))}{where}{message}</li>'
        )
    return f'<h3>checks</h3><ul class="steps">{"".join(items)}</ul>' if items else ""


def _guards(guards: Iterable[Mapping[str, Any]]) -> str:
    rows = "".join(
        f'<tr class="{"ok" if g.get("passed") else "bad"}"><td>no call to {_text(g.get("assertion", ""))}</td>'
        f"<td>{_text(g.get('boundary', ''))}</td><td>{'yes' if g.get('offered') else 'no'}</td>"
        f"<td>{_text(g.get('asked', 0))}</td><td>{_text(g.get('called', 0))}</td>"
        f"<td>{_text(g.get('warning') or '')}</td></tr>"
        for g in guards
    )
    if not rows:
        return ""
    return (
        '<h3>guard evidence</h3><table class="guards"><thead><tr><th>guard</th><th>boundary</th>'
        f"<th>offered</th><th>asked</th><th>called</th><th>warning</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _checks_not_run(flow: Mapping[str, Any]) -> str:
    """Why a failed flow lists no check: the judge stopped before the steps (`flowproof.verdict`)."""
    if flow.get("passed"):
        return ""
    code = flow.get("exit_code")
    if flow.get("divergences"):
        why = ("the replay diverged, so what the agent did after that request is not the recorded "
               "flow; they are judged once every request matches a recorded turn")
    elif code == 5:
        why = "the agent or the proxy failed first (the error above)"
    elif code == 2 or (isinstance(code, int) and code >= 128):
        why = "the flow stopped before them (the error above)"
    else:
        return ""
    return f'<h3>checks</h3><p class="empty">Not run: {_text(why)}.</p>'


def _served(conversation: Mapping[str, Any] | None) -> int:
    """How many turns the replay served before it stopped."""
    return sum(len(t.get("turns") or ()) for t in (conversation or {}).get("threads") or ())


def _conversation(
    conversation: Mapping[str, Any] | None,
    bad: Sequence[Mapping[str, Any]],
    guards: Iterable[Mapping[str, Any]],
    ids: str,
) -> str:
    diverged = bool(bad) and bad[0].get("kind") == "divergence"
    if not conversation and not diverged:
        return ""
    conversation = conversation or {}
    bad_turn = bad[0].get("turn") if bad else None
    guarded = {str(g.get("tool")): g for g in guards}
    parts = [_agent_tree(conversation.get("subagents") or (), ids), "<h3>conversation</h3>"]
    parts.extend(_mcp_call(c) for c in conversation.get("mcp_calls_before") or ())
    threads = conversation.get("threads") or ()
    for thread in threads:
        label = f"thread {thread.get('number')}" + (
            " — main (the reply comes from here)" if thread.get("main") and len(threads) > 1 else ""
        )
        parts.append(f'<div class="thread"><h4>{_text(label)}</h4>')
        if thread.get("system"):
            parts.append(
                f'<details class="system"><summary>system prompt</summary><pre>{_text(thread["system"])}</pre></details>'
            )
        parts.extend(
            _turn(t, t.get("index") == bad_turn, guarded, ids) for t in thread.get("turns") or ()
        )
        parts.append("</div>")
    if not threads:
        parts.append(
            '<p class="empty">No turn was replayed: the first request already matched no recorded turn.</p>'
            if diverged
            else '<p class="empty">No model call was made.</p>'
        )
    if diverged:
        why = (
            str(bad[0].get("message") or "").splitlines() or ["a request matched no recorded turn"]
        )[0]
        parts.append(
            f'<div class="msg stop"><a href="#{ids}first-bad">✗ the replay stopped at turn '
            f"{_served(conversation)}: {_text(why)} (the diff is above)</a></div>"
        )
    abandoned = conversation.get("abandoned") or ()
    if abandoned:
        parts.append("<details><summary>abandoned calls (not counted)</summary>")
        parts.extend(_turn(t, False, guarded, f"{ids}abandoned-") for t in abandoned)
        parts.append("</details>")
    if conversation.get("reply") is not None:
        parts.append(
            f'<div class="reply"><span class="role">reply</span><pre>{_text(conversation["reply"])}</pre></div>'
        )
    elif conversation.get("reply_absent_reason"):
        parts.append(
            f'<p class="empty">The agent has not replied ({_text(conversation["reply_absent_reason"])}).</p>'
        )
    return "\n".join(parts)


def _agent_tree(subagents: Sequence[Mapping[str, Any]], ids: str) -> str:
    """The agent the flow started and its sub-agents, each under the agent that spawned it."""
    if not subagents:
        return ""

    def children(parent: Any) -> str:
        items = [
            f'<li><a href="#{ids}turn-{_text(s.get("spawn_turn"))}">{_text(s.get("text", ""))}</a>'
            f"{children(s.get('number'))}</li>"
            for s in subagents
            if s.get("parent") == parent
        ]
        return f"<ul>{''.join(items)}</ul>" if items else ""

    return f'<h3>agents</h3><ul class="agents"><li>the agent{children(None)}</li></ul>'


def _witness(flow: Mapping[str, Any]) -> str:
    """The hosts the agent reached, where a declared secret went, and the mocks never fired."""
    hosts = [
        (f"{h.get('host')}:{h.get('port')} ({h.get('role')}, {h.get('via')})",
         "ok" if h.get("role") in ("model", "mcp") else "other")
        for h in flow.get("egress") or ()
    ]
    leaks = [
        (f"{leak.get('label')} → {leak.get('host')}: {leak.get('method')} {leak.get('url')} "
         f"({leak.get('where')} {leak.get('path')})", "")
        for leak in flow.get("secret_leaks") or ()
    ]
    mocks = [(str(m.get("text")), "") for m in flow.get("unused_mocks") or ()]
    return "\n".join(
        _items(title, css, items)
        for title, css, items in (("hosts contacted", "hosts", hosts), ("secret leaks", "leaks", leaks),
                                  ("mocks that never fired", "mocks", mocks))
        if items
    )


def _items(title: str, css: str, items: Sequence[tuple[str, str]]) -> str:
    lines = "".join(f'<li class="{cls}">{_text(text)}</li>' if cls else f"<li>{_text(text)}</li>"
                    for text, cls in items)
    return f'<h3>{_text(title)}</h3><ul class="{css}">{lines}</ul>'


def _turn(turn: Mapping[str, Any], bad: bool, guarded: Mapping[str, Mapping[str, Any]], ids: str) -> str:
    head = f"turn {turn.get('index')} · {turn.get('provider', '')} · {turn.get('model') or '?'}"
    if turn.get("agent"):
        head += f" · sub-agent {turn['agent']}"
    parts = [
        f'<div class="turn{" badturn" if bad else ""}" id="{ids}turn-{_text(turn.get("index"))}">'
        f'<p class="turnhead">{_text(head)}</p>'
    ]
    if turn.get("prompt"):
        parts.append(
            f'<div class="msg user"><span class="role">user</span><pre>{_text(turn["prompt"])}</pre></div>'
        )
    for result in turn.get("tool_results") or ():
        name = result.get("name") or result.get("call_id") or "?"
        mock = " · the spec's mock (tools:)" if result.get("mocked") else ""
        parts.append(
            f'<div class="msg result"><span class="role">tool result · {_text(name + mock)}</span>'
            f"<pre>{_text(result.get('content', ''))}</pre></div>"
        )
    response = turn.get("response")
    if response is None:
        parts.append('<p class="empty">no response</p>')
    else:
        for call in response.get("tool_calls") or ():
            guard = guarded.get(str(call.get("name")))
            badge = (
                f'<span class="guard">guarded: the model asked; {_text(guard.get("called", 0))} call(s) '
                f"crossed the {_text(guard.get('boundary', ''))} boundary</span>"
                if guard
                else ""
            )
            parts.append(
                f'<div class="msg call"><span class="role">tool call · {_text(call.get("name", ""))}</span>'
                f"{badge}<pre>{_text(call.get('arguments', ''))}</pre></div>"
            )
        if response.get("text"):
            parts.append(
                f'<div class="msg assistant"><span class="role">assistant</span><pre>{_text(response["text"])}</pre></div>'
            )
        parts.append(f'<p class="finish">finish: {_text(response.get("finish_reason", ""))}</p>')
    parts.extend(_mcp_call(c) for c in turn.get("mcp_calls") or ())
    parts.append("</div>")
    return "".join(parts)


def _mcp_call(call: Mapping[str, Any]) -> str:
    how = (
        "answered by flowproof from the spec"
        if call.get("answered")
        else "crossed the MCP boundary"
    )
    return (
        f'<div class="msg mcp"><span class="role">MCP tools/call · {_text(call.get("name", ""))} · '
        f"server {_text(call.get('server', ''))} · {how}</span><pre>{_text(call.get('arguments', ''))}</pre></div>"
    )


# --------------------------------------------------------------------------- text


def _text(value: Any) -> str:
    """Any value as HTML text: escaped (quotes too, so it is safe in an attribute) with
    invisible characters shown as escapes."""
    shown = _INVISIBLE.sub(
        lambda m: (
            f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}"
        ),
        str(value),
    )
    return html.escape(shown, quote=True)


def _value(value: Any) -> str:
    """A finding's value as shown in a diff cell: text bare, anything else as JSON."""
    if value is None:
        return "(none)"
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _highlight(left: str, right: str) -> tuple[str, str]:
    """Both sides escaped, what differs marked: word by word when both are short enough for
    a sequence diff, else the part between their common prefix and common suffix (linear,
    so a long prompt costs no more than reading it)."""
    if left == right:
        return _text(left), _text(right)
    a, b = _TOKEN.findall(left), _TOKEN.findall(right)
    if len(a) + len(b) <= _WORD_DIFF_LIMIT:
        marked_left: list[str] = []
        marked_right: list[str] = []
        matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
        for op, i1, i2, j1, j2 in matcher.get_opcodes():
            for out, chunk in ((marked_left, "".join(a[i1:i2])), (marked_right, "".join(b[j1:j2]))):
                if chunk:
                    out.append(_text(chunk) if op == "equal" else f"<mark>{_text(chunk)}</mark>")
        return "".join(marked_left), "".join(marked_right)
    start = 0
    limit = min(len(left), len(right))
    while start < limit and left[start] == right[start]:
        start += 1
    end = 0
    while end < limit - start and left[-1 - end] == right[-1 - end]:
        end += 1

    def marked(s: str) -> str:
        middle = s[start : len(s) - end]
        return (
            _text(s[:start])
            + (f"<mark>{_text(middle)}</mark>" if middle else "")
            + _text(s[len(s) - end :])
        )

    return marked(left), marked(right)


def _mark(passed: Any) -> str:
    return (
        f'<span class="mark ok">{_PASS}</span>'
        if passed
        else f'<span class="mark bad">{_FAIL}</span>'
    )


def _state(flow: Mapping[str, Any]) -> str:
    return "ok" if flow.get("passed") else "bad"


def _seconds(value: Any) -> str:
    return f"{value:.1f}s" if isinstance(value, int | float) and not isinstance(value, bool) else ""


_STYLE = """
:root{--ok:#1a7f37;--bad:#cf222e;--line:#d0d7de;--muted:#57606a;--bg:#f6f8fa}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1100px;padding:16px 24px;color:#1f2328}
h1{font-size:22px;margin:4px 0}h2{font-size:18px;margin:0 0 4px}h3{font-size:15px;margin:16px 0 6px}h4{font-size:14px;margin:6px 0;color:var(--muted)}
pre{margin:0;white-space:pre-wrap;word-break:break-word;font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
table{border-collapse:collapse;width:100%;margin:6px 0}th,td{border:1px solid var(--line);padding:4px 8px;text-align:left;vertical-align:top}
th{background:var(--bg);font-weight:600}
.verdict{font-weight:600}.ok .mark,.mark.ok,.verdict.ok{color:var(--ok)}.mark.bad,.verdict.bad{color:var(--bad)}
tr.bad td:first-child,li.bad{color:var(--bad)}.hosts li.other{font-weight:600}
.agents ul{margin:0;padding-left:1.4em}
.path{font-family:ui-monospace,monospace;font-size:12.5px;color:var(--muted)}
.flow{border:1px solid var(--line);border-left:6px solid var(--ok);border-radius:6px;padding:12px 16px;margin:18px 0}
.flow.bad{border-left-color:var(--bad)}
.meta,.where,.finish,.turnhead{color:var(--muted);font-size:12.5px;margin:2px 0}
.error,.finding{background:#fff8f8;border:1px solid #ffd8d3;border-radius:4px;padding:6px 8px;margin:4px 0}
.firstbad>h3{color:var(--bad)}.firstbad{margin:8px 0}
.diff td.side{width:42%}.diff .recorded{background:#fff5f5}.diff .other{background:#f0fff4}
.diff .recorded mark{background:#ffc1c0}.diff .other mark{background:#abf2bc}
.next{font-weight:600}
.steps{list-style:none;padding-left:4px}.steps li{margin:3px 0}
.thread{border-top:1px dashed var(--line);padding-top:6px;margin-top:8px}
.turn{margin:6px 0 10px;padding-left:10px;border-left:3px solid var(--line)}.turn.badturn{border-left-color:var(--bad)}
.msg{border-radius:6px;padding:6px 10px;margin:4px 0;max-width:92%}
.msg pre,.side pre,.error,details pre{max-height:32em;overflow:auto}
.msg .role{display:block;font-size:11.5px;font-weight:600;color:var(--muted);margin-bottom:2px}
.user{background:#ddf4ff;margin-left:auto}.assistant{background:var(--bg);border:1px solid var(--line)}
.call{background:#fff8c5;border:1px solid #eac54f}.result{background:#f5f0ff;border:1px solid #d8c8ff}
.mcp{background:#e6fffa;border:1px solid #7fd1c0}.stop{background:#fff8f8;border:1px solid var(--bad)}
.reply{background:#dafbe1;border:1px solid #4ac26b;border-radius:6px;padding:6px 10px;margin:8px 0}
.reply .role{font-weight:600;font-size:11.5px}
.guard{display:inline-block;font-size:11.5px;font-weight:600;color:#fff;background:#8250df;border-radius:10px;padding:0 8px;margin-bottom:3px}
.empty{color:var(--muted);font-style:italic}
details{margin:6px 0}summary{cursor:pointer;color:var(--muted)}
"""
