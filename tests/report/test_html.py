"""Tests for flowproof.report.html: the HTML page, rendered from plain data and from judged flows."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import pytest

from flowproof.divergence import Divergence, FieldChange
from flowproof.mcp import McpCall
from flowproof.report.html import CSP, conversation_json, first_bad_turn, flow_conversation, html_report, render_html
from flowproof.trajectory import build_trajectory
from flowproof.turns import FinishReason, RequestView, ResponseView, ToolCall, ToolResult, Turn
from flowproof.verdict import FlowResult

from ..runner.helpers import BOOKING_TURNS as CASSETTE_TURNS
from ..runner.helpers import chat_turn, turn_events
from .helpers import judged, result

SYSTEM = "You book flights."


def request(
    *, prompt: str = "Book me a flight to Nairobi", results: tuple[ToolResult, ...] = (), system: str = SYSTEM
) -> RequestView:
    return RequestView(
        provider="openai-chat",
        model="gpt-4o-mini",
        system=system,
        tools=("search_flights", "create_booking"),
        roles=("system", "user"),
        tool_results=results,
        stream=True,
        text_size=100,
        prompt=prompt,
    )


def calls(*pairs: tuple[str, str]) -> tuple[ToolCall, ...]:
    return tuple(ToolCall(name, args, call_id=f"call_{i}") for i, (name, args) in enumerate(pairs))


SEARCH = ToolResult("call_0", "search_flights", '{"flights":[{"id":"KQ311"}]}')
BOOKED = ToolResult("call_1", "create_booking", '{"booking":"B-1042"}')

BOOKING_TURNS = [
    Turn(0, request(), ResponseView("", calls(("search_flights", '{"destination":"NBO"}')), FinishReason.TOOL_CALLS)),
    Turn(
        1,
        request(results=(SEARCH,)),
        ResponseView("", calls(("create_booking", '{"flight":{"id":"KQ311"}}')), FinishReason.TOOL_CALLS),
    ),
    Turn(2, request(results=(SEARCH, BOOKED)), ResponseView("You're booked on KQ311: B-1042.", (), FinishReason.STOP)),
]


def flow(**overrides: Any) -> dict[str, Any]:
    """A flow of the ``--json`` report, passing, with the booking conversation."""
    base: dict[str, Any] = {
        "spec": "example_specs/booking.flow.yaml",
        "name": "Booking assistant books a flight",
        "mode": "replay",
        "passed": True,
        "exit_code": 0,
        "verdict": "passed",
        "cassette": "example_specs/booking.cassette.json",
        "error": None,
        "steps": [
            {
                "passed": True,
                "source": "search_flights where destination contains NBO",
                "message": "ok",
                "location": None,
            }
        ],
        "findings": [],
        "compare": None,
        "guards": [],
        "notes": [],
        "warnings": [],
        "proxy_errors": [],
        "heal_diff": None,
        "agent": {"returncode": 0, "stdout": "", "stderr": ""},
        "duration_seconds": 1.25,
        "next": "Nothing to do.",
        "conversation": conversation_json(build_trajectory(BOOKING_TURNS)),
    }
    base.update(overrides)
    return base


def page(*flows: dict[str, Any]) -> str:
    return render_html({"exit_code": max((f["exit_code"] for f in flows), default=0), "flows": list(flows)})


def divergence(path: str, recorded: Any, replayed: Any, turn: int = 2) -> dict[str, Any]:
    return {
        "kind": "divergence",
        "detail": "unmatched",
        "turn": turn,
        "thread": None,
        "path": path,
        "recorded": recorded,
        "replayed": replayed,
        "live": None,
        "hint": None,
        "location": None,
        "message": f"request 3 matches no recorded turn; closest is turn {turn}\n- {path}: ...",
    }


class Elements(HTMLParser):
    """Every start tag with its attributes, and the text, as an HTML parser reads the page."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def names(self) -> set[str]:
        return {tag for tag, _ in self.tags}


