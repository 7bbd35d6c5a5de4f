"""Requests stage: one row per HTTP stream, its milestones, links and the boundaries of its phases.

Everything is vectorised: per-stream aggregates in one ``group_by``, then as-of
lookups ("the last read event on this connection before the stream began",
"the first socket write on the upstream connection after the headers were
proxied") with ``join_asof``. Connections are keyed by ``(origin, conn_id)``.
"""
from __future__ import annotations

import functools

import polars as pl

from envoy_dissector.analysis.engine.asof import asof
from envoy_dissector.analysis.engine.frames import joined, pick
from envoy_dissector.analysis.engine.origins import group_per_origin
from envoy_dissector.analysis.schema import LINK_SCHEMA, REQUEST_LINES_SCHEMA, conform
from envoy_dissector.analysis.stages.failures import connect_failure_reason, failed_connects, failure_reason
from envoy_dissector.parser.kinds import EventKind

CONN = ["origin", "conn_id"]
UPSTREAM_CONN = ["origin", "upstream_conn_id"]
_PROXYING = (EventKind.PROXYING_HEADERS, EventKind.PROXYING_BYTES, EventKind.PROXYING_TRAILERS)
_ENCODING = (EventKind.ENCODING_HEADERS, EventKind.ENCODING_DATA, EventKind.ENCODING_TRAILERS)
ADMIN_PATHS = (r"^/(logging|ready|stats|server_info|clusters|config_dump|listeners|runtime|runtime_modify|memory|"
               r"certs|healthcheck|hot_restart_version|quitquitquit|reset_counters|drain_listeners|init_dump|help|"
               r"tap|heapprofiler|cpuprofiler|contention|reopen_logs)(/|\?|$)")


@functools.cache  # (the same few conditions in every window: an ``is_in`` converts its kinds each time it is built)
def _kind(*kinds: EventKind) -> pl.Expr:
    return pl.col("kind") == kinds[0] if len(kinds) == 1 else pl.col("kind").is_in(kinds)


#: The event columns the requests stage reads (selected before filtering: filters copy every column).
_USED = ("origin", "conn_id", "stream_id", "thread", "ts_us", "line_no", "kind", "logger", "cluster", "url",
         "end_stream", "x_request_id", "trace_id", "method", "authority", "path", "status", "events", "bytes",
         "filter", "upstream_conn_id", "event")
_STREAM = ["origin", "conn_id", "stream_id"]
#: Lines only TLS transport sockets log (Istio mTLS between sidecars).
TLS_KINDS = (EventKind.SSL_READ_RETURNS, EventKind.SSL_READ_BYTES, EventKind.SSL_WRITE_RETURNS,
             EventKind.SSL_ERROR_WHILE_READ, EventKind.SSL_ERROR_WHILE_WRITE, EventKind.SSL_SHUTDOWN,
             EventKind.TLS_FAILURE)


#: Lines of the connection logger at trace level: without them (debug captures) a request's life is
#: bounded by its HTTP lines instead (docs/phases.md, "Debug-level and cut-off captures").
SOCKET_KINDS = (EventKind.SOCKET_EVENT, EventKind.READ_RETURNS, EventKind.WRITE_RETURNS, EventKind.SSL_READ_RETURNS,
                EventKind.SSL_WRITE_RETURNS)


#: Lines of a connection's setup (connect, TLS).
_SETUP_KINDS = (EventKind.CONNECTED, EventKind.CONNECTION_IN_PROGRESS, EventKind.CONNECTING_TO,
                EventKind.CLIENT_CONNECTING, EventKind.RAISING_CONNECTION_EVENT, *TLS_KINDS)
#: The kinds ``build_requests`` looks up after its per-stream aggregates (with the ``http2`` logger's lines): it
#: reads them from ``_lookup_rows``, a frame of these lines only, instead of filtering the window for each.
_LOOKUP_KINDS = (
    EventKind.NEW_STREAM, EventKind.PARSING_BYTES, EventKind.H2_DISPATCHING_BYTES,
    EventKind.ATTACHED_UPSTREAM_CONNECTION, EventKind.POOL_CREATING_STREAM, EventKind.POOL_ATTACHING_TO_NEXT_STREAM,
    EventKind.POOL_USING_EXISTING, EventKind.WRITING_BYTES, EventKind.DECODE_HEADERS_CALLED,
    EventKind.CONTINUING_FILTER_CHAIN, EventKind.RESPONSE_COMPLETE, EventKind.CLIENT_ON_HEADERS_COMPLETE,
    EventKind.SERVER_LIFECYCLE_NOISE, *SOCKET_KINDS, *_SETUP_KINDS)


#: The columns ``build_requests`` reads from ``_lookup_rows`` (none of the request's header values: those come from
#: the per-stream aggregates; each string column a filter keeps is a copy of its texts).
_LOOKUP_COLUMNS = ("origin", "conn_id", "stream_id", "thread", "ts_us", "line_no", "kind", "logger", "events",
                   "bytes", "filter", "upstream_conn_id", "event")


def _lookup_rows(events: pl.DataFrame) -> pl.DataFrame:
    """The lines of ``_LOOKUP_KINDS`` and of the ``http2`` logger, with the columns the requests stage reads."""
    return pick(events, _kind(*_LOOKUP_KINDS) | (pl.col("logger") == "http2"),
                tuple(c for c in _LOOKUP_COLUMNS if c in events.columns))


