"""GenAI spans from plain runs: the agent tree, chat and tool spans, timing, and no content."""

from __future__ import annotations

import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from flowproof.cassette import RecordedRequest, RecordedResponse, RecordedTurn
from flowproof.divergence import Divergence
from flowproof.genai_spans import (
    CallFacts,
    RunFacts,
    SpanKind,
    SpanRecord,
    build_spans,
    call_facts,
    run_spans,
)
from flowproof.log_events import (
    DivergenceEvent,
    Event,
    McpCallEvent,
    ReplayedTurnEvent,
    RequestStartedEvent,
    TurnEvent,
)
from flowproof.mcp import McpCall
from flowproof.run_record import ReplayMiss, read_run
from flowproof.trajectory import build_trajectory
from flowproof.turns import FinishReason, ResponseView, ToolCall, Usage

from .agent_runs import (
    GREP,
    SPAWN,
    SPAWN_PROMPT,
    SUB_ANSWER,
    anthropic,
    called,
    claude_code_cassette,
    claude_code_run,
    said,
    turn,
    user,
)

RUN = RunFacts(flow="book a flight", mode="replay", run_id="r1", started_at=99.0, ended_at=106.0)


def timed(*indexes: int) -> dict[int, CallFacts]:
    """Turn i arrived at 100 + i and took half a second, at api.anthropic.com."""
    return {i: CallFacts(100.0 + i, 500.0, "api.anthropic.com", 443, 200) for i in indexes}


def secs(span: SpanRecord) -> tuple[float, float]:
    return span.start / 1e9, span.end / 1e9


def by_key(spans: tuple[SpanRecord, ...]) -> dict[str, SpanRecord]:
    keys = [s.key for s in spans]
    assert len(keys) == len(set(keys)), keys
    return {s.key: s for s in spans}


def claude_spans(**kwargs):  # type: ignore[no-untyped-def]
    return by_key(build_spans(build_trajectory(claude_code_run()), RUN, timed(0, 1, 2, 3, 4), **kwargs))


class TestTheAgentTree:
    def test_one_agent_span_per_agent_and_the_sub_agent_under_its_parent(self) -> None:
        spans = claude_spans()
        root, explore = spans["agent"], spans["agent/0"]
        assert (root.parent, root.name, root.kind) == (None, "invoke_agent book a flight", SpanKind.INTERNAL)
        assert (explore.parent, explore.name) == ("agent", "invoke_agent Explore")
        assert explore.attributes["gen_ai.operation.name"] == "invoke_agent"
        assert explore.attributes["gen_ai.agent.name"] == "Explore"
        assert explore.attributes["flowproof.agent.label"] == "Explore #1"
        assert explore.attributes["gen_ai.provider.name"] == "anthropic"

    def test_each_model_call_is_a_chat_span_under_the_agent_it_belongs_to(self) -> None:
        spans = claude_spans()
        parents = {s.attributes["flowproof.turn"]: s.parent for s in spans.values() if s.key.startswith("chat/")}
        # Turns 2 and 3 are the Explore sub-agent's; 0, 1 (the title call) and 4 the root's.
        assert parents == {0: "agent", 1: "agent", 2: "agent/0", 3: "agent/0", 4: "agent"}

    def test_each_tool_call_is_an_execute_tool_span_beside_the_chat_that_asked(self) -> None:
        spans = claude_spans()
        tools = {s.attributes["gen_ai.tool.name"]: s for s in spans.values() if s.key.startswith("tool/")}
        assert set(tools) == {"Agent", "Grep"}
        grep = tools["Grep"]
        assert (grep.name, grep.kind, grep.parent) == ("execute_tool Grep", SpanKind.INTERNAL, "agent/0")
        assert grep.attributes["gen_ai.tool.call.id"] == GREP.call_id
        assert grep.attributes["gen_ai.operation.name"] == "execute_tool"
        assert grep.attributes["gen_ai.tool.type"] == "function"
        assert tools["Agent"].parent == "agent"

    def test_parents_come_before_their_children(self) -> None:
        spans = build_spans(build_trajectory(claude_code_run()), RUN, timed(0, 1, 2, 3, 4))
        seen: set[str] = set()
        for span in spans:
            assert span.parent is None or span.parent in seen, span.key
            seen.add(span.key)