class TestConversationData:
    def test_turns_show_what_is_new_in_each_request(self) -> None:
        """Per thread, the prompt shows once and each tool result once, in the turn that first
        told the model; tool calls keep their arguments (as indented JSON)."""
        data = conversation_json(build_trajectory(BOOKING_TURNS))
        [thread] = data["threads"]
        assert thread["main"] and thread["number"] == 0 and thread["system"] == SYSTEM
        turns = thread["turns"]
        assert [t["prompt"] for t in turns] == ["Book me a flight to Nairobi", "", ""]
        assert [[r["name"] for r in t["tool_results"]] for t in turns] == [[], ["search_flights"], ["create_booking"]]
        assert turns[1]["tool_results"][0]["content"] == '{"flights":[{"id":"KQ311"}]}'
        assert turns[0]["response"]["tool_calls"] == [
            {"name": "search_flights", "call_id": "call_0", "arguments": '{\n  "destination": "NBO"\n}'}
        ]
        assert turns[2]["response"]["finish_reason"] == "stop"
        assert data["reply"] == "You're booked on KQ311: B-1042."

    def test_arguments_that_are_not_json_are_shown_as_sent(self) -> None:
        turn = Turn(
            0, request(), ResponseView("", calls(("search_flights", "{destination: NBO")), FinishReason.TOOL_CALLS)
        )
        data = conversation_json(build_trajectory([turn]))
        assert data["threads"][0]["turns"][0]["response"]["tool_calls"][0]["arguments"] == "{destination: NBO"
        assert data["reply"] is None and "tool call to search_flights" in data["reply_absent_reason"]

    def test_threads_are_numbered_by_first_turn_and_the_main_one_is_marked(self) -> None:
        """A side conversation (another system prompt) is its own thread; the reply's thread is main."""
        side = Turn(
            1,
            request(prompt="Title this chat", system="You write titles."),
            ResponseView("Trip", (), FinishReason.STOP),
        )
        turns = [
            BOOKING_TURNS[0],
            side,
            *(Turn(i + 1, t.request, t.response) for i, t in enumerate(BOOKING_TURNS[1:], 1)),
        ]
        data = conversation_json(build_trajectory(turns))
        assert [(t["number"], t["main"], t["system"]) for t in data["threads"]] == [
            (0, True, SYSTEM),
            (1, False, "You write titles."),
        ]
        assert [t["index"] for t in data["threads"][1]["turns"]] == [1]

    def test_mcp_calls_come_after_the_turn_that_preceded_them(self) -> None:
        mcp = [McpCall("exports", "list_rows", '{"limit": 5}', answered=False, after_turns=1)]
        data = conversation_json(build_trajectory(BOOKING_TURNS, mcp), mcp)
        turns = data["threads"][0]["turns"]
        assert [len(t["mcp_calls"]) for t in turns] == [1, 0, 0]
        assert turns[0]["mcp_calls"][0] == {
            "server": "exports",
            "name": "list_rows",
            "arguments": '{\n  "limit": 5\n}',
            "answered": False,
        }
        before = [McpCall("exports", "list_rows", "{}", answered=True, after_turns=0)]
        assert conversation_json(build_trajectory(BOOKING_TURNS, before), before)["mcp_calls_before"][0]["answered"]

    def test_abandoned_turns_are_kept_aside(self) -> None:
        gone = Turn(3, request(prompt="again"), None, abandoned=True)
        data = conversation_json(build_trajectory([*BOOKING_TURNS, gone]))
        assert [t["index"] for t in data["abandoned"]] == [3]
        assert [t["index"] for t in data["threads"][0]["turns"]] == [0, 1, 2]


class TestFirstBadTurn:
    def test_the_first_place_with_all_its_fields(self) -> None:
        """A divergence with two differing fields is two findings at one place: both are the
        first bad turn; a later divergence and the assertions are not."""
        one = divergence("messages.5.content → booking", "B-1042", "B-2077")
        two = {**one, "path": "messages.0.content"}
        later = divergence("messages.7.content", "a", "b", turn=4)
        failed = {"kind": "assertion", "turn": None, "thread": None, "message": "no reply"}
        assert first_bad_turn({"findings": [failed, one, two, later]}) == [one, two]

    def test_a_passing_flow_has_none(self) -> None:
        assert first_bad_turn(flow()) == []


