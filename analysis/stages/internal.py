"""Envoy's own work on its threads — internal requests and health checks — and the client requests it delayed.

Besides client requests, Envoy makes requests of its own, each with its own router, pool and codec lines:

* **filter calls** — a decoder filter that asks a service about the request and stops the chain until the
  answer (``ext_authz`` ``http_service``, rate limit, Lua ``httpCall``): an async-client stream (connection
  id 0) started inside the request's ``decodeHeaders``; the filter's ``decode headers called`` line that
  follows it returns a stop status. The call belongs to that request (its *owner*);
* **tracing flushes** — the tracer's span batches to its collector (:mod:`~envoy_dissector.analysis.stages.tracing`);
* **other internal requests** — async-client streams no filter waited for;
* **health checks** — Envoy's active health checker (``hc response_code=…`` on the checker's connection).
  Envoy runs it on the main thread, so it competes with the workers for CPU but never holds a worker's loop.

Their *worker time* is measured like a flush's: every run of their own lines (the stream's, its upstream
connection's, the checker connection's) not interrupted by other connections' lines or by a ``socket event``
(the thread waking up again) is one *burst* (for a flush, also the silent span serialisation before its first
line when it ran inside a client request). A burst delays every client request in flight on the same thread:
the overlap is charged to that request — ``tracing_us`` for flushes, ``internal_us`` for the rest — and
listed in ``phases``. A filter call's owner is charged its whole call instead, from the call's start to the
filter chain's resumption (it waited for the answer, not only for the worker).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import polars as pl

from envoy_dissector.analysis.engine.frames import joined, pick
from envoy_dissector.analysis.engine.order import in_order
from envoy_dissector.analysis.stages.loop import IDLE_GAP_US
from envoy_dissector.analysis.stages.tracing import is_flush
from envoy_dissector.parser.kinds import EventKind

_THREAD = ["origin", "thread"]
_STREAM = ["origin", "conn_id", "stream_id"]
#: The lines of a health checker's connection that name it a checker.
HEALTH_CHECK_RESULT_KINDS = [EventKind.HEALTH_CHECK_RESULT, EventKind.HEALTH_CHECK_FAILURE]
#: A filter's call starts at most this long before the filter returns its stop status (µs).
_CALL_START_US = 10_000
AUTHZ = r"(?i)authz|authoriz"
RATE_LIMIT = r"(?i)rate[_-]?limit"


class WorkKind(StrEnum):
    """What an internal burst of work was (the ``kind`` of :func:`work_bursts` and ``internal_kind``)."""

    TRACING_FLUSH = "tracing flush"
    EXT_AUTHZ = "ext_authz call"
    RATE_LIMIT = "rate limit call"
    FILTER_CALL = "filter call"
    INTERNAL_REQUEST = "internal request"
    HEALTH_CHECK = "health check"


#: Kinds charged to ``tracing_us``; every other kind is charged to ``internal_us``.
TRACING_KINDS = (WorkKind.TRACING_FLUSH,)

STREAMS_SCHEMA: dict[str, pl.DataType] = {
    "work_uid": pl.String(), "kind": pl.String(), "owner_uid": pl.String(), "call_start_us": pl.Int64(),
    "call_end_us": pl.Int64(),
}
BURSTS_SCHEMA: dict[str, pl.DataType] = {
    "work_uid": pl.String(), "kind": pl.String(), "label": pl.String(), "owner_uid": pl.String(),
    "origin": pl.String(), "thread": pl.Int64(), "start_us": pl.Int64(), "end_us": pl.Int64(),
}
ROWS_SCHEMA: dict[str, pl.DataType] = {
    "request_uid": pl.String(), "detail": pl.String(), "start_us": pl.Int64(), "end_us": pl.Int64(),
    "dur_us": pl.Int64(), "tracing": pl.Boolean(),
}


def is_work_row() -> pl.Expr:
    """``phases`` rows that charge internal work to a request (their ``detail`` starts with a :class:`WorkKind`)."""
    return pl.col("detail").str.starts_with(WorkKind.TRACING_FLUSH.value) | pl.col("detail").str.contains(
        "^(" + "|".join(k.value for k in WorkKind) + ") ")


def _async_streams(requests: pl.DataFrame) -> pl.DataFrame:
    """Internal requests that are Envoy's own async-client streams (no connection-manager line: not admin).

    Envoy logs an async stream on connection 0; an admin request seen without its `new stream` (the tool's own
    ``POST /logging`` that raised the level, only its response's end logged) keeps its real connection.
    """
    if requests.height == 0:
        return requests.head(0)
    return requests.filter(pl.col("internal") & pl.col("ds_rx_beg_us").is_null() & pl.col("stream_id").is_not_null()
                           & (pl.col("conn_id") == 0))


def internal_streams(requests: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """Each async-client stream's kind, and for a filter call its owner and the span the owner waited.

    ``work_uid`` is the internal request's ``request_uid``; ``owner_uid`` the client request whose decoder filter
    made the call; ``call_start_us`` the filter's ``ext_authz filter calling …`` line (else the stream's first line),
    ``call_end_us`` the owner's ``continuing filter chain`` after it (else the stream's last line).
    """
    streams = _async_streams(requests)
    if streams.height == 0:
        return pl.DataFrame(schema=STREAMS_SCHEMA)
    flush = streams.select_seq(is_flush()).to_series()
    streams = streams.with_columns_seq(flush=flush).select_seq(
        "request_uid", "origin", "thread", "cluster", "flush", first_line="first_line_no", first_us="first_ts",
        last_us=pl.col("last_ts"))
    clients = requests.filter(~pl.col("internal")).select_seq(*_STREAM, owner_uid="request_uid")
    lines = pick(events.select_seq(*_STREAM, "thread", "line_no", "ts_us", "kind", "filter", "filter_status"),
        pl.col("stream_id").is_not_null() & pl.col("thread").is_not_null())
    # The next decoder-filter return on the same thread, after the stream's first line, of a client stream.
    decoded = joined(pick(lines, pl.col("kind") == EventKind.DECODE_HEADERS_CALLED), clients, on=_STREAM).select_seq(
        *_THREAD, "owner_uid", "filter", "filter_status", returned_line="line_no", returned_us="ts_us")
    found = streams.sort("first_line").join_asof(
        decoded.sort("returned_line"), left_on="first_line", right_on="returned_line", by=_THREAD,
        strategy="forward", check_sortedness=False)
    stopped = (pl.col("filter_status").fill_null(0) != 0) & (
        pl.col("returned_us") - pl.col("first_us") <= _CALL_START_US)
    found = found.with_columns_seq(owner_uid=pl.when(stopped & ~pl.col("flush")).then(pl.col("owner_uid")))
    name = pl.concat_str(pl.col("filter").fill_null(""), pl.lit(" "), pl.col("cluster").fill_null(""))
    kind = (pl.when(pl.col("flush")).then(pl.lit(WorkKind.TRACING_FLUSH.value))
            .when(name.str.contains(AUTHZ)).then(pl.lit(WorkKind.EXT_AUTHZ.value))
            .when(name.str.contains(RATE_LIMIT)).then(pl.lit(WorkKind.RATE_LIMIT.value))
            .when(pl.col("owner_uid").is_not_null()).then(pl.lit(WorkKind.FILTER_CALL.value))
            .otherwise(pl.lit(WorkKind.INTERNAL_REQUEST.value)))
    found = found.with_columns_seq(kind=kind)
    owned = pick(found, pl.col("owner_uid").is_not_null())
    if owned.height == 0:
        return found.select_seq("kind", "owner_uid", work_uid="request_uid", call_start_us=pl.lit(None, pl.Int64),
                                call_end_us=pl.lit(None, pl.Int64)
                                ).select_seq(list(STREAMS_SCHEMA)).cast(STREAMS_SCHEMA)  # type: ignore[arg-type]
    owner_lines = joined(lines, joined(clients, owned.select_seq("owner_uid").unique(), on="owner_uid"), on=_STREAM)
    calling = pick(owner_lines, pl.col("kind") == EventKind.EXT_AUTHZ_CALLING).select_seq(
        "owner_uid", calling_us="ts_us").sort("calling_us")
    resumed = pick(owner_lines, pl.col("kind") == EventKind.CONTINUING_FILTER_CHAIN).select_seq(
        "owner_uid", resumed_us="ts_us").sort("resumed_us")
    owned = owned.sort("first_us").join_asof(calling, left_on="first_us", right_on="calling_us", by="owner_uid",
                                             strategy="backward", tolerance=_CALL_START_US, check_sortedness=False)
    owned = owned.sort("first_us").join_asof(resumed, left_on="first_us", right_on="resumed_us", by="owner_uid",
                                             strategy="forward", check_sortedness=False)
    owned = owned.select_seq("request_uid", call_start_us=pl.coalesce("calling_us", "first_us"),
                             call_end_us=pl.coalesce("resumed_us", "last_us"))
    return joined(found, owned, on="request_uid", how="left").select_seq(
        "kind", "owner_uid", "call_start_us", "call_end_us", work_uid="request_uid").select_seq(
        list(STREAMS_SCHEMA)).cast(STREAMS_SCHEMA)  # type: ignore[arg-type]


def _health_check_connections(events: pl.DataFrame) -> pl.DataFrame:
    """``origin, thread, conn_id`` of the health checker's connections (they log `hc response_code=…`)."""
    return pick(events.select_seq(*_THREAD, "conn_id", "kind"),
        pl.col("kind").is_in(HEALTH_CHECK_RESULT_KINDS) & pl.col("conn_id").is_not_null()
        & pl.col("thread").is_not_null()).select_seq(*_THREAD, "conn_id").unique()


