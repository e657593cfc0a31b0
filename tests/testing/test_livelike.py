"""Tests for flowproof.testing.livelike: answers that differ like a live model's, for every API."""

from __future__ import annotations

import json
from typing import Any

import pytest

from flowproof.testing import FakeModelServer, LiveLike, Reply
from flowproof.testing.livelike import normalized_text

from .helpers import MESSAGES, anthropic_client, gemini_client, openai_client

TEXT = "Booked  KQ311 to Nairobi.\nSee you soon!"
ARGS = {"flight": "KQ311", "seats": 2, "trip": {"from": "LHR", "to": "NBO"}}


def script() -> list[Reply]:
    return [Reply.tool_call("book", ARGS, text="Booking it."), Reply.text(TEXT)]


class TestLiveLike:
    def test_ids_are_deterministic_and_depend_on_seed_and_call(self) -> None:
        """The same seed and call give the same id; another seed or call another one."""
        one, two = LiveLike(seed=1), LiveLike(seed=2)
        assert one.mint("call_", 1, "call") == LiveLike(seed=1).mint("call_", 1, "call")
        assert len({one.mint("call_", 1, "call"), two.mint("call_", 1, "call"), one.mint("call_", 2, "call"),
                    one.mint("call_", 1, "call", 1)}) == 4
        assert one.mint("toolu_01", 3, "call").startswith("toolu_01")

    def test_keys_never_keep_the_scripted_order(self) -> None:
        """Every object's keys are reordered (nested ones too); the values are untouched."""
        reply = Reply.tool_call("book", ARGS)
        for seed in range(20):
            raw = LiveLike(seed=seed).apply(reply, 1).calls[0].arguments
            parsed = json.loads(raw)
            assert parsed == ARGS
            assert list(parsed) != list(ARGS) and list(parsed["trip"]) != list(ARGS["trip"])

    def test_prose_keeps_its_words(self) -> None:
        """Live prose differs from the script but is equal after trim, whitespace collapse and lowercase."""
        for seed in range(20):
            text = LiveLike(seed=seed).apply(Reply.text(TEXT), 1).content
            assert text != TEXT and normalized_text(text) == normalized_text(TEXT)

    def test_prose_without_letters_still_changes(self) -> None:
        """Text with no letters to recase gets other whitespace."""
        assert LiveLike(seed=0).reword_case_and_space("42", 1) != "42"
        assert LiveLike(seed=0).reword_case_and_space("", 1) == ""

    def test_parts_can_be_turned_off(self) -> None:
        """With prose and key_order off the reply is the scripted one."""
        reply = Reply.tool_call("book", ARGS, text="Hi there")
        assert LiveLike(seed=3, prose=False, key_order=False).apply(reply, 1) == reply

    def test_non_object_arguments_are_left_alone(self) -> None:
        """Arguments that are not a JSON object are sent as scripted."""
        reply = Reply.tool_call("f", "not json")
        assert LiveLike(seed=1).apply(reply, 1).calls[0].arguments == "not json"

    def test_server_refuses_a_bad_live_value(self) -> None:
        """live= is a LiveLike or an int seed."""
        with pytest.raises(ValueError, match="live must be"):
            FakeModelServer(live="yes")  # type: ignore[arg-type]


def chat_calls(server: FakeModelServer, stream: bool) -> tuple[list[tuple[str, str]], str]:
    client = openai_client(server)
    first = client.chat.completions.create(model="m", messages=MESSAGES, stream=stream)
    second = client.chat.completions.create(model="m", messages=MESSAGES, stream=stream)
    if stream:
        calls: dict[int, list[str]] = {}
        for chunk in first:
            for delta in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
                slot = calls.setdefault(delta.index, ["", ""])
                slot[0] = delta.id or slot[0]
                slot[1] += (delta.function.arguments or "") if delta.function else ""
        text = "".join(c.choices[0].delta.content or "" for c in second if c.choices)
        return [(i, a) for i, a in calls.values()], text
    message = first.choices[0].message  # type: ignore[union-attr]
    return ([(c.id, c.function.arguments) for c in message.tool_calls or []],  # type: ignore[union-attr]
            second.choices[0].message.content or "")  # type: ignore[union-attr]