class TestPage:
    def test_a_conversation_reads_in_order(self) -> None:
        """Prompt, tool calls with arguments, tool results as the model was told them, reply."""
        text = "".join(Elements(page(flow())).text)
        order = [
            "Book me a flight to Nairobi",
            "tool call · search_flights",
            '"destination": "NBO"',
            "tool result · search_flights",
            '{"flights":[{"id":"KQ311"}]}',
            "tool call · create_booking",
            "tool result · create_booking",
            "You're booked on KQ311: B-1042.",
        ]
        positions = [text.find(item) for item in order]
        assert -1 not in positions, list(zip(order, positions, strict=True))
        assert positions == sorted(positions)

    def test_summary_lists_every_flow_with_a_link(self) -> None:
        bad = flow(name="Refund guard", passed=False, exit_code=1, verdict="assertion failed")
        html = page(flow(), bad)
        parsed = Elements(html)
        links = [a["href"] for tag, a in parsed.tags if tag == "a"]
        assert links[:2] == ["#flow-1", "#flow-2"]
        assert 'id="flow-2"' in html
        assert "1 of 2 flow(s) passed · exit code 1" in "".join(parsed.text)

    def test_no_flow(self) -> None:
        assert "No flow ran." in render_html({"exit_code": 0, "flows": []})

    def test_a_divergence_is_a_side_by_side_diff_with_the_change_marked(self) -> None:
        """Recorded and replayed values sit in one row under their field path; only the part
        between the common prefix and suffix is marked."""
        html = page(
            flow(passed=False, exit_code=3, verdict="replay divergence",
                 findings=[divergence("messages.5.content → booking", "B-1042", "B-2077")],
                 conversation=conversation_json(build_trajectory(BOOKING_TURNS[:2])))
        )
        row = re.search(r'<table class="diff">.*?</table>', html, re.DOTALL)
        assert row is not None
        assert "<th>recorded</th><th>replayed</th>" in row.group()
        assert "messages.5.content → booking" in row.group()
        assert '<td class="side recorded"><pre>B-<mark>1042</mark></pre></td>' in row.group()
        assert '<td class="side other"><pre>B-<mark>2077</mark></pre></td>' in row.group()
        assert "first bad turn: divergence at recorded turn 2" in html
        assert "the replay stopped at turn 2: request 3 matches no recorded turn" in html

    def test_a_divergence_without_field_paths_shows_its_text(self) -> None:
        """An envelope change (a tool added) has no field rows: the report's words stand in."""
        added = {**divergence("x", None, None), "path": None,
                 "message": "request 1 matches no recorded turn\n- tools: added refund_order"}
        html = page(flow(passed=False, exit_code=3, findings=[added]))
        assert '<table class="diff">' not in html
        assert '<pre class="finding">request 1 matches no recorded turn\n- tools: added refund_order</pre>' in html

    def test_a_value_added_at_the_end_marks_only_the_addition(self) -> None:
        html = page(flow(passed=False, exit_code=3, findings=[divergence("messages.0.content", "Book", "Book now")]))
        assert "<pre>Book</pre>" in html and "<pre>Book<mark> now</mark></pre>" in html

    def test_each_changed_word_is_marked_on_its_own(self) -> None:
        html = page(flow(passed=False, exit_code=3, findings=[
            divergence("messages.1.content", "Booked KQ311 for tomorrow.", "Booked KQ999 for today.")]))
        assert "<pre>Booked <mark>KQ311</mark> for <mark>tomorrow</mark>.</pre>" in html
        assert "<pre>Booked <mark>KQ999</mark> for <mark>today</mark>.</pre>" in html

    def test_a_very_long_value_marks_the_span_between_prefix_and_suffix(self) -> None:
        """Past the word-diff limit (thousands of words) one span is marked, in one pass."""
        head, tail = "word " * 3000, " end" * 10
        html = page(flow(passed=False, exit_code=3, findings=[
            divergence("messages.0.content", head + "KQ311 x KQ312" + tail, head + "KQ999 x KQ998" + tail)]))
        assert "<mark>311 x KQ312</mark>" in html and "<mark>999 x KQ998</mark>" in html

    def test_structured_values_are_shown_as_json(self) -> None:
        html = page(flow(passed=False, exit_code=3, findings=[divergence("tools", ["a"], None)]))
        assert "<pre><mark>[\n  &quot;a&quot;\n]</mark></pre>" in html and "<mark>(none)</mark>" in html

    def test_compare_drift_sets_the_two_responses_side_by_side(self) -> None:
        result = {
            "kind": "paired", "equal": False, "turn": 2, "live_call": 2, "thread": 0,
            "tool_calls": {"equal": True, "recorded": [], "live": []},
            "finish_reason": {"equal": True, "recorded": "stop", "live": "stop"},
            "text": {"status": "different", "recorded": "You're booked.", "live": "All booked."},
        }
        drift = {**divergence("text", "You're booked.", None), "kind": "drift", "live": "All booked."}
        html = page(
            flow(mode="compare", passed=False, exit_code=4, findings=[drift],
                 compare={"results": [result], "first_drift": 0})
        )
        assert "<th>recorded</th><th>live</th>" in html
        assert "first bad turn: drift at recorded turn 2, thread 0 (paired)" in html
        assert "<mark>You&#x27;re</mark> booked." in html and "<mark>All</mark> booked." in html

    def test_failed_checks_show_their_message_and_location(self) -> None:
        step = {"passed": False, "source": "reply contains refunded", "message": 'expected "refunded"',
                "location": "refund.flow.yaml:9:5"}
        html = page(flow(passed=False, exit_code=1, steps=[step], next="Fix the agent"))
        assert "✗</span> reply contains refunded" in html
        assert "refund.flow.yaml:9:5" in html and "expected &quot;refunded&quot;" in html
        assert '<p class="next">Fix the agent</p>' in html

    def test_guard_evidence_is_a_table_and_the_asked_call_is_badged(self) -> None:
        guard = {"assertion": "create_booking", "tool": "create_booking", "boundary": "mcp", "offered": True,
                 "asked": 1, "called": 0, "passed": True, "warning": None, "location": "x:1:1"}
        html = page(flow(guards=[guard]))
        table = re.search(r'<table class="guards">.*?</table>', html, re.DOTALL)
        assert table is not None
        cells = re.findall(r"<td>(.*?)</td>", table.group())
        assert cells == ["no call to create_booking", "mcp", "yes", "1", "0", ""]
        assert "guarded: the model asked; 0 call(s) crossed the mcp boundary" in html

    def test_agent_output_and_heal_diff_are_folded(self) -> None:
        html = page(flow(agent={"stdout": "", "stderr": "Traceback: boom"}, heal_diff=""))
        assert "<summary>agent stderr (last lines)</summary><pre>Traceback: boom</pre>" in html
        assert "<pre>no change</pre>" in html
        assert "agent stdout" not in html


