"""Envoy 1.13-1.26 message texts (../shared/docs/envoy-log-catalog.md, version columns) are understood by the grammar,
on the slow path (grammar per line) and the fast path (grammar per shape) alike."""
from __future__ import annotations

import polars as pl
import pytest

from envoy_dissector.parser.classify import classify
from envoy_dissector.parser.grammar import parse_message

CASES = [  # (logger, message, kind, fields that must be read)
    ("pool", "[C7] attaching to next request", "pool_attaching_to_next_stream", {"conn_id": "7"}),
    ("pool", "[C7] attaching to next stream", "pool_attaching_to_next_stream", {"conn_id": "7"}),
    ("pool", "queueing request due to no available connections", "pool_queueing_stream", {}),
    ("pool", "queueing stream due to no available connections", "pool_queueing_stream", {}),
    ("pool", "[C7] using existing connection", "pool_using_existing", {"conn_id": "7"}),
    ("pool", "creating a new connection", "pool_creating_connection", {}),
    ("pool", "[C7] destroying stream: 0 remaining", "pool_destroying_stream", {"count": "0"}),
    ("pool", "max pending requests overflow", "pool_overflow", {}),
    ("pool", "cancelling pending request", "pool_cancelling_stream", {}),
    ("pool", "[C7] moving to ready", "pool_state_noise", {}),
    ("http", "[C3] onHeadersCompleteBase", "on_headers_complete", {"conn_id": "3"}),
    ("http", "[C3] headers complete", "on_headers_complete", {"conn_id": "3"}),
    ("http", "[C3][S1051077257573646553] request end stream", "request_end_stream",
     {"conn_id": "3", "stream_id": "1051077257573646553"}),
    ("http", "[C3][S12] decode headers called: filter=0x55d5c8a07e50 status=1", "decode_headers_called",
     {"filter": "0x55d5c8a07e50", "filter_status": "1"}),
    ("http", "[C3][S12] encode headers called: filter=0x55d5c8a0b3c0 status=0", "encode_headers_called",
     {"filter": "0x55d5c8a0b3c0", "filter_status": "0"}),
    ("http", "[C3][S12] stream reset", "stream_reset", {"stream_id": "12"}),
    ("connection", "[C3] readDisable: disable=true disable_count=0 state=0 buffer_length=126", "read_disable",
     {"disable": "true", "count": "0", "buffer_length": "126"}),
    ("connection", "[C3] read ready. dispatch_buffered_data=false", "read_ready", {"dispatch_buffered": "false"}),
    ("connection", "[C3] read ready. dispatch_buffered_data=1", "read_ready", {"dispatch_buffered": "1"}),
    ("connection", "[C3] read ready", "read_ready", {"conn_id": "3"}),
    ("connection", "[C3] writing 190 bytes", "writing_bytes", {"bytes": "190"}),
    ("connection", "[C3] writing 190 bytes, end_stream false", "writing_bytes",
     {"bytes": "190", "end_stream": "false"}),
    ("connection", "[C3] read error: Resource temporarily unavailable", "read_error",
     {"reason": "Resource temporarily unavailable"}),
    ("connection", "[C9] delayed connection error: 111", "connect_error", {"reason": "111"}),
    ("router", "[C3][S12] no cluster match for URL '/nope'", "no_route_match", {"url": "'/nope'"}),
    ("router", "[C3][S12] upstream reset: reset reason connection termination", "upstream_reset",
     {"reason": "connection termination"}),
    ("main", "[C2] new connection", "new_connection", {"conn_id": "2"}),
    ("http2", "[C0] about to recv frame type=8, flags=0", "h2_about_to_recv_frame", {"frame_type": "8", "flags": "0"}),
    ("pool", "[C1] client disconnected, failure reason:", "pool_client_disconnected", {"conn_id": "1"}),
    ("wasm", "[host->vm] proxy_on_request_headers(13, 28, 1)", "wasm_vm_enter",
     {"wasm_call": "proxy_on_request_headers", "wasm_context": "13"}),
    ("wasm", "[vm<-host] env.proxy_log return: 0", "wasm_host_call_noise", {}),
    ("connection", "[C1175] setting delayed close timer with timeout 1000 ms", "connection_close_noise", {}),
]


@pytest.mark.parametrize("logger,message,kind,fields", CASES, ids=[c[1][:60] for c in CASES])
def test_grammar_reads_older_texts(logger: str, message: str, kind: str, fields: dict[str, str]) -> None:
    text = f"{logger}\t{message}"
    parse = parse_message(text)
    assert parse.kind == kind
    values = parse.values(text)
    assert {k: values.get(k) for k in fields} == fields


@pytest.mark.parametrize("fast", [True, False])
def test_fast_and_slow_paths_type_them_alike(fast: bool) -> None:
    records = pl.DataFrame({"logger": [c[0] for c in CASES], "first_line": [c[1] for c in CASES]})
    out = classify(records, fast=fast)
    assert out["kind"].to_list() == [c[2] for c in CASES]
    ready = out.filter(pl.col("kind") == "read_ready")["dispatch_buffered"].to_list()
    assert ready == [0, 1, None]  # `false` is the bool the older builds printed as a word
    writing = out.filter(pl.col("kind") == "writing_bytes")
    assert writing["bytes"].to_list() == [190, 190] and writing["end_stream"].to_list() == [None, False]
