"""Read request/response attributes out of header dumps (the lines after ``...headers:``)."""
from __future__ import annotations

import polars as pl

#: Kinds whose message carries a header dump after its first line.
DUMP_KINDS: tuple[str, ...] = (
    "request_headers_complete", "router_decoding_headers", "encoding_headers", "upstream_response_headers",
    "request_trailers_complete", "router_decoding_trailers", "encoding_trailers", "upstream_response_trailers",
)


def _header(name: str) -> pl.Expr:
    return pl.col("message").str.extract(rf"(?m)^'{name}', '([^\n]*)'$", 1)


def header_columns(events: pl.DataFrame) -> pl.DataFrame:
    """Adds method, authority, path, x_request_id, trace_id and (for responses) status."""
    traceparent = _header("traceparent").str.split("-").list.get(1, null_on_oob=True)
    exprs = {
        "method": _header(":method"),
        "authority": pl.coalesce(_header(":authority"), _header("host")),
        "path": _header(":path"),
        "x_request_id": _header("x-request-id"),
        "trace_id": pl.coalesce(traceparent, _header("x-b3-traceid")),
    }
    rows = events.select(pl.col("kind").is_in(DUMP_KINDS)).to_series().arg_true()
    dumps = events.select("message", "status")[rows]
    has_dump = dumps.select(pl.col("message").str.contains("\n", literal=True)).to_series()
    rows, dumps = rows.filter(has_dump), dumps.filter(has_dump)
    if rows.len() == 0:
        return events.with_columns(pl.lit(None, dtype=pl.String).alias(k) for k in exprs)
    found = dumps.select(
        *[e.alias(k) for k, e in exprs.items()],
        status=pl.coalesce(pl.col("status"), _header(":status").cast(pl.Int64, strict=False)))
    n = events.height
    columns = [pl.repeat(None, n, dtype=pl.String, eager=True).alias(k).scatter(rows, found[k]) for k in exprs]
    return events.with_columns(*columns, events["status"].cast(pl.Int64).scatter(rows, found["status"]))