def _health_check_lines(lines: pl.DataFrame, checks: pl.DataFrame) -> pl.DataFrame:
    """``line_no, origin, work_uid`` of the checker connections' lines without a stream id."""
    uid = pl.concat_str(pl.col("origin"), pl.lit(":C"), pl.col("conn_id").cast(pl.String), pl.lit(":hc"))
    return joined(pick(lines, pl.col("stream_id").is_null()), checks, on=[*_THREAD, "conn_id"]).select_seq(
        pl.col("line_no").cast(pl.Int64), "origin", work_uid=uid)


def _burst_starts(owner: str, checking: pl.Expr, by: list[str] | None = None) -> pl.Expr:
    """Where a burst starts among a thread's lines that have a connection id, in line order (``prev_ts``: the time of
    the line before, of any kind; ``wakeup``: a `socket event`).

    A burst ends at a line of another ``owner``, and at a `socket event` (the thread woke up again after waiting: for
    a connect or an answer). A health check also starts on its timer, which logs nothing: on a ``checking`` line,
    after a silence longer than an idle gap, a new burst starts (a silence inside a stream's run is silent work, such
    as a flush's span serialisation, and stays in it).
    """
    before = pl.col(owner).shift(1)
    idle = checking & ((pl.col("ts_us") - pl.col("prev_ts")) > IDLE_GAP_US)
    return pl.col(owner).ne_missing(before.over(by) if by else before) | pl.col("wakeup") | idle


