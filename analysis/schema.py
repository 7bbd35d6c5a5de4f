"""Names of milestones and phases, and the declared frames each analysis stage returns (docs/architecture.md).

``REQUEST_SCHEMA`` is the output contract; the other request schemas are what each stage hands on (its
scratch columns are dropped at its exit with :func:`conform`)."""
from __future__ import annotations

from enum import StrEnum

import polars as pl


class Milestone(StrEnum):
    """Envoy's own stream-timing names (``%COMMON_DURATION(A:B:us)%``), as epoch-µs columns ``<name>_us``.

    Each is read from the log line named here (see docs/phases.md).
    """

    DS_RX_BEG = "ds_rx_beg"  # `new stream` on the downstream connection
    DS_RX_END = "ds_rx_end"  # `request end stream [timestamp recorded]`
    US_CX_BEG = "us_cx_beg"  # first line of a new upstream connection (`connecting to ...`), new connections only
    US_CX_END = "us_cx_end"  # `connected` on that upstream connection
    US_HS_END = "us_hs_end"  # TLS only: `raising connection event 2` on that upstream connection (handshake done)
    #: upstream codec's encodeHeaders returned (next upstream_codec line), else `proxying headers`
    US_TX_BEG = "us_tx_beg"
    US_TX_END = "us_tx_end"  # last `proxying headers|N bytes|trailers` of the stream
    US_RX_BEG = "us_rx_beg"  # `Client: onHeadersComplete` upstream, else `[end_stream: X, ]upstream response headers:`
    US_RX_END = "us_rx_end"  # codec client `response complete` on the upstream connection
    DS_TX_BEG = "ds_tx_beg"  # `encoding headers via codec`
    DS_TX_END = "ds_tx_end"  # `Codec completed encoding stream.`, else the last encode with end_stream=true


class Phase(StrEnum):
    """Phases partition a request's life (they sum to ``total_us``), and the event-loop queueing estimate
    beside them; see docs/phases.md."""

    DOWNSTREAM_READ = "downstream_read"
    HEADER_PARSE = "header_parse"
    FILTER_CHAIN = "filter_chain"
    ROUTER = "router"
    UPSTREAM_CONNECT = "upstream_connect"
    TLS_HANDSHAKE = "tls_handshake"
    UPSTREAM_SEND = "upstream_send"
    UPSTREAM_WAIT = "upstream_wait"
    RESPONSE_PARSE = "response_parse"
    ENCODE = "encode"
    DOWNSTREAM_WRITE = "downstream_write"
    #: not part of the partition: time an event of the request was ready while the worker served other
    #: connections (a share of the phases above, like ``wasm_us``); a row of the phases frame, ``loop_queue_us``
    LOOP_QUEUE = "loop_queue"


#: the phases that partition a request's life (they sum to ``total_us``)
PARTITION_PHASES: tuple[Phase, ...] = tuple(p for p in Phase if p is not Phase.LOOP_QUEUE)
#: each phase measured between two boundaries (b0..b9, analysis/stages/phases.py); ``upstream_connect`` and
#: ``tls_handshake`` are carved out of ``router``'s span, so they have no span of their own here
PHASE_SPANS: tuple[tuple[Phase, str, str], ...] = (
    (Phase.DOWNSTREAM_READ, "b0", "b1"), (Phase.HEADER_PARSE, "b1", "b2"), (Phase.FILTER_CHAIN, "b2", "b3"),
    (Phase.ROUTER, "b3", "b4"), (Phase.UPSTREAM_SEND, "b4", "b5"), (Phase.UPSTREAM_WAIT, "b5", "b6"),
    (Phase.RESPONSE_PARSE, "b6", "b7"), (Phase.ENCODE, "b7", "b8"), (Phase.DOWNSTREAM_WRITE, "b8", "b9"),
)
MILESTONE_COLUMNS: tuple[str, ...] = tuple(f"{m.value}_us" for m in Milestone)
PHASE_COLUMNS: tuple[str, ...] = tuple(f"{p.value}_us" for p in PARTITION_PHASES)

