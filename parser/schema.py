"""Column names and dtypes of the parser's frames (part of the output contract)."""
from __future__ import annotations

import polars as pl

from envoy_dissector.parser.grammar import ALL_KINDS

KIND = pl.Enum(list(ALL_KINDS))

RECORD_SCHEMA: dict[str, pl.DataType] = {
    "line_no": pl.Int64(),
    "ts_us": pl.Int64(),
    "thread": pl.Int64(),
    "level": pl.String(),
    "logger": pl.String(),
    "source": pl.String(),
    "conn_id": pl.Int64(),
    "stream_id": pl.UInt64(),
    "message": pl.String(),
    "origin": pl.String(),
    "n_lines": pl.Int64(),
}
RECORD_COLUMNS: tuple[str, ...] = tuple(RECORD_SCHEMA)

#: Typed fields the grammar's labels produce (label name = column name).
FIELD_SCHEMA: dict[str, pl.DataType] = {
    "events": pl.Int64(), "dispatch_buffered": pl.Int64(), "bytes": pl.Int64(), "count": pl.Int64(),
    "state": pl.Int64(), "buffer_length": pl.Int64(), "event": pl.Int64(), "close_type": pl.Int64(),
    "code": pl.Int64(), "status": pl.Int64(), "frame_type": pl.Int64(), "flags": pl.Int64(),
    "h2_stream_id": pl.Int64(), "upstream_conn_id": pl.Int64(), "filter_status": pl.Int64(),
    "end_stream": pl.Boolean(), "disable": pl.Boolean(), "connecting": pl.Boolean(),
    "address": pl.String(), "reason": pl.String(), "header_key": pl.String(), "header_value": pl.String(),
    "filter": pl.String(), "cluster": pl.String(), "url": pl.String(), "details": pl.String(),
    "iteration": pl.String(), "frame_name": pl.String(), "text": pl.String(),
    "wasm_call": pl.String(), "wasm_context": pl.Int64(),
}
#: Fields lexed as single-quoted strings: quotes are stripped.
QUOTED_FIELDS = frozenset({"cluster", "url"})
#: Columns read from header dumps by ``headers.py`` (a response dump's ``:status`` goes to ``status``).
HEADER_SCHEMA: dict[str, pl.DataType] = {
    "method": pl.String(), "authority": pl.String(), "path": pl.String(),
    "x_request_id": pl.String(), "trace_id": pl.String(),
}
EVENT_SCHEMA: dict[str, pl.DataType] = {**RECORD_SCHEMA, "kind": KIND, **FIELD_SCHEMA, **HEADER_SCHEMA}
EVENT_COLUMNS: tuple[str, ...] = tuple(EVENT_SCHEMA)
PREFIX_FIELDS = ("conn_id", "stream_id")
