"""The tracer's cost: span flushes to the collector, charged to the client requests they delayed.

A tracer logs nothing per span. Its visible work is the flush: when a batch is full (or on its timer) it
serialises the spans and sends them through Envoy's async HTTP client — an internal request (connection
id 0, ``cluster 'zipkin' match for URL '/api/v2/spans'``) with its own router, pool and codec lines, and
later the collector's answer on the upstream connection. On the worker thread, that work is:

* the silent gap before the flush's first line (span serialisation, logged nowhere) when the flush runs inside
  a client request's processing (a full batch; a flush on the tracer's timer follows idle time instead), and
* every run of the flush's own lines (its stream and its upstream connection) not interrupted by lines
  of other connections or by a ``socket event`` (the worker waking up after waiting for the collector).

Each such burst delayed every client request in flight on the same worker at that moment: the overlap
of the burst with a request's life is charged to that request's ``tracing_us`` and listed in ``phases``
(``tracing flush …``). The flush itself stays an internal request, never a client request.
"""
from __future__ import annotations

import polars as pl

from envoy_dissector.parser.kinds import EventKind

#: Collector clusters, paths and hosts of the tracers Envoy ships (Zipkin, Jaeger, OpenTelemetry, Datadog…).
COLLECTOR = (r"(?i)zipkin|jaeger|opentelemetry|otel|datadog|skywalking|lightstep|"
             r"^/api/v[12]/spans|^/v1/traces|^/v0\.[345]/traces")
_THREAD = ["origin", "thread"]


def is_flush() -> pl.Expr:
    """Internal requests that carry spans to a tracing collector."""
    target = pl.concat_str(pl.col("cluster").fill_null(""), pl.lit(" "), pl.col("path").fill_null(""))
    return pl.col("internal") & (pl.col("cluster").fill_null("").str.contains(COLLECTOR)
                                 | pl.col("path").fill_null("").str.contains(COLLECTOR)
                                 | target.str.contains(r"(?i)^\S*\s/api/v2/spans"))