REQUEST_SCHEMA: dict[str, pl.DataType] = {
    "request_uid": pl.String(), "origin": pl.String(), "thread": pl.Int64(), "downstream_conn_id": pl.Int64(),
    "stream_id": pl.UInt64(), "upstream_conn_id": pl.Int64(), "x_request_id": pl.String(),
    "method": pl.String(), "authority": pl.String(), "path": pl.String(), "status": pl.Int64(),
    "protocol": pl.String(), "complete": pl.Boolean(), "internal": pl.Boolean(), "upstream_attempts": pl.Int64(),
    **{c: pl.Int64() for c in MILESTONE_COLUMNS},
    "downstream_read_us": pl.Int64(), "header_parse_us": pl.Int64(), "filter_chain_us": pl.Int64(),
    "wasm_us": pl.Int64(), "tracing_us": pl.Int64(), "internal_us": pl.Int64(), "router_us": pl.Int64(),
    "upstream_connect_us": pl.Int64(),
    "tls_handshake_us": pl.Int64(),
    "upstream_send_us": pl.Int64(), "upstream_wait_us": pl.Int64(), "response_parse_us": pl.Int64(),
    "encode_us": pl.Int64(), "downstream_write_us": pl.Int64(), "total_us": pl.Int64(), "loop_queue_us": pl.Int64(),
    "envoy_duration_us": pl.Int64(), "queue_before_read_us": pl.Int64(),
    # Envoy's response flags and details (``UF,URX upstream_reset_before_response_started{…}``), null if none
    "failure_reason": pl.String(),
    # time inside the proxy, not waiting for the upstream (stages/cost.py, docs/cost.md)
    "sidecar_added_us": pl.Int64(),
}
CONTRACT_COLUMNS: tuple[str, ...] = tuple(REQUEST_SCHEMA)

#: The contract columns a request has once the requests stage has read its lines (the phase durations and the
#: event-loop estimates come later).
_REQUEST_IDENTITY = {c: t for c, t in REQUEST_SCHEMA.items()
                     if not c.endswith("_us") or c in MILESTONE_COLUMNS}

#: Detail columns: not part of the output contract (they may change between versions), declared because
#: readers after their stage use them (report, findings, exports, dashboard, notebook; docs/output.md).
REQUEST_DETAIL_SCHEMA: dict[str, pl.DataType] = {
    "cluster": pl.String(),  # the route's cluster
    "retries": pl.UInt32(),  # `performing retry` lines
    "log_lines": pl.UInt32(),  # records of the stream
    # the stream's first and last line (order requests whose life is unknown; place Envoy's own streams)
    "first_ts": pl.Int64(), "last_ts": pl.Int64(), "first_line_no": pl.Int64(),
    "life_start_us": pl.Int64(), "life_end_us": pl.Int64(),  # first read → last write, from the stream's lines
    "outcome": pl.String(),  # ok, local reply: <details>, stream reset, cut by the capture, ...
    "link": pl.String(),  # how the upstream connection was linked: attached, pool-line-...
    "new_upstream_conn": pl.Boolean(),  # the request waited for a new upstream connection
    # the connection its last attempt failed to open, and that connection's own error (analysis/stages/failures.py)
    "failed_upstream_conn_id": pl.Int64(), "failed_upstream_error": pl.String(),
    **{f"b{i}": pl.Int64() for i in range(10)},  # phase boundaries (analysis/stages/phases.py)
    "boundary_fallbacks": pl.String(), "missing_boundaries": pl.String(), "unmeasured_phases": pl.String(),
    # on an internal request: what it was (internal.WorkKind), its own worker time, the same for tracer flushes
    "internal_kind": pl.String(), "internal_work_us": pl.Int64(), "flush_work_us": pl.Int64(),
    "downstream_tls_handshake_us": pl.Int64(),  # handshake before the connection's first request (outside total)
}
#: Requests stitched across origins (analysis/stages/stitch.py).
PEER_SCHEMA: dict[str, pl.DataType] = {"peer_origin": pl.String(), "peer_request_uid": pl.String(),
                                       "network_out_us": pl.Int64(), "network_back_us": pl.Int64()}

#: Requests stage (requests.build_requests): one row per HTTP stream with its identity, milestones and the
#: timestamps of the lines the phases and event-loop stages cut at (``*_ts``, see fallbacks.BOUNDARY_SOURCES).
REQUEST_LINES_SCHEMA: dict[str, pl.DataType] = {
    **_REQUEST_IDENTITY,
    "conn_id": pl.Int64(),  # = downstream_conn_id, under the events' name (join key with events)
    **{c: REQUEST_DETAIL_SCHEMA[c] for c in ("cluster", "retries", "log_lines", "first_ts", "last_ts",
                                             "first_line_no", "life_start_us", "life_end_us", "outcome", "link",
                                             "new_upstream_conn", "failed_upstream_conn_id",
                                             "failed_upstream_error")},
    "conn_first_ts": pl.Int64(),
    **{c: pl.Int64() for c in ("new_stream_ts", "read_start_ts", "parse_start_ts", "hdr_ts", "route_ts",
                               "router_any_ts", "pool_ready_ts", "us_tx_start_ts", "us_written_ts",
                               "us_read_start_ts", "us_resp_router_ts", "response_end_ts", "life_end_ts",
                               # a last attempt that failed to connect: that connection's connect and TLS ends
                               "failed_cx_beg_ts", "failed_cx_end_ts", "failed_hs_end_ts")},
}
#: Downstream TLS waits (tls.downstream_waits) append this column to the phases stage's requests.
DOWNSTREAM_TLS_SCHEMA: dict[str, pl.DataType] = {"downstream_tls_handshake_us": pl.Int64()}
#: Phases stage (phases.attribute_phases): the contract but the event-loop estimates, the detail columns but
#: the downstream TLS wait, and what the next steps read besides (the downstream connection under the events'
#: name, the connection's first line, the upstream read event).
PHASED_REQUEST_SCHEMA: dict[str, pl.DataType] = {
    **{c: t for c, t in REQUEST_SCHEMA.items()
       if c not in ("loop_queue_us", "queue_before_read_us", "sidecar_added_us")},
    **{c: t for c, t in REQUEST_DETAIL_SCHEMA.items() if c not in DOWNSTREAM_TLS_SCHEMA},
    "conn_id": pl.Int64(), "conn_first_ts": pl.Int64(), "us_read_start_ts": pl.Int64(),
}
#: Event-loop stage (loop.loop_queue; its input is ``PHASED_REQUEST_SCHEMA`` + ``DOWNSTREAM_TLS_SCHEMA``):
#: the contract, then the detail columns.
QUEUED_REQUEST_SCHEMA: dict[str, pl.DataType] = {
    **{c: t for c, t in REQUEST_SCHEMA.items() if c != "sidecar_added_us"}, **REQUEST_DETAIL_SCHEMA}
