"""Official SDK clients against the fake model server: the codecs read the captured bytes as the SDKs do.

For each model API, the real client (openai for Chat Completions and Responses,
anthropic, google-genai) calls `FakeModelServer`, streaming and not, with text
and with parallel tool calls. The server keeps the exact request bytes the SDK
sent and the exact response payload it wrote (`FakeModelServer.exchanges`);
the tests check that `detect` picks the codec from the captured method and
path, that the codec's request view shows what the test asked for, and that
its response view agrees with the script AND with what the SDK itself parsed.
A second turn per API sends tool results back and checks that the request view
resolves each result's tool through its call id and that `rewrite_tool_results`
changes exactly the mocked result.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest
from google import genai
from google.genai import types as gtypes

from flowproof.testing import Exchange, FakeModelServer, Reply
from flowproof.turns import FinishReason, RequestView, ResponseView
from flowproof.wire import Codec, codec_by_name, detect, parse_sse
from flowproof.wire.gemini import model_from_path

SYSTEM = "You are a terse travel assistant."
PROMPT = "What is the weather and the time in Paris?"
TOOL_NAMES = ("get_weather", "get_time")
# Two calls, arguments with a nested object, a number and non-ASCII text, so argument
# reassembly from stream pieces is exercised beyond a single short string.
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("get_weather", {"city": "Paris", "units": {"temp": "celsius"}, "days": 2}),
    ("get_time", {"tz": "Europe/Paris", "label": "heure locale à Paris"}),
]
ANSWER = "It is 18°C and sunny in Paris, and the time is 14:05."
PREAMBLE = "Let me check both."
RESULTS = {"get_weather": "18°C and sunny", "get_time": "14:05"}
MOCK = {"temp_c": -40, "sky": "mocked"}

pytestmark = pytest.mark.timeout(60)


@dataclass(frozen=True)
class SdkResult:
    """What the SDK parsed: text, tool calls as (name, parsed arguments, call id), raw finish reason."""

    text: str
    calls: Sequence[tuple[str | None, Any, str | None]]
    finish: str | None


def only_model_exchange(server: FakeModelServer) -> Exchange:
    """The single model call the server saw, with its complete response."""
    exchanges = server.model_exchanges
    assert len(exchanges) == 1, [e.request.path for e in exchanges]
    exchange = exchanges[0]
    assert exchange.response is not None and exchange.response.complete
    assert exchange.response.status == 200
    return exchange


def detected(exchange: Exchange, name: str) -> Codec:
    """The codec `detect` picks from the captured method and path; it must be ``name``."""
    codec = detect(exchange.request.method, "127.0.0.1", exchange.request.path)
    assert codec is not None and codec.name == name
    assert codec is codec_by_name(name)
    return codec


def response_view(codec: Codec, exchange: Exchange) -> ResponseView:
    """The codec's view of the captured response payload (SSE events when it is a stream)."""
    request, response = exchange.request, exchange.response
    assert response is not None
    query = "&".join(f"{k}={v}" for k, v in request.query.items())
    if codec.is_stream_request(request.body, request.path, query):
        assert response.content_type.startswith("text/event-stream")
        assert len(response.chunks) > 2  # really streamed, event by event
        return codec.parse_events(parse_sse(response.body))
    assert response.content_type == "application/json"
    assert dict(response.headers)["content-length"] == str(len(response.body))
    return codec.parse_response(response.body)


def view_calls(view: ResponseView) -> list[tuple[str | None, Any, str | None]]:
    return [(c.name, c.arguments, c.call_id) for c in view.tool_calls]


def assert_agrees(view: ResponseView, sdk: SdkResult, text: str, with_calls: bool) -> None:
    """The view matches the script and what the SDK parsed from the same bytes."""
    assert view.text == text == sdk.text
    assert [(n, a) for n, a, _ in view_calls(view)] == (CALLS if with_calls else [])
    assert view_calls(view) == sdk.calls
    assert all(c.is_json for c in view.tool_calls)
    assert view.finish_reason is (FinishReason.TOOL_CALLS if with_calls else FinishReason.STOP)
    assert view.raw_finish_reason == sdk.finish


def assert_request(
    view: RequestView, name: str, model: str | None, roles: tuple[str, ...], tools: tuple[str, ...]
) -> None:
    assert view.provider == name
    assert view.model == model
    assert view.system == SYSTEM
    assert view.roles == roles
    assert view.tools == tools
    assert view.tool_results == ()


