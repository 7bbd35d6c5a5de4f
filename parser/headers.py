"""Read request/response attributes out of header dumps (the lines after ``...headers:``)."""
from __future__ import annotations

import polars as pl

from envoy_dissector.parser import extension
from envoy_dissector.parser.constant import constant

#: Kinds whose message carries a header dump after its first line.
DUMP_KINDS: tuple[str, ...] = (
    "request_headers_complete", "router_decoding_headers", "encoding_headers", "upstream_response_headers",
    "request_trailers_complete", "router_decoding_trailers", "encoding_trailers", "upstream_response_trailers",
)


#: the headers the columns are read from
HEADER_NAMES = (":method", ":authority", "host", ":path", "x-request-id", "traceparent", "x-b3-traceid", ":status")


def _header(name: str) -> pl.Expr:
    return pl.col("message").str.extract(rf"(?m)^'{name}', '([^\n]*)'$", 1)


def header_values(messages: pl.Series) -> pl.DataFrame:
    """Per message, the value of its first dump line of each of ``HEADER_NAMES`` (a column each, null: none): one
    compiled pass where the extension is on (``extension.header_values``), else ``header_values_by_polars``."""
    found = extension.header_values(messages, HEADER_NAMES)
    return found if found is not None else header_values_by_polars(messages)


def header_values_by_polars(messages: pl.Series) -> pl.DataFrame:
    """``header_values`` by one regex extract per name (the reference)."""
    return messages.to_frame("message").select_seq(_header(name).alias(name) for name in HEADER_NAMES)


def header_columns(events: pl.DataFrame) -> pl.DataFrame:
    """Adds method, authority, path, x_request_id, trace_id and (for responses) status."""
    rows = events.select_seq(pl.col("kind").is_in(DUMP_KINDS)).to_series().arg_true()
    dumps = events.select_seq("message", "status")[rows]
    has_dump = dumps.select_seq(pl.col("message").str.contains("\n", literal=True)).to_series()
    rows, dumps = rows.filter(has_dump), dumps.filter(has_dump)
    names = ("method", "authority", "path", "x_request_id", "trace_id")
    if rows.len() == 0:
        return events.with_columns_seq(pl.lit(None, dtype=pl.String).alias(k) for k in names)
    header = pl.col  # (the columns of header_values are named by header)
    traceparent = header("traceparent").str.split("-").list.get(1, null_on_oob=True)
    found = pl.concat([dumps.select_seq("status"), header_values(dumps["message"])], how="horizontal").select_seq(
        method=header(":method"), authority=pl.coalesce(header(":authority"), header("host")), path=header(":path"),
        x_request_id=header("x-request-id"), trace_id=pl.coalesce(traceparent, header("x-b3-traceid")),
        status=pl.coalesce(pl.col("status"), header(":status").cast(pl.Int64, strict=False)))
    n = events.height
    columns = [constant(None, n, pl.String, k).scatter(rows, found[k]) for k in names]
    return events.with_columns_seq(*columns, events["status"].cast(pl.Int64).scatter(rows, found["status"]))