def flush_bursts(requests: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """Worker time of each flush: ``flush_uid, origin, thread, start_us, end_us`` (one row per burst)."""
    empty = pl.DataFrame(schema={"flush_uid": pl.String(), "origin": pl.String(), "thread": pl.Int64(),
                                 "start_us": pl.Int64(), "end_us": pl.Int64()})
    if requests.height == 0:
        return empty
    flushes = requests.filter(is_flush()).select(
        flush_uid="request_uid", origin="origin", conn_id="conn_id", stream_id="stream_id",
        upstream_conn_id="upstream_conn_id", first_us="life_start_us", last_us="life_end_us")
    if flushes.height == 0:
        return empty
    lines = events.filter(pl.col("thread").is_not_null()).select(
        *_THREAD, "line_no", "ts_us", "conn_id", "stream_id",
        wakeup=pl.col("kind") == EventKind.SOCKET_EVENT)
    own_stream = lines.join(flushes.select("flush_uid", "origin", "conn_id", "stream_id"),
                            on=["origin", "conn_id", "stream_id"], how="inner").select("line_no", "origin", "flush_uid")
    bounds = own_stream.join(lines.select("origin", "line_no", "ts_us"), on=["origin", "line_no"]).group_by(
        "flush_uid").agg(first_ts=pl.col("ts_us").min(), last_ts=pl.col("ts_us").max())
    upstream = flushes.filter(pl.col("upstream_conn_id").is_not_null()).join(bounds, on="flush_uid").select(
        "flush_uid", "origin", pl.col("upstream_conn_id").alias("conn_id"), "first_ts",
        last_ts=pl.max_horizontal("last_ts", "last_us"))
    own_upstream = lines.join(upstream, on=["origin", "conn_id"], how="inner").filter(
        pl.col("ts_us").is_between("first_ts", "last_ts")).select("line_no", "origin", "flush_uid")
    owner = pl.concat([own_stream, own_upstream]).unique(["origin", "line_no"], keep="first")
    threads = lines.join(owner.select("origin", "line_no").join(lines.select("origin", "line_no", "thread"),
                                                                on=["origin", "line_no"]).select(*_THREAD).unique(),
                         on=_THREAD, how="semi")
    marked = threads.join(owner, on=["origin", "line_no"], how="left").sort(*_THREAD, "line_no").with_columns(
        prev_ts=pl.col("ts_us").shift(1).over(_THREAD))
    # Lines without a connection id (deferred deletion, timers) neither belong to a burst nor break one.
    with_ids = marked.filter(pl.col("conn_id").is_not_null() | pl.col("flush_uid").is_not_null())
    # A burst ends at another connection's line, and at a `socket event` (the worker woke up again after
    # waiting: for the collector's connect or answer).
    new_run = pl.col("flush_uid").ne_missing(pl.col("flush_uid").shift(1).over(_THREAD)) | pl.col("wakeup")
    with_ids = with_ids.with_columns(run=new_run.cast(pl.Int64).cum_sum().over(_THREAD))
    runs = with_ids.filter(pl.col("flush_uid").is_not_null()).group_by(*_THREAD, "run", "flush_uid").agg(
        head_ts=pl.col("ts_us").first(), prev_ts=pl.col("prev_ts").first(), end_us=pl.col("ts_us").last())
    runs = runs.sort("head_ts").with_columns(first=pl.col("head_ts").rank("ordinal").over("flush_uid") == 1)
    # A flush triggered by a full batch runs inside the processing of the request whose span filled it: its first
    # burst starts where the worker stopped logging before it (span serialisation). A flush on the tracer's
    # timer follows an idle worker: that gap is idle time, not work.
    clients = requests.filter(~pl.col("internal") & pl.col("life_start_us").is_not_null()).select(
        *_THREAD, "life_start_us", "life_end_us")
    inside = runs.filter("first").join(clients, on=_THREAD, how="inner").filter(
        pl.col("head_ts").is_between("life_start_us", "life_end_us")).select(*_THREAD, "run").unique()
    runs = runs.join(inside.with_columns(in_request=pl.lit(True)), on=[*_THREAD, "run"], how="left")
    serialising = pl.col("first") & pl.col("in_request").fill_null(False)
    start = pl.when(serialising).then(pl.coalesce("prev_ts", "head_ts")).otherwise(pl.col("head_ts"))
    return runs.select("flush_uid", *_THREAD, start_us=start, end_us="end_us").cast(empty.schema)  # type: ignore[arg-type]


def tracing_rows(requests: pl.DataFrame, events: pl.DataFrame, bursts: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per client request, the flush bursts that delayed it: ``request_uid, detail, start_us, end_us, dur_us``.

    ``requests`` needs ``request_uid, origin, thread, internal, conn_id, stream_id, upstream_conn_id, cluster,
    path, life_start_us, life_end_us`` and the boundaries ``b0``/``b9``.
    """
    out_schema = {"request_uid": pl.String(), "detail": pl.String(), "start_us": pl.Int64(), "end_us": pl.Int64(),
                  "dur_us": pl.Int64()}
    if bursts is None:
        bursts = flush_bursts(requests, events)
    if bursts.height == 0:
        return pl.DataFrame(schema=out_schema)
    clients = requests.filter(~pl.col("internal") & pl.col("b0").is_not_null()).select(
        "request_uid", *_THREAD, "b0", "b9")
    hit = bursts.join(clients, on=_THREAD, how="inner").filter(
        (pl.col("start_us") < pl.col("b9")) & (pl.col("end_us") > pl.col("b0")))
    start = pl.max_horizontal("start_us", "b0")
    end = pl.min_horizontal("end_us", "b9")
    return hit.select("request_uid", detail=pl.lit("tracing flush ") + pl.col("flush_uid").str.split(":").list.last(),
                      start_us=start, end_us=end, dur_us=end - start).filter(pl.col("dur_us") > 0).cast(out_schema)  # type: ignore[arg-type]
