"""The cassette JSON Schema shipped in flowproof/schemas/ agrees with flowproof's reader and
writer (docs/cassette.md). tests/conftest.py also checks every cassette the suite leaves."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowproof.cassette import (
    Cassette,
    LooseFrame,
    RecordedConnection,
    RecordedRequest,
    RecordedResponse,
    RecordedTurn,
    TurnRef,
    dumps_cassette,
    load_cassette,
    loads_cassette,
)
from flowproof.errors import CassetteError
from flowproof.mcp import McpExchange
from flowproof.mcp.stdio import StdioMessage, StdioSession
from flowproof.wire import CODEC_NAMES
from flowproof.wire.base import Frame
from flowproof.wire.sse import SSEEvent, canonical_raw

from .cassette_schema import accepted_by_flowproof, cassette_problems, cassette_validator, schema_errors
from .runner.helpers import BOOKING_TURNS, cassette_text

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_CASSETTES = sorted((ROOT / "example_specs").glob("*.cassette.json"))


def booking() -> dict[str, Any]:
    return dict(json.loads(cassette_text(BOOKING_TURNS)))


def test_the_schema_is_valid_draft_2020_12() -> None:
    assert cassette_validator().schema["title"] == "flowproof cassette (formats 1 and 2)"


@pytest.mark.parametrize("path", EXAMPLE_CASSETTES, ids=[p.name for p in EXAMPLE_CASSETTES])
def test_every_example_cassette_matches(path: Path) -> None:
    assert EXAMPLE_CASSETTES, "example_specs has no cassette"
    assert schema_errors(json.loads(path.read_text(encoding="utf-8"))) == []


def test_the_providers_are_the_codecs() -> None:
    """A new wire codec must reach the schema too."""
    turn = cassette_validator().schema["$defs"]["turn"]
    assert tuple(turn["properties"]["provider"]["enum"]) == CODEC_NAMES


def rich_cassette() -> Cassette:
    """One of each shape the writer knows: an SSE stream with ids, retry and a raw block, a
    JSON body, a text body, an empty body, an abandoned turn with nothing and one with a
    partial stream, and MCP exchanges."""
    request = RecordedRequest("POST", "https://api.openai.com/v1/chat/completions",
                              {"content-type": "application/json"}, "0" * 64, {"model": "gpt-4o"})
    odd = SSEEvent(raw="event: x\r\ndata: {}\r\n\r\n", data="{}", event="x", id="7", retry=3000)
    plain = SSEEvent(raw=canonical_raw(None, "[DONE]"), data="[DONE]")
    sse = RecordedResponse(200, {"content-type": "text/event-stream"}, events=(odd, plain))
    return Cassette(
        turns=(
            RecordedTurn(0, "openai-chat", request, sse),
            RecordedTurn(1, "anthropic", request, RecordedResponse(200, {}, body={"content": []})),
            RecordedTurn(2, "gemini", request, RecordedResponse(502, {"content-type": "text/plain"}, text="bad")),
            RecordedTurn(3, "openai-responses", request, RecordedResponse(204, {})),
            RecordedTurn(4, "openai-chat", request, None, abandoned=True),
            RecordedTurn(5, "openai-chat", request, sse, abandoned=True),
        ),
        route="base_url",
        mcp=(
            McpExchange(0, "docs", "POST", "/mcp", {"jsonrpc": "2.0", "method": "initialize"}, "a" * 64, 200,
                        "application/json", session=True, body={"result": {}}),
            McpExchange(1, "docs", "POST", "/mcp", None, "b" * 64, 200, "text/event-stream", events=("{}",)),
            McpExchange(2, "docs", "DELETE", "/mcp", None, "c" * 64, 202, ""),
        ),
        mcp_stdio=(
            StdioSession(0, "files", (
                StdioMessage("client", message={"jsonrpc": "2.0", "id": 1, "method": "initialize"}),
                StdioMessage("server", line="starting up (not JSON)"),
                StdioMessage("server", message={"jsonrpc": "2.0", "id": 1, "result": {}}),
            )),
        ),
    )


def test_what_the_writer_writes_matches(tmp_path: Path) -> None:
    doc = json.loads(dumps_cassette(rich_cassette()))
    assert schema_errors(doc) == []
    assert {"abandoned", "mcp", "mcp_stdio"} <= set(json.dumps(doc).replace('"', " ").split())


def test_a_websocket_cassette_the_writer_writes_matches() -> None:
    """Format 2: turns spoken on a connection, their server frames, and the connection's transcript."""
    url = "wss://api.openai.com/v1/responses"
    turns = tuple(
        RecordedTurn(i, "openai-responses",
                     RecordedRequest("WEBSOCKET", url, {}, "f" * 64, {"type": "response.create", "input": []}),
                     RecordedResponse(101, {}, frames=(Frame(text='{"type":"response.completed"}'),
                                                       Frame(data=b"\x00\x01"))),
                     connection=0)
        for i in range(2))
    connection = RecordedConnection(0, "openai-responses", url, {"openai-beta": "responses_websockets=2026-02-06"},
                                    (TurnRef(0), LooseFrame(False, Frame(text="{}")), TurnRef(1)), "client", 1000)
    doc = json.loads(dumps_cassette(Cassette(turns, connections=(connection,))))
    assert doc["format"] == 2 and schema_errors(doc) == []
    loads_cassette(json.dumps(doc), Path("ws.cassette.json"))  # and flowproof reads it back
    broken = copy.deepcopy(doc)
    broken["connections"][0]["transcript"].append({"turn": 0, "server": {"text": "x"}})
    assert schema_errors(broken)