HOSTILE = '<script>document.title="pwned"</script><img src="http://127.0.0.1:9/x" onerror="alert(1)">'


class TestUntrustedText:
    def hostile_page(self) -> str:
        turn = Turn(
            0,
            request(prompt=HOSTILE, results=(ToolResult("c", "</pre><b>x", HOSTILE),)),
            ResponseView(
                HOSTILE, calls(("<i>tool</i>", '{"q": "' + HOSTILE.replace('"', "'") + '"}')), FinishReason.STOP
            ),
        )
        bad = flow(
            name=HOSTILE, spec=HOSTILE, passed=False, exit_code=3, error=HOSTILE, next=HOSTILE,
            findings=[divergence(HOSTILE, HOSTILE, HOSTILE + "!")],
            steps=[{"passed": False, "source": HOSTILE, "message": HOSTILE, "location": HOSTILE}],
            agent={"stdout": HOSTILE, "stderr": HOSTILE},
            notes=[HOSTILE], guards=[{"assertion": HOSTILE, "tool": "<i>tool</i>", "boundary": HOSTILE}],
            conversation=conversation_json(build_trajectory([turn])),
        )
        return render_html({"exit_code": 3, "flows": [bad]}, title=HOSTILE)

    def test_markup_in_model_text_and_arguments_is_shown_not_parsed(self) -> None:
        """A <script> in a reply, a prompt, tool arguments, a tool name, a spec name is text:
        the page holds no script, image or event handler, and shows the characters."""
        html = self.hostile_page()
        parsed = Elements(html)
        assert "script" not in parsed.names() and "img" not in parsed.names() and "i" not in parsed.names()
        assert not any(name.startswith("on") for _tag, attrs in parsed.tags for name in attrs)
        assert sum(HOSTILE in chunk for chunk in parsed.text) >= 10
        assert "&lt;script&gt;" in html and "<script" not in html.lower()

    def test_the_page_loads_nothing(self) -> None:
        """No element has a src, no link leaves the page, the style imports nothing, and the CSP
        forbids every load but the inline style."""
        parsed = Elements(self.hostile_page())
        assert all("src" not in attrs for _tag, attrs in parsed.tags)
        assert [a["href"] for tag, a in parsed.tags if "href" in a and not str(a["href"]).startswith("#")] == []
        assert "link" not in parsed.names() and "iframe" not in parsed.names()
        [csp] = [
            a["content"] for tag, a in parsed.tags if tag == "meta" and a.get("http-equiv") == "Content-Security-Policy"
        ]
        assert csp == CSP and "default-src 'none'" in csp and "script-src" not in csp
        style = re.search(r"<style>(.*?)</style>", self.hostile_page(), re.DOTALL)
        assert style is not None and "url(" not in style.group(1) and "@import" not in style.group(1)

    @pytest.mark.parametrize(
        ("raw", "shown"),
        [
            ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
            ("a\x00b", "a\\x00b"),
            ("\ud800", "\\ud800"),
            ("a\x85b", "a\\x85b"),
        ],
    )
    def test_invisible_characters_are_made_visible(self, raw: str, shown: str) -> None:
        html = page(flow(agent={"stdout": "", "stderr": raw}))
        assert shown in html
        html.encode("utf-8")  # a lone surrogate would make the page unwritable

    def test_the_parser_sees_the_planted_tags_without_escaping(self) -> None:
        """The checks above can fail: unescaped, the same payload is a script and an image."""
        parsed = Elements(f"<p>{HOSTILE}</p>")
        assert {"script", "img"} <= parsed.names()