def work_bursts(requests: pl.DataFrame, events: pl.DataFrame, streams: pl.DataFrame | None = None) -> pl.DataFrame:
    """Worker time of Envoy's own work: one row per burst (``BURSTS_SCHEMA``; ``label`` e.g. ``health check C0``).

    ``requests`` needs ``request_uid, origin, thread, internal, conn_id, stream_id, upstream_conn_id, cluster,
    path, ds_rx_beg_us, first_ts, last_ts, first_line_no, life_start_us, life_end_us``.
    """
    empty = pl.DataFrame(schema=BURSTS_SCHEMA)
    if streams is None:
        streams = internal_streams(requests, events)
    checks = _health_check_connections(events)
    if streams.height == 0 and checks.height == 0:
        return empty
    lines = pick(events, pl.col("thread").is_not_null()).select_seq(
        *_THREAD, "line_no", "ts_us", "conn_id", "stream_id", wakeup=pl.col("kind") == EventKind.SOCKET_EVENT)
    owners: list[pl.DataFrame] = [_health_check_lines(lines, checks)]
    if streams.height:
        own = _async_streams(requests).select_seq(
            work_uid="request_uid", origin="origin", conn_id="conn_id", stream_id="stream_id",
            upstream_conn_id="upstream_conn_id", last_us="life_end_us")
        own_stream = joined(lines, own.select_seq("work_uid", *_STREAM), on=_STREAM, how="inner").select_seq(
            "line_no", "origin", "work_uid")
        bounds = joined(own_stream, lines.select_seq("origin", "line_no", "ts_us"), on=["origin", "line_no"]).group_by(
            "work_uid").agg(first_ts=pl.col("ts_us").min(), last_ts=pl.col("ts_us").max())
        upstream = joined(pick(own, pl.col("upstream_conn_id").is_not_null()), bounds, on="work_uid").select_seq(
            "work_uid", "origin", pl.col("upstream_conn_id").alias("conn_id"), "first_ts",
            last_ts=pl.max_horizontal("last_ts", "last_us"))
        own_upstream = pick(joined(lines, upstream, on=["origin", "conn_id"], how="inner"),
            pl.col("ts_us").is_between("first_ts", "last_ts") & pl.col("stream_id").is_null()).select_seq(
            "line_no", "origin", "work_uid")
        owners += [own_stream, own_upstream]
    owner = pl.concat([o.cast({"line_no": pl.Int64}) for o in owners]).unique(["origin", "line_no"], keep="first")
    if owner.height == 0:
        return empty
    lines = lines.with_columns_seq(pl.col("line_no").cast(pl.Int64))
    threads = joined(lines, owner, on=["origin", "line_no"], how="semi").select_seq(*_THREAD).unique()
    marked = joined(joined(lines, threads, on=_THREAD, how="semi"), owner, on=["origin", "line_no"], how="left").sort(
        *_THREAD, "line_no").with_columns_seq(prev_ts=pl.col("ts_us").shift(1).over(_THREAD))
    # Lines without a connection id (deferred deletion, timers) neither belong to a burst nor break one.
    with_ids = pick(marked, pl.col("conn_id").is_not_null() | pl.col("work_uid").is_not_null())
    new_run = _burst_starts("work_uid", pl.col("work_uid").str.ends_with(":hc").fill_null(False), by=_THREAD)
    with_ids = with_ids.with_columns_seq(run=new_run.cast(pl.Int64).cum_sum().over(_THREAD))
    runs = pick(with_ids, pl.col("work_uid").is_not_null()).group_by(*_THREAD, "run", "work_uid").agg(
        head_ts=pl.col("ts_us").first(), prev_ts=pl.col("prev_ts").first(), end_us=pl.col("ts_us").last())
    kinds = streams.select_seq("work_uid", "kind", "owner_uid")
    runs = joined(runs, kinds, on="work_uid", how="left").with_columns_seq(
        kind=pl.col("kind").fill_null(WorkKind.HEALTH_CHECK.value))
    runs = runs.sort("head_ts").with_columns_seq(first=pl.col("head_ts").rank("ordinal").over("work_uid") == 1)
    # A flush triggered by a full batch runs inside the processing of the request whose span filled it: its first
    # burst starts where the worker stopped logging before it (span serialisation). A flush on the tracer's
    # timer follows an idle worker: that gap is idle time, not work.
    clients = requests.filter(~pl.col("internal") & pl.col("life_start_us").is_not_null()).select_seq(
        *_THREAD, "life_start_us", "life_end_us")
    inside = pick(joined(pick(runs, "first"), clients, on=_THREAD, how="inner"),
        pl.col("head_ts").is_between("life_start_us", "life_end_us")).select_seq(*_THREAD, "run").unique()
    runs = joined(runs, inside.with_columns_seq(in_request=pl.lit(True)), on=[*_THREAD, "run"], how="left")
    serialising = (pl.col("first") & pl.col("in_request").fill_null(False)
                   & (pl.col("kind") == WorkKind.TRACING_FLUSH.value))
    start = pl.when(serialising).then(pl.coalesce("prev_ts", "head_ts")).otherwise(pl.col("head_ts"))
    return runs.select_seq("work_uid", "kind", label=work_label(), owner_uid="owner_uid", origin="origin",
                           thread="thread", start_us=start, end_us="end_us"
                           ).cast(BURSTS_SCHEMA)  # type: ignore[arg-type]


