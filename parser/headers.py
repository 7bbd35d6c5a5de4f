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
    is_dump = pl.col("kind").cast(pl.String).is_in(DUMP_KINDS) & pl.col("message").str.contains("\n")
    traceparent = _header("traceparent").str.split("-").list.get(1, null_on_oob=True)
    exprs = {
        "method": _header(":method"),
        "authority": pl.coalesce(_header(":authority"), _header("host")),
        "path": _header(":path"),
        "x_request_id": _header("x-request-id"),
        "trace_id": pl.coalesce(traceparent, _header("x-b3-traceid")),
    }
    out = events.with_columns(
        [pl.when(is_dump).then(e).otherwise(None).alias(k) for k, e in exprs.items()]
        + [pl.when(is_dump & pl.col("status").is_null())
           .then(_header(":status").cast(pl.Int64, strict=False))
           .otherwise(pl.col("status")).alias("status")]
    )
    return out