class TestTiming:
    def test_chat_spans_are_the_proxy_times(self) -> None:
        spans = claude_spans()
        assert secs(spans["chat/2"]) == (102.0, 102.5)

    def test_a_tool_runs_from_the_answer_that_asked_to_the_request_that_carried_its_result(self) -> None:
        spans = claude_spans()
        tools = {s.attributes["gen_ai.tool.name"]: s for s in spans.values() if s.key.startswith("tool/")}
        assert secs(tools["Grep"]) == (102.5, 103.0)
        assert secs(tools["Agent"]) == (100.5, 104.0)

    def test_a_sub_agent_runs_from_its_spawn_until_its_parent_had_the_result(self) -> None:
        explore = claude_spans()["agent/0"]
        assert secs(explore) == (100.5, 104.0)

    def test_every_parent_covers_its_children(self) -> None:
        spans = claude_spans()
        for span in spans.values():
            if span.parent is not None:
                parent = spans[span.parent]
                assert parent.start <= span.start <= span.end <= parent.end, span.key
        assert secs(spans["agent"]) == (99.0, 106.0)

    def test_without_times_the_spans_follow_each_other_from_the_run_start(self) -> None:
        spans = by_key(build_spans(build_trajectory(claude_code_run()), RUN, {}))
        starts = [secs(spans[f"chat/{i}"])[0] for i in range(5)]
        assert starts == [99.0] * 5
        assert all(s.start <= s.end for s in spans.values())

    def test_a_missing_time_starts_where_the_last_call_ended(self) -> None:
        calls = {0: CallFacts(100.0, 1000.0), 2: CallFacts(None, 250.0)}
        spans = by_key(build_spans(build_trajectory(claude_code_run()), RUN, calls))
        assert (secs(spans["chat/1"])[0], *secs(spans["chat/2"])) == (101.0, 101.0, 101.25)


