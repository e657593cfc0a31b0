"""--otel's exporter: span records through the real OpenTelemetry SDK, to its in-memory exporter
and over OTLP/HTTP to a receiver on 127.0.0.1; the checks before a run; the lazy import."""

from __future__ import annotations

import subprocess
import sys

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from flowproof import __version__
from flowproof.errors import OtelError
from flowproof.genai_spans import SpanKind as RecordKind
from flowproof.genai_spans import SpanRecord
from flowproof.runner.otel import check_otel, export_runs, otlp_endpoint

from .otlp_receiver import OtlpReceiver

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def ns(seconds: float) -> int:
    return round(seconds * 1_000_000_000)


def run_records(flow: str = "book") -> list[SpanRecord]:
    return [
        SpanRecord("agent", None, f"invoke_agent {flow}", RecordKind.INTERNAL, ns(100.0), ns(104.0),
                   {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": flow}),
        SpanRecord("agent/0", "agent", "invoke_agent Explore", RecordKind.INTERNAL, ns(101.0), ns(103.0),
                   {"gen_ai.operation.name": "invoke_agent"}),
        SpanRecord("chat/0", "agent", "chat gpt-4o", RecordKind.CLIENT, ns(100.0), ns(100.5),
                   {"gen_ai.operation.name": "chat", "gen_ai.response.finish_reasons": ("tool_calls",),
                    "gen_ai.usage.input_tokens": 12, "gen_ai.request.stream": False}),
        SpanRecord("tool/0", "agent/0", "execute_tool grep", RecordKind.INTERNAL, ns(101.5), ns(102.25),
                   {"gen_ai.tool.name": "grep", "flowproof.tool.result": "mocked"}),
        SpanRecord("miss/0", "agent", "chat gpt-4o", RecordKind.CLIENT, ns(103.0), ns(103.0),
                   {"error.type": "replay_divergence"}, error="replay diverged"),
    ]


@pytest.fixture
def clean_otel_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_HEADERS",
                 "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
                 "OTEL_SDK_DISABLED", "OTEL_TRACES_SAMPLER", "TRACEPARENT", "TRACESTATE",
                 "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


class TestTheSdkSpans:
    def test_records_become_spans_with_their_times_kinds_parents_and_status(self, clean_otel_env) -> None:
        memory = InMemorySpanExporter()
        assert export_runs([run_records()], environ={}, exporter=memory) == 5
        spans = {s.name + (" miss" if s.status.status_code is StatusCode.ERROR else ""): s
                 for s in memory.get_finished_spans()}
        root, explore, chat, grep = (spans["invoke_agent book"], spans["invoke_agent Explore"],
                                     spans["chat gpt-4o"], spans["execute_tool grep"])
        assert root.parent is None and root.kind is SpanKind.INTERNAL
        assert explore.parent is not None and explore.parent.span_id == root.context.span_id
        assert grep.parent is not None and grep.parent.span_id == explore.context.span_id
        assert chat.kind is SpanKind.CLIENT and chat.parent is not None
        assert {s.context.trace_id for s in spans.values()} == {root.context.trace_id}
        assert (grep.start_time, grep.end_time) == (101_500_000_000, 102_250_000_000)
        assert dict(chat.attributes or {})["gen_ai.response.finish_reasons"] == ("tool_calls",)
        assert dict(chat.attributes or {})["gen_ai.usage.input_tokens"] == 12
        missed = spans["chat gpt-4o miss"]
        assert (missed.status.status_code, missed.status.description) == (StatusCode.ERROR, "replay diverged")
        assert root.status.status_code is StatusCode.UNSET

    def test_the_resource_and_the_scope_name_flowproof(self, clean_otel_env) -> None:
        memory = InMemorySpanExporter()
        export_runs([run_records()], environ={}, exporter=memory)
        span = memory.get_finished_spans()[0]
        assert span.resource.attributes["service.name"] == "flowproof"
        scope = span.instrumentation_scope
        assert scope is not None
        assert (scope.name, scope.version, scope.schema_url) == (
            "flowproof", __version__, "https://opentelemetry.io/schemas/1.41.0")

    def test_otel_service_name_wins(self, clean_otel_env) -> None:
        clean_otel_env.setenv("OTEL_SERVICE_NAME", "booking-ci")
        memory = InMemorySpanExporter()
        export_runs([run_records()], environ={}, exporter=memory)
        assert memory.get_finished_spans()[0].resource.attributes["service.name"] == "booking-ci"

    def test_each_run_is_a_trace_of_its_own(self, clean_otel_env) -> None:
        memory = InMemorySpanExporter()
        export_runs([run_records("a"), run_records("b")], environ={}, exporter=memory)
        roots = [s for s in memory.get_finished_spans() if s.parent is None]
        assert sorted(s.name for s in roots) == ["invoke_agent a", "invoke_agent b"]
        assert len({s.context.trace_id for s in roots}) == 2

    def test_a_traceparent_makes_every_root_its_child(self, clean_otel_env) -> None:
        memory = InMemorySpanExporter()
        export_runs([run_records("a"), run_records("b")], environ={"TRACEPARENT": TRACEPARENT}, exporter=memory)
        spans = memory.get_finished_spans()
        assert {format(s.context.trace_id, "032x") for s in spans} == {"0af7651916cd43dd8448eb211c80319c"}
        roots = [s for s in spans if s.name.startswith("invoke_agent ") and s.name[-1] in "ab"]
        assert {format(s.parent.span_id, "016x") for s in roots if s.parent} == {"b7ad6b7169203331"}

    def test_nothing_to_export_and_a_disabled_sdk_export_nothing(self, clean_otel_env) -> None:
        memory = InMemorySpanExporter()
        assert export_runs([(), ()], environ={}, exporter=memory) == 0
        assert export_runs([run_records()], environ={"OTEL_SDK_DISABLED": "true"}, exporter=memory) == 0
        assert memory.get_finished_spans() == ()


class TestOtlpHttp:
    def test_the_spans_reach_a_receiver_with_the_configured_headers(self, clean_otel_env) -> None:
        with OtlpReceiver() as receiver:
            clean_otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
            clean_otel_env.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-collector-key=k-123")
            assert export_runs([run_records()]) == 5
        assert [r["path"] for r in receiver.requests] == ["/v1/traces"]  # one batch
        assert receiver.requests[0]["x-collector-key"] == "k-123"
        got = {s.name: s for s in receiver.spans if s.status != "error"}
        assert got["execute_tool grep"].attributes == {"gen_ai.tool.name": "grep", "flowproof.tool.result": "mocked"}
        assert got["execute_tool grep"].parent_span_id == got["invoke_agent Explore"].span_id
        assert got["chat gpt-4o"].kind == "client"
        assert got["chat gpt-4o"].attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
        assert got["invoke_agent book"].resource["service.name"] == "flowproof"

    def test_a_refused_batch_is_an_error_naming_the_endpoint_and_no_header_value(self, clean_otel_env) -> None:
        with OtlpReceiver(status=400) as receiver:
            clean_otel_env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.endpoint + "/v1/traces")
            clean_otel_env.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer sk-collector-99")
            with pytest.raises(OtelError) as raised:
                export_runs([run_records()])
        message = str(raised.value)
        assert f"could not export 5 span(s) to {receiver.endpoint}/v1/traces" in message
        assert "400" in message and "OTEL_EXPORTER_OTLP_ENDPOINT" in message
        assert "sk-collector-99" not in message

    def test_the_endpoint_resolves_as_the_exporter_resolves_it(self) -> None:
        assert otlp_endpoint({}) == "http://localhost:4318/v1/traces"
        assert otlp_endpoint({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}) == "http://c:4318/v1/traces"
        assert otlp_endpoint({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
                              "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t/x"}) == "http://t/x"


class TestChecks:
    @pytest.mark.parametrize("name", ["OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"])
    def test_another_protocol_is_refused(self, name: str) -> None:
        with pytest.raises(OtelError, match=f"{name}=grpc: --otel exports over OTLP/HTTP with protobuf only"):
            check_otel({name: "grpc"})

    def test_the_traces_protocol_wins_and_http_protobuf_passes(self) -> None:
        check_otel({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
        check_otel({})

    def test_a_traceparent_that_is_none_is_refused(self) -> None:
        with pytest.raises(OtelError, match="TRACEPARENT='abc' is not a W3C trace context"):
            check_otel({"TRACEPARENT": "abc"})
        check_otel({"TRACEPARENT": TRACEPARENT})

    def test_without_the_sdk_it_says_what_to_install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
        with pytest.raises(OtelError, match=r"pip install 'flowproof-llm\[otel\]'"):
            check_otel({})


def test_a_run_without_otel_never_loads_opentelemetry() -> None:
    """The runner, the pytest plugin and the span builder import no OpenTelemetry module."""
    code = ("import sys, flowproof.runner.cli, flowproof.pytest_plugin, flowproof.genai_spans, "
            "flowproof.runner.otel; print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