def work_label() -> pl.Expr:
    """``<kind> S<stream>`` for an internal request (``work_uid`` ``ORIGIN:C0:S<stream>``), ``<kind> C<conn>`` for a
    health checker's connection (``ORIGIN:C<conn>:hc``)."""
    parts = pl.col("work_uid").str.split(":")
    tail = pl.when(pl.col("work_uid").str.ends_with(":hc")).then(parts.list.get(-2, null_on_oob=True)).otherwise(
        parts.list.last())
    return pl.col("kind") + pl.lit(" ") + tail


#: Lines a health checker's connection logs before its first result (connecting, the first check's request) come at
#: most this long before it, in log time: the check's timeout, or the cluster's connect timeout (5 s by default).
HC_FIRST_RESULT_US = 10_000_000
_RUNS_SCHEMA: dict[str, pl.DataType] = {"conn_id": pl.Int64(), "start_us": pl.Int64(), "end_us": pl.Int64()}


@dataclass
class HealthCheckBursts:
    """The health-check bursts of one thread whose lines come part by part, in order (``streaming.py``): the
    ``kind == health check`` rows :func:`work_bursts` gives over the whole capture.

    Each step splits the lines, after those carried from the previous step, into runs of one connection's lines
    without a stream id (:func:`_burst_starts`). A run is closed once a later line with a connection id starts
    another; the last run stays open and its lines are carried, so a burst across two steps is found once, whole. A
    closed run is a burst if its connection is a checker (it logs a health-check result on this thread, before or
    after the run): the runs of other connections wait ``HC_FIRST_RESULT_US`` of log time for such a line.
    """

    origin: str
    thread: int
    #: connections that logged a health-check result
    checkers: set[int] = field(default_factory=set)
    #: lines from the head of the open run on (without one, the last line): the next step continues after them
    carried: pl.DataFrame | None = None
    #: closed runs of connections not known as checkers yet (``conn_id, start_us, end_us``)
    waiting: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=_RUNS_SCHEMA))

    def step(self, lines: pl.DataFrame, final: bool = False) -> pl.DataFrame:
        """The bursts (``BURSTS_SCHEMA``) closed by the thread's next ``lines`` (``EVENT_SCHEMA``, all with this
        thread id); at ``final`` (no line follows), every burst left."""
        results = pick(lines.select_seq("conn_id", "kind"), pl.col("kind").is_in(HEALTH_CHECK_RESULT_KINDS)
                                                             & pl.col("conn_id").is_not_null())["conn_id"]
        self.checkers.update(results.to_list())
        new = lines.select_seq(
            "line_no", "ts_us", owner=pl.when(pl.col("stream_id").is_null()).then(pl.col("conn_id")),
            has_id=pl.col("conn_id").is_not_null(), wakeup=pl.col("kind") == EventKind.SOCKET_EVENT)
        new = in_order(new, "line_no").drop("line_no")
        seq = pl.concat([self.carried, new]) if self.carried is not None else new
        seq = seq.with_row_index("row").with_columns_seq(prev_ts=pl.col("ts_us").shift(1))
        ids = pick(seq, "has_id").with_columns_seq(
            run=_burst_starts("owner", pl.col("owner").is_not_null()).cast(pl.Int64).cum_sum())
        # The last run is open (the next lines may continue it) unless nothing follows.
        last = ids.tail(1)
        open_run = None if final or last.height == 0 or last["owner"][0] is None else int(last["run"][0])
        # A run is a stretch of rows with one owner: its first row gives its start, its last its end (no grouping).
        kept = pl.col("owner").is_not_null() & pl.col("run").ne_missing(open_run)
        ends = ids.select_seq("owner", "ts_us", kept=kept, head=pl.col("run").ne_missing(pl.col("run").shift(1)),
                              tail=pl.col("run").ne_missing(pl.col("run").shift(-1)))
        runs = pl.concat([pick(ends, pl.col("kept") & pl.col("head")).select_seq(conn_id="owner", start_us="ts_us"),
                          pick(ends, pl.col("kept") & pl.col("tail")).select_seq(end_us="ts_us")], how="horizontal")
        runs = pl.concat([self.waiting, runs.select_seq(list(_RUNS_SCHEMA))])
        if self.checkers:
            checking = pl.col("conn_id").is_in(pl.Series(list(self.checkers), dtype=pl.Int64).implode())
            done, waiting = pick(runs, checking), pick(runs, ~checking)
        else:  # (a thread that logged no health-check result yet, as in most captures: every run waits)
            done, waiting = runs.clear(), runs
        if final:
            self.carried, self.waiting = None, waiting.head(0)
        elif seq.height:
            head = int(pick(ids, pl.col("run") == open_run)["row"][0]) if open_run is not None else seq.height - 1
            self.carried = seq.slice(head).select_seq(new.columns)
            newest = pl.lit(seq["ts_us"].max(), pl.Int64)
            self.waiting = pick(waiting, pl.col("end_us") >= newest - HC_FIRST_RESULT_US)
        if done.height == 0:
            return pl.DataFrame(schema=BURSTS_SCHEMA)
        bursts = done.sort("start_us").with_columns_seq(
            work_uid=pl.format("{}:C{}:hc", pl.lit(self.origin), pl.col("conn_id")),
            kind=pl.lit(WorkKind.HEALTH_CHECK.value))
        return bursts.select_seq("work_uid", "kind", label=work_label(), owner_uid=pl.lit(None, pl.String),
                                 origin=pl.lit(self.origin), thread=pl.lit(self.thread, pl.Int64), start_us="start_us",
                                 end_us="end_us").cast(BURSTS_SCHEMA)  # type: ignore[arg-type]


