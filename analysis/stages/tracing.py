"""The tracer's internal requests: which of Envoy's own requests carry spans to a tracing collector.

A tracer logs nothing per span. Its visible work is the flush: when a batch is full (or on its timer) it
serialises the spans and sends them through Envoy's async HTTP client — an internal request (connection
id 0, ``cluster 'zipkin' match for URL '/api/v2/spans'``) with its own router, pool and codec lines, and
later the collector's answer on the upstream connection. Its worker time and the client requests it delayed
(charged to their ``tracing_us``) are measured like every internal work's, in
:mod:`envoy_dissector.analysis.stages.internal`.
"""
from __future__ import annotations

import polars as pl

#: Collector clusters, paths and hosts of the tracers Envoy ships (Zipkin, Jaeger, OpenTelemetry, Datadog…).
COLLECTOR = (r"(?i)zipkin|jaeger|opentelemetry|otel|datadog|skywalking|lightstep|"
             r"^/api/v[12]/spans|^/v1/traces|^/v0\.[345]/traces")


def is_flush() -> pl.Expr:
    """Internal requests that carry spans to a tracing collector."""
    target = pl.concat_str(pl.col("cluster").fill_null(""), pl.lit(" "), pl.col("path").fill_null(""))
    return pl.col("internal") & (pl.col("cluster").fill_null("").str.contains(COLLECTOR)
                                 | pl.col("path").fill_null("").str.contains(COLLECTOR)
                                 | target.str.contains(r"(?i)^\S*\s/api/v2/spans"))