def diverged() -> FlowResult:
    """Two turns served, then the third request changed a tool result."""
    divergence = Divergence(
        kind="unmatched", request_number=3, closest_index=2,
        fields=(FieldChange("messages.5.content", "B-1042", "B-2077", inner="booking"),),
    )
    events = [
        *turn_events(CASSETTE_TURNS[:2]),
        {"event": "divergence", "id": "2", "divergence": divergence.to_json()},
        {"event": "done", "unconsumed": [2]},
    ]
    return judged(events, CASSETTE_TURNS)


class TestHtmlReport:
    def test_the_conversation_is_the_trajectory_the_flow_was_judged_on(self) -> None:
        """The turns the proxy reported are the conversation: tool calls with their arguments."""
        conversation = flow_conversation(diverged())
        assert conversation is not None
        [thread] = conversation["threads"]
        calls = [c["name"] for t in thread["turns"] for c in t["response"]["tool_calls"]]
        assert calls == ["search_flights", "create_booking"]

    def test_request_text_is_shown_as_the_cassette_holds_it(self) -> None:
        """A normalized volatile span shows as its placeholder, as in the cassette."""
        turn = chat_turn(0, text="Booked.", user="Book me a flight on «volatile:date»")
        page = html_report([judged(turn_events([turn]), [turn])])
        assert "Book me a flight on «volatile:date»" in page

    def test_a_flow_that_never_ran_has_no_conversation(self) -> None:
        assert flow_conversation(result(2, error="spec error")) is None
        assert "spec error" in html_report([result(2, error="spec error")])

    def test_a_divergence_is_shown_at_its_first_bad_turn(self) -> None:
        page = html_report([result(), diverged()])
        assert page.count('<section class="flow') == 2
        assert "first bad turn: divergence at recorded turn 2" in page
        assert "messages.5.content → booking" in page
        assert "B-<mark>1042</mark>" in page and "B-<mark>2077</mark>" in page
        assert "0 of 2" not in page and "1 of 2 flow(s) passed · exit code 3" in page