class TestChatAttributes:
    def test_model_provider_finish_reason_and_usage(self) -> None:
        usage = Usage(input_tokens=120, output_tokens=7, cache_read_tokens=100, cache_write_tokens=3)
        turns = [turn(0, "anthropic", anthropic("sys", [user("hi")]), said("hello", usage))]
        (_root, chat) = build_spans(build_trajectory(turns), RUN, timed(0))
        assert (chat.name, chat.kind, chat.parent, chat.error) == ("chat claude-x", SpanKind.CLIENT, "agent", None)
        assert chat.attributes == {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "anthropic",
            "gen_ai.request.model": "claude-x",
            "gen_ai.response.model": "claude-x",
            "gen_ai.request.stream": True,
            "gen_ai.response.finish_reasons": ("end_turn",),
            "gen_ai.usage.input_tokens": 120,
            "gen_ai.usage.output_tokens": 7,
            "gen_ai.usage.cache_read.input_tokens": 100,
            "gen_ai.usage.cache_creation.input_tokens": 3,
            "gen_ai.conversation.id": "r1-0",
            "server.address": "api.anthropic.com",
            "server.port": 443,
            "flowproof.turn": 0,
            "flowproof.finish_reason": "stop",
        }

    def test_gemini_generates_content_and_a_gateway_is_its_own_provider(self) -> None:
        gemini = turn(0, "gemini", {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}, said("yo"))
        chat = turn(1, "openai-chat", {"model": "llama-3", "messages": [{"role": "user", "content": "hi"}]},
                    said("yo"))
        calls = {0: CallFacts(100.0, 1.0, "us-central1-aiplatform.googleapis.com", 443),
                 1: CallFacts(101.0, 1.0, "api.groq.com", 443)}
        spans = by_key(build_spans(build_trajectory([gemini, chat]), RUN, calls))
        assert spans["chat/0"].name == "generate_content"  # Gemini names the model in the URL path
        assert spans["chat/0"].attributes["gen_ai.provider.name"] == "gcp.vertex_ai"
        assert spans["chat/1"].name == "chat llama-3"
        assert spans["chat/1"].attributes["gen_ai.provider.name"] == "groq"

    def test_an_http_error_an_abandoned_call_and_a_divergence_end_in_errors(self) -> None:
        base = anthropic("sys", [user("hi")])
        turns = [turn(0, "anthropic", base, ResponseView("", (), FinishReason.ERROR)),
                 turn(1, "anthropic", base, None)]
        abandoned = turn(2, "anthropic", base, None)
        object.__setattr__(abandoned, "abandoned", True)
        calls = {0: CallFacts(100.0, 5.0, status=529), 1: CallFacts(101.0, 5.0)}
        miss = ReplayMiss("f9", Divergence("unmatched", 3, 0), "anthropic", "claude-y", 2.0, started_at=103.0)
        spans = by_key(build_spans(build_trajectory([*turns, abandoned]), RUN, calls, misses=[miss]))
        assert spans["chat/0"].attributes["error.type"] == "529" and spans["chat/0"].error
        assert spans["chat/1"].attributes["error.type"] == "_OTHER"
        assert spans["chat/2"].attributes["error.type"] == "client_abandoned"
        diverged = spans["miss/0"]
        assert (diverged.name, diverged.parent, secs(diverged)[0]) == ("chat claude-y", "agent", 103.0)
        assert diverged.attributes["error.type"] == "replay_divergence"
        assert diverged.error == "replay diverged: no recorded turn matches this request"

    def test_a_failed_flow_is_an_error_on_the_root(self) -> None:
        failed = RunFacts("f", "replay", "r", 1.0, 2.0, exit_code=3, error="replay diverged at turn 1")
        (root,) = build_spans(build_trajectory([]), failed, {})
        assert (root.error, root.attributes["error.type"], root.attributes["flowproof.exit_code"]) == (
            "replay diverged at turn 1", "exit_3", 3)
        assert "gen_ai.provider.name" not in root.attributes  # no call named one


class TestToolResults:
    def test_mocked_real_and_never_seen(self) -> None:
        never = ToolCall("export", "{}", "toolu_x")
        turns = claude_code_run()
        turns[-1] = turn(4, "anthropic", turns[-1].body, called(never))
        spans = by_key(build_spans(build_trajectory(turns), RUN, timed(0, 1, 2, 3, 4), mocked={"Grep"}))
        result = {s.attributes["gen_ai.tool.name"]: s.attributes["flowproof.tool.result"]
                  for s in spans.values() if s.key.startswith("tool/")}
        assert result == {"Agent": "real", "Grep": "mocked", "export": "none"}
        last = [s for s in spans.values() if s.attributes.get("gen_ai.tool.name") == "export"][0]
        assert secs(last) == (104.5, 104.5)

    def test_an_mcp_call_answered_at_the_boundary_or_forwarded(self) -> None:
        base = anthropic("sys", [user("export it")], tools=("mcp__exports__export",))
        turns = [turn(0, "anthropic", base, called(ToolCall("mcp__exports__export", "{}", "toolu_e"))),
                 turn(1, "anthropic", base, said("done"))]
        crossed = [McpCall("exports", "export", "{}", answered=True, after_turns=1),
                   McpCall("exports", "audit", "{}", answered=False, after_turns=1)]
        trajectory = build_trajectory(turns, crossed, {"export"}, {"exports"})
        tools = [s for s in build_spans(trajectory, RUN, timed(0, 1)) if s.key.startswith("tool/")]
        assert [(s.name, s.attributes["flowproof.tool.result"], s.attributes["gen_ai.tool.type"]) for s in tools] == [
            ("execute_tool export", "answered", "extension"), ("execute_tool audit", "real", "extension")]
        # Between the model call before it and the next one: the model then knows the result.
        assert secs(tools[0]) == (100.5, 101.0)
        assert tools[0].attributes["flowproof.mcp.server"] == "exports"