def _when(kinds: EventKind | tuple[EventKind, ...], value: str = "ts_us") -> pl.Expr:
    return pl.when(_kind(*kinds) if isinstance(kinds, tuple) else _kind(kinds)).then(pl.col(value))


#: Lines whose values (not only their times) a stream's row takes: its request headers, routing, upstream and
#: response headers, and the admin interface's completion line.
_VALUE_KINDS = (EventKind.REQUEST_HEADERS_COMPLETE, EventKind.ROUTER_DECODING_HEADERS, EventKind.ROUTE_MATCH,
                EventKind.UPSTREAM_HEADERS_COMPLETE, EventKind.ENCODING_HEADERS, EventKind.ADMIN_REQUEST_COMPLETE)
#: ``stream_aggregates``' columns, in order.
_STREAM_COLUMNS = (
    "origin", "conn_id", "stream_id", "thread", "first_ts", "last_ts", "first_line_no", "hdr_ts", "end_stream_ts",
    "hdr_end_stream", "route_ts", "router_any_ts", "cluster", "route_url", "pool_ready_ts", "pool_ready_count",
    "proxy_hdr_ts", "us_tx_end_ts", "us_resp_ts", "us_hdr_complete_ts", "us_hdr_end_stream", "enc_hdr_ts",
    "enc_end_ts", "codec_done_ts", "hcm_filter_ts", "retries", "upstream_resets", "local_reply", "stream_reset",
    "x_request_id_router", "x_request_id_client", "trace_id", "method", "authority", "path", "status", "log_lines",
    "reply_details", "client_dump")
#: A router header dump only a connection manager's stream carries: the ``x-forwarded-proto`` it adds to every
#: request, without the ``x-envoy-internal: true`` Envoy's async client sets on its own calls (ext_authz, xDS, a
#: tracer's flush). Header lines a paste marked up (``> ``, ``**…**``) count too.
_DUMP_LINE = r"(?m)^[>*_`\s]*'"
_CLIENT_DUMP = (pl.col("message").str.contains(_DUMP_LINE + r"x-forwarded-proto'")
                & ~pl.col("message").str.contains(_DUMP_LINE + r"x-envoy-internal', 'true'"))


