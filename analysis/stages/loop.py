"""Event-loop model: each worker's busy slices, and how long a request's events waited for the worker.

A worker thread runs one event at a time. Envoy logs ``socket event: N`` when the
loop dispatches a file event, so every ``socket event`` line opens a *slice* that
lasts until the line before the next one on that thread (silent CPU such as a Lua
script stays inside its slice). Slices separated by at most ``IDLE_GAP_US`` form a
*busy run*: the loop never went back to waiting in between.

``queue_before_read_us`` and ``loop_queue_us`` estimate how long an event of the request
was ready while the worker was serving other connections, at the wait points in
``WAIT_POINTS``: before the read that starts the request (``queue_before_read_us``, outside
``total_us``), and inside its life (``loop_queue_us``, a share of the phases): the new
upstream connection's connect completion, the upstream write, the upstream response read,
the final downstream write. At each, a lower bound says when the event could have been ready at the
earliest (e.g. the response cannot arrive before the request was written plus the
fastest upstream wait seen for its cluster); see docs/phases.md.

The estimate is the time between that lower bound and the moment the event was served;
the connections served meanwhile are listed.
"""
from __future__ import annotations

import numpy as np
import polars as pl

from envoy_dissector.analysis.engine.asof import asof
from envoy_dissector.analysis.engine.spill import constant_columns, gathered, grouped_by_varying
from envoy_dissector.analysis.schema import (
    LOOP_SCHEMA,
    PHASES_SCHEMA,
    QUEUED_REQUEST_SCHEMA,
    QUEUEING_SCHEMA,
    WORKER_SCHEMA,
    Phase,
    conform,
)
from envoy_dissector.analysis.stages.requests import UID_COLUMNS, request_uid
from envoy_dissector.analysis.stats import percentile_expr, rows_where
from envoy_dissector.parser import extension
from envoy_dissector.parser.kinds import EventKind

IDLE_GAP_US = 100
#: A request *waited* for its worker when its loop queueing (before its first read plus inside its life)
#: reached this; the worker table counts such requests and findings weigh harm by them (docs/findings.md).
WAITED_US = 1_000
MIN_SAMPLES = 5
#: Lines a timer callback starts with (fault delay expired, retry back-off over): after an idle gap on the
#: thread they open a new slice, because no ``socket event`` line marks a timer event.
TIMER_RESUME_KINDS = (EventKind.CONTINUING_FILTER_CHAIN, EventKind.PERFORMING_RETRY)
#: Lines that begin work of their own (a listener accepting a connection, the dispatcher exiting, a signal
#: handled): after an idle gap they open a new slice even inside a socket event's slice.
WAKE_KINDS = (EventKind.NEW_CONNECTION, EventKind.WORKER_NOISE, EventKind.SERVER_LIFECYCLE_NOISE)
#: A gap this long before a line of no connection is the loop waiting, not silent CPU: a connection's silent
#: CPU (a Lua script, a Wasm call) is followed by that connection's lines or by its VM's, within a few ms.
UNATTRIBUTED_IDLE_US = 10_000
_EVENT_KIND = {1: "read", 2: "write", 3: "read+write", 4: "closed", 5: "read+closed", 6: "write+closed",
               7: "read+write+closed"}


def _threadless_origins(events: pl.DataFrame) -> pl.Series:
    return events.group_by("origin").agg(pl.col("thread").is_null().all().alias("none")).filter("none")["origin"]


def has_thread_ids(events: pl.DataFrame) -> bool:
    """Whether every origin's format logged thread ids (else ``infer_threads`` places its connections on lanes)."""
    return events["thread"].null_count() == 0 or _threadless_origins(events).len() == 0


