"""Tests for flowproof.testing.openai_responses: the openai SDK parses Responses answers."""

from __future__ import annotations

import json

from flowproof.testing import (
    FakeModelServer,
    Reply,
)

from .helpers import (
    openai_client,
    raw_post,
)


class TestOpenAIResponses:
    def test_non_streaming_function_call(self) -> None:
        """A tool-call reply parses as a function_call output item."""
        with FakeModelServer([Reply.tool_call("lookup", {"q": "x"})]) as server:
            response = openai_client(server).responses.create(model="gpt-4o", input="find x")
        item = response.output[0]
        assert item.type == "function_call"
        assert (item.name, item.call_id, item.id) == ("lookup", "call_fake_1", "fc_fake_1")
        assert json.loads(item.arguments) == {"q": "x"}
        assert (response.id, response.status) == ("resp_fake_1", "completed")

    def test_non_streaming_text(self) -> None:
        """A text reply parses as a message output whose output_text is the text."""
        with FakeModelServer([Reply.text("All done.")]) as server:
            response = openai_client(server).responses.create(model="gpt-4o", input="go")
        assert response.output_text == "All done."

    def test_streaming_text_events(self) -> None:
        """A streamed text reply emits the full event sequence with increasing sequence numbers."""
        with FakeModelServer([Reply.text("one two three")]) as server:
            events = list(openai_client(server).responses.create(model="gpt-4o", input="go", stream=True))
        types = [e.type for e in events]
        assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                             "response.content_part.added"]
        assert types.count("response.output_text.delta") == 3
        assert types[-1] == "response.completed"
        assert [e.sequence_number for e in events] == list(range(len(events)))
        assert events[-1].response.output_text == "one two three"  # type: ignore[union-attr]

    def test_streaming_function_call_arguments(self) -> None:
        """Function-call argument deltas join to the arguments the done event repeats."""
        with FakeModelServer([Reply.tool_call("lookup", {"query": "flights to Nairobi"})]) as server:
            events = list(openai_client(server).responses.create(model="gpt-4o", input="go", stream=True))
        deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
        done = next(e for e in events if e.type == "response.function_call_arguments.done")
        assert len(deltas) >= 2 and "".join(deltas) == done.arguments  # type: ignore[union-attr]
        assert json.loads(done.arguments) == {"query": "flights to Nairobi"}  # type: ignore[union-attr]

    def test_streaming_uses_event_lines(self) -> None:
        """Each Responses SSE block names its type in an event: line."""
        with FakeModelServer([Reply.text("x")]) as server:
            _, headers, raw = raw_post(server, "/v1/responses", {"model": "m", "input": "x", "stream": True})
        assert headers["content-type"].startswith("text/event-stream")
        assert raw.startswith(b"event: response.created\ndata: {")


class TestFinish:
    def test_finish_sets_status_and_incomplete_reason(self) -> None:
        """length and content_filter end a response incomplete with the matching reason."""
        script = [Reply.text("x", finish="length"), Reply.text("x", finish="content_filter"), Reply.text("x")]
        with FakeModelServer(script) as server:
            client = openai_client(server)
            responses = [client.responses.create(model="m", input="x") for _ in script]
        assert [(r.status, r.incomplete_details.reason if r.incomplete_details else None) for r in responses] == [
            ("incomplete", "max_output_tokens"), ("incomplete", "content_filter"), ("completed", None)]