def stream_aggregates(events: pl.DataFrame) -> pl.DataFrame:
    """Per (origin, conn_id, stream_id): timestamps of the stream's own lines and what its dumps say.

    Conditional values ("ts of the first `pool ready`") are a condition's times reduced with plain
    min/max/sum (``when(...).then(ts).min()``: polars computes the condition over the whole column once,
    much cheaper than filtering inside each group, and cheaper than making it a column first). The values of
    the few lines that carry them (``_VALUE_KINDS``: "the cluster of the first route match") are reduced over
    those lines only, a frame a fraction of the stream's lines: taking a group's first non-null value is the
    costly reduction.
    """
    on_stream = pl.col("stream_id").is_not_null() & pl.col("conn_id").is_not_null()
    keys = ["conn_id", "stream_id"]
    times = pick(events, on_stream,
                 ("origin", *keys, "thread", "ts_us", "line_no", "kind", "logger", "end_stream", "filter"))
    # (a group's first thread: the plain first when every line has one, as in most captures)
    thread = pl.col("thread").first(ignore_nulls=bool(times["thread"].null_count()))
    out = group_per_origin(times, keys, dict(
        thread=thread,
        first_ts=pl.col("ts_us").min(),
        last_ts=pl.col("ts_us").max(),
        first_line_no=pl.col("line_no").min(),
        end_stream_ts=_when(EventKind.REQUEST_END_STREAM).min(),
        router_any_ts=pl.when(pl.col("logger") == "router").then(pl.col("ts_us")).min(),
        pool_ready_ts=_when(EventKind.POOL_READY).max(),
        pool_ready_count=_kind(EventKind.POOL_READY).sum(),
        proxy_hdr_ts=_when(EventKind.PROXYING_HEADERS).min(),
        us_tx_end_ts=_when(_PROXYING).max(),
        us_resp_ts=_when(EventKind.UPSTREAM_RESPONSE_HEADERS).min(),
        # (trailers always end the stream: `encoding trailers via codec` logs no end_stream flag)
        enc_end_ts=pl.when(_kind(*_ENCODING) & pl.col("end_stream").fill_null(False)
                           | (pl.col("kind") == EventKind.ENCODING_TRAILERS)).then(pl.col("ts_us")).max(),
        codec_done_ts=_when(EventKind.CODEC_COMPLETED_ENCODING).min(),
        # A downstream filter's `decode headers called` (not the upstream filter chain's codec filter, which
        # Envoy's own async streams log too): only the connection manager's filter chain logs it.
        hcm_filter_ts=pl.when(_kind(EventKind.DECODE_HEADERS_CALLED)
                              & ~pl.col("filter").fill_null("").str.contains("upstream_codec")
                              ).then(pl.col("ts_us")).min(),
        retries=_kind(EventKind.PERFORMING_RETRY).sum(),
        upstream_resets=_kind(EventKind.UPSTREAM_RESET).sum(),
        # (`sum > 0`, not `any`: the same on a column without nulls, and several times cheaper per group)
        stream_reset=(_kind(EventKind.STREAM_RESET) | _kind(EventKind.DO_END_STREAM_RESET)).sum() > 0,
        log_lines=pl.len(),
    ))
    rhc, rdh = EventKind.REQUEST_HEADERS_COMPLETE, EventKind.ROUTER_DECODING_HEADERS
    valued = pick(events, on_stream & _kind(*_VALUE_KINDS),
                  ("origin", *keys, "ts_us", "kind", "end_stream", "cluster", "url", "x_request_id",
                   "trace_id", "method", "authority", "path", "status", "message")).select_seq(
        "origin", *keys,
        hdr_ts=_when(rhc),
        hdr_end_stream=_when(rhc, "end_stream"),
        route_ts=_when(EventKind.ROUTE_MATCH),
        cluster=_when(EventKind.ROUTE_MATCH, "cluster"),
        route_url=_when(EventKind.ROUTE_MATCH, "url"),
        us_hdr_complete_ts=_when(EventKind.UPSTREAM_HEADERS_COMPLETE),
        us_hdr_end_stream=_when(EventKind.UPSTREAM_HEADERS_COMPLETE, "end_stream"),
        enc_hdr_ts=_when(EventKind.ENCODING_HEADERS),
        x_request_id_router=_when(rdh, "x_request_id"),
        x_request_id_client=_when(rhc, "x_request_id"),
        trace_id_router=_when(rdh, "trace_id"),
        trace_id_client=_when(rhc, "trace_id"),
        method=_when(rhc, "method"),
        authority=_when(rhc, "authority"),
        # (the admin interface's filter logs the path it served: an admin request whose dump lies outside the excerpt)
        path=pl.coalesce(_when(rhc, "path"), _when(EventKind.ADMIN_REQUEST_COMPLETE, "url")),
        status=_when(EventKind.ENCODING_HEADERS, "status"),
        client_dump=pl.when(_kind(rdh)).then(_CLIENT_DUMP),
    )
    first = {c: pl.col(c).first(ignore_nulls=True) for c in (
        "hdr_end_stream", "cluster", "route_url", "us_hdr_end_stream", "x_request_id_router", "x_request_id_client",
        "method", "authority", "path", "status")}
    values = group_per_origin(valued, keys, dict(
        hdr_ts=pl.col("hdr_ts").min(),
        route_ts=pl.col("route_ts").min(),
        us_hdr_complete_ts=pl.col("us_hdr_complete_ts").min(),
        enc_hdr_ts=pl.col("enc_hdr_ts").min(),
        trace_id=pl.coalesce(pl.col("trace_id_router").first(ignore_nulls=True),
                             pl.col("trace_id_client").first(ignore_nulls=True)),
        client_dump=pl.col("client_dump").any(),
        **first,
    ))
    # Local-reply texts come from the few local_reply lines (the message column is not carried above); their
    # details are kept whole (the grammar's ``details``: a paste may have put spaces in them).
    replies = pick(events, on_stream & _kind(EventKind.LOCAL_REPLY) & pl.col("message").is_not_null(),
                   (*_STREAM, "message", "details")
                   ).group_by(*_STREAM, maintain_order=True).agg(local_reply=pl.col("message").first(),
                                                                  reply_details=pl.col("details").first())
    return joined(joined(out, values, on=_STREAM, how="left", maintain_order="left"), replies, on=_STREAM,
                  how="left", maintain_order="left").select_seq(_STREAM_COLUMNS)


def _events_of(events: pl.DataFrame, *kinds: EventKind) -> pl.DataFrame:
    return pick(events, _kind(*kinds) & pl.col("conn_id").is_not_null(), ("origin", "conn_id", "ts_us"))


#: The admin filter's line after each chunk of a response it served (``admin_filter.cc``, logger ``misc``).
_ADMIN_CHUNK = "nextChunk: response.length="


def _main_threads(events: pl.DataFrame) -> pl.DataFrame:
    """The thread that logged the server's start-up per origin (admin requests run there); in a capture without
    start-up lines (a follow, ``capture``'s window), the thread of the admin filter's own lines.

    Envoy serves its admin interface on the main thread only, so a thread that logged an admin request's completion
    or the admin filter's ``nextChunk`` is the main thread: the tool's own ``POST /logging`` that raised the level
    then shows as the admin request it is, even when only its response's end was logged (no path of its own).
    Only real thread ids count: inferred worker lanes (negative, see ``loop.infer_threads``) may hold
    a shutdown line that fell inside a worker's slice, which must not turn that worker into "main".
    """
    real = pl.col("thread") >= 0
    startup = pick(events, (pl.col("kind") == EventKind.SERVER_LIFECYCLE_NOISE) & real, ("origin", "thread"))
    admin = pick(events, real & _kind(EventKind.ADMIN_REQUEST_COMPLETE, EventKind.BACKGROUND),
                 ("origin", "thread", "kind", "message"))
    admin = pick(admin, (pl.col("kind") == EventKind.ADMIN_REQUEST_COMPLETE)
                         | pl.col("message").str.starts_with(_ADMIN_CHUNK)).select_seq("origin", "thread")
    # (start-up lines decide where a capture has them; the admin lines only where it has none)
    admin = joined(admin, startup.select_seq("origin").unique(), on="origin", how="anti")
    lines = pl.concat([startup, admin])
    if lines.height == 0:
        return pl.DataFrame(schema={"origin": pl.String, "main_thread": pl.Int64})
    return (lines.group_by("origin", "thread").len().sort(["len", "thread"], descending=[True, False])
            .group_by("origin", maintain_order=True).first().select_seq("origin", main_thread="thread"))


