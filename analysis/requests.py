"""Requests stage: one row per HTTP stream, its milestones, links and the boundaries of its phases.

Everything is vectorised: per-stream aggregates in one ``group_by``, then as-of
lookups ("the last read event on this connection before the stream began",
"the first socket write on the upstream connection after the headers were
proxied") with ``join_asof``. Connections are keyed by ``(origin, conn_id)``.
"""
from __future__ import annotations

import polars as pl

from envoy_dissector.analysis.asof import asof

CONN = ["origin", "conn_id"]
UPSTREAM_CONN = ["origin", "upstream_conn_id"]
_PROXYING = ("proxying_headers", "proxying_bytes", "proxying_trailers")
_ENCODING = ("encoding_headers", "encoding_data", "encoding_trailers")
ADMIN_PATHS = (r"^/(logging|ready|stats|server_info|clusters|config_dump|listeners|runtime|runtime_modify|memory|"
               r"certs|healthcheck|hot_restart_version|quitquitquit|reset_counters|drain_listeners|init_dump|help|"
               r"tap|heapprofiler|cpuprofiler|contention|reopen_logs)(/|\?|$)")


def _kind(name: str) -> pl.Expr:
    return pl.col("kind") == name


def _first_ts(kind: str) -> pl.Expr:
    return pl.col("ts_us").filter(_kind(kind)).min()


def _first(column: str, kind: str) -> pl.Expr:
    return pl.col(column).filter(_kind(kind) & pl.col(column).is_not_null()).first()


def stream_aggregates(events: pl.DataFrame) -> pl.DataFrame:
    """Per (origin, conn_id, stream_id): timestamps of the stream's own lines and what its dumps say."""
    stream_events = events.filter(pl.col("stream_id").is_not_null() & pl.col("conn_id").is_not_null())
    kind_s = pl.col("kind").cast(pl.String)
    return stream_events.group_by("origin", "conn_id", "stream_id").agg(
        thread=pl.col("thread").drop_nulls().first(),
        first_ts=pl.col("ts_us").min(),
        last_ts=pl.col("ts_us").max(),
        first_line_no=pl.col("line_no").min(),
        hdr_ts=_first_ts("request_headers_complete"),
        end_stream_ts=_first_ts("request_end_stream"),
        hdr_end_stream=_first("end_stream", "request_headers_complete"),
        route_ts=_first_ts("route_match"),
        router_any_ts=pl.col("ts_us").filter(pl.col("logger") == "router").min(),
        cluster=_first("cluster", "route_match"),
        route_url=_first("url", "route_match"),
        pool_ready_ts=pl.col("ts_us").filter(_kind("pool_ready")).max(),
        pool_ready_count=_kind("pool_ready").sum(),
        proxy_hdr_ts=_first_ts("proxying_headers"),
        us_tx_end_ts=pl.col("ts_us").filter(kind_s.is_in(_PROXYING)).max(),
        us_resp_ts=_first_ts("upstream_response_headers"),
        us_hdr_complete_ts=_first_ts("upstream_headers_complete"),
        us_hdr_end_stream=_first("end_stream", "upstream_headers_complete"),
        enc_hdr_ts=_first_ts("encoding_headers"),
        enc_end_ts=pl.col("ts_us").filter(kind_s.is_in(_ENCODING) & pl.col("end_stream").fill_null(False)).max(),
        codec_done_ts=_first_ts("codec_completed_encoding"),
        retries=_kind("performing_retry").sum(),
        upstream_resets=_kind("upstream_reset").sum(),
        local_reply=_first("message", "local_reply"),
        stream_reset=(_kind("stream_reset") | _kind("do_end_stream_reset")).any(),
        x_request_id_router=_first("x_request_id", "router_decoding_headers"),
        x_request_id_client=_first("x_request_id", "request_headers_complete"),
        trace_id=pl.coalesce(_first("trace_id", "router_decoding_headers"),
                             _first("trace_id", "request_headers_complete")),
        method=_first("method", "request_headers_complete"),
        authority=_first("authority", "request_headers_complete"),
        path=_first("path", "request_headers_complete"),
        status=_first("status", "encoding_headers"),
        log_lines=pl.len(),
    )


