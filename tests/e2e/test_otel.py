"""--otel end to end: flowproof-run -> real mitmdump -> agents on the official SDKs -> the fake
model, and the GenAI spans over OTLP/HTTP to a receiver on 127.0.0.1 (the collector stand-in,
tests/runner/otlp_receiver.py), at record and at replay.

- an openai-agents handoff: the agent tree (the billing agent's span under the triage run's),
  chat spans timed by the proxy, each tool span between the call that asked and the call that
  carried its result;
- the booking agent with ``--otel-content``: the spec's mocked result marked and carried, the
  agent's own result marked real, and no API key in any span.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..runner.otlp_receiver import OtlpReceiver, ReceivedSpan
from .conftest import DUMMY_KEYS, Flowproof, upstream_args
from .test_prove import Fake, booking_script, booking_spec, handoff_flow

ROOT = "invoke_agent triage hands a billing question to the billing agent"


def named(spans: list[ReceivedSpan], name: str) -> list[ReceivedSpan]:
    return sorted((s for s in spans if s.name == name), key=lambda s: s.start_ns)


def otel_env(receiver: OtlpReceiver) -> dict[str, str]:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}


class TestOtel:
    def test_a_handoff_is_a_tree_of_genai_spans_at_record_and_at_replay(
        self, tmp_path: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        spec, server = handoff_flow(tmp_path, fake_model)
        runs = []
        with OtlpReceiver() as receiver:
            recorded = flowproof.run(spec, *upstream_args(server), "--record", "--otel", keys=True,
                                     **otel_env(receiver))
            assert recorded.code == 0, recorded.output
            runs.append(list(receiver.spans))
            receiver.spans.clear()
            replayed = flowproof.run(spec, "--otel", **otel_env(receiver))
            assert replayed.code == 0, replayed.output
            runs.append(list(receiver.spans))
        for mode, spans in zip(("record", "replay"), runs, strict=True):
            (root,) = named(spans, ROOT)
            (billing,) = named(spans, "invoke_agent billing_agent")
            assert root.parent_span_id == "" and billing.parent_span_id == root.span_id
            assert root.attributes["flowproof.mode"] == mode and root.status == "unset"
            assert billing.attributes["flowproof.agent.family"] == "openai-agents"
            chats = named(spans, "chat gpt-4o-mini")
            assert [c.attributes["flowproof.turn"] for c in chats] == [0, 1, 2]
            assert [c.parent_span_id for c in chats] == [root.span_id, billing.span_id, billing.span_id]
            for chat in chats:
                assert chat.kind == "client" and chat.attributes["gen_ai.provider.name"] == "openai"
                assert chat.attributes["gen_ai.operation.name"] == "chat"
                assert chat.attributes["gen_ai.usage.input_tokens"] > 0
                assert root.start_ns <= chat.start_ns <= chat.end_ns <= root.end_ns
            # Timed by the proxy: the calls follow each other, and a live call takes time.
            assert chats[0].end_ns <= chats[1].start_ns and chats[1].end_ns <= chats[2].start_ns
            if mode == "record":
                assert all(c.end_ns > c.start_ns for c in chats)
            (handoff,) = named(spans, "execute_tool transfer_to_billing_agent")
            (lookup,) = named(spans, "execute_tool lookup_invoice")
            assert handoff.parent_span_id == root.span_id and lookup.parent_span_id == billing.span_id
            assert (lookup.start_ns, lookup.end_ns) == (chats[1].end_ns, chats[2].start_ns)
            assert lookup.attributes["flowproof.tool.result"] == "real"
            assert {s.trace_id for s in spans} == {root.trace_id}
            assert root.resource["service.name"] == "flowproof"
        assert runs[0][0].trace_id != runs[1][0].trace_id

    def test_content_on_request_carries_the_mock_and_never_a_key(
        self, tmp_path: Path, flowproof: Flowproof, fake_model: Fake
    ) -> None:
        spec = booking_spec(tmp_path)
        server = fake_model(booking_script())
        with OtlpReceiver() as receiver:
            ran = flowproof.run(spec, *upstream_args(server), "--record", "--otel", "--otel-content", keys=True,
                                **otel_env(receiver))
        assert ran.code == 0, ran.failure
        spans = receiver.spans
        (flights,) = named(spans, "execute_tool search_flights")
        (hotels,) = named(spans, "execute_tool search_hotels")
        assert flights.attributes["flowproof.tool.result"] == "mocked"
        assert json.loads(flights.attributes["gen_ai.tool.call.arguments"]) == {"to": "NBO"}
        assert "KQ311" in flights.attributes["gen_ai.tool.call.result"]  # the spec's result, as the model got it
        assert hotels.attributes["flowproof.tool.result"] == "real"
        assert "Tamarind" in hotels.attributes["gen_ai.tool.call.result"]  # the agent's own
        assert len(named(spans, "chat gpt-4o-mini")) == 5
        every_value = [str(v) for s in spans for v in (*s.attributes.values(), *s.resource.values())]
        assert not any(key in v for key in DUMMY_KEYS.values() for v in every_value)
