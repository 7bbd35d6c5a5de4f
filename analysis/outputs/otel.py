"""OpenTelemetry export: ``-o requests.otlp.json`` (OTLP/JSON, as the collector's file exporter writes it) and
``--otlp-endpoint URL`` (OTLP/HTTP protobuf to a collector, Jaeger or Tempo). docs/otel.md has the span model.

The spans (``otel_spans``) become the OpenTelemetry SDK's ``ReadableSpan``s and are encoded by the OTLP exporter
packages (``opentelemetry-exporter-otlp-proto-common``'s ``encode_spans``, ``-proto-http``'s ``OTLPSpanExporter``):
no hand-written encoding. The JSON file is the protobuf message in proto3 JSON with OTLP's one exception, ids in
hex (the OTLP/JSON rule); one ``ExportTraceServiceRequest`` per line, a batch of requests each. The same capture
gives the same bytes (ids are derived from the log, ``otel_ids``).

>>> from envoy_dissector.analysis.capture import dissect
>>> cap = dissect("fixtures/istio-thread/lua-cpu/envoy.log.gz")
>>> line = next(otlp_json_lines(cap, trace_contexts_of(cap)))
>>> sorted(json.loads(line)["resourceSpans"][0])
['resource', 'scopeSpans']
"""
from __future__ import annotations

import base64
import importlib.metadata
import json
import logging
from collections.abc import Iterator, Sequence
from functools import cache
from typing import Any
from urllib.parse import urlsplit

import polars as pl
from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, TraceFlags
from opentelemetry.trace import SpanKind as OtelKind
from opentelemetry.trace.status import Status, StatusCode

from envoy_dissector.analysis.capture import Capture
from envoy_dissector.analysis.outputs.otel_spans import BATCH_REQUESTS, Span, SpanKind, capture_spans
from envoy_dissector.analysis.outputs.output_file import output_path
from envoy_dissector.analysis.outputs.trace_context import trace_contexts
from envoy_dissector.parser.errors import OutputError, UsageError
from envoy_dissector.parser.redact import RedactOption

OTLP_SUFFIX = ".otlp.json"
#: OTLP/HTTP's traces path, added to an endpoint given without a path (``http://127.0.0.1:4318``).
TRACES_PATH = "/v1/traces"
#: Seconds the exporter waits for the collector per batch (it retries within this time).
SEND_TIMEOUT_S = 10.0
_KINDS = {SpanKind.SERVER: OtelKind.SERVER, SpanKind.CLIENT: OtelKind.CLIENT, SpanKind.INTERNAL: OtelKind.INTERNAL}
_ID_KEYS = ("traceId", "spanId", "parentSpanId")
_EXPORTER_LOGGER = "opentelemetry.exporter.otlp.proto.http"


@cache
def _scope() -> InstrumentationScope:
    try:
        version = importlib.metadata.version("envoy-dissector")
    except importlib.metadata.PackageNotFoundError:
        version = "0"
    return InstrumentationScope("envoy-dissector", version)


def trace_contexts_of(capture: Capture) -> pl.DataFrame:
    """The trace contexts the requests of ``capture`` arrived with, from its events (read again from its input
    unless held: ``cli/otel_output.py`` reads only its files' header dumps then, ``trace_context.gathered``)."""
    return trace_contexts(capture.events)


def _context(trace_id: str, span_id: str, *, remote: bool = False) -> SpanContext:
    return SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=remote, trace_flags=TraceFlags(1))


def readable_spans(spans: Sequence[Span]) -> list[ReadableSpan]:
    """The SDK's span objects for ``spans`` (times in ns; one resource per origin, ``service.name`` = the origin)."""
    resources: dict[str, Resource] = {}
    out = []
    for s in spans:
        resource = resources.get(s.origin)
        if resource is None:
            resource = resources[s.origin] = Resource({"service.name": s.origin})
        parent = (None if s.parent_span_id is None
                  else _context(s.trace_id, s.parent_span_id, remote=s.remote_parent))
        status = Status(StatusCode.ERROR, s.error) if s.error is not None else Status(StatusCode.UNSET)
        out.append(ReadableSpan(name=s.name, context=_context(s.trace_id, s.span_id), parent=parent, resource=resource,
                                attributes=dict(s.attributes), kind=_KINDS[s.kind], status=status,
                                start_time=s.start_us * 1000, end_time=s.end_us * 1000,
                                instrumentation_scope=_scope()))
    return out