class TestNoContentByDefault:
    def test_no_prompt_reply_argument_or_result_is_an_attribute(self) -> None:
        texts = [str(v) for s in claude_spans().values() for v in s.attributes.values()]
        for secret in ("KQ311", SPAWN_PROMPT, "booking", "bookings.txt"):
            assert not any(secret in t for t in texts), secret

    def test_content_goes_through_the_masking_it_is_given(self) -> None:
        spans = claude_spans(content=lambda text: text.replace("KQ311", "[redacted]"))
        grep = [s for s in spans.values() if s.attributes.get("gen_ai.tool.name") == "Grep"][0]
        assert json.loads(str(grep.attributes["gen_ai.tool.call.arguments"])) == {"pattern": "KQ"}
        assert grep.attributes["gen_ai.tool.call.result"] == "bookings.txt: [redacted]"
        spawn = [s for s in spans.values() if s.attributes.get("gen_ai.tool.name") == "Agent"][0]
        assert spawn.attributes["gen_ai.tool.call.result"] == SUB_ANSWER.replace("KQ311", "[redacted]")

    @settings(max_examples=40, deadline=None)
    @given(st.text(min_size=6).filter(lambda s: s.strip() and "\x00" not in s))
    def test_any_argument_text_stays_out_of_the_spans(self, secret: str) -> None:
        asked = ToolCall("lookup", json.dumps({"q": secret}), "call_1")
        turns = [turn(0, "anthropic", anthropic("sys", [user("go")]), called(asked))]
        for span in build_spans(build_trajectory(turns), RUN, timed(0)):
            assert all(secret not in str(value) for value in span.attributes.values())


def _promptfoo_reads_a_tool_name(key: str, value: object) -> bool:
    """promptfoo's trajectory assertions take a span as a tool call when a string attribute's
    key has a ``tool`` segment or reads ``tool name``/``function name`` (and as a command for a
    key naming a ``command``): only execute_tool spans may carry such a key."""
    if not isinstance(value, str) or not value.strip():
        return False
    return bool(re.search(r"tool.?name|function.?name|command", key, re.I)
                or (re.search(r"(^|[._])tool($|[._])", key, re.I) and not re.search(r"result|output|definition",
                                                                                 key, re.I)))


class TestTraceReaders:
    def test_only_tool_spans_read_as_tools(self) -> None:
        spans = claude_spans(content=lambda text: text)
        for span in spans.values():
            tool_like = any(_promptfoo_reads_a_tool_name(k, v) for k, v in span.attributes.items())
            assert tool_like == span.key.startswith("tool/"), span.key

    def test_the_rule_above_is_not_vacuous(self) -> None:
        assert _promptfoo_reads_a_tool_name("gen_ai.tool.name", "Grep")
        assert _promptfoo_reads_a_tool_name("flowproof.tool_calls", "Grep")
        assert not _promptfoo_reads_a_tool_name("flowproof.turn", 3)

    def test_every_gen_ai_key_is_in_the_conventions_registry(self) -> None:
        """The keys are the registry's own (the installed opentelemetry-semantic-conventions), and
        none is a name the conventions replaced (gen_ai.system became gen_ai.provider.name)."""
        from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
        from opentelemetry.semconv.attributes import error_attributes, server_attributes

        known = {v for m in (gen_ai_attributes, error_attributes, server_attributes)
                 for k, v in vars(m).items() if k.isupper() and isinstance(v, str)}
        replaced = {"gen_ai.system", "gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens"}
        used = turn(0, "anthropic", anthropic("sys", [user("hi")]), said("hello", Usage(5, 2, 1, 1)))
        spans = [*claude_spans(content=lambda text: text).values(),
                 *build_spans(build_trajectory([used]), RUN, timed(0))]
        keys = {k for s in spans for k in s.attributes if not k.startswith("flowproof.")}
        assert keys - known == set()
        assert keys & replaced == set()
        assert {"gen_ai.provider.name", "gen_ai.tool.call.id", "gen_ai.usage.input_tokens"} <= keys


CASSETTE = claude_code_cassette()