#: Cost stage (stages/cost.with_sidecar_added, on the event-loop stage's requests): the contract, then the detail.
COSTED_REQUEST_SCHEMA: dict[str, pl.DataType] = {**REQUEST_SCHEMA, **REQUEST_DETAIL_SCHEMA}
#: The requests frame of ``analyse`` / ``Capture.requests`` (after stitching): contract, detail, peers.
REQUEST_FRAME_SCHEMA: dict[str, pl.DataType] = {**COSTED_REQUEST_SCHEMA, **PEER_SCHEMA}

PHASES_SCHEMA: dict[str, pl.DataType] = {
    "request_uid": pl.String(), "phase": pl.String(), "detail": pl.String(), "start_us": pl.Int64(),
    "end_us": pl.Int64(), "dur_us": pl.Int64(), "part_of_total": pl.Boolean(),
}
#: connection links (requests.connection_links, fed to loop.infer_threads): per stream, its downstream and
#: (last attempt's) upstream connection
LINK_SCHEMA: dict[str, pl.DataType] = {"origin": pl.String(), "downstream_conn_id": pl.Int64(),
                                       "upstream_conn_id": pl.Int64()}
LOOP_SCHEMA: dict[str, pl.DataType] = {
    "origin": pl.String(), "thread": pl.Int64(), "start_us": pl.Int64(), "end_us": pl.Int64(),
    "conn_id": pl.Int64(), "kind": pl.String(), "lines": pl.Int64(),
}
#: Per worker (loop.worker_stats, ``Capture.workers()``; read by findings and the dashboard).
WORKER_SCHEMA: dict[str, pl.DataType] = {
    "origin": pl.String(), "thread": pl.Int64(), "utilisation": pl.Float64(), "busy_us": pl.Int64(),
    "requests": pl.UInt32(), "connections": pl.UInt32(), "window_us": pl.Int64(), "waited": pl.UInt32(),
    "wait_p50_us": pl.Int64(),
}
#: Event-loop queueing windows (loop.loop_queue): where a request's event waited for its worker, and the other
#: connections the worker served meanwhile, in the order served. The phases frame shows them as ``loop_queue``
#: rows whose detail is :func:`loop.render_queueing`'s text.
QUEUEING_SCHEMA: dict[str, pl.DataType] = {
    "request_uid": pl.String(), "where": pl.String(), "start_us": pl.Int64(), "end_us": pl.Int64(),
    "dur_us": pl.Int64(), "conn_ids": pl.List(pl.Int64()),
}


def conform(frame: pl.DataFrame, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """A stage's exit: exactly ``schema``'s columns, in its order and types (scratch columns dropped).

    A declared column the stage did not make is an error (``ColumnNotFoundError``), never a silent null.
    """
    return frame.select_seq(pl.col(c).cast(t) for c, t in schema.items())


#: The event columns (``parser.schema.EVENT_COLUMNS``) the analysis stages read. The streaming path keeps only
#: these: a window is split by worker, filtered and copied many times, and each copy costs per column (a
#: 92 k-row chunk split by worker: 21 ms with all 48 columns). The others (codec fields, header dumps, the
#: source location, the line count) are for the parser's accounting and the exports of the events frame.
#: ``tests/analysis/test_streaming.py`` checks on every fixture that the streamed analysis, which sees only
#: these, answers as ``analyse`` does with all of them (a stage reading another column fails there).
ANALYSED_COLUMNS: tuple[str, ...] = (
    "line_no", "ts_us", "thread", "level", "logger", "conn_id", "stream_id", "message", "origin", "kind", "events",
    "bytes", "count", "event", "status", "upstream_conn_id", "filter_status", "end_stream", "filter", "cluster",
    "url", "wasm_call", "wasm_context", "method", "authority", "path", "x_request_id", "trace_id", "reason", "details",
)