def charged_rows(requests: pl.DataFrame, bursts: pl.DataFrame, streams: pl.DataFrame) -> pl.DataFrame:
    """Per client request, the internal work that took its time (``ROWS_SCHEMA``; ``tracing`` = a tracing row).

    Bursts overlapping its life on its thread (other requests' calls: ``… (another request's)``), and the whole
    span of each call a filter of its own made (``ext_authz call S…``: call start → filter chain resumed).
    """
    clients = requests.filter(~pl.col("internal") & pl.col("b0").is_not_null()).select_seq(
        "request_uid", *_THREAD, "b0", "b9")
    out = []
    if bursts.height:
        hit = pick(joined(bursts, clients, on=_THREAD, how="inner"),
            (pl.col("start_us") < pl.col("b9")) & (pl.col("end_us") > pl.col("b0"))
            & pl.col("owner_uid").ne_missing(pl.col("request_uid")))
        start = pl.max_horizontal("start_us", "b0")
        end = pl.min_horizontal("end_us", "b9")
        other = pl.when(pl.col("owner_uid").is_not_null()).then(pl.lit(" (another request's)")).otherwise(pl.lit(""))
        out.append(hit.select_seq("request_uid", detail=pl.col("label") + other, start_us=start, end_us=end,
                                  dur_us=end - start, tracing=pl.col("kind").is_in([k.value for k in TRACING_KINDS])))
    calls = pick(streams, pl.col("owner_uid").is_not_null())
    if calls.height:
        own = calls.join(clients.select_seq("request_uid"), left_on="owner_uid", right_on="request_uid").select_seq(
            request_uid="owner_uid", detail=work_label(), start_us="call_start_us", end_us="call_end_us",
            dur_us=pl.col("call_end_us") - pl.col("call_start_us"), tracing=pl.lit(False))
        out.append(own)
    if not out:
        return pl.DataFrame(schema=ROWS_SCHEMA)
    rows = pl.concat([o.cast(ROWS_SCHEMA) for o in out])  # type: ignore[arg-type]
    return pick(rows, pl.col("dur_us") > 0)