def infer_threads(events: pl.DataFrame, links: pl.DataFrame) -> tuple[pl.DataFrame, str | None]:
    """Without thread ids, place connections on inferred worker lanes.

    Connections linked by a request (``links``: origin, downstream_conn_id, upstream_conn_id; see
    ``requests.connection_links``) share a worker. Each linked group's
    busy slices (cut at its ``socket event`` lines) are packed first-fit into lanes whose slices
    never overlap: a lane is a worker that certainly existed; the true worker count may be larger.
    Lines without a connection id go to the lane whose slice covers them. Lane numbers are
    negative to mark them inferred.
    """
    if has_thread_ids(events):
        return events, None
    threadless = _threadless_origins(events)
    if threadless.len() < events["origin"].n_unique():
        # Several captures, some with thread ids: infer lanes only where they are missing, keep the row order.
        indexed = events.with_row_index("row__")
        mine = pl.col("origin").is_in(threadless.implode())
        inferred, note = infer_threads(indexed.filter(mine).drop("row__"), links.filter(mine))
        inferred = inferred.with_columns_seq(indexed.filter(mine)["row__"])
        return pl.concat([indexed.filter(~mine),
                          inferred.select_seq(indexed.columns)]).sort("row__").drop("row__"), note
    parent: dict[tuple[str, int], tuple[str, int]] = {}

    def find(x: tuple[str, int]) -> tuple[str, int]:
        while parent.get(x, x) != x:
            x = parent[x]
        return x

    for origin, down, up in links.select_seq("origin", "downstream_conn_id", "upstream_conn_id").iter_rows():
        if down is not None and up is not None:
            a, b = find((origin, down)), find((origin, up))
            if a != b:
                parent[a] = b
    conn_lines = events.select_seq("origin", "conn_id", "ts_us", "line_no",
                                   "kind").filter(pl.col("conn_id").is_not_null())
    conns = conn_lines.select_seq("origin", "conn_id").unique().rows()
    # (a group is named by its first connection, not by the union's root, which depends on the links' order: the
    # streaming engine gives them in the order requests finished, and ties in a group's first slice are broken by it)
    roots = pl.DataFrame([(o, c, "{}|{}".format(*find((o, c)))) for o, c in conns],
                         schema={"origin": pl.String, "conn_id": pl.Int64, "root": pl.String}, orient="row")
    group_of = roots.with_columns_seq(group=pl.col("conn_id").min().over("origin", "root")).drop("root")
    lines = conn_lines.join(group_of, on=["origin", "conn_id"]).sort("origin", "group", "ts_us", "line_no")
    lines = lines.with_columns_seq(slice=(pl.col("kind") == EventKind.SOCKET_EVENT).cast(pl.Int64).cum_sum().over(
        "origin", "group"))
    spans = lines.group_by("origin", "group", "slice").agg(s=pl.col("ts_us").min(), e=pl.col("ts_us").max())
    by_group = spans.group_by("origin", "group").agg(pl.col("s"), pl.col("e"), first=pl.col("s").min()).sort(
        "first", "origin", "group")
    lanes: dict[str, list[_Lane]] = {}
    lane_rows: list[tuple[str, int, int]] = []
    for origin, group, starts, ends, _ in by_group.iter_rows():
        mine_s, mine_e = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
        order = np.lexsort((mine_e, mine_s))
        mine_s, mine_e = mine_s[order], mine_e[order]
        origin_lanes = lanes.setdefault(origin, [])
        for i, lane in enumerate(origin_lanes):  # noqa: B007 (i names the lane found, read after the loop)
            if not lane.overlaps(mine_s, mine_e):
                lane.add(mine_s, mine_e)
                break
        else:
            origin_lanes.append(_Lane())
            origin_lanes[-1].add(mine_s, mine_e)
            i = len(origin_lanes) - 1
        lane_rows.append((origin, group, -(i + 1)))
    lane_of = group_of.join(pl.DataFrame(lane_rows, schema={"origin": pl.String, "group": pl.Int64,
                                                            "lane": pl.Int64}, orient="row"),
                            on=["origin", "group"]).select_seq("origin", "conn_id", "lane")
    # Only the lane column is looked up (joining the whole events frame would copy every column).
    lanes_of_lines = events.select_seq("origin", "conn_id").join(lane_of, on=["origin", "conn_id"], how="left",
                                                                 maintain_order="left")["lane"]
    events = events.with_columns_seq(thread=lanes_of_lines)
    # Lines without a connection id: the lane whose latest slice started before them.
    lane_spans = spans.join(lane_of.join(group_of, on=["origin", "conn_id"]).select_seq("origin", "group", "lane")
                            .unique(), on=["origin", "group"]).select_seq("origin", "s", "e", "lane").sort(
        "origin", "s", "e", "lane")
    events = asof(events, lane_spans, left_on="ts_us", right_on="s", by=["origin"], strategy="backward",
                  take={"lane": "covering_lane", "e": "covering_end"})
    events = events.with_columns_seq(thread=pl.coalesce(
        "thread", pl.when(pl.col("ts_us") <= pl.col("covering_end") + IDLE_GAP_US).then(pl.col("covering_lane"))
    )).drop("covering_lane", "covering_end")
    n_lanes = sum(len(v) for v in lanes.values())
    note = (f"no thread ids: {len(conns)} connections placed on {n_lanes} inferred worker lane(s) "
            "(connections linked by a request share a lane; a lane's event slices never overlap); "
            "confidence is lower than with %t in the log format")
    return events, note


class _Lane:
    """One inferred worker's slices: closed intervals that never overlap, so sorted by start their ends are
    sorted too, and "does [s, e] overlap any?" is one binary search: the last interval starting at or before
    e is the one reaching furthest. New intervals wait in a small sorted buffer merged in now and then,
    so packing stays near-linear instead of comparing every slice with every slice of the lane."""

    MERGE_AT = 8192

    def __init__(self) -> None:
        self.s = self.e = self.ps = self.pe = np.empty(0, dtype=np.int64)

    @staticmethod
    def _hits(lane_s: np.ndarray, lane_e: np.ndarray, s: np.ndarray, e: np.ndarray) -> bool:
        if lane_s.size == 0:
            return False
        last = np.searchsorted(lane_s, e, side="right") - 1
        seen = last >= 0
        return bool(np.any(lane_e[last[seen]] >= s[seen]))

    def overlaps(self, s: np.ndarray, e: np.ndarray) -> bool:
        return self._hits(self.s, self.e, s, e) or self._hits(self.ps, self.pe, s, e)

    def add(self, s: np.ndarray, e: np.ndarray) -> None:
        ps, pe = np.concatenate([self.ps, s]), np.concatenate([self.pe, e])
        order = np.lexsort((pe, ps))
        self.ps, self.pe = ps[order], pe[order]
        if self.ps.size >= self.MERGE_AT:  # both sorted, never overlapping: insert the buffer in place
            at = np.searchsorted(self.s, self.ps)
            self.s, self.e = np.insert(self.s, at, self.ps), np.insert(self.e, at, self.pe)
            self.ps = self.pe = np.empty(0, dtype=np.int64)


