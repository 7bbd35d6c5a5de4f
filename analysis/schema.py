"""Names of milestones, phases and the analysis frames' columns (the output contract)."""
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
}
CONTRACT_COLUMNS: tuple[str, ...] = tuple(REQUEST_SCHEMA)

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