def covered_us(rows: pl.DataFrame) -> pl.DataFrame:
    """``request_uid, covered_us``: the time the rows of each request cover (overlapping rows counted once)."""
    ordered = rows.sort("request_uid", "start_us").with_columns_seq(
        reached=pl.col("end_us").cum_max().shift(1).over("request_uid"))
    part = (pl.col("end_us") - pl.max_horizontal("start_us", pl.coalesce("reached", "start_us"))).clip(lower_bound=0)
    return ordered.group_by("request_uid").agg(covered_us=part.sum())


def charged_shares(rows: pl.DataFrame) -> pl.DataFrame:
    """``request_uid, flush_us, internal_us``: the tracing rows' sum and the other rows' covered time."""
    tracing = pick(rows, "tracing").group_by("request_uid").agg(flush_us=pl.col("dur_us").sum())
    other = covered_us(pick(rows, ~pl.col("tracing"))).rename({"covered_us": "internal_us"})
    return tracing.join(other, on="request_uid", how="full", coalesce=True)


def own_work(bursts: pl.DataFrame, streams: pl.DataFrame) -> pl.DataFrame:
    """Per internal request: ``internal_kind``, its own worker time ``internal_work_us`` (its bursts), and
    ``flush_work_us`` (the same, for tracing flushes only)."""
    work = bursts.group_by("work_uid").agg(internal_work_us=(pl.col("end_us") - pl.col("start_us")).sum())
    kinds = streams.select_seq("work_uid", internal_kind="kind")
    out = joined(kinds, work, on="work_uid", how="left").with_columns_seq(
        flush_work_us=pl.when(pl.col("internal_kind") == WorkKind.TRACING_FLUSH.value).then(
            pl.col("internal_work_us")))
    return out.rename({"work_uid": "request_uid"})
