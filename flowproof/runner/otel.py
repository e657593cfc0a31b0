"""``--otel``: the run's GenAI span records (`flowproof.genai_spans`) sent over OTLP/HTTP.

The edge of the span path. `flow_spans` builds a judged flow's records, the same
way for every way in (flowproof-run, a pytest flow item, a ``flowproof_proxy``
session): from the `FlowResult` the one judge made, its run record and its
trajectory. `export_runs` turns them into OpenTelemetry SDK spans (their own
start and end times, parents by key, each flow one trace) and exports them in
one batch, so a failed export is known and reported instead of logged and lost. Everything
about where they go is the standard OpenTelemetry environment, read by the SDK
itself: ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``_TRACES_ENDPOINT``, ``_HEADERS``,
``_TIMEOUT``, ``_COMPRESSION``, ``_CERTIFICATE``, ``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER``; ``OTEL_SDK_DISABLED=true``
turns the export off. ``TRACEPARENT`` (the W3C trace context in an environment
variable, as a caller such as promptfoo hands it on) makes every flow's root a
child of that span.

The SDK is imported here, inside the functions: it is the ``otel`` extra, and a
run without ``--otel`` never loads it (``tests/runner/test_otel.py`` checks).
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from flowproof import __version__
from flowproof.errors import OtelError
from flowproof.genai_spans import SEMCONV_VERSION, RunFacts, SpanKind, SpanRecord, run_spans
from flowproof.redact import masked_url, redact_text, secret_values
from flowproof.verdict import FlowResult

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = ["check_otel", "export_runs", "flow_spans", "otlp_endpoint"]

#: What to install for --otel (the extra carries the SDK and the OTLP/HTTP exporter).
INSTALL = "pip install 'flowproof-llm[otel]'"
#: The one OTLP protocol this exporter speaks.
HTTP_PROTOBUF = "http/protobuf"
_SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
_W3C_TRACEPARENT = r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"


def otlp_endpoint(environ: Mapping[str, str]) -> str:
    """The URL spans are posted to, resolved as the OTLP exporter specification (and the SDK)
    resolve it: the traces variable as given, else the base endpoint plus ``v1/traces``."""
    traces = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if traces:
        return traces
    base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip() or "http://localhost:4318"
    return base.rstrip("/") + "/v1/traces"


def disabled(environ: Mapping[str, str]) -> bool:
    """``OTEL_SDK_DISABLED=true``: the standard switch that turns every export off."""
    return environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def check_otel(environ: Mapping[str, str]) -> None:
    """Before any flow runs: the SDK is installed, the protocol is one this exporter speaks and a
    ``TRACEPARENT`` reads as one. Raises `OtelError` saying what to change."""
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        raise OtelError(f"--otel needs the OpenTelemetry SDK and its OTLP/HTTP exporter — {INSTALL}") from None
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = environ.get(name, "").strip()
        if protocol:
            if protocol != HTTP_PROTOBUF:
                raise OtelError(
                    f"{name}={protocol}: --otel exports over OTLP/HTTP with protobuf only — set it to "
                    f"{HTTP_PROTOBUF} (or unset it) and point OTEL_EXPORTER_OTLP_ENDPOINT at the "
                    "collector's HTTP port (4318 by default)"
                )
            break
    parent = environ.get("TRACEPARENT", "").strip()
    if parent and not re.match(_W3C_TRACEPARENT, parent.lower()):
        raise OtelError(
            f"TRACEPARENT={parent!r} is not a W3C trace context (version-traceid-spanid-flags, e.g. "
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01) — fix it or unset it"
        )


def flow_spans(
    result: FlowResult,
    *,
    started_at: float,
    ended_at: float,
    environ: Mapping[str, str],
    mocked: Collection[str] = (),
    content: bool = False,
) -> tuple[SpanRecord, ...]:
    """The GenAI span records of a judged flow whose agent ran from ``started_at`` to
    ``ended_at`` (seconds since the epoch): the record the judge read (`FlowResult.run`), the
    trajectory it built (`FlowResult.trajectory`), its exit code. ``mocked`` are the tools the
    spec's ``tools:`` answers; with ``content`` the spans carry the tool calls' arguments and
    results and the root the first line of why the flow failed, each masked with the
    credentials of ``environ``, as log lines are."""
    masking = secret_values(environ)
    mask = (lambda text: redact_text(text, masking)) if content else None
    # The verdict's words quote prompts and arguments: content, so opt-in like the rest.
    why = _failure_line(result) if mask is not None else None
    run = RunFacts(result.name, result.mode, uuid.uuid4().hex, started_at, ended_at, result.exit_code,
                   mask(why) if mask is not None and why else None)
    return run_spans(result.run, run, trajectory=result.trajectory, mocked=mocked, content=mask)


def _failure_line(result: FlowResult) -> str | None:
    """The first line of why a flow failed, for its root span's status (None: it passed)."""
    if result.passed:
        return None
    failed = [s.message for s in result.steps if not s.passed]
    text = (result.error or next(iter(result.divergence_texts()), None) or next(iter(failed), None)
            or result.missing_text())
    return text.strip().splitlines()[0] if text and text.strip() else None