_text = st.text(max_size=12)
_json = st.recursive(st.none() | st.booleans() | st.integers() | _text,
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
                     max_leaves=8)
_events = st.lists(st.builds(lambda data, event, raw: SSEEvent(raw=raw or canonical_raw(event, data), data=data,
                                                               event=event),
                             _text, st.none() | _text, st.none() | _text), max_size=3)
_responses = st.one_of(
    st.builds(lambda s, h, e: RecordedResponse(s, h, events=tuple(e)), st.integers(100, 599),
              st.dictionaries(_text, _text, max_size=2), _events),
    st.builds(lambda s, b: RecordedResponse(s, {}, body=b), st.integers(100, 599), _json),
    st.builds(lambda s, t: RecordedResponse(s, {}, text=t), st.integers(100, 599), _text),
)
_turns = st.builds(
    lambda i, provider, body, response, abandoned: RecordedTurn(
        i, provider, RecordedRequest("POST", "https://h/v1", {}, "f" * 64, body),
        None if abandoned and response is None else (response or RecordedResponse(200, {})), abandoned),
    st.integers(0, 50), st.sampled_from(CODEC_NAMES), _json, st.none() | _responses, st.booleans(),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_turns, max_size=4), st.sampled_from(["proxy", "base_url"]))
def test_any_cassette_the_writer_writes_matches(turns: list[RecordedTurn], route: str) -> None:
    """Whatever the turns hold, the writer's output is valid, and it reads back."""
    text = dumps_cassette(Cassette(turns=tuple(turns), route=route))  # type: ignore[arg-type]
    assert schema_errors(json.loads(text)) == []
    loads_cassette(text, "c.json")


def _set(path: str, value: Any) -> Any:
    def mutate(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value
    return mutate


_DELETE = object()

#: Broken cassettes flowproof refuses: the schema refuses each too.
REFUSED = {
    "no turns": _set("turns", _DELETE),
    "newer format": _set("format", 3),
    "unknown route": _set("route", "sideways"),
    "turns not a list": _set("turns", {}),
    "turn without request": _set("turns.0.request", _DELETE),
    "request without body": _set("turns.0.request.body", _DELETE),
    "hash not text": _set("turns.0.request.body_sha256", 12),
    "header not text": _set("turns.0.request.headers", {"content-type": 1}),
    "status not an integer": _set("turns.0.response.status", "200"),
    "status a boolean": _set("turns.0.response.status", True),
    "events and body": _set("turns.0.response.events", [{"data": "{}"}]),
    "event without data": _set("turns.0.response", {"status": 200, "headers": {}, "events": [{"event": "x"}]}),
    "retry a boolean": _set("turns.0.response",
                            {"status": 200, "headers": {}, "events": [{"data": "", "retry": True}]}),
    "abandoned not a boolean": _set("turns.0.abandoned", "yes"),
    "complete turn without response": _set("turns.0.response", None),
    "unknown provider": _set("turns.0.provider", "openai-chat-v9"),
    "stdio line from the client": _set("mcp_stdio", [{"index": 0, "server": "s", "messages": [
        {"from": "client", "line": "hello"}]}]),
    "stdio message and line": _set("mcp_stdio", [{"index": 0, "server": "s", "messages": [
        {"from": "server", "line": "x", "message": {}}]}]),
    "stdio sender unknown": _set("mcp_stdio", [{"index": 0, "server": "s", "messages": [
        {"from": "agent", "message": {}}]}]),
}


@pytest.mark.parametrize("mutate", REFUSED.values(), ids=REFUSED.keys())
def test_what_flowproof_refuses_the_schema_refuses(mutate: Any) -> None:
    doc = booking()
    mutate(doc)
    assert not accepted_by_flowproof(json.dumps(doc), "c.json"), "the case is not broken for flowproof"
    assert schema_errors(doc) != []


def test_a_key_flowproof_never_writes_is_refused() -> None:
    """A typo (`reponse`) or a key of a newer flowproof is caught by an editor, even though
    the reader ignores it."""
    doc = booking()
    doc["turns"][0]["reponse"] = copy.deepcopy(doc["turns"][0]["response"])
    assert any("reponse" in e for e in schema_errors(doc))


def test_the_session_check_reports_a_cassette_the_schema_refuses(tmp_path: Path) -> None:
    """The check tests/conftest.py runs: a cassette flowproof reads but the schema refuses is
    named; a broken one flowproof refuses, and a JSON file that is no cassette, are skipped."""
    good, odd, broken, other = (tmp_path / n for n in ("good.json", "odd.json", "broken.json", "script.json"))
    good.write_text(cassette_text(BOOKING_TURNS))
    doc = booking()
    doc["note"] = "hand-edited"
    odd.write_text(json.dumps(doc))
    broken.write_text(json.dumps({"format": 1, "turns": [{"index": 0}]}))
    other.write_text(json.dumps({"events": []}))
    try:
        with pytest.raises(CassetteError):
            load_cassette(broken)
        checked, problems = cassette_problems(sorted(tmp_path.glob("*.json")))
        assert checked == 2
        assert len(problems) == 1 and problems[0].startswith(f"{odd}: $: Additional properties")
    finally:
        odd.unlink()  # or the session check would report it, rightly