def slices(events: pl.DataFrame) -> pl.DataFrame:
    """The ``loop`` frame: busy slices per (origin, thread)."""
    lines = events.select_seq("origin", "thread", "ts_us", "line_no", "kind", "conn_id", "events").filter(
        pl.col("thread").is_not_null())
    if lines.height == 0:
        return pl.DataFrame(schema=LOOP_SCHEMA)
    # One worker at a time (a handful of threads per origin): partitioning on an integer key is much cheaper
    # than sorting or windowing the whole capture on the origin string.
    code = pl.col("origin").cast(pl.Categorical).to_physical().cast(pl.Int64)
    lines = lines.with_columns_seq(key=code * (1 << 40) + pl.col("thread") + (1 << 39))
    out = pl.concat([_thread_slices(part.sort("ts_us", "line_no"))
                     for part in lines.partition_by("key", maintain_order=False)])
    out = out.sort("origin", "thread", maintain_order=True)
    return out.select_seq(list(LOOP_SCHEMA)).cast(LOOP_SCHEMA)  # type: ignore[arg-type]


#: Each line kind's part in the slice rules (``extension.loop_slices``), by its name.
SLICE_BITS = {EventKind.SOCKET_EVENT.value: extension.SOCKET_EVENT_BIT,
              **{k.value: extension.TIMER_RESUME_BIT for k in TIMER_RESUME_KINDS},
              **{k.value: extension.WAKE_BIT for k in WAKE_KINDS}}


def _thread_slices(lines: pl.DataFrame) -> pl.DataFrame:
    """Slices of one (origin, thread), its lines in time order: cut by the compiled pass where it is on
    (``extension.loop_slices``), else by polars (``_thread_slices_by_polars``, the reference)."""
    found = extension.loop_slices(lines["ts_us"], lines["kind"], lines["conn_id"], SLICE_BITS,
                                  IDLE_GAP_US, UNATTRIBUTED_IDLE_US)
    if found is None:
        return _thread_slices_by_polars(lines)
    first, last = found["first_row"], found["last_row"]
    opens, timer = pl.lit(found["opens"]), pl.lit(found["timer"])
    mask = pl.when(opens).then(pl.col("events"))
    # (one select over the slices' first lines: a query costs more than its few rows here)
    return lines.select_seq("origin", "thread", "ts_us", "conn_id", "events")[first].select_seq(
        "origin", "thread", start_us="ts_us", conn_id=pl.when(opens).then(pl.col("conn_id")), mask=mask, timer=timer,
        first_row=pl.lit(first), end_us=pl.lit(lines["ts_us"].gather(last)), last_row=pl.lit(last),
        lines=pl.lit((last - first + 1).cast(pl.UInt32)),
        kind=pl.when(timer).then(pl.lit("timer")).otherwise(
            mask.replace_strict(_EVENT_KIND, default="other", return_dtype=pl.String)))


def _thread_slices_by_polars(lines: pl.DataFrame) -> pl.DataFrame:
    """``_thread_slices`` by polars passes over every line."""
    # A slice opens at each `socket event`. Silent CPU inside an event (a Lua script) stays in its slice.
    # On a thread that has not dispatched a socket event yet (start-up, the main thread), idle gaps cut slices.
    gap = pl.col("ts_us") - pl.col("ts_us").shift(1)
    is_event = pl.col("kind") == EventKind.SOCKET_EVENT
    before_first = is_event.cast(pl.Int64).cum_sum() == 0
    # A timer callback (fault delay, retry back-off) logs no `socket event`: the idle wait before it must not
    # be counted as busy, so its first line opens a slice when it follows an idle gap.
    timer = pl.col("kind").is_in(TIMER_RESUME_KINDS) & (gap > IDLE_GAP_US)
    # A slice is contiguous work: after an idle gap, work of its own (an accept, shutdown) or a long-silent
    # line of no connection (a timer, the dispatcher waking) starts a new slice, so the last socket event
    # before shutdown does not stretch to the end of the capture.
    woke = ((pl.col("kind").is_in(WAKE_KINDS) & (gap > IDLE_GAP_US))
            | (pl.col("conn_id").is_null() & (gap >= UNATTRIBUTED_IDLE_US)))
    lines = lines.with_columns_seq(opens=is_event | ((gap > IDLE_GAP_US) & before_first) | timer | woke,
                                   timer=timer & ~is_event)
    lines = lines.with_columns_seq(slice=pl.col("opens").cast(pl.Int64).cum_sum())
    # Lines are in time order, so each slice is a run of rows: its first row opens it (when any does) and
    # its last row has its latest time. Read both ends of every run instead of grouping.
    lines = lines.with_row_index("row").with_columns_seq(
        head=(pl.col("slice") != pl.col("slice").shift(1)).fill_null(True),
        tail=(pl.col("slice") != pl.col("slice").shift(-1)).fill_null(True))
    heads = lines.filter("head").select_seq(
        "origin", "thread", start_us="ts_us", conn_id=pl.when(pl.col("opens")).then(pl.col("conn_id")),
        mask=pl.when(pl.col("opens")).then(pl.col("events")), timer="timer", first_row="row")
    tails = lines.filter("tail").select_seq(end_us="ts_us", last_row="row")
    out = pl.concat([heads, tails], how="horizontal").with_columns_seq(
        lines=(pl.col("last_row") - pl.col("first_row") + 1).cast(pl.UInt32))
    return out.with_columns_seq(kind=pl.when(pl.col("timer")).then(pl.lit("timer")).otherwise(
        pl.col("mask").replace_strict(_EVENT_KIND, default="other", return_dtype=pl.String)))


def busy_runs(loop: pl.DataFrame, idle_gap_us: int = IDLE_GAP_US) -> pl.DataFrame:
    """Slices with ``run_start_us``: the start of the busy run each belongs to."""
    loop = loop.sort("origin", "thread", "start_us")
    gap = pl.col("start_us") - pl.col("end_us").shift(1).over("origin", "thread")
    loop = loop.with_columns_seq(new_run=gap.is_null() | (gap > idle_gap_us))
    loop = loop.with_columns_seq(run=pl.col("new_run").cast(pl.Int64).cum_sum().over("origin", "thread"))
    return loop.with_columns_seq(run_start_us=pl.col("start_us").min().over("origin", "thread", "run"))


