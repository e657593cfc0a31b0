"""A small OTLP/HTTP trace receiver on 127.0.0.1: the collector stand-in of the --otel tests.

It decodes what arrives with the OpenTelemetry protocol's own protobuf types
(``opentelemetry-proto``, the package the SDK's exporter encodes with), the way
a collector's ``otlp`` receiver does: ``POST /v1/traces`` with an
``ExportTraceServiceRequest`` body (gzip when the exporter compresses), answered
with an ``ExportTraceServiceResponse``. ``status`` makes it refuse every batch.
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
STATUS = {0: "unset", 1: "ok", 2: "error"}


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(value_of(v) for v in value.array_value.values)
    return getattr(value, kind) if kind else None


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status: str
    status_message: str
    resource: dict[str, Any]
    scope: tuple[str, str, str]


@dataclass
class OtlpReceiver:
    """``with OtlpReceiver() as r:`` serves on a free port until the block ends."""

    status: int = 200
    spans: list[ReceivedSpan] = field(default_factory=list)
    requests: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                receiver.requests.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
                if self.path != "/v1/traces" or receiver.status != 200:
                    self.send_response(404 if self.path != "/v1/traces" else receiver.status)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver.take(ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def take(self, request: ExportTraceServiceRequest) -> None:
        for resource_spans in request.resource_spans:
            resource = {a.key: value_of(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                scope = (scope_spans.scope.name, scope_spans.scope.version, scope_spans.schema_url)
                for span in scope_spans.spans:
                    self.spans.append(ReceivedSpan(
                        span.name, span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex(),
                        KINDS[span.kind], span.start_time_unix_nano, span.end_time_unix_nano,
                        {a.key: value_of(a.value) for a in span.attributes},
                        STATUS[span.status.code], span.status.message, resource, scope,
                    ))

    def __enter__(self) -> OtlpReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