def _hex_ids(value: Any) -> Any:
    """OTLP/JSON writes trace and span ids in hex where proto3 JSON writes bytes in base64."""
    if isinstance(value, dict):
        return {k: (base64.b64decode(v).hex() if k in _ID_KEYS and isinstance(v, str) else _hex_ids(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_hex_ids(v) for v in value]
    return value


def otlp_json(spans: Sequence[Span]) -> str:
    """One ``ExportTraceServiceRequest`` in OTLP/JSON (one line)."""
    message = MessageToDict(encode_spans(readable_spans(spans)), use_integers_for_enums=True)
    return json.dumps(_hex_ids(message), separators=(",", ":"), ensure_ascii=False)


def otlp_json_lines(capture: Capture, contexts: pl.DataFrame, *, redact: RedactOption = True,
                    batch_requests: int = BATCH_REQUESTS) -> Iterator[str]:
    """The capture's spans as OTLP/JSON lines, a batch of requests each."""
    for batch in capture_spans(capture, contexts, redact=redact, batch_requests=batch_requests):
        yield otlp_json(batch)


def write_otlp_json(capture: Capture, path: str, contexts: pl.DataFrame, *, redact: RedactOption = True) -> int:
    """Write ``path`` (all or nothing, ``output_file``); returns the number of spans written."""
    written = 0
    with output_path(path) as out, open(out, "w", encoding="utf-8") as fh:
        for batch in capture_spans(capture, contexts, redact=redact):
            fh.write(otlp_json(batch) + "\n")
            written += len(batch)
    return written


def traces_endpoint(url: str) -> str:
    """The OTLP/HTTP traces URL for ``url``: ``/v1/traces`` added when ``url`` has no path.

    >>> traces_endpoint("http://127.0.0.1:4318")
    'http://127.0.0.1:4318/v1/traces'
    >>> traces_endpoint("https://tempo.example:443/otlp/v1/traces")
    'https://tempo.example:443/otlp/v1/traces'
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"--otlp-endpoint {url}: expected an http:// or https:// URL (OTLP/HTTP, e.g. "
                         "http://127.0.0.1:4318)")
    return url.rstrip("/") + TRACES_PATH if parts.path in ("", "/") else url


class _LastMessage(logging.Handler):
    """Keeps the exporter's last complaint (it logs why a batch failed) for the one-line error."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.text: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        self.text = record.getMessage().splitlines()[0][:300]


def send_otlp(capture: Capture, url: str, contexts: pl.DataFrame, *, redact: RedactOption = True,
              timeout_s: float = SEND_TIMEOUT_S) -> int:
    """Send the capture's spans to an OTLP/HTTP endpoint, a batch of requests per POST; returns spans sent.

    Raises:
        OutputError: the endpoint refused a batch or could not be reached (what the exporter said, one line).
    """
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    endpoint = traces_endpoint(url)
    exporter = OTLPSpanExporter(endpoint=endpoint, timeout=timeout_s)
    logger = logging.getLogger(_EXPORTER_LOGGER)
    handler = _LastMessage()
    logger.addHandler(handler)
    propagate, logger.propagate = logger.propagate, False  # its complaint becomes our one line, not a traceback
    sent = 0
    try:
        for batch in capture_spans(capture, contexts, redact=redact):
            if exporter.export(readable_spans(batch)) is not SpanExportResult.SUCCESS:
                raise OutputError(f"--otlp-endpoint {endpoint}: not accepted after {sent:,} spans: "
                                  f"{handler.text or 'no answer'}")
            sent += len(batch)
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
        exporter.shutdown()
    return sent