def _real_threads(streams: pl.DataFrame) -> bool:
    """Every stream has a thread id the log gave (inferred lanes are negative)."""
    return streams.height > 0 and not streams.select_seq((pl.col("thread").is_null() | (pl.col("thread") < 0)).any()
                                                         ).item()


#: Lines ``failures.failed_connects`` reads: the router's reset, the pool's close, the connection's error.
_FAILURE_KINDS = (EventKind.UPSTREAM_RESET, EventKind.POOL_CLIENT_DISCONNECTED, EventKind.POOL_CONNECT_TIMEOUT,
                  EventKind.TLS_FAILURE, EventKind.CONNECT_ERROR)


def _failure_rows(events: pl.DataFrame) -> pl.DataFrame:
    return pick(events, _kind(*_FAILURE_KINDS), tuple(
        c for c in ("origin", "conn_id", "stream_id", "thread", "ts_us", "line_no", "kind", "reason")
        if c in events.columns))


def link_upstream(streams: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """Upstream connection of each stream's last attempt, and how it was linked.

    ``Attached upstream connection [Cu] to downstream connection [Cd]`` (Envoy 1.27+) is exact.
    Older logs have no such line; on one worker ``pool ready`` comes right after the pool's
    ``creating stream`` / ``attaching to next stream`` on Cu and right before the router's request
    headers are queued on Cu (``writing N bytes``). Both neighbours are looked up on the same worker
    (real thread ids), or in the whole file when there are none; when they disagree (other workers'
    lines interleave) the closer one wins, and a pool line up to 20 ms back (a stalled log writer)
    is the last resort.
    """
    attached = pick(events, pl.col("kind") == EventKind.ATTACHED_UPSTREAM_CONNECTION,
                    ("origin", "conn_id", "ts_us", "upstream_conn_id"))
    streams = asof(streams, attached, left_on="pool_ready_ts", right_on="ts_us", by=CONN, strategy="forward",
                   take={"upstream_conn_id": "up_attached"}, tolerance=2_000)
    # (`using existing connection` alone marks a pool hit on Envoys that log no `creating stream`, <= 1.14)
    pool_kinds = [EventKind.POOL_CREATING_STREAM, EventKind.POOL_ATTACHING_TO_NEXT_STREAM,
                  EventKind.POOL_USING_EXISTING]
    pool_lines = pick(events, _kind(*pool_kinds) & pl.col("conn_id").is_not_null(),
                      ("origin", "thread", "conn_id", "ts_us"))
    # Connections a pool hands out are upstream connections: their `writing N bytes` are requests.
    upstream_conns = pool_lines.select_seq("origin", "conn_id").unique()
    writes = joined(pick(events, (pl.col("kind") == EventKind.WRITING_BYTES) & pl.col("conn_id").is_not_null(),
                         ("origin", "thread", "conn_id", "ts_us")),
                    upstream_conns, on=["origin", "conn_id"], how="semi")
    real_threads = _real_threads(streams)
    by = ["origin", "thread"] if real_threads else ["origin"]
    # (one lookup for both reaches: the nearest pool line is the same, only whether it is near enough differs)
    streams = asof(streams, pool_lines.with_columns_seq(pool_ts=pl.col("ts_us")), left_on="pool_ready_ts",
                   right_on="ts_us", by=by, strategy="backward", take={"conn_id": "up_pool_far", "pool_ts": "far_ts"},
                   tolerance=20_000)
    near = pl.col("pool_ready_ts") - pl.col("far_ts") <= 2_000
    streams = streams.with_columns_seq(up_pool=pl.when(near).then(pl.col("up_pool_far")),
                                       up_pool_ts=pl.when(near).then(pl.col("far_ts")))
    streams = asof(streams, writes.with_columns_seq(write_ts=pl.col("ts_us")), left_on="pool_ready_ts",
                   right_on="ts_us", by=by, strategy="forward", take={"conn_id": "up_write", "write_ts": "up_write_ts"},
                   tolerance=2_000)
    pool_gap = pl.col("pool_ready_ts") - pl.col("up_pool_ts")
    write_gap = pl.col("up_write_ts") - pl.col("pool_ready_ts")
    agree = pl.col("up_write").is_null() | (pl.col("up_pool") == pl.col("up_write"))
    neighbour = (pl.when(agree).then(pl.col("up_pool"))
                 .when(pl.col("up_pool").is_null()).then(pl.col("up_write"))
                 .when(pool_gap <= write_gap).then(pl.col("up_pool")).otherwise(pl.col("up_write")))
    streams = streams.with_columns_seq(up_neighbour=neighbour)
    how = "same-thread" if real_threads else "inferred"
    return streams.with_columns_seq(
        upstream_conn_id=pl.coalesce("up_attached", "up_neighbour", "up_pool_far"),
        link=pl.when(pl.col("up_attached").is_not_null()).then(pl.lit("attached"))
        .when(pl.col("up_neighbour").is_not_null()).then(pl.lit(f"pool-line-{how}"))
        .when(pl.col("up_pool_far").is_not_null()).then(pl.lit(f"pool-line-far-{how}"))
        .otherwise(None),
    ).drop("up_attached", "up_pool", "up_pool_ts", "up_write", "up_write_ts", "up_pool_far", "far_ts", "up_neighbour")


def connection_links(events: pl.DataFrame) -> pl.DataFrame:
    """Which connections each stream links (the cheap part of ``build_requests`` that thread inference needs)."""
    streams = stream_aggregates(events)
    if streams.height == 0:
        return pl.DataFrame(schema=LINK_SCHEMA)
    linked = link_upstream(streams, events.select_seq(*(c for c in _USED if c in events.columns)))
    return linked.select_seq("origin", downstream_conn_id="conn_id", upstream_conn_id="upstream_conn_id").cast(
        LINK_SCHEMA)  # type: ignore[arg-type]


def build_requests(events: pl.DataFrame) -> pl.DataFrame:
    """The requests stage: one row per HTTP stream with its identity, milestones (``*_us``), attributes and the
    timestamps of the lines later stages cut at (``REQUEST_LINES_SCHEMA``; the rest is scratch)."""
    streams = stream_aggregates(events)
    conn_lines = pick(events.select_seq("origin", "conn_id", "ts_us"), pl.col("conn_id").is_not_null())
    failure_lines = _failure_rows(events)
    main_threads = _main_threads(events)
    events = _lookup_rows(events)
    new_stream = _events_of(events, EventKind.NEW_STREAM)
    streams = asof(streams, new_stream, left_on="hdr_ts", right_on="ts_us", by=CONN, strategy="backward",
                   take={"ts_us": "new_stream_ts"}, tolerance=1_000_000)
    # Some layouts tag `new stream` with the connection only (Envoy 1.34 `[Tags: "ConnectionId":…]`): such a
    # line opens the stream whose first line comes next on that connection.
    # (on the same worker too: Envoy's own async streams all log connection id 0, as a client connection may)
    untagged = pick(events, _kind(EventKind.NEW_STREAM) & pl.col("conn_id").is_not_null()
                    & pl.col("stream_id").is_null(), ("origin", "conn_id", "thread", "ts_us", "line_no"))
    if untagged.height:
        lane = pl.col("thread").fill_null(-1).alias("lane__")
        nexts = asof(untagged.with_columns_seq(lane), streams.select_seq(*CONN, "stream_id", "first_ts", lane),
                     left_on="ts_us", right_on="first_ts", by=[*CONN, "lane__"], strategy="forward",
                     take={"stream_id": "stream_id"}, tolerance=1_000_000)
        opened = pick(nexts, pl.col("stream_id").is_not_null()).group_by(*CONN, "stream_id").agg(
            untagged_new_stream_ts=pl.col("ts_us").max())
        streams = joined(streams, opened, on=[*CONN, "stream_id"], how="left", maintain_order="left").with_columns_seq(
            new_stream_ts=pl.coalesce("new_stream_ts", "untagged_new_stream_ts")).drop("untagged_new_stream_ts")
        # A `new stream` no line of its stream follows (the excerpt ends there): a request of its own, cut,
        # whose stream id the log never shows.
        lone = pick(nexts, pl.col("stream_id").is_null()).select_seq(
            *CONN, "thread", new_stream_ts="ts_us", first_ts="ts_us", last_ts="ts_us", first_line_no="line_no",
            pool_ready_count=pl.lit(0), retries=pl.lit(0), upstream_resets=pl.lit(0), stream_reset=pl.lit(False),
            log_lines=pl.lit(1))
        if lone.height:
            streams = pl.concat([streams, lone], how="diagonal_relaxed")
    reads = pick(events, (pl.col("kind") == EventKind.SOCKET_EVENT) & ((pl.col("events") & 1) == 1)
                 & pl.col("conn_id").is_not_null(), ("origin", "conn_id", "ts_us"))
    streams = asof(streams, reads, left_on="new_stream_ts", right_on="ts_us", by=CONN, strategy="backward",
                   take={"ts_us": "read_start_ts"}, tolerance=1_000_000)
    parses = _events_of(events, EventKind.PARSING_BYTES, EventKind.H2_DISPATCHING_BYTES)
    streams = asof(streams, parses, left_on="new_stream_ts", right_on="ts_us", by=CONN, strategy="backward",
                   take={"ts_us": "parse_start_ts"}, tolerance=1_000_000)
    h2 = pick(events, (pl.col("logger") == "http2") & pl.col("conn_id").is_not_null(), ("origin", "conn_id")
              ).unique().with_columns_seq(is_h2=pl.lit(True))
    streams = joined(streams, h2, on=CONN, how="left").with_columns_seq(pl.col("is_h2").fill_null(False))

    streams = streams.with_columns_seq(
        ds_tx_end_us=pl.coalesce("codec_done_ts", "enc_end_ts"),
    )
    # Bytes on the wire: raw sockets log `write returns`, TLS sockets (Istio mTLS) `ssl write returns`.
    writes = pick(events, _kind(EventKind.WRITE_RETURNS, EventKind.SSL_WRITE_RETURNS) & (pl.col("bytes") > 0)
                  & pl.col("conn_id").is_not_null(), ("origin", "conn_id", "ts_us"))
    streams = asof(streams, writes, left_on="ds_tx_end_us", right_on="ts_us", by=CONN, strategy="forward",
                   take={"ts_us": "life_end_ts"}, tolerance=10_000_000)

    streams = link_upstream(streams, events)
    # (every line of a connection counts for its first line; its setup comes from the lookup rows)
    up_first = group_per_origin(conn_lines, ["conn_id"], dict(up_first_ts=pl.col("ts_us").min()))
    setup = pick(events.select_seq("origin", "conn_id", "ts_us", "kind", "event"),
        _kind(*_SETUP_KINDS) & pl.col("conn_id").is_not_null()).with_columns_seq(
        up_connected_ts=_when(EventKind.CONNECTED),
        up_in_progress_ts=_when(EventKind.CONNECTION_IN_PROGRESS),
        up_connecting_ts=_when((EventKind.CONNECTING_TO, EventKind.CLIENT_CONNECTING,
                                EventKind.CONNECTION_IN_PROGRESS)),
        # `raising connection event 2` (Connected) comes after the TLS handshake on a TLS connection.
        up_established_ts=pl.when((pl.col("kind") == EventKind.RAISING_CONNECTION_EVENT) & (pl.col("event") == 2))
        .then(pl.col("ts_us")),
        up_tls=_kind(*TLS_KINDS),
    )
    setup = group_per_origin(setup, ["conn_id"], dict(
        up_connected_ts=pl.col("up_connected_ts").min(),
        up_in_progress_ts=pl.col("up_in_progress_ts").min(),
        up_connecting_ts=pl.col("up_connecting_ts").min(),
        up_established_ts=pl.col("up_established_ts").min(),
        up_tls=pl.col("up_tls").any(),
    ))
    up_first = joined(up_first, setup, on=CONN, how="left", maintain_order="left")
    # The downstream connection's first line (loop model: a request cannot be read before it) ...
    streams = joined(streams, up_first.select_seq(*CONN, conn_first_ts="up_first_ts"), on=CONN, how="left",
                           maintain_order="left")
    # A last attempt that failed to connect: linked to the connection that failed (analysis/stages/failures.py). It is
    # not ``upstream_conn_id``, which is Envoy's %UPSTREAM_CONNECTION_ID% (none: no connection was established).
    streams = failed_connects(streams, failure_lines, up_first, _real_threads(streams))
    streams = streams.with_columns_seq(
        failed_upstream_conn_id="failed_conn_id", failed_upstream_error="failed_error",
        link=pl.when(pl.col("failed_conn_id").is_not_null() & pl.col("link").is_null()).then(
            pl.lit("failed-connect")).otherwise(pl.col("link")))
    # ... and the upstream connection's setup.
    streams = joined(streams, up_first.rename({"conn_id": "upstream_conn_id"}), on=UPSTREAM_CONN, how="left",
                           maintain_order="left")
    router_start = pl.coalesce("route_ts", "router_any_ts")
    # A new connection of this request: set up (connect lines) between the request's start and its pool ready —
    # after its route match, or while a filter held it (an ext_authz check) for another request's demand, which
    # Envoy then reports for this request too (US_CX_BEG after its DS_RX_BEG).
    new_conn = ((pl.col("up_first_ts") >= pl.coalesce("new_stream_ts", router_start))
                & (pl.col("up_first_ts") <= pl.col("pool_ready_ts"))
                & pl.col("up_connecting_ts").is_not_null())
    streams = streams.with_columns_seq(
        new_upstream_conn=new_conn.fill_null(False),
        us_cx_beg_us=pl.when(new_conn).then(pl.coalesce("up_in_progress_ts", "up_first_ts")),
        us_cx_end_us=pl.when(new_conn).then(pl.col("up_connected_ts")),
        # Envoy 1.40 logs no "handshake complete": the TLS connection's Connected event marks its end.
        us_hs_end_us=pl.when(new_conn & pl.col("up_tls").fill_null(False)).then(pl.col("up_established_ts")),
    )
    up_writes = writes.select_seq("origin", "ts_us", upstream_conn_id="conn_id")
    # The router hands the headers to the upstream codec (`proxying headers`, else `pool ready`) ...
    streams = streams.with_columns_seq(us_tx_start_ts=pl.coalesce("proxy_hdr_ts", "pool_ready_ts"))
    streams = asof(streams, up_writes, left_on="us_tx_start_ts", right_on="ts_us", by=UPSTREAM_CONN,
                   strategy="forward", take={"ts_us": "us_written_ts"}, tolerance=10_000_000)
    # ... and Envoy stamps US_TX_BEG when the codec's encodeHeaders returns: the stream's next filter-manager
    # line (`decode headers called: filter=...upstream_codec`, or `continuing filter chain` when the upstream
    # filter chain resumes on a new connection) bounds it from above; a stall inside the encode lands there too.
    encoded = pick(pick(events, _kind(EventKind.DECODE_HEADERS_CALLED, EventKind.CONTINUING_FILTER_CHAIN),
                        ("origin", "conn_id", "stream_id", "ts_us", "kind", "filter")),
                   _kind(EventKind.CONTINUING_FILTER_CHAIN)
                   | pl.col("filter").fill_null("").str.contains("upstream_codec"))
    streams = asof(streams, encoded, left_on="proxy_hdr_ts", right_on="ts_us", by=[*CONN, "stream_id"],
                   strategy="forward", take={"ts_us": "us_encoded_ts"}, tolerance=1_000_000)
    # Envoy <= 1.23 has no upstream filter chain (no `proxying headers`, no `upstream_codec` line): there the
    # codec's encodeHeaders shows only as the `writing N bytes` it queues on the upstream connection right after
    # `pool ready` (every version logs it; `write returns` comes an event later, after the stamp).
    queued = pick(events, (pl.col("kind") == EventKind.WRITING_BYTES) & pl.col("conn_id").is_not_null(),
                  ("origin", "conn_id", "ts_us")).rename({"conn_id": "upstream_conn_id"})
    streams = asof(streams, queued, left_on="pool_ready_ts", right_on="ts_us", by=UPSTREAM_CONN,
                   strategy="forward", take={"ts_us": "us_queued_ts"}, tolerance=1_000_000)
    streams = streams.with_columns_seq(us_tx_beg_us=pl.when(pl.col("proxy_hdr_ts").is_not_null()).then(pl.coalesce(
        pl.min_horizontal("us_encoded_ts", pl.coalesce("us_written_ts", "us_encoded_ts")), "us_tx_start_ts"))
        .otherwise(pl.coalesce(pl.min_horizontal("us_queued_ts", pl.coalesce("us_written_ts", "us_queued_ts")),
                               "us_tx_start_ts")))
    # The router sees the response headers (`upstream response headers`, else `upstream headers complete`).
    streams = streams.with_columns_seq(us_resp_router_ts=pl.coalesce("us_resp_ts", "us_hdr_complete_ts"))
    up_reads = reads.select_seq("origin", "ts_us", upstream_conn_id="conn_id")
    streams = asof(streams, up_reads, left_on="us_resp_router_ts", right_on="ts_us", by=UPSTREAM_CONN,
                   strategy="backward", take={"ts_us": "us_read_start_ts"}, tolerance=10_000_000)
    complete_lines = pick(events, (pl.col("kind") == EventKind.RESPONSE_COMPLETE) & (pl.col("logger") == "client"),
                          ("origin", "ts_us", "conn_id")).rename({"conn_id": "upstream_conn_id"})
    streams = asof(streams, complete_lines, left_on="us_resp_router_ts", right_on="ts_us", by=UPSTREAM_CONN,
                   strategy="forward", take={"ts_us": "us_complete_ts"}, tolerance=60_000_000)
    # Envoy stamps US_RX_BEG when the upstream codec has parsed the response headers (before the router's
    # line): HTTP/1 logs that as `Client: onHeadersComplete` on the upstream connection.
    parsed = pick(events, _kind(EventKind.CLIENT_ON_HEADERS_COMPLETE), ("origin", "ts_us", "conn_id")).rename(
        {"conn_id": "upstream_conn_id"})
    streams = asof(streams, parsed, left_on="us_resp_router_ts", right_on="ts_us", by=UPSTREAM_CONN,
                   strategy="backward", take={"ts_us": "us_parsed_ts"}, tolerance=1_000_000)
    streams = streams.with_columns_seq(us_rx_beg_us=pl.coalesce(
        pl.when(pl.col("us_parsed_ts") >= pl.col("us_tx_start_ts")).then(pl.col("us_parsed_ts")),
        "us_resp_router_ts"))
    streams = joined(streams, main_threads, on="origin", how="left")
    return conform(_finish(joined(streams, _socket_origins(events), on="origin", how="left").with_columns_seq(
        pl.col("origin_socket_lines").fill_null(False))), REQUEST_LINES_SCHEMA)


def _socket_origins(events: pl.DataFrame) -> pl.DataFrame:
    """Origins whose capture holds socket lines (one row each, ``origin_socket_lines = true``)."""
    return pick(events, _kind(*SOCKET_KINDS), ("origin",)).unique().with_columns_seq(
        origin_socket_lines=pl.lit(True))


#: The columns a request's uid is made of (``request_uid``), by their names in the requests frame.
UID_COLUMNS = ("origin", "downstream_conn_id", "stream_id", "first_line_no")


def request_uid(conn: str = "downstream_conn_id") -> pl.Expr:
    """A request's ``request_uid`` from its columns: ``ORIGIN:C<connection>:S<stream>`` (``S?<first line>`` when
    the stream id was not logged); ``conn``: the connection id column's name."""
    return pl.concat_str([pl.col("origin"), pl.lit(":C"), pl.col(conn).cast(pl.String), pl.lit(":S"),
                          pl.col("stream_id").cast(pl.String).fill_null(pl.concat_str(pl.lit("?"), "first_line_no"))]
                         ).alias("request_uid")


def _finish(s: pl.DataFrame) -> pl.DataFrame:
    ds_rx_end = pl.coalesce("end_stream_ts", pl.when(pl.col("hdr_end_stream")).then(pl.col("hdr_ts")))
    us_rx_end = pl.when(pl.col("us_hdr_end_stream").fill_null(False)).then(pl.col("us_rx_beg_us")).otherwise(
        pl.col("us_complete_ts"))
    # The response's end: DS_TX_END, else (debug level, Envoy < 1.26 or HTTP/2: the last `encoding data` is a
    # trace line) the codec client's `response complete` upstream once the headers were encoded.
    response_end = pl.coalesce("ds_tx_end_us", pl.when(pl.col("us_complete_ts") >= pl.col("enc_hdr_ts")).then(
        pl.col("us_complete_ts")))
    # Not client traffic: Envoy's own async streams (no connection-manager line), and the admin interface (on
    # the main thread, never routed; recognised by its paths when the capture misses the start-up lines).
    admin = pl.col("route_ts").is_null() & pl.col("router_any_ts").is_null() & pl.coalesce(
        "path", "route_url").fill_null("").str.contains(ADMIN_PATHS)
    # Only the connection manager logs these; Envoy's async streams never do. A stream with one of them is a
    # client request even when its `new stream` lies before the excerpt (it is then cut, not internal).
    hcm = pl.any_horizontal(pl.col(c).is_not_null() for c in (
        "new_stream_ts", "hdr_ts", "end_stream_ts", "enc_hdr_ts", "enc_end_ts", "codec_done_ts", "hcm_filter_ts"))
    # An async stream has no connection: Envoy logs it as connection 0, as it does a client's first connection; a
    # router dump with the connection manager's headers tells the client's stream. A stream of another connection
    # with router or filter lines only is a client request whose connection-manager lines lie outside the excerpt.
    # (the response flags are 16 regexes, ~2 ms a window whatever its size: without a local reply there are no
    # details for them to read, and the failure is the failed connect's alone)
    replied = s["local_reply"].null_count() < s.height or s["reply_details"].null_count() < s.height
    internal = ((~hcm & (pl.col("conn_id") == 0) & ~pl.col("client_dump").fill_null(False))
                # (a routed stream is never the admin interface, whatever thread it runs on)
                | (pl.col("thread").is_not_null() & (pl.col("thread") == pl.col("main_thread"))
                   & pl.col("route_ts").is_null()) | admin)
    return s.with_columns_seq(
        request_uid=request_uid("conn_id"),
        downstream_conn_id=pl.col("conn_id"),
        x_request_id=pl.coalesce("x_request_id_router", "x_request_id_client"),
        path=pl.coalesce("path", "route_url"),
        protocol=pl.when(pl.col("is_h2")).then(pl.lit("HTTP/2")).otherwise(pl.lit("HTTP/1.1")),
        internal=internal.fill_null(False),
        # (a retry means a first attempt was made, even when its `pool ready` lies outside the excerpt)
        upstream_attempts=(pl.col("retries") + pl.when(
            pl.col("pool_ready_count").gt(0) | pl.col("upstream_resets").gt(0) | pl.col("retries").gt(0)
        ).then(1).otherwise(0)).cast(pl.Int64),
        ds_rx_beg_us=pl.col("new_stream_ts"),
        ds_rx_end_us=ds_rx_end,
        us_tx_end_us=pl.max_horizontal("us_tx_end_ts", "us_tx_beg_us"),
        us_rx_end_us=us_rx_end,
        ds_tx_beg_us=pl.col("enc_hdr_ts"),
        life_start_us=pl.coalesce("read_start_ts", "parse_start_ts", "new_stream_ts"),
        response_end_ts=response_end,
        life_end_us=pl.coalesce("life_end_ts", response_end),
        # Whole life inside the capture: from `new stream` to the response's end, and where the capture has
        # socket lines, from the read that delivered the request to the write that sent the response.
        complete=(pl.col("new_stream_ts").is_not_null() & response_end.is_not_null()
                  & (~pl.col("origin_socket_lines")
                     | pl.col("life_end_ts").is_not_null() & pl.col("read_start_ts").is_not_null())),
        failure_reason=failure_reason(_reply_details(), pl.col("status"), pl.col("retries").fill_null(0) > 0,
                                      pl.col("failed_reason")) if replied else connect_failure_reason(
            pl.col("failed_reason")),
    ).with_columns_seq(outcome=_outcome())


def _reply_details() -> pl.Expr:
    """A local reply's details, whole (the grammar's field; the message's first word where it has none)."""
    return pl.coalesce("reply_details", pl.col("local_reply").str.extract(r"with details (\S+)", 1))


def _outcome() -> pl.Expr:
    """How the stream ended, in words: a local reply (with Envoy's details), a reset, retries, or ok."""
    details = _reply_details()
    resets = pl.col("upstream_resets").fill_null(0)
    return (pl.when(pl.col("local_reply").is_not_null()).then(pl.lit("local reply: ") + details.fill_null("?"))
            .when(pl.col("stream_reset").fill_null(False)).then(pl.lit("stream reset"))
            .when(~pl.col("complete")).then(pl.lit("cut by the capture"))
            .when(resets > 0).then(pl.lit("ok after ") + resets.cast(pl.String) + pl.lit(" upstream reset(s)"))
            .otherwise(pl.lit("ok")))