def replay_log(*positions: int) -> list[Event]:
    """The log of a replay of `claude_code_cassette` serving ``positions`` in order: call i
    arrived at 100 + i and its turn was logged half a second later (as `timed`)."""
    events: list[Event] = []
    for i in positions:
        events += [RequestStartedEvent(f"f{i}", 100.0 + i),
                   ReplayedTurnEvent(f"f{i}", i, CASSETTE.turns[i].request.body_sha256, 500.0)]
    return events


class TestFromTheRunRecord:
    """`run_spans` reads the run as `read_run` read it once: no second pass over the log."""

    def test_a_replay_is_timed_by_its_log_and_addressed_as_its_cassette(self) -> None:
        record = read_run(replay_log(0, 1, 2, 3, 4), CASSETTE)
        spans = by_key(run_spans(record, RUN, trajectory=record.trajectory()))
        assert spans == claude_spans()  # the same spans as the plain data gives
        assert secs(spans["chat/2"]) == (102.0, 102.5) and spans["chat/2"].parent == "agent/0"
        assert spans["chat/2"].attributes["server.address"] == "api.anthropic.com"

    def test_call_facts_are_a_turns_arrival_duration_address_and_status(self) -> None:
        recorded = RecordedTurn(
            3, "anthropic",
            RecordedRequest("POST", "http://127.0.0.1:8123/v1/messages", {}, "0" * 64, anthropic("s", [user("x")])),
            RecordedResponse(429, {}, body={"type": "error"}),
        )
        record = read_run([RequestStartedEvent("a", 1700000000.25), TurnEvent("a", "record", recorded, 12.5)], None)
        assert call_facts(record.turns[0]) == CallFacts(1700000000.25, 12.5, "127.0.0.1", 8123, 429)

    def test_a_divergence_is_a_span_at_its_arrival(self) -> None:
        events = [*replay_log(0), RequestStartedEvent("b", 101.0),
                  DivergenceEvent("b", {"kind": "unmatched"}, "openai-chat", "gpt-x", 3.0), RequestStartedEvent("c")]
        spans = by_key(run_spans(read_run(events, CASSETTE), RUN))
        diverged = spans["miss/0"]
        assert (diverged.name, secs(diverged)) == ("chat gpt-x", (101.0, 101.003))
        assert diverged.attributes["error.type"] == "replay_divergence"
        assert not any(k.startswith("miss/") for k in spans if k != "miss/0")  # `c` never ended: no span

    def test_without_the_judges_trajectory_the_turns_codecs_read_are_spanned(self) -> None:
        """A turn no codec reads keeps the judge from building a trajectory; the rest are spans."""
        broken = RecordedTurn(7, "anthropic", CASSETTE.turns[4].request, RecordedResponse(200, {}, body={"no": 1}))
        events = [*replay_log(0), RequestStartedEvent("x", 101.0), TurnEvent("x", "record", broken, 1.0),
                  McpCallEvent("crm", "lookup", "{}", True)]
        record = read_run(events, CASSETTE)
        assert not record.readable()
        spans = by_key(run_spans(record, RUN))
        assert sorted(k for k in spans if k.startswith("chat/")) == ["chat/0"]
        assert [s.attributes["flowproof.tool.result"] for k, s in spans.items() if k.startswith("tool/")] == [
            "none", "answered"]  # the Agent call (no request carried its result) and the MCP call

    def test_a_turn_the_log_names_twice_is_one_span(self) -> None:
        """Every recorded turn is served once; a log that says otherwise must not give two spans
        one key (the exporter parents by key)."""
        record = read_run([*replay_log(0, 1), *replay_log(1)], CASSETTE)
        assert len(record.turns) == 3
        keys = [s.key for s in run_spans(record, RUN)]
        assert len(keys) == len(set(keys)) and keys.count("chat/1") == 1


def test_the_spawn_prompt_fixture_is_what_the_sub_agent_got() -> None:
    """Guards the fixture the tests above lean on: the sub-agent's thread is found."""
    trajectory = build_trajectory(claude_code_run())
    assert [t.index for t in trajectory.agents.subagents[0].turns] == [2, 3]
    assert trajectory.agents.subagents[0].call == SPAWN