def test_the_page_draws_the_agent_tree_and_the_hosts() -> None:
    from flowproof.report.html import conversation_json, render_html
    from flowproof.trajectory import build_trajectory

    from ..agent_runs import claude_code_run

    conversation = conversation_json(build_trajectory(claude_code_run()))
    assert [s["label"] for s in conversation["subagents"]] == ["Explore #1"]
    turns = {t["index"]: t["agent"] for th in conversation["threads"] for t in th["turns"]}
    assert turns == {0: None, 1: None, 2: "Explore #1", 3: "Explore #1", 4: None}
    flow = {"name": "f", "passed": False, "conversation": conversation,
            "egress": [{"host": "exfil.example.test", "port": 80, "role": "other", "via": "http"}],
            "unused_mocks": [{"text": "search_hotels (tools:, f:1:1): no request carried its result"}]}
    page = render_html({"flows": [flow], "passed": 0, "failed": 1, "exit_code": 1})
    assert '<ul class="agents"><li>the agent<ul><li><a href="#flow-1-turn-0">Explore #1 (claude-code)' in page
    assert "turn 2 · anthropic · claude-x · sub-agent Explore #1" in page
    assert '<li class="other">exfil.example.test:80 (other, http)</li>' in page
    assert "mocks that never fired" in page


def diverged_at_first_request() -> FlowResult:
    """The very first request matched nothing: no turn was replayed."""
    divergence = Divergence(kind="unmatched", request_number=1, closest_index=0,
                            fields=(FieldChange("messages.1.content", "Book me a flight", "Book me a train"),))
    events = [{"event": "divergence", "id": "1", "divergence": divergence.to_json()},
              {"event": "done", "unconsumed": [0, 1, 2]}]
    return judged(events, CASSETTE_TURNS)


class Sections(HTMLParser):
    """Every id and every in-page link, each with the flow section it sits in (None: outside)."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.section: str | None = None
        self.ids: list[tuple[str | None, str]] = []
        self.links: list[tuple[str | None, str]] = []
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "section":  # flow sections do not nest
            self.section = found.get("id")
        if found.get("id"):
            self.ids.append((self.section, str(found["id"])))
        href = found.get("href") or ""
        if href.startswith("#"):
            self.links.append((self.section, href[1:]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self.section = None


class TestSeveralFlows:
    def test_every_id_is_unique_and_every_link_opens_its_own_flow(self) -> None:
        """Two diverged flows and one that diverged at once: each "stopped here" link and each
        turn link lands in the flow it was drawn in."""
        page = html_report([diverged(), diverged(), diverged_at_first_request()])
        parsed = Sections(page)
        ids = [i for _, i in parsed.ids]
        assert len(ids) == len(set(ids))
        where = {i: section for section, i in parsed.ids}
        stops = [(section, target) for section, target in parsed.links if target.endswith("first-bad")]
        assert [s for s, _ in stops] == ["flow-1", "flow-2", "flow-3"]
        for section, target in parsed.links:
            assert target in where, target
            if section is not None:  # a link inside a flow opens that flow's part
                assert where[target] == section, (section, target)
            else:  # the summary links to the flow sections themselves
                assert where[target] == target

    def test_a_flow_that_diverged_at_turn_0_says_why(self) -> None:
        """No turn was replayed: the page names the request, where the replay stopped and why
        the checks did not run."""
        page = html_report([result(), diverged_at_first_request()])
        section = page.split('id="flow-2"', 1)[1]
        assert "the replay stopped at turn 0: request 1 matches no recorded turn; closest is turn 0" in section
        assert "No turn was replayed: the first request already matched no recorded turn." in section
        assert "<h3>checks</h3><p class=\"empty\">Not run: the replay diverged" in section
        assert 'href="#flow-2-first-bad"' in section and 'id="flow-2-first-bad"' in section

    def test_an_agent_that_failed_says_its_checks_did_not_run(self) -> None:
        page = html_report([result(5, error="the agent exited with code 3")])
        assert "Not run: the agent or the proxy failed first (the error above)." in page

    def test_a_mocked_tool_result_is_marked_as_the_spec_s_mock(self) -> None:
        conversation = conversation_json(build_trajectory(BOOKING_TURNS), mocked=["search_flights"])
        results = [r for th in conversation["threads"] for t in th["turns"] for r in t["tool_results"]]
        assert [(r["name"], r["mocked"]) for r in results] == [("search_flights", True), ("create_booking", False)]
        page = render_html({"exit_code": 0, "flows": [flow(conversation=conversation)]})
        assert "tool result · search_flights · the spec&#x27;s mock (tools:)" in page
        assert "tool result · create_booking</span>" in page