def export_runs(
    runs: Sequence[Sequence[SpanRecord]],
    *,
    environ: Mapping[str, str] | None = None,
    exporter: SpanExporter | None = None,
) -> int:
    """Export each run's span records (each run one trace) in one batch; the number of spans
    sent. ``exporter`` defaults to the OTLP/HTTP exporter configured by the environment (which
    the SDK reads from ``os.environ``). Raises `OtelError` when the export failed."""
    environ = os.environ if environ is None else environ
    if disabled(environ) or not any(runs):
        return 0
    spans = _sdk_spans(runs, environ)
    own = exporter is None
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    from opentelemetry.sdk.trace.export import SpanExportResult

    try:
        with _exporter_warnings() as warned:
            result = exporter.export(spans)
    finally:
        if own:
            exporter.shutdown()
    if result is not SpanExportResult.SUCCESS:
        why = f" ({redact_text(warned[-1], _secrets(environ))})" if warned else ""
        raise OtelError(
            f"could not export {len(spans)} span(s) to {masked_url(otlp_endpoint(environ))}{why} — is an "
            "OTLP/HTTP collector listening there? Set OTEL_EXPORTER_OTLP_ENDPOINT (and "
            "OTEL_EXPORTER_OTLP_HEADERS if it needs a key)"
        )
    return len(spans)


def _sdk_spans(runs: Sequence[Sequence[SpanRecord]], environ: Mapping[str, str]) -> list[Any]:
    """The records as finished SDK spans, with their own times and parents."""
    from opentelemetry import trace
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
    from opentelemetry.trace import Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    finished: list[ReadableSpan] = []

    class Collect(SpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            finished.append(span)

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        # No OTEL_SERVICE_NAME: the spans are flowproof's account of the agent's calls.
        resource = resource.merge(Resource({SERVICE_NAME: "flowproof"}))
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_span_processor(Collect())
    tracer = provider.get_tracer("flowproof", __version__, schema_url=_SCHEMA_URL)
    carrier = {"traceparent": environ.get("TRACEPARENT", "").strip().lower()}
    if environ.get("TRACESTATE"):
        carrier["tracestate"] = environ["TRACESTATE"]
    outer = TraceContextTextMapPropagator().extract(carrier) if carrier["traceparent"] else None
    kinds = {SpanKind.INTERNAL: trace.SpanKind.INTERNAL, SpanKind.CLIENT: trace.SpanKind.CLIENT}
    for records in runs:
        started: dict[str, trace.Span] = {}
        for record in records:
            context = trace.set_span_in_context(started[record.parent]) if record.parent else outer
            span = tracer.start_span(record.name, context=context, kind=kinds[record.kind],
                                     attributes=dict(record.attributes), start_time=record.start)
            if record.error is not None:
                span.set_status(Status(StatusCode.ERROR, record.error))
            started[record.key] = span
        for record in reversed(records):
            started[record.key].end(end_time=record.end)
    provider.shutdown()
    return finished


def _secrets(environ: Mapping[str, str]) -> set[str]:
    """Values a message must not show: the environment's credentials and the OTLP headers'
    values (``api-key=…`` for a hosted collector)."""
    found = set(secret_values(environ))
    for name in ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"):
        for pair in environ.get(name, "").split(","):
            value = pair.partition("=")[2].strip()
            if value:
                found.add(value)
    return found


@contextmanager
def _exporter_warnings() -> Iterator[list[str]]:
    """The messages the OTLP exporter logs while it exports (why a batch failed: it returns
    only FAILURE), kept for the error and kept off the terminal meanwhile."""
    messages: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger = logging.getLogger("opentelemetry.exporter")
    handler, propagate = Keep(logging.WARNING), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