def responses_calls(server: FakeModelServer, stream: bool) -> tuple[list[tuple[str, str]], str]:
    client = openai_client(server)
    if stream:
        first = [e for e in client.responses.create(model="m", input="x", stream=True)][-1].response  # type: ignore[union-attr]
        second = [e for e in client.responses.create(model="m", input="x", stream=True)][-1].response  # type: ignore[union-attr]
    else:
        first = client.responses.create(model="m", input="x")
        second = client.responses.create(model="m", input="x")
    calls = [(f"{i.id}/{i.call_id}", i.arguments) for i in first.output if i.type == "function_call"]
    return calls, second.output_text


def anthropic_calls(server: FakeModelServer, stream: bool) -> tuple[list[tuple[str, str]], str]:
    client = anthropic_client(server)
    messages: list[Any] = []
    for _ in range(2):
        if stream:
            with client.messages.stream(model="m", max_tokens=50, messages=MESSAGES) as s:
                messages.append(s.get_final_message())
        else:
            messages.append(client.messages.create(model="m", max_tokens=50, messages=MESSAGES))
    calls = [(b.id, json.dumps(b.input)) for b in messages[0].content if b.type == "tool_use"]
    return calls, messages[1].content[0].text


def gemini_calls(server: FakeModelServer, stream: bool) -> tuple[list[tuple[str, str]], str]:
    client = gemini_client(server)
    results = []
    for _ in range(2):
        if stream:
            chunks = list(client.models.generate_content_stream(model="g", contents="x"))
            results.append(chunks)
        else:
            results.append([client.models.generate_content(model="g", contents="x")])
    calls = [(fc.id or "", json.dumps(fc.args)) for c in results[0] for fc in c.function_calls or []]
    return calls, "".join(c.text or "" for c in results[1])


API_CALLS = {"openai-chat": chat_calls, "openai-responses": responses_calls, "anthropic": anthropic_calls,
             "gemini": gemini_calls}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("api", list(API_CALLS))
class TestEveryApi:
    def test_live_answers_differ_like_a_live_model(self, api: str, stream: bool) -> None:
        """Fresh ids per seed, reordered argument keys and recased prose, as each official SDK parses them."""
        seen = {}
        for seed in (None, 1, 2, 1):
            with FakeModelServer(script(), live=seed) as server:
                seen.setdefault(seed, []).append(API_CALLS[api](server, stream))
        plain_calls, plain_text = seen[None][0]
        (live_calls, live_text), again = seen[1]
        other_calls, _ = seen[2][0]
        assert again == (live_calls, live_text)  # deterministic from the seed
        assert len(live_calls) == 1
        live_id, plain_id, other_id = live_calls[0][0], plain_calls[0][0], other_calls[0][0]
        assert len({live_id, plain_id, other_id}) == 3  # fresh ids (Gemini's plain call has none)
        assert json.loads(live_calls[0][1]) == json.loads(plain_calls[0][1]) == ARGS
        assert list(json.loads(live_calls[0][1])) != list(ARGS)
        assert plain_text == TEXT and live_text != TEXT
        assert normalized_text(live_text) == normalized_text(TEXT)


class TestScriptedIds:
    def test_live_mode_replaces_scripted_call_ids(self) -> None:
        """A scripted call_id is replaced by a fresh one too: a live model never repeats an id."""
        with FakeModelServer([Reply.tool_call("f", {"a": 1}, call_id="call_scripted")], live=5) as server:
            result = openai_client(server).chat.completions.create(model="m", messages=MESSAGES)
        [call] = result.choices[0].message.tool_calls or []
        assert call.id.startswith("call_") and call.id != "call_scripted"
