"""The trace context a request arrived with: W3C ``traceparent``, B3 (``x-b3-traceid``/``x-b3-spanid``, or the
single ``b3`` header), read from its header dumps.

The downstream dump (``request headers complete``) is what the sender wrote; the router's dump (what this Envoy
sends upstream, where its own tracer may have replaced the span id) is used only when the first is not in the
log. A value that is not a valid context (wrong length, not hex, all zeros) is ignored, as a tracer would.

>>> import polars as pl
>>> context = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
>>> dump = f"request headers complete (end_stream=true):\\n':path', '/'\\n'traceparent', '{context}'"
>>> events = pl.DataFrame({"origin": ["a"], "conn_id": [1], "stream_id": [7], "kind": ["request_headers_complete"],
...                        "message": [dump]}, schema_overrides={"stream_id": pl.UInt64})
>>> trace_contexts(events).row(0)
('a', 1, 7, 'abababababababababababababababab', 'cdcdcdcdcdcdcdcd')
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import polars as pl

from envoy_dissector.parser.kinds import EventKind
from envoy_dissector.parser.pipeline import ShapeStore, iter_parse
from envoy_dissector.parser.redact import RedactOption

#: One row per stream that carried a valid trace context (hex, lower case).
CONTEXT_SCHEMA: dict[str, pl.DataType] = {
    "origin": pl.String(), "conn_id": pl.Int64(), "stream_id": pl.UInt64(), "trace_id": pl.String(),
    "parent_span_id": pl.String(),
}
#: The event columns read here (a second parse of a capture's files, when its events are not held, computes only these).
COLUMNS: tuple[str, ...] = ("origin", "conn_id", "stream_id", "kind", "message")
#: Dumps read, the sender's first.
_DUMPS: tuple[EventKind, ...] = (EventKind.REQUEST_HEADERS_COMPLETE, EventKind.ROUTER_DECODING_HEADERS)
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16
#: Columns the parser's own checks read from every chunk (its time sanity per thread).
_PARSER_CHECKS = ("line_no", "ts_us", "thread")


def _header(name: str) -> pl.Expr:
    return pl.col("message").str.extract(rf"(?mi)^'{name}', '([^\n']*)'$", 1).str.strip_chars().str.to_lowercase()


def _valid(trace_id: pl.Expr, span_id: pl.Expr) -> pl.Expr:
    return (trace_id.is_not_null() & span_id.is_not_null() & (trace_id != _ZERO_TRACE) & (span_id != _ZERO_SPAN))


def _b3_trace_id(value: pl.Expr) -> pl.Expr:
    """B3 trace ids have 16 or 32 hex digits; a 64-bit one is the low half of a 128-bit id."""
    return value.str.extract(r"^([0-9a-f]{32}|[0-9a-f]{16})$", 1).str.pad_start(32, "0")


def trace_contexts(events: pl.DataFrame) -> pl.DataFrame:
    """Per stream (origin, conn_id, stream_id), the trace id and parent span id it arrived with
    (``CONTEXT_SCHEMA``): ``traceparent`` first, then B3's headers, then the single ``b3`` header."""
    dumps = events.select_seq(COLUMNS).filter(
        pl.col("kind").is_in([k.value for k in _DUMPS]) & pl.col("stream_id").is_not_null()
        & pl.col("message").str.contains("(?i)'(?:traceparent|x-b3-traceid|b3)', '"))
    if dumps.height == 0:
        return pl.DataFrame(schema=CONTEXT_SCHEMA)
    parent = _header("traceparent").str.extract_groups(
        r"^(?P<v>[0-9a-e][0-9a-f])-(?P<t>[0-9a-f]{32})-(?P<s>[0-9a-f]{16})-[0-9a-f]{2}(?:-.*)?$")
    single = _header("b3").str.extract_groups(r"^(?P<t>[0-9a-f]{16}|[0-9a-f]{32})-(?P<s>[0-9a-f]{16})(?:-.*)?$")
    found = dumps.with_columns_seq(
        w3c_trace=parent.struct["t"], w3c_span=parent.struct["s"],
        b3_trace=_b3_trace_id(_header("x-b3-traceid")),
        b3_span=_header("x-b3-spanid").str.extract(r"^([0-9a-f]{16})$", 1),
        single_trace=single.struct["t"].str.pad_start(32, "0"), single_span=single.struct["s"],
        first=pl.col("kind").cast(pl.String) == _DUMPS[0].value,
    ).with_columns_seq(
        trace_id=pl.when(_valid(pl.col("w3c_trace"), pl.col("w3c_span"))).then("w3c_trace")
        .when(_valid(pl.col("b3_trace"), pl.col("b3_span"))).then("b3_trace")
        .when(_valid(pl.col("single_trace"), pl.col("single_span"))).then("single_trace"),
        parent_span_id=pl.when(_valid(pl.col("w3c_trace"), pl.col("w3c_span"))).then("w3c_span")
        .when(_valid(pl.col("b3_trace"), pl.col("b3_span"))).then("b3_span")
        .when(_valid(pl.col("single_trace"), pl.col("single_span"))).then("single_span"),
    ).filter(pl.col("trace_id").is_not_null())
    return (found.sort("first", descending=True, maintain_order=True)
            .group_by("origin", "conn_id", "stream_id", maintain_order=True)
            .agg(pl.col("trace_id").first(), pl.col("parent_span_id").first())
            .sort("origin", "conn_id", "stream_id")
            .select_seq(pl.col(c).cast(t) for c, t in CONTEXT_SCHEMA.items()))


def gathered(frames: Iterable[pl.DataFrame]) -> pl.DataFrame:
    """``trace_contexts`` over the events of several chunks (a stream's dumps lie in one chunk: a record is whole)."""
    parts = [trace_contexts(f) for f in frames]
    if not parts:
        return pl.DataFrame(schema=CONTEXT_SCHEMA)
    both = pl.concat(parts)
    return both.unique(subset=["origin", "conn_id", "stream_id"], keep="first", maintain_order=True)


def read_contexts(sources: Any, *, format: str = "auto", log_format: str | None = None, redact: RedactOption = True,
                  shapes: ShapeStore | None = None) -> pl.DataFrame:
    """The trace contexts of the requests in ``sources``, read again (for a capture that does not hold its
    events): one more parse of the files computing only ``COLUMNS``, keeping only the dumps that carry a trace
    header.

    A capture whose Envoy restarted inside one file numbers its later requests' origin ``ORIGIN#2``; this pass
    does not split restarts, so requests after a restart do not find their contexts (docs/otel.md).
    """
    run = iter_parse(sources, format=format, log_format=log_format, redact=redact, shapes=shapes,
                     columns=(*COLUMNS, *_PARSER_CHECKS))
    return gathered(chunk.events for chunk in run)