def _events_of(events: pl.DataFrame, *kinds: str) -> pl.DataFrame:
    return events.filter(pl.col("kind").cast(pl.String).is_in(kinds) & pl.col("conn_id").is_not_null())


def _main_threads(events: pl.DataFrame) -> pl.DataFrame:
    """The thread that logged the server's start-up per origin (admin requests run there).

    Only real thread ids count: inferred worker lanes (negative, see ``loop.infer_threads``) may hold
    a shutdown line that fell inside a worker's slice, which must not turn that worker into "main".
    """
    startup = events.filter((pl.col("kind") == "server_lifecycle_noise") & (pl.col("thread") >= 0))
    if startup.height == 0:
        return pl.DataFrame(schema={"origin": pl.String, "main_thread": pl.Int64})
    return (startup.group_by("origin", "thread").len().sort("len", descending=True)
            .group_by("origin", maintain_order=True).first().select("origin", main_thread="thread"))


def link_upstream(streams: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """Upstream connection of each stream's last attempt, and how it was linked.

    ``Attached upstream connection [Cu] to downstream connection [Cd]`` (Envoy 1.27+) is exact;
    older logs: the pool line (``creating stream``/``attaching to next stream``) closest before
    ``pool ready`` on the same worker (or the same file without thread ids).
    """
    attached = events.filter(pl.col("kind") == "attached_upstream_connection")
    streams = asof(streams, attached, left_on="pool_ready_ts", right_on="ts_us", by=CONN, strategy="forward",
                   take={"upstream_conn_id": "up_attached"}, tolerance=2_000)
    pool_lines = events.filter(pl.col("kind").cast(pl.String).is_in(
        ["pool_creating_stream", "pool_attaching_to_next_stream"]) & pl.col("conn_id").is_not_null())
    with_thread = streams.filter(pl.col("thread").is_not_null())
    by = ["origin", "thread"] if with_thread.height == streams.height and streams.height else ["origin"]
    streams = asof(streams, pool_lines, left_on="pool_ready_ts", right_on="ts_us", by=by, strategy="backward",
                   take={"conn_id": "up_pool"}, tolerance=2_000)
    return streams.with_columns(
        upstream_conn_id=pl.coalesce("up_attached", "up_pool"),
        link=pl.when(pl.col("up_attached").is_not_null()).then(pl.lit("attached"))
        .when(pl.col("up_pool").is_not_null()).then(pl.lit("pool-line-same-thread" if "thread" in by
                                                            else "pool-line-inferred"))
        .otherwise(None),
    ).drop("up_attached", "up_pool")


def build_requests(events: pl.DataFrame) -> pl.DataFrame:
    """One row per HTTP stream with milestones (``*_us``), phase boundaries (``b*``) and attributes."""
    streams = stream_aggregates(events)
    if streams.height == 0:
        return streams
    new_stream = _events_of(events, "new_stream")
    streams = asof(streams, new_stream, left_on="hdr_ts", right_on="ts_us", by=CONN, strategy="backward",
                   take={"ts_us": "new_stream_ts"}, tolerance=1_000_000)
    reads = events.filter((pl.col("kind") == "socket_event") & ((pl.col("events") & 1) == 1)
                          & pl.col("conn_id").is_not_null())
    streams = asof(streams, reads, left_on="new_stream_ts", right_on="ts_us", by=CONN, strategy="backward",
                   take={"ts_us": "read_start_ts"}, tolerance=1_000_000)
    parses = _events_of(events, "parsing_bytes", "h2_dispatching_bytes")
    streams = asof(streams, parses, left_on="new_stream_ts", right_on="ts_us", by=CONN, strategy="backward",
                   take={"ts_us": "parse_start_ts"}, tolerance=1_000_000)
    h2 = events.filter((pl.col("logger") == "http2") & pl.col("conn_id").is_not_null()).select(
        "origin", "conn_id").unique().with_columns(is_h2=pl.lit(True))
    streams = streams.join(h2, on=CONN, how="left").with_columns(pl.col("is_h2").fill_null(False))

    streams = streams.with_columns(
        ds_tx_end_us=pl.coalesce("codec_done_ts", "enc_end_ts"),
    )
    # Bytes on the wire: raw sockets log `write returns`, TLS sockets (Istio mTLS) `ssl write returns`.
    writes = events.filter(pl.col("kind").cast(pl.String).is_in(["write_returns", "ssl_write_returns"])
                           & (pl.col("bytes") > 0) & pl.col("conn_id").is_not_null())
    streams = asof(streams, writes, left_on="ds_tx_end_us", right_on="ts_us", by=CONN, strategy="forward",
                   take={"ts_us": "life_end_ts"}, tolerance=10_000_000)

    streams = link_upstream(streams, events)
    up_first = events.filter(pl.col("conn_id").is_not_null()).group_by("origin", "conn_id").agg(
        up_first_ts=pl.col("ts_us").min(),
        up_connected_ts=pl.col("ts_us").filter((pl.col("kind") == "connected")).min(),
        up_in_progress_ts=pl.col("ts_us").filter((pl.col("kind") == "connection_in_progress")).min(),
        up_connecting_ts=pl.col("ts_us").filter(pl.col("kind").cast(pl.String).is_in(
            ["connecting_to", "client_connecting", "connection_in_progress"])).min(),
    ).rename({"conn_id": "upstream_conn_id"})
    streams = streams.join(up_first, on=UPSTREAM_CONN, how="left")
    router_start = pl.coalesce("route_ts", "router_any_ts")
    # A connection this request waited for: it was set up (connect lines) between route match and pool ready.
    new_conn = ((pl.col("up_first_ts") >= router_start) & (pl.col("up_first_ts") <= pl.col("pool_ready_ts"))
                & pl.col("up_connecting_ts").is_not_null())
    streams = streams.with_columns(
        new_upstream_conn=new_conn.fill_null(False),
        us_cx_beg_us=pl.when(new_conn).then(pl.coalesce("up_in_progress_ts", "up_first_ts")),
        us_cx_end_us=pl.when(new_conn).then(pl.col("up_connected_ts")),
    )
    up_writes = writes.select("origin", "ts_us", upstream_conn_id="conn_id")
    # The router hands the headers to the upstream codec (`proxying headers`, else `pool ready`) ...
    streams = streams.with_columns(us_tx_start_ts=pl.coalesce("proxy_hdr_ts", "pool_ready_ts"))
    streams = asof(streams, up_writes, left_on="us_tx_start_ts", right_on="ts_us", by=UPSTREAM_CONN,
                   strategy="forward", take={"ts_us": "us_written_ts"}, tolerance=10_000_000)
    # ... and Envoy stamps US_TX_BEG when the codec's encodeHeaders returns: the stream's next filter-manager
    # line (`decode headers called: filter=...upstream_codec`, or `continuing filter chain` when the upstream
    # filter chain resumes on a new connection) bounds it from above; a stall inside the encode lands there too.
    encoded = events.filter(((pl.col("kind") == "decode_headers_called")
                             & pl.col("filter").fill_null("").str.contains("upstream_codec"))
                            | (pl.col("kind") == "continuing_filter_chain"))
    streams = asof(streams, encoded, left_on="proxy_hdr_ts", right_on="ts_us", by=[*CONN, "stream_id"],
                   strategy="forward", take={"ts_us": "us_encoded_ts"}, tolerance=1_000_000)
    streams = streams.with_columns(us_tx_beg_us=pl.coalesce(
        pl.min_horizontal("us_encoded_ts", pl.coalesce("us_written_ts", "us_encoded_ts")), "us_tx_start_ts"))
    # The router sees the response headers (`upstream response headers`, else `upstream headers complete`).
    streams = streams.with_columns(us_resp_router_ts=pl.coalesce("us_resp_ts", "us_hdr_complete_ts"))
    up_reads = reads.select("origin", "ts_us", upstream_conn_id="conn_id")
    streams = asof(streams, up_reads, left_on="us_resp_router_ts", right_on="ts_us", by=UPSTREAM_CONN,
                   strategy="backward", take={"ts_us": "us_read_start_ts"}, tolerance=10_000_000)
    complete_lines = events.filter((pl.col("kind") == "response_complete") & (pl.col("logger") == "client")
                                   ).select("origin", "ts_us", upstream_conn_id="conn_id")
    streams = asof(streams, complete_lines, left_on="us_resp_router_ts", right_on="ts_us", by=UPSTREAM_CONN,
                   strategy="forward", take={"ts_us": "us_complete_ts"}, tolerance=60_000_000)
    # Envoy stamps US_RX_BEG when the upstream codec has parsed the response headers (before the router's
    # line): HTTP/1 logs that as `Client: onHeadersComplete` on the upstream connection.
    parsed = events.filter(pl.col("kind") == "client_on_headers_complete").select(
        "origin", "ts_us", upstream_conn_id="conn_id")
    streams = asof(streams, parsed, left_on="us_resp_router_ts", right_on="ts_us", by=UPSTREAM_CONN,
                   strategy="backward", take={"ts_us": "us_parsed_ts"}, tolerance=1_000_000)
    streams = streams.with_columns(us_rx_beg_us=pl.coalesce(
        pl.when(pl.col("us_parsed_ts") >= pl.col("us_tx_start_ts")).then(pl.col("us_parsed_ts")),
        "us_resp_router_ts"))
    streams = streams.join(_main_threads(events), on="origin", how="left")
    return _finish(streams)


def _finish(s: pl.DataFrame) -> pl.DataFrame:
    ds_rx_end = pl.coalesce("end_stream_ts", pl.when(pl.col("hdr_end_stream")).then(pl.col("hdr_ts")))
    us_rx_end = pl.when(pl.col("us_hdr_end_stream").fill_null(False)).then(pl.col("us_rx_beg_us")).otherwise(
        pl.col("us_complete_ts"))
    uid = pl.concat_str([pl.col("origin"), pl.lit(":C"), pl.col("conn_id").cast(pl.String), pl.lit(":S"),
                         pl.col("stream_id").cast(pl.String)])
    # Not client traffic: Envoy's own async streams (no `new stream`), and the admin interface (served on
    # the main thread, never routed; recognised by its paths when the capture misses the start-up lines).
    admin = pl.col("route_ts").is_null() & pl.col("router_any_ts").is_null() & pl.coalesce(
        "path", "route_url").fill_null("").str.contains(ADMIN_PATHS)
    internal = (pl.col("new_stream_ts").is_null() | (pl.col("conn_id") == 0) & pl.col("route_ts").is_null()
                | (pl.col("thread").is_not_null() & (pl.col("thread") == pl.col("main_thread"))) | admin)
    return s.with_columns(
        request_uid=uid,
        downstream_conn_id=pl.col("conn_id"),
        x_request_id=pl.coalesce("x_request_id_router", "x_request_id_client"),
        path=pl.coalesce("path", "route_url"),
        protocol=pl.when(pl.col("is_h2")).then(pl.lit("HTTP/2")).otherwise(pl.lit("HTTP/1.1")),
        internal=internal.fill_null(False),
        upstream_attempts=(pl.col("retries") + pl.when(
            pl.col("pool_ready_count").gt(0) | pl.col("upstream_resets").gt(0)).then(1).otherwise(0)).cast(pl.Int64),
        ds_rx_beg_us=pl.col("new_stream_ts"),
        ds_rx_end_us=ds_rx_end,
        us_tx_end_us=pl.max_horizontal("us_tx_end_ts", "us_tx_beg_us"),
        us_rx_end_us=us_rx_end,
        ds_tx_beg_us=pl.col("enc_hdr_ts"),
        life_start_us=pl.coalesce("read_start_ts", "parse_start_ts", "new_stream_ts"),
        life_end_us=pl.coalesce("life_end_ts", "ds_tx_end_us"),
        complete=(pl.col("new_stream_ts").is_not_null() & pl.col("ds_tx_end_us").is_not_null()
                  & pl.col("life_end_ts").is_not_null() & pl.col("read_start_ts").is_not_null()),
    )