def _min_positive(expr: pl.Expr) -> pl.Expr:
    return expr.filter(expr >= 0).min()


#: The requests' columns the event-loop model reads.
_LOOP_READS = ("origin", "request_uid", "thread", "downstream_conn_id", "upstream_conn_id", "cluster", "first_line_no",
               "conn_first_ts", "total_us", "life_start_us", "life_end_us", "ds_rx_beg_us", "ds_tx_end_us",
               "us_cx_beg_us", "us_cx_end_us", "us_tx_beg_us", "us_read_start_ts", "b5")
BEFORE_READ = "before read"
#: Where a request waits for the loop: (name, event column, lower-bound column, lower bound is a slice end).
WAIT_POINTS = (
    (BEFORE_READ, "life_start_us", "ready_read_us", False),
    ("upstream connect", "us_cx_end_us", "ready_connect_us", False),
    ("upstream send", "b5", "us_tx_beg_us", True),
    ("upstream wait", "us_read_start_ts", "ready_response_us", False),
    ("downstream write", "life_end_us", "ds_tx_end_us", True),
)


def loop_queue(requests: pl.DataFrame, loop: pl.DataFrame, placed: pl.Expr | None = None
               ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The event-loop stage: requests (``PHASED_REQUEST_SCHEMA``) with ``queue_before_read_us`` (the wait
    before the request's first read, outside ``total_us``) and ``loop_queue_us`` (the waits inside its life,
    never more than ``total_us``), as ``QUEUED_REQUEST_SCHEMA``; and the queueing windows (``QUEUEING_SCHEMA``:
    one row per wait point that waited, with the connections served meanwhile).

    At each wait point the request's next event is served in some slice; it was ready no
    earlier than a lower bound (see module doc) and no earlier than the start of the busy
    run that slice belongs to. The queue is the time from the later of the two to the slice.
    For writes the lower bound is the end of the request's own slice that queued the bytes.

    ``placed`` (on ``requests``; default every request): the requests whose waits can be placed. The others still
    count in the minima and as a connection's previous request, but their waits are not looked up: their two
    columns are null (unmeasured) and they have no windows (a request without its read event, ``conclude``).
    """
    # (the model reads a few columns: they are sorted and joined, the wide frame is not copied;
    # origins are numbered in their sort order, so millions of lookup rows do not each carry a file name)
    # (`select`, not `requests["origin"]`: indexing a constant column makes the frame keep a full copy of it)
    names = pl.concat([requests.select_seq(pl.col("origin").unique()).to_series(),
                       loop.select_seq(pl.col("origin").unique()).to_series()]).unique().drop_nulls().sort()
    origin = pl.col("origin").cast(pl.Enum(names)).to_physical()
    loop = loop.select_seq(origin, "thread", "start_us", "end_us", "conn_id")
    runs = busy_runs(loop.drop("conn_id")).drop("new_run", "run")
    # A column of one value on every row (spill.constant_columns: a field one-line requests never set, one
    # origin) stays out of the sort and the windows, which would expand it to a value a row, and is added
    # back as that one value; a window partitioned by it is the whole frame.
    fixed = _constant_reads(requests, origin)

    def over(expr: pl.Expr, *keys: str) -> pl.Expr:
        varying = [k for k in keys if k not in fixed]
        return expr.over(varying) if varying else expr

    # HTTP/2 streams read in one socket read share life_start_us: break ties by stream start, then log order.
    order = [k for k in ("origin", "downstream_conn_id", "life_start_us", "ds_rx_beg_us", "first_line_no")
             if k not in fixed]
    # (the uid is not read here: its ~60 bytes a request are read from ``requests`` for the windows only; the
    # sort gathers columns of equal values once, spill.gathered: a one-line request's times are one timestamp)
    r = requests.select_seq(*([] if "origin" in fixed else [origin]),
                            *(c for c in _LOOP_READS[2:] if c not in fixed),
                            pos__=pl.int_range(pl.len(), dtype=pl.UInt32))
    if order:
        sorting, columns = r.select_seq(pl.arg_sort_by(order)).to_series(), r.get_columns()
        del r
        r = pl.DataFrame(gathered(columns, sorting))
    r = r.with_columns_seq(value.alias(name) for name, value in fixed.items())
    # (`r` is sorted by origin and connection first: a connection's requests are neighbours, and the previous
    # row's end is its previous request's when the two keys match; `shift(1).over(...)` hashed millions of
    # connections: 28 s and 200 MiB for 5 M of one request each)
    same = [pl.col(k).eq_missing(pl.col(k).shift(1)) for k in ("origin", "downstream_conn_id") if k not in fixed]
    previous_end = pl.col("life_end_us").shift(1)
    r = r.with_columns_seq(prev_end_us=pl.when(pl.all_horizontal(same)).then(previous_end) if same else previous_end)
    # (the minima are window expressions: three joins would each copy the millions of rows of `r`)
    waits = pl.col("us_read_start_ts") - pl.col("b5")
    connects = pl.col("us_cx_end_us") - pl.col("us_cx_beg_us")
    r = r.with_columns_seq(
        turnaround_us=over(_min_positive(pl.col("life_start_us") - pl.col("prev_end_us")), "origin"),
        # too few samples tell nothing about the upstream's speed
        min_wait_us=over(pl.when(waits.filter(waits >= 0).count() >= MIN_SAMPLES).then(_min_positive(waits)),
                         "origin", "cluster"),
        min_connect_us=over(pl.when(connects.filter(connects >= 0).count() >= MIN_SAMPLES)
                            .then(_min_positive(connects)), "origin", "cluster"))
    # (the requests stage knows each downstream connection's first line: a request cannot be read before it)
    r = r.with_columns_seq(
        ready_read_us=pl.max_horizontal(pl.col("prev_end_us") + pl.col("turnaround_us"), "conn_first_ts"),
        ready_response_us=pl.col("b5") + pl.col("min_wait_us").fill_null(0),
        ready_connect_us=pl.col("us_cx_beg_us") + pl.col("min_connect_us").fill_null(0),
    )
    # (what the lookups and the result read from here on: the other columns are let go before the blocks run)
    r = r.select_seq("origin", "thread", "downstream_conn_id", "upstream_conn_id", "total_us", "pos__",
                     *dict.fromkeys(c for _where, event, bound, _slice in WAIT_POINTS for c in (event, bound)))
    if placed is not None:  # (five lookup rows a request and their queues: 1.5 GiB for 10 M one-line requests)
        r = r.filter(requests.select_seq(placed).to_series().gather(r["pos__"]))
    # Each wait point's lookups (one as-of lookup per step for a block of rows; rows name their request by its
    # row in `r` and their wait point by its number: no strings repeated), a block of QUEUE_ROWS at a time, in
    # the order of wait point then row: what a block keeps is its queue and its windows (memory stays bounded
    # by a block however many requests there are, not by five lookup rows a request).
    runs = runs.sort("start_us")
    points: list[list[pl.Series]] = [[] for _ in WAIT_POINTS]
    waited: list[pl.DataFrame] = []
    # (a block runs on all wait points' rows it holds at once: each lookup's fixed cost, hashing the busy
    # slices by worker, is paid once a block, not once a wait point)
    for pieces in _blocks(r.height, len(WAIT_POINTS)):
        block = pl.concat([_wait_rows(r, i, at, rows) for i, at, rows in pieces])
        looked = _queued_at(block, runs, loop)
        offset = 0
        for i, _at, rows in pieces:
            points[i].append(looked["queue"].slice(offset, rows))
            offset += rows
        waited.append(looked.filter(pl.col("queue") > 0).select_seq(
            "row", "point", "origin", "thread", "downstream_conn_id", "upstream_conn_id", start_us="lb",
            end_us="slice_start"))
    queues = [pl.concat(point) if len(point) > 1 else point[0] for point in points]
    # (the lookup columns are let go: the last block still shares their buffers)
    del block, looked
    r = r.select_seq("total_us", "pos__").with_columns_seq(queue.alias(f"queue_{where.replace(' ', '_')}_us")
                       for queue, (where, *_rest) in zip(queues, WAIT_POINTS, strict=True))
    windows = pl.concat(waited)
    # Before the first read the request's life has not begun: that wait is outside total_us. The other wait
    # points lie between b0 and b9, so their sum is a share of the phases (clipped, in case windows overlap).
    inside = [pl.col(f"queue_{w[0].replace(' ', '_')}_us").fill_null(0) for w in WAIT_POINTS if w[0] != BEFORE_READ]
    added = r.select_seq(
        queue_before_read_us=pl.col(f"queue_{BEFORE_READ.replace(' ', '_')}_us").fill_null(0).cast(pl.Int64),
        loop_queue_us=pl.min_horizontal(pl.sum_horizontal(inside), pl.col("total_us").clip(lower_bound=0)
                                        ).cast(pl.Int64))
    # (the two columns are put back in the requests' own order: the wide frame is not copied)
    queued = requests.drop(added.columns, strict=False).hstack(
        added[r["pos__"].arg_sort()] if r.height == requests.height else _scattered(added, r["pos__"], requests.height))
    # (made from the columns it is made of, for the windows' requests only: ``conclude`` carries the uid as
    # one null value until the requests are in order)
    uids = requests.select_seq(pl.col(UID_COLUMNS).gather(r["pos__"].gather(windows["row"]))).select_seq(request_uid())
    del r  # (the lookup frame is let go before the served connections are listed: the two would peak together)
    queueing = windows.select_seq(
        uids.to_series(), pl.Series("where", [p[0] for p in WAIT_POINTS]).gather(
            windows["point"]), "start_us", "end_us", dur_us=pl.col("end_us") - pl.col("start_us"),
        conn_ids=_served_during(windows, loop))
    return conform(queued, QUEUED_REQUEST_SCHEMA), conform(queueing, QUEUEING_SCHEMA)


def _scattered(frame: pl.DataFrame, rows: pl.Series, height: int) -> pl.DataFrame:
    """``frame``'s columns put at ``rows`` of ``height`` rows, null elsewhere."""
    return pl.DataFrame([pl.repeat(None, height, dtype=dtype, eager=True).alias(name).scatter(rows, frame[name])
                         for name, dtype in frame.schema.items()])


def _blocks(rows: int, points: int) -> list[list[tuple[int, int, int]]]:
    """The lookup rows of ``points`` wait points of ``rows`` requests each (in the order of wait point, then
    request), cut into blocks of ``QUEUE_ROWS``: each block a list of (wait point, first request, requests)."""
    if rows == 0:
        return [[(point, 0, 0) for point in range(points)]]
    blocks = []
    for start in range(0, rows * points, QUEUE_ROWS):
        end = min(start + QUEUE_ROWS, rows * points)
        blocks.append([(p, max(start - p * rows, 0), min(end - p * rows, rows) - max(start - p * rows, 0))
                       for p in range(start // rows, (end - 1) // rows + 1)])
    return blocks


def _wait_rows(r: pl.DataFrame, point: int, at: int, rows: int) -> pl.DataFrame:
    """The lookup rows of wait point ``point`` for requests ``at`` .. ``at + rows`` of ``r``."""
    _where, event_col, bound_col, bound_is_slice = WAIT_POINTS[point]
    return r.slice(at, rows).select_seq(
        "origin", "thread", "downstream_conn_id", "upstream_conn_id",
        row=pl.int_range(at, at + pl.len(), dtype=pl.UInt32), point=pl.lit(point, dtype=pl.UInt8),
        event=event_col, bound=bound_col, bound_is_slice=pl.lit(bound_is_slice))


def _constant_reads(requests: pl.DataFrame, origin: pl.Expr) -> dict[str, pl.Expr]:
    """The columns of ``_LOOP_READS`` that hold one value on every row, each as that value (``origin`` as its
    number, ``origin`` the expression that numbers it)."""
    fixed = constant_columns(requests.select_seq(_LOOP_READS))
    first = requests.head(1).select_seq(*([origin.alias("origin")] if "origin" in fixed else []), *(
        name for name in fixed if name != "origin"))
    return {name: pl.lit(first.item(0, name), dtype=first.schema[name]) for name in first.columns}


def _queued_at(w: pl.DataFrame, runs: pl.DataFrame, loop: pl.DataFrame) -> pl.DataFrame:
    """``w`` (wait points: event, bound) with the slice that served each event (``slice_start``), the lower
    bound ``lb`` and the ``queue`` between them; ``runs``: the busy slices, sorted by start."""
    w = asof(w, runs, left_on="event", right_on="start_us", by=["origin", "thread"], strategy="backward",
             take={"start_us": "slice_start", "run_start_us": "run_start"})
    w = asof(w, runs, left_on="bound", right_on="start_us", by=["origin", "thread"], strategy="backward",
             take={"end_us": "bound_slice_end", "start_us": "bound_slice_start"})
    # Writes: the bound is the end of the slice that queued the bytes; the same slice as the event means
    # no new event, no wait.
    w = w.with_columns_seq(bound=pl.when(~pl.col("bound_is_slice")).then(pl.col("bound")).when(
        pl.col("bound_slice_start") == pl.col("slice_start")).then(pl.col("slice_start")).otherwise(
        pl.col("bound_slice_end")))
    w = _after_own_work(w, loop)
    w = w.with_columns_seq(lb=pl.max_horizontal("bound", "run_start", "own_end"))
    # Slices after `lb` and before the event belong to other connections (own ones moved `lb`);
    # the wait starts when the first of them starts: idle time before it is not queueing.
    w = asof(w, runs, left_on="lb", right_on="start_us", by=["origin", "thread"], strategy="forward",
             take={"start_us": "first_other"})
    w = w.with_columns_seq(lb=pl.when(pl.col("first_other") < pl.col("slice_start")).then(pl.col("first_other")))
    w = w.with_columns_seq(queue=(pl.col("slice_start") - pl.col("lb")).clip(lower_bound=0).fill_null(0).cast(pl.Int64))
    return w


def _after_own_work(w: pl.DataFrame, loop: pl.DataFrame) -> pl.DataFrame:
    """``own_end``: end of the last slice of the request's own connections before its event (not queueing)."""
    own = loop.filter(pl.col("conn_id").is_not_null()).select_seq("origin", "conn_id", "start_us", "end_us")
    w = w.with_columns_seq(before=pl.col("slice_start") - 1)
    w = asof(w, own.rename({"conn_id": "downstream_conn_id"}), left_on="before", right_on="start_us",
             by=["origin", "downstream_conn_id"], strategy="backward", take={"end_us": "own_down_end"})
    w = asof(w, own.rename({"conn_id": "upstream_conn_id"}), left_on="before", right_on="start_us",
             by=["origin", "upstream_conn_id"], strategy="backward", take={"end_us": "own_up_end"})
    return w.with_columns_seq(own_end=pl.max_horizontal("own_down_end", "own_up_end")).drop(
        "before", "own_down_end", "own_up_end")


#: Queueing windows written as phase rows at once.
RENDER_ROWS = 200_000
#: Wait points looked up at once by the event-loop model.
QUEUE_ROWS = 500_000
#: Slice rows gathered at once when listing the connections served during queueing windows.
EXPLODE_ROWS = 1_000_000


def _served_during(windows: pl.DataFrame, loop: pl.DataFrame) -> pl.Series:
    """Per queueing window (rows of ``windows``), the connections its worker served during it (``conn_ids``): in one
    compiled pass over the windows' slice ranges where the extension is on (``extension.served_connections``)."""
    if windows.height == 0:
        return pl.Series("conn_ids", [], dtype=pl.List(pl.Int64))
    if loop.select_seq(pl.col("conn_id").is_not_null().any()).item() is not True:  # no slice served a connection
        return pl.select(conn_ids=pl.repeat([], windows.height, dtype=pl.List(pl.Int64))).to_series()
    # Slices numbered per worker in time order; a window covers the index range of the slices starting
    # inside it (two as-of lookups), so the work is linear in the slices actually served, not windows × slices.
    numbered = loop.select_seq("origin", "thread", s="start_us", c="conn_id").sort("origin", "thread",
                                                                                   "s").with_columns_seq(
        idx=pl.int_range(pl.len(), dtype=pl.Int64))
    # (first and last row of each (worker, start) run of the sorted slices, without a hash table)
    first = ((pl.col("origin") != pl.col("origin").shift(1)) | (pl.col("thread") != pl.col("thread").shift(1))
             | (pl.col("s") != pl.col("s").shift(1))).fill_null(True)
    starts = numbered.filter(first).select_seq("origin", "thread", "s", lo="idx").with_columns_seq(
        hi=pl.col("lo").shift(-1).fill_null(numbered.height) - 1)
    w = windows.select_seq("origin", "thread", "downstream_conn_id", "upstream_conn_id", "start_us",
                           last_s=pl.col("end_us") - 1, win=pl.int_range(pl.len(), dtype=pl.UInt32))
    w = asof(w, starts, left_on="start_us", right_on="s", by=["origin", "thread"], strategy="forward",
             take={"lo": "first_idx"})
    w = asof(w, starts, left_on="last_s", right_on="s", by=["origin", "thread"], strategy="backward",
             take={"hi": "last_idx"})
    found = extension.served_connections(w["first_idx"], w["last_idx"], w["downstream_conn_id"],
                                         w["upstream_conn_id"], numbered["c"])
    return found.alias("conn_ids") if found is not None else _served_by_polars(w, numbered["c"])


def _served_by_polars(w: pl.DataFrame, conns: pl.Series) -> pl.Series:
    """``_served_during``'s lists from the windows' slice ranges (``first_idx``..``last_idx``, rows of ``conns``) by
    polars (the reference ``extension.served_connections`` is compared with)."""
    none = pl.lit([], dtype=pl.List(pl.Int64))
    # (a range of slices none of which names a connection serves none: it is not expanded slice by slice)
    named_before = pl.concat([pl.Series([0], dtype=pl.Int64), conns.is_not_null().cast(pl.Int64).cum_sum()])
    # (select before filtering: a filter copies every column it keeps)
    ranges = w.select_seq("win", "downstream_conn_id", "upstream_conn_id", "first_idx", "last_idx").filter(
        pl.col("first_idx") <= pl.col("last_idx"))
    ranges = ranges.filter(named_before.gather(ranges["last_idx"] + 1) > named_before.gather(ranges["first_idx"]))
    ranges = ranges.with_columns_seq(batch=(pl.col("last_idx") - pl.col("first_idx") + 1).cum_sum() // EXPLODE_ROWS)
    # (one row per slice served inside a window adds up to millions: they are made a batch of windows at a time)
    if ranges.height == 0:
        return pl.select(conn_ids=pl.repeat([], w.height, dtype=pl.List(pl.Int64))).to_series()
    names = pl.concat([_served(part, conns) for part in ranges.partition_by("batch", maintain_order=True)])
    return w.select_seq("win").join(names, on="win", how="left", maintain_order="left").select_seq(
        conn_ids=pl.col("conns").fill_null(none)).to_series()


def _served(ranges: pl.DataFrame, conns: pl.Series) -> pl.DataFrame:
    """Per window (``win``), the other connections served in its slice range, in the order they were served.

    ``first_idx``..``last_idx`` are rows of ``conns`` (the worker's slices in time order: lookups were by
    worker, so a range stays on the window's worker)."""
    w = ranges.select_seq("win", "downstream_conn_id", "upstream_conn_id",
                          idx=pl.int_ranges("first_idx", pl.col("last_idx") + 1, dtype=pl.Int64)).explode("idx")
    served = w.with_columns_seq(c=conns.gather(w["idx"])).filter(
        pl.col("c").is_not_null() & (pl.col("c") != pl.col("downstream_conn_id"))
        & (pl.col("c") != pl.col("upstream_conn_id").fill_null(-1)))
    return served.group_by("win", maintain_order=True).agg(conns=pl.col("c").unique(maintain_order=True))


def render_queueing(queueing: pl.DataFrame) -> pl.DataFrame:
    """``loop_queue`` rows for the phases frame: the windows with their connections as text for display
    (``upstream wait: C2 + C7``); readers that need the connections read ``queueing`` itself."""
    listed = pl.lit("C") + pl.col("conn_ids").cast(pl.List(pl.String)).list.join(" + C")  # (no per-element eval)
    rows = [part.select_seq("request_uid", phase=pl.lit(Phase.LOOP_QUEUE.value), detail=_queueing_detail(part, listed),
                            start_us="start_us", end_us="end_us", dur_us="dur_us",
                            part_of_total=pl.lit(False)).cast(PHASES_SCHEMA)  # type: ignore[arg-type]
            # (a block of windows at a time: the text of every listed connection is made, then joined)
            for part in queueing.iter_slices(RENDER_ROWS)]
    return pl.concat(rows) if rows else pl.DataFrame(schema=PHASES_SCHEMA)


NO_OTHER_CONNECTION = "(no other connection logged)"
#: A window that served no other connection, per wait point: its whole detail text.
_ALONE_DETAIL = pl.Series("detail", [f"{where}: {NO_OTHER_CONNECTION}" for where, *_rest in WAIT_POINTS])
_WAIT_POINT_NUMBER = {where: i for i, (where, *_rest) in enumerate(WAIT_POINTS)}


def _queueing_detail(part: pl.DataFrame, listed: pl.Expr) -> pl.Series:
    """Each window's detail text: ``where: C2 + C7``, or ``where: (no other connection logged)``."""
    # (the text is written only for windows that served other connections; the others point at one of the
    # few strings of _ALONE_DETAIL instead of each holding its own copy, ~45 bytes a window)
    rows = part.select_seq(served=pl.col("conn_ids").list.len() > 0, point=pl.col("where").replace_strict(
        _WAIT_POINT_NUMBER, default=None, return_dtype=pl.UInt32))
    written = rows.select_seq(own=pl.col("served") | pl.col("point").is_null())["own"]
    texts = part.filter(written).select_seq(pl.col("where") + pl.lit(": ") + pl.when(pl.col("conn_ids").list.len() > 0)
                                            .then(listed).otherwise(pl.lit(NO_OTHER_CONNECTION)))
    at = rows.select_seq(pl.when(written).then(written.cast(pl.UInt32).cum_sum() - 1 + _ALONE_DETAIL.len())
                         .otherwise("point"))
    return pl.concat([_ALONE_DETAIL, texts.to_series().alias("detail")]).gather(at.to_series())


def worker_threads(events: pl.DataFrame, requests: pl.DataFrame) -> pl.DataFrame:
    """(origin, thread) of workers: threads that logged `worker entering dispatch loop` or served requests."""
    started = events.filter((pl.col("kind") == EventKind.WORKER_NOISE)
                            & pl.col("message").str.starts_with("worker entering dispatch loop")
                            & pl.col("thread").is_not_null()).select_seq("origin", "thread")
    served = rows_where(requests, ~pl.col("internal") & pl.col("thread").is_not_null(), ("origin", "thread"))
    return pl.concat([started, served]).unique()


def traffic_windows(requests: pl.DataFrame) -> pl.DataFrame:
    """Per origin, the traffic window: the first client request's start (``w0``) to the last one's end (``w1``).
    A worker's utilisation (``worker_stats``) and the sidecar's cost (``cost.owned_slices``) count only the slices
    inside it."""
    client = rows_where(requests, ~pl.col("internal"), ("origin", "life_start_us", "life_end_us"))
    return grouped_by_varying(client, ("origin",), w0=pl.col("life_start_us").min(), w1=pl.col("life_end_us").max())


def in_window(slices: pl.LazyFrame, windows: pl.DataFrame) -> pl.LazyFrame:
    """The slices with some part inside their origin's traffic window (``windows``: :func:`traffic_windows`), that
    part from ``s`` to ``e``: the busy time ``worker_stats`` and the cost (``cost.owned_slices``) both count."""
    return slices.join(windows.lazy(), on="origin").with_columns_seq(
        s=pl.max_horizontal("start_us", "w0"), e=pl.min_horizontal("end_us", "w1")).filter(pl.col("e") > pl.col("s"))


def worker_stats(loop: pl.DataFrame, requests: pl.DataFrame, workers: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per worker: busy time inside the traffic window, its share of that window, requests and connections,
    and the harm queueing did there: ``waited`` complete requests that waited at least ``WAITED_US`` for the
    loop (before their first read plus inside their life) and the median of that wait (``wait_p50_us``).

    The traffic window runs from the first client request's start to the last one's end in the origin;
    ``busy_us`` counts only the slices' parts inside it (the slice that runs on to shutdown, start-up work
    and idle threads' housekeeping stay out), so ``utilisation = busy_us / window_us`` exactly.
    """
    # (the four columns read, in lazy passes a morsel at a time: a semi join or a join of the eager frame copies
    # every column of millions of slices, and even the four columns of the 5 GB corpus' 1.4 M slices held once were
    # +200 MiB at its report)
    spans = loop.lazy().select_seq("origin", "thread", "start_us", "end_us")
    if workers is not None:
        spans = spans.join(workers.lazy().select_seq("origin", "thread"), on=["origin", "thread"], how="semi")
    schema = WORKER_SCHEMA
    client = rows_where(requests, ~pl.col("internal"), (
        "origin", "thread", "complete", "downstream_conn_id", "queue_before_read_us", "loop_queue_us"))
    threads = spans.select_seq("origin", "thread").unique().collect(engine="streaming")
    if threads.height == 0 or client.height == 0:
        return pl.DataFrame(schema=schema)
    wait = pl.col("queue_before_read_us").fill_null(0) + pl.col("loop_queue_us").fill_null(0)
    counted = client.filter(pl.col("complete"))
    work = grouped_by_varying(client, ("origin", "thread"), requests=pl.len(),
                              connections=pl.col("downstream_conn_id").n_unique())
    harm = grouped_by_varying(counted, ("origin", "thread"), waited=(wait >= WAITED_US).sum().cast(pl.UInt32),
                              wait_p50_us=percentile_expr(wait, 0.5))
    window = traffic_windows(requests)
    busy_in = in_window(spans, window).group_by("origin", "thread").agg(
        busy_us=(pl.col("e") - pl.col("s")).sum()).collect(engine="streaming")
    out = (threads.join(window, on="origin", how="left").join(busy_in, on=["origin", "thread"], how="left")
           .join(work, on=["origin", "thread"], how="left").join(harm, on=["origin", "thread"], how="left"))
    out = out.with_columns_seq(window_us=(pl.col("w1") - pl.col("w0")).cast(pl.Int64),
                               busy_us=pl.col("busy_us").fill_null(0).cast(pl.Int64))
    return out.with_columns_seq(
        utilisation=(pl.col("busy_us") / pl.col("window_us").cast(pl.Float64)).fill_nan(None).clip(0, 1),
        requests=pl.col("requests").fill_null(0).cast(pl.UInt32),
        connections=pl.col("connections").fill_null(0).cast(pl.UInt32),
        waited=pl.col("waited").fill_null(0).cast(pl.UInt32), wait_p50_us=pl.col("wait_p50_us").cast(pl.Int64),
    ).select_seq(*schema).sort("origin", "thread")