def json_diff(old: Any, new: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The paths where two JSON trees differ (a dict with other keys differs as a whole)."""
    if isinstance(old, dict) and isinstance(new, dict) and old.keys() == new.keys():
        for key in old:
            yield from json_diff(old[key], new[key], (*path, key))
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            yield from json_diff(a, b, (*path, i))
    elif old != new or type(old) is not type(new):
        yield path


def assert_rewrite(codec: Codec, body: bytes, path: tuple[Any, ...], weather: int) -> None:
    """Mocking get_weather changes exactly the JSON at ``path``, and result ``weather`` shows the mock."""
    assert codec.rewrite_tool_results(body, {"not_called": MOCK}) == body
    rewritten = codec.rewrite_tool_results(body, {"get_weather": MOCK})
    assert list(json_diff(json.loads(body), json.loads(rewritten))) == [path]
    before = codec.parse_request(body).tool_results
    after = codec.parse_request(rewritten).tool_results
    assert before[weather].name == after[weather].name == "get_weather"
    assert before[weather].call_id == after[weather].call_id
    assert json.loads(after[weather].content) == MOCK
    assert before[weather].content == RESULTS["get_weather"] or json.loads(
        before[weather].content
    ) == {"result": RESULTS["get_weather"]}
    assert [r for i, r in enumerate(after) if i != weather] == [
        r for i, r in enumerate(before) if i != weather
    ]


def script(with_calls: bool, ids: bool = False) -> Reply:
    """The scripted answer: parallel calls after a preamble, or a plain text answer."""
    if not with_calls:
        return Reply.text(ANSWER)
    calls = [(name, args, f"call-{name}") for name, args in CALLS] if ids else CALLS
    return Reply.tool_calls(calls, text=PREAMBLE)


def expected_text(with_calls: bool) -> str:
    return PREAMBLE if with_calls else ANSWER


SCENARIOS = pytest.mark.parametrize(
    ("stream", "with_calls"),
    [(False, False), (False, True), (True, False), (True, True)],
    ids=["plain-text", "plain-tools", "stream-text", "stream-tools"],
)


# --------------------------------------------------------------------------- OpenAI Chat Completions

CHAT_TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} tool",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    for name in TOOL_NAMES
]


def chat_client(server: FakeModelServer) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=server.url + "/v1", api_key="placeholder", max_retries=0, timeout=10
    )


def chat_call(client: openai.OpenAI, messages: list[Any], stream: bool) -> SdkResult:
    """One Chat Completions call; for a stream, the deltas accumulated as the SDK yields them."""
    if not stream:
        answer = client.chat.completions.create(
            model="gpt-4o", messages=messages, tools=CHAT_TOOLS, parallel_tool_calls=True
        ).choices[0]
        calls = [
            (c.function.name, json.loads(c.function.arguments), c.id)
            for c in answer.message.tool_calls or ()
            if c.type == "function"
        ]
        return SdkResult(answer.message.content or "", calls, answer.finish_reason)
    text, finish = "", None
    parts: dict[int, dict[str, str]] = {}
    for chunk in client.chat.completions.create(
        model="gpt-4o",
        messages=messages,
        tools=CHAT_TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    ):
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for delta in choice.delta.tool_calls or ():
                part = parts.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                part["id"] += delta.id or ""
                if delta.function is not None:
                    part["name"] += delta.function.name or ""
                    part["arguments"] += delta.function.arguments or ""
            finish = choice.finish_reason or finish
    calls = [(p["name"], json.loads(p["arguments"]), p["id"]) for _, p in sorted(parts.items())]
    return SdkResult(text, calls, finish)


class TestOpenAIChatSdk:
    @SCENARIOS
    def test_codec_reads_the_captured_exchange_as_the_sdk_does(
        self, stream: bool, with_calls: bool
    ) -> None:
        """The chat codec's views of the captured bytes match the request sent and the SDK's parse."""
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}]
        with FakeModelServer([script(with_calls)]) as server:
            sdk = chat_call(chat_client(server), messages, stream)
            exchange = only_model_exchange(server)
        codec = detected(exchange, "openai-chat")
        request = codec.parse_request(exchange.request.body)
        assert_request(request, "openai-chat", "gpt-4o", ("system", "user"), TOOL_NAMES)
        assert request.stream is stream
        assert_agrees(response_view(codec, exchange), sdk, expected_text(with_calls), with_calls)

    def test_tool_results_resolve_names_and_rewrite(self) -> None:
        """Tool messages sent back resolve to their tools by call id, and a mock replaces one."""
        messages: list[Any] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": PROMPT},
        ]
        with FakeModelServer([script(True), Reply.text(ANSWER)]) as server:
            client = chat_client(server)
            message = (
                client.chat.completions.create(model="gpt-4o", messages=messages, tools=CHAT_TOOLS)
                .choices[0]
                .message
            )
            calls = [c for c in message.tool_calls or () if c.type == "function"]
            messages.append(
                {
                    "role": "assistant",
                    "content": message.content,
                    "tool_calls": [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {
                                "name": c.function.name,
                                "arguments": c.function.arguments,
                            },
                        }
                        for c in calls
                    ],
                }
            )
            # The results go back in the reverse order: names must come from the ids, not positions.
            for call in reversed(calls):
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": call.id,
                        "content": RESULTS[call.function.name],
                    }
                )
            second = chat_call(client, messages, stream=False)
            exchange = server.model_exchanges[1]
        codec = detected(exchange, "openai-chat")
        view = codec.parse_request(exchange.request.body)
        assert view.roles == ("system", "user", "assistant", "tool", "tool")
        assert [(r.call_id, r.name, r.content) for r in view.tool_results] == [
            (c.id, c.function.name, RESULTS[c.function.name]) for c in reversed(calls)
        ]
        assert second.text == ANSWER
        # get_weather's result is the last message (index 4), the second of the two results.
        assert_rewrite(codec, exchange.request.body, ("messages", 4, "content"), weather=1)


# --------------------------------------------------------------------------- OpenAI Responses

RESPONSES_TOOLS: list[Any] = [
    {
        "type": "function",
        "name": name,
        "description": f"{name} tool",
        "parameters": {"type": "object", "properties": {}},
        "strict": False,
    }
    for name in TOOL_NAMES
]


def responses_result(response: Any) -> SdkResult:
    calls = [
        (o.name, json.loads(o.arguments), o.call_id)
        for o in response.output
        if o.type == "function_call"
    ]
    return SdkResult(response.output_text, calls, response.status)


class TestOpenAIResponsesSdk:
    @SCENARIOS
    def test_codec_reads_the_captured_exchange_as_the_sdk_does(
        self, stream: bool, with_calls: bool
    ) -> None:
        """The responses codec's views of the captured bytes match the request sent and the SDK's parse."""
        with FakeModelServer([script(with_calls)]) as server:
            client = chat_client(server)
            kwargs: dict[str, Any] = {
                "model": "gpt-4.1",
                "instructions": SYSTEM,
                "tools": RESPONSES_TOOLS,
                "input": [{"role": "user", "content": PROMPT}],
            }
            if stream:
                deltas, completed = "", None
                for event in client.responses.create(**kwargs, stream=True):
                    if event.type == "response.output_text.delta":
                        deltas += event.delta
                    elif event.type == "response.completed":
                        completed = event.response
                assert completed is not None
                sdk = responses_result(completed)
                assert deltas == sdk.text
            else:
                sdk = responses_result(client.responses.create(**kwargs))
            exchange = only_model_exchange(server)
        codec = detected(exchange, "openai-responses")
        request = codec.parse_request(exchange.request.body)
        assert_request(request, "openai-responses", "gpt-4.1", ("user",), TOOL_NAMES)
        assert request.stream is stream
        assert_agrees(response_view(codec, exchange), sdk, expected_text(with_calls), with_calls)

    def test_tool_results_resolve_names_and_rewrite(self) -> None:
        """function_call_output items resolve to their tools by call id, and a mock replaces one."""
        items: list[Any] = [{"role": "user", "content": PROMPT}]
        with FakeModelServer([script(True), Reply.text(ANSWER)]) as server:
            client = chat_client(server)
            first = client.responses.create(
                model="gpt-4.1", instructions=SYSTEM, input=items, tools=RESPONSES_TOOLS
            )
            calls = [o for o in first.output if o.type == "function_call"]
            items += [o.model_dump(exclude_none=True) for o in calls]
            items += [
                {"type": "function_call_output", "call_id": c.call_id, "output": RESULTS[c.name]}
                for c in reversed(calls)
            ]
            second = client.responses.create(
                model="gpt-4.1", instructions=SYSTEM, input=items, tools=RESPONSES_TOOLS
            )
            exchange = server.model_exchanges[1]
        codec = detected(exchange, "openai-responses")
        view = codec.parse_request(exchange.request.body)
        assert view.roles == ("user", "assistant", "assistant", "tool", "tool")
        assert [(r.call_id, r.name, r.content) for r in view.tool_results] == [
            (c.call_id, c.name, RESULTS[c.name]) for c in reversed(calls)
        ]
        assert second.output_text == ANSWER
        assert_rewrite(codec, exchange.request.body, ("input", 4, "output"), weather=1)


# --------------------------------------------------------------------------- Anthropic Messages

ANTHROPIC_TOOLS: list[Any] = [
    {
        "name": name,
        "description": f"{name} tool",
        "input_schema": {"type": "object", "properties": {}},
    }
    for name in TOOL_NAMES
]


def anthropic_client(server: FakeModelServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=server.url, api_key="placeholder", max_retries=0, timeout=10
    )


def anthropic_result(message: Any) -> SdkResult:
    text = "".join(b.text for b in message.content if b.type == "text")
    calls = [(b.name, b.input, b.id) for b in message.content if b.type == "tool_use"]
    return SdkResult(text, calls, message.stop_reason)


class TestAnthropicSdk:
    @SCENARIOS
    def test_codec_reads_the_captured_exchange_as_the_sdk_does(
        self, stream: bool, with_calls: bool
    ) -> None:
        """The anthropic codec's views of the captured bytes match the request sent and the SDK's parse."""
        kwargs: dict[str, Any] = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 256,
            "system": SYSTEM,
            "messages": [{"role": "user", "content": PROMPT}],
            "tools": ANTHROPIC_TOOLS,
        }
        with FakeModelServer([script(with_calls)]) as server:
            client = anthropic_client(server)
            if stream:
                with client.messages.stream(**kwargs) as events:
                    sdk = anthropic_result(events.get_final_message())
            else:
                sdk = anthropic_result(client.messages.create(**kwargs))
            exchange = only_model_exchange(server)
        codec = detected(exchange, "anthropic")
        request = codec.parse_request(exchange.request.body)
        assert_request(request, "anthropic", "claude-sonnet-4-5", ("user",), TOOL_NAMES)
        assert request.stream is stream
        assert_agrees(response_view(codec, exchange), sdk, expected_text(with_calls), with_calls)

    def test_tool_results_resolve_names_and_rewrite(self) -> None:
        """tool_result blocks resolve to their tools through tool_use_id, and a mock replaces one."""
        messages: list[Any] = [{"role": "user", "content": PROMPT}]
        with FakeModelServer([script(True), Reply.text(ANSWER)]) as server:
            client = anthropic_client(server)
            first = client.messages.create(
                model="claude-sonnet-4-5",
                max_tokens=256,
                system=SYSTEM,
                messages=messages,
                tools=ANTHROPIC_TOOLS,
            )
            calls = [b for b in first.content if b.type == "tool_use"]
            messages.append(
                {
                    "role": "assistant",
                    "content": [b.model_dump(exclude_none=True) for b in first.content],
                }
            )
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": c.id, "content": RESULTS[c.name]}
                        for c in reversed(calls)
                    ],
                }
            )
            second = client.messages.create(
                model="claude-sonnet-4-5",
                max_tokens=256,
                system=SYSTEM,
                messages=messages,
                tools=ANTHROPIC_TOOLS,
            )
            exchange = server.model_exchanges[1]
        codec = detected(exchange, "anthropic")
        view = codec.parse_request(exchange.request.body)
        assert view.roles == ("user", "assistant", "user")
        assert [(r.call_id, r.name, r.content) for r in view.tool_results] == [
            (c.id, c.name, RESULTS[c.name]) for c in reversed(calls)
        ]
        assert anthropic_result(second).text == ANSWER
        assert_rewrite(
            codec, exchange.request.body, ("messages", 2, "content", 1, "content"), weather=1
        )


# --------------------------------------------------------------------------- Gemini

GEMINI_MODEL = "gemini-2.0-flash"


def gemini_client(server: FakeModelServer) -> genai.Client:
    options = gtypes.HttpOptions(
        base_url=server.url, retry_options=gtypes.HttpRetryOptions(attempts=1)
    )
    return genai.Client(api_key="placeholder", http_options=options)


def gemini_config() -> gtypes.GenerateContentConfig:
    declarations = [
        gtypes.FunctionDeclaration(
            name=name, description=f"{name} tool", parameters=gtypes.Schema(type=gtypes.Type.OBJECT)
        )
        for name in TOOL_NAMES
    ]
    return gtypes.GenerateContentConfig(
        system_instruction=SYSTEM, tools=[gtypes.Tool(function_declarations=declarations)]
    )


def gemini_result(chunks: list[gtypes.GenerateContentResponse]) -> SdkResult:
    """Text and function calls gathered over the chunks as the SDK parsed them; the last finish reason."""
    text, calls, finish = "", [], None
    for chunk in chunks:
        assert chunk.candidates
        candidate = chunk.candidates[0]
        parts = candidate.content.parts if candidate.content and candidate.content.parts else []
        text += "".join(p.text for p in parts if p.text is not None)
        calls += [(c.name, c.args, c.id) for c in chunk.function_calls or ()]
        finish = candidate.finish_reason.value if candidate.finish_reason is not None else finish
    return SdkResult(text, calls, finish)


class TestGeminiSdk:
    @SCENARIOS
    def test_codec_reads_the_captured_exchange_as_the_sdk_does(
        self, stream: bool, with_calls: bool
    ) -> None:
        """The gemini codec's views of the captured bytes match the request sent and the SDK's parse."""
        with FakeModelServer([script(with_calls)]) as server:
            client = gemini_client(server)
            if stream:
                chunks = list(
                    client.models.generate_content_stream(
                        model=GEMINI_MODEL, contents=PROMPT, config=gemini_config()
                    )
                )
            else:
                chunks = [
                    client.models.generate_content(
                        model=GEMINI_MODEL, contents=PROMPT, config=gemini_config()
                    )
                ]
            sdk = gemini_result(chunks)
            exchange = only_model_exchange(server)
        codec = detected(exchange, "gemini")
        request = codec.parse_request(exchange.request.body)
        assert_request(request, "gemini", None, ("user",), TOOL_NAMES)
        assert model_from_path(exchange.request.path) == GEMINI_MODEL
        assert codec.is_stream_request(exchange.request.body, exchange.request.path, "") is stream
        assert_agrees(response_view(codec, exchange), sdk, expected_text(with_calls), with_calls)

    def test_tool_results_resolve_names_and_rewrite(self) -> None:
        """functionResponse parts carry their tool and call id through, and a mock replaces one."""
        with FakeModelServer([script(True, ids=True), Reply.text(ANSWER)]) as server:
            client = gemini_client(server)
            user = gtypes.Content(role="user", parts=[gtypes.Part(text=PROMPT)])
            first = client.models.generate_content(
                model=GEMINI_MODEL, contents=[user], config=gemini_config()
            )
            calls = first.function_calls or []
            assert first.candidates and first.candidates[0].content
            answers = gtypes.Content(
                role="user",
                parts=[
                    gtypes.Part(
                        function_response=gtypes.FunctionResponse(
                            id=c.id, name=c.name, response={"result": RESULTS[c.name or ""]}
                        )
                    )
                    for c in reversed(calls)
                ],
            )
            second = client.models.generate_content(
                model=GEMINI_MODEL,
                contents=[user, first.candidates[0].content, answers],
                config=gemini_config(),
            )
            exchange = server.model_exchanges[1]
        codec = detected(exchange, "gemini")
        view = codec.parse_request(exchange.request.body)
        assert view.roles == ("user", "model", "user")
        assert [c.id for c in calls] == ["call-get_weather", "call-get_time"]
        assert [(r.call_id, r.name, json.loads(r.content)) for r in view.tool_results] == [
            (c.id, c.name, {"result": RESULTS[c.name or ""]}) for c in reversed(calls)
        ]
        assert gemini_result([second]).text == ANSWER
        assert_rewrite(
            codec,
            exchange.request.body,
            ("contents", 2, "parts", 1, "functionResponse", "response"),
            weather=1,
        )
