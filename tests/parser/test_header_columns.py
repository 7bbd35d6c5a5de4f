"""headers.header_columns: the request/response attributes read from header dumps, against values written by hand."""
from __future__ import annotations

import polars as pl

from envoy_dissector.parser.headers import header_columns

_SCHEMA = {"kind": pl.String, "message": pl.String, "status": pl.Int32}


def test_values_read_from_dumps() -> None:
    events = pl.DataFrame([
        ("request_headers_complete", "request headers complete (end_stream=true):\n':authority', 'a.example'\n"
         "':path', '/x?y='1''\n':method', 'GET'\n'x-request-id', 'r-1'\n"
         "'traceparent', '00-4bf92f-00f067-01'", None),
        ("encoding_headers", "encoding headers via codec (end_stream=false):\n':status', '503'\n'host', 'h2.example'\n"
         "'x-b3-traceid', 'b3'", None),
        ("upstream_response_headers", "upstream headers complete: end_stream=false\n':status', ''\n':status', '201'",
         200),
        ("request_headers_complete", "no dump on one line ':method', 'GET'", None),
        ("new_stream", "new stream\n':method', 'POST'", None),
        ("router_decoding_headers", "router decoding headers:\n':method', 'PUT'\r\n':path', 'no quote\n"
         "':path-x', '/wrong'\n'host', 'h.example'", None),
    ], schema=_SCHEMA, orient="row")
    out = header_columns(events)
    assert out["method"].to_list() == ["GET", None, None, None, None, None]  # (a line ending in \r is not read)
    assert out["authority"].to_list() == ["a.example", "h2.example", None, None, None, "h.example"]
    assert out["path"].to_list() == ["/x?y='1'", None, None, None, None, None]
    assert out["x_request_id"].to_list() == ["r-1", None, None, None, None, None]
    assert out["trace_id"].to_list() == ["4bf92f", "b3", None, None, None, None]
    # the record's own status first, else the dump's first (a value that is no number reads as none)
    assert out["status"].to_list() == [None, 503, 200, None, None, None]
    assert out["status"].dtype == pl.Int64


def test_a_chunk_without_dumps_gets_empty_columns() -> None:
    events = pl.DataFrame([("new_stream", "new stream", 7)], schema=_SCHEMA, orient="row")
    out = header_columns(events)
    assert out.select("method", "authority", "path", "x_request_id", "trace_id").row(0) == (None,) * 5
    assert out["status"].to_list() == [7]
