"""What the sidecar costs, from one capture: added latency, CPU per request and the throughput ceiling.

Every figure is defined and derived in docs/cost.md; in short:

* ``sidecar_added_us`` (a contract column, :func:`with_sidecar_added`): the request's time inside the proxy
  and not waiting for the upstream — ``queue_before_read_us + total_us − upstream_wait_us``, with the part of
  the upstream wait that was the worker being busy elsewhere (the ``upstream wait`` queueing window) given
  back, because the response had arrived and the proxy had not read it.
* the observer: trace logging costs each record some worker time, about ten times more for the record that wakes
  an idle worker than for one that follows others (:func:`record_costs_from_gaps`: the mean gap between two records
  logged by adjacent statements, per idle class before them; :func:`record_cost_us` from the densest slices when the
  capture has too few), plus what no gap shows (:func:`unseen_record_us`); a request's observer cost is that over
  the records on its own slices, each slice's first record at its idle class's cost, plus the logging share of the
  time it queued behind others, plus the log's flush thread writing its records out (:data:`WRITE_OUT_RECORD_US`;
  :func:`request_cpu`).
* CPU per request: the worker busy time (loop slices inside the traffic window) of the request's own slices
  (its downstream and upstream connections), plus an equal share of the worker's slices no request owns,
  without the time off the CPU (:func:`corrected_slices`: a slice far longer than its shape's median).
* the ceiling: a worker serves at most ``1e6 / CPU µs per request at saturation`` requests/s at this mix (a
  slice that woke the worker counts as its shape's warm median: :func:`corrected_slices`; a request that woke
  it pays no wake-up cost: :func:`without_wake_up`); the pod at most
  where its busiest worker (by share of the traffic) saturates; ``--concurrency N`` that times ``N / W``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Final

import polars as pl

from envoy_dissector.analysis.engine.asof import asof
from envoy_dissector.analysis.gap_counts import COLD, COOLING, WARM, GapCounts, idle_class
from envoy_dissector.analysis.schema import COSTED_REQUEST_SCHEMA, conform
from envoy_dissector.analysis.stages.loop import in_window, traffic_windows
from envoy_dissector.analysis.stats import QUANTILES, percentile_expr, rows_where

#: The queueing window (``QUEUEING_SCHEMA.where``) inside the upstream wait: proxy time, not upstream time.
UPSTREAM_WAIT_QUEUE: Final = "upstream wait"
#: Slices with at least this many records are "dense": records follow one another with little work between.
DENSE_SLICE_LINES: Final = 8
#: The per-record cost is this quantile of the dense slices' time per record (the least work between records).
RECORD_COST_QUANTILE: Final = 0.1
#: Back-to-back record gaps (``findings.record_gaps``) needed to take their mean as the per-record cost.
MIN_GAPS: Final = 5
#: A back-to-back gap longer than this is the worker descheduled between two statements, not logging.
BACK_TO_BACK_US: Final = 10
#: The same bound for the record that wakes an idle worker (idle class cold): its gaps are 8-13 µs on a quiet
#: worker, so 10 µs would cut half of them; a worker descheduled is off for hundreds of µs.
COLD_BACK_TO_BACK_US: Final = 30
#: Worker time (µs) a trace record costs that no back-to-back gap shows (:func:`unseen_record_us`): records longer
#: than the short pair the gaps time (header dumps), and the logger's code and buffers pushing the proxy's out of
#: the caches, paid at the price a cache miss has on the machine at the time — which the record that wakes an idle
#: worker shows, as its excess over a warm one (``cold − warm``). The first term is UNSEEN_BASE_US, the second
#: UNSEEN_PER_COLD_US µs per µs of that excess: fitted on 24 bench-ab runs (the trace-minus-info worker CPU per
#: request, the median of the rounds', less what the gaps explain, over the records; cold − warm 2.0-7.2 µs as the
#: VM's speed moved), then checked on 17 later ones (docs/cost.md, the observer). A proxy on other hardware may
#: differ.
UNSEEN_BASE_US: Final = 0.45
UNSEEN_PER_COLD_US: Final = 0.06
#: Envoy's CPU (µs) on another thread per trace record: the log's flush thread copying the record to the file.
#: A request waits for it where that thread shares the cores with the worker, the client and the upstream.
#: Measured on the lab's bench-ab as trace-minus-info CPU of Envoy's threads other than the worker (schedstat)
#: over the records written per request: 0.24-0.30 µs in eight runs (mean 0.28) (docs/cost.md, the observer).
WRITE_OUT_RECORD_US: Final = 0.28
#: Fewer dense slices than this and the per-record cost is not estimated.
MIN_DENSE_SLICES: Final = 20
#: Relative uncertainty of the ceiling's model beyond sampling (per-event work the log does not show, work
#: batching differently as load rises): the largest error the lab ladder showed, see docs/cost.md.
CEILING_MODEL_UNCERTAINTY: Final = 0.15
#: ``--concurrency`` values the ceiling is extrapolated to (besides the capture's own worker count).
CONCURRENCY_STEPS: Final = (1, 2, 4, 8)
#: A slice longer than :data:`STALL_FACTOR` × the median slice of its shape (event kind and record count) plus
#: :data:`STALL_US` held time off the CPU (the worker descheduled inside the event: another task's time slice
#: on a busy core is several hundred µs or more): it counts as the median. Cold caches after an idle worker
#: stretch a slice too, but by less than twice (docs/cost.md: the variants tried against /proc).
STALL_FACTOR: Final = 2
STALL_US: Final = 300
#: When the time off the CPU is at least this share of the workers' busy time, the cost says so in a note.
STALL_NOTE_SHARE: Final = 0.1
#: A shape with fewer slices than this is judged by the median of its event kind's slices instead.
MIN_SHAPE_SLICES: Final = 5
#: A slice starting at most this long after the worker's previous slice ended found the worker already running
#: ("warm": no wake-up from idle, caches hot); saturated, every slice is.
WARM_GAP_US: Final = 5
#: Warm slices of a shape needed to take their median as the shape's cost at saturation.
MIN_WARM_SLICES: Final = 10
#: Under this share of busy time on every worker the capture is lightly loaded, not moderately: the ceiling it
#: predicts mostly reads low (plain in the lab's paced steps at 2-9 % busy: -26..+29 %, median -13 %; docs/cost.md),
#: and a note says so.
LIGHT_LOAD: Final = 0.10
#: Requests that found their worker running (not the first of its busy period) needed to take the wake-up cost
#: of those that woke it (:func:`without_wake_up`).
MIN_FOUND_RUNNING: Final = 20


def with_sidecar_added(requests: pl.DataFrame, queueing: pl.DataFrame) -> pl.DataFrame:
    """Requests (``QUEUED_REQUEST_SCHEMA``) with ``sidecar_added_us``, as ``COSTED_REQUEST_SCHEMA``.

    ``queue_before_read_us + total_us − upstream_wait_us + min(upstream-wait queueing, upstream_wait_us)``;
    null where ``total_us`` is; a request without an upstream wait (a local reply) spent all of it in the proxy.
    """
    back = (queueing.filter(pl.col("where") == UPSTREAM_WAIT_QUEUE).group_by("request_uid")
            .agg(queued_in_wait__=pl.col("dur_us").sum()))
    wait = pl.col("upstream_wait_us").fill_null(0)
    added = (pl.col("total_us") + pl.col("queue_before_read_us").fill_null(0) - wait
             + pl.min_horizontal(pl.col("queued_in_wait__").fill_null(0), wait))
    # (the key alone is joined and the sum put beside the rows: a join of the wide frame copies every column, and
    # without a window of upstream wait nothing is joined)
    queued = (requests.select_seq("request_uid").join(back, on="request_uid", how="left", maintain_order="left")
              .get_column("queued_in_wait__") if back.height
              else pl.lit(None, dtype=pl.Int64).alias("queued_in_wait__"))
    out = requests.with_columns_seq(queued)
    return conform(out.with_columns_seq(sidecar_added_us=added.clip(lower_bound=0)), COSTED_REQUEST_SCHEMA)


@dataclass(frozen=True, kw_only=True)
class RecordCosts:
    """Worker µs one trace record costs, by the worker's idle before it (``gap_counts.idle_class``), and the
    per-record cost no gap shows (:func:`unseen_record_us`). Only a slice's first record can follow idle: the
    others follow records of the same event and cost ``warm``."""

    warm: float
    cooling: float
    cold: float
    unseen: float = 0.0
    write_out: float = 0.0
    """Another thread's CPU per record (:data:`WRITE_OUT_RECORD_US`): not the worker's, so not in ``observer``."""
    measured: frozenset[int] = frozenset()
    """The idle classes whose cost their own gaps gave (the others took the mean over all the gaps)."""

    @classmethod
    def uniform(cls, cost: float) -> RecordCosts:
        """Every record at ``cost`` (no idle classes measured, nothing added)."""
        return cls(warm=cost, cooling=cost, cold=cost)

    def observer(self, records: pl.Expr, cooling: pl.Expr, cold: pl.Expr) -> pl.Expr:
        """µs of ``records`` records, ``cooling`` and ``cold`` of them a slice's first after that much idle."""
        return ((self.warm + self.unseen) * records + (self.cooling - self.warm) * cooling
                + (self.cold - self.warm) * cold)

    def as_dict(self) -> dict[str, float]:
        return {"warm": round(self.warm, 3), "cooling": round(self.cooling, 3), "cold": round(self.cold, 3),
                "unseen": round(self.unseen, 3), "write_out": round(self.write_out, 3)}


def record_costs_from_gaps(gaps: GapCounts) -> RecordCosts | None:
    """Per idle class, the mean back-to-back gap (:func:`record_cost_from_gaps`; the cold class's up to
    :data:`COLD_BACK_TO_BACK_US`), plus :func:`unseen_record_us` a record. A class with fewer than
    :data:`MIN_GAPS` gaps (or gaps counted without their idle class) takes the mean over all the gaps; ``None``
    when that has fewer than :data:`MIN_GAPS` too."""
    pooled = record_cost_from_gaps(gaps)
    if pooled is None:
        return None
    limits = {WARM: BACK_TO_BACK_US, COOLING: BACK_TO_BACK_US, COLD: COLD_BACK_TO_BACK_US}
    kept = {idle: gaps.in_class(idle).at_most(limit) for idle, limit in limits.items()}
    measured = frozenset(idle for idle, k in kept.items() if k.len() >= MIN_GAPS)
    cost = {idle: float(kept[idle].mean() or 0.0) if idle in measured else pooled for idle in limits}
    return RecordCosts(warm=cost[WARM], cooling=cost[COOLING], cold=cost[COLD],
                       unseen=unseen_record_us(cost[WARM], cost[COLD]), write_out=WRITE_OUT_RECORD_US,
                       measured=measured)


def unseen_record_us(warm: float, cold: float) -> float:
    """Worker µs a record costs that no gap shows: :data:`UNSEEN_BASE_US` plus :data:`UNSEEN_PER_COLD_US` × the
    waking record's excess over a warm one (a worker that never idled has no waking records: its cold cost is the
    mean of all the gaps, and the excess is small)."""
    return UNSEEN_BASE_US + UNSEEN_PER_COLD_US * max(0.0, cold - warm)


def record_cost_from_gaps(gaps: GapCounts) -> float | None:
    """The mean gap (µs) between a ``socket event`` record and the ``read ready``/``write ready`` its worker logs
    next (``findings.record_gaps``: adjacent statements, no work between), over the gaps of at most
    :data:`BACK_TO_BACK_US` (longer: the worker was descheduled), whatever the idle before them: the cost of a
    class with too few gaps of its own (:func:`record_costs_from_gaps`). The mean, not the median: timestamps tick
    in whole µs, so the gaps are 0, 1 or 2 and their median only ever says 1. ``None`` with fewer than
    :data:`MIN_GAPS`."""
    kept = gaps.at_most(BACK_TO_BACK_US)
    return kept.mean() if kept.len() >= MIN_GAPS else None


def record_cost_us(loop: pl.DataFrame) -> float | None:
    """Worker time one log record costs (µs): the :data:`RECORD_COST_QUANTILE` of the dense slices'
    ``(end − start) / (lines − 1)`` — where records follow one another with the least work between them, the
    time between two is what writing the first cost. ``None`` with fewer than :data:`MIN_DENSE_SLICES`."""
    dense = loop.filter((pl.col("lines") >= DENSE_SLICE_LINES) & pl.col("thread").is_not_null())
    if dense.height < MIN_DENSE_SLICES:
        return None
    per = ((pl.col("end_us") - pl.col("start_us")) / (pl.col("lines") - 1)).quantile(RECORD_COST_QUANTILE)
    value = dense.select_seq(per).item()
    return None if value is None else float(value)


def corrected_slices(slices: pl.DataFrame) -> pl.DataFrame:
    """Slices (``busy_us``: wall time) with ``cpu_us`` (without the time off the CPU: a slice longer than
    :data:`STALL_FACTOR` × its shape's median + :data:`STALL_US` counts as the median; ``stall_us`` the rest)
    and ``saturated_us`` (what the slice would cost on a worker that never idles: a slice that woke the worker
    counts at most as the median of its shape's warm slices, those that began within :data:`WARM_GAP_US` of the
    previous one, when there are :data:`MIN_WARM_SLICES`; else as it is). A shape is an event kind and a record
    count, per origin (with fewer than :data:`MIN_SHAPE_SLICES` slices, the event kind alone). ``idle``: the
    idle class (``gap_counts.idle_class``) of the slice's first record. Drops ``end_us`` and ``kind``."""
    shape = ["origin", "kind", "lines"]
    median = (pl.when(pl.len().over(shape) >= MIN_SHAPE_SLICES).then(pl.col("busy_us").median().over(shape))
              .otherwise(pl.col("busy_us").median().over("origin", "kind")))
    stalled = pl.col("busy_us") > STALL_FACTOR * median + STALL_US
    out = slices.with_columns_seq(cpu_us=pl.when(stalled).then(median).otherwise(pl.col("busy_us")).cast(pl.Float64))
    after = pl.col("start_us") - pl.col("end_us").shift(1).over("origin", "thread", order_by="start_us")
    out = out.with_columns_seq(warm=after.is_not_null() & (after <= WARM_GAP_US), idle=idle_class(after))
    warm_median = pl.col("cpu_us").filter(pl.col("warm")).median().over(shape)
    warm_count = pl.col("warm").sum().over(shape)
    return out.with_columns_seq(
        stall_us=pl.col("busy_us") - pl.col("cpu_us"),
        saturated_us=pl.when(~pl.col("warm") & (warm_count >= MIN_WARM_SLICES))
        .then(pl.min_horizontal(warm_median, pl.col("cpu_us"))).otherwise(pl.col("cpu_us")),
    ).drop("end_us", "kind", "warm")


def owned_slices(requests: pl.DataFrame, loop: pl.DataFrame) -> pl.DataFrame:
    """The loop's slices inside each origin's traffic window (clipped to it, ``busy_us``), each with the client
    request that owns it (``request_uid``; null: nobody's). A slice of a downstream connection belongs to the
    latest request that began on it at or before the slice (a request begins with the slice of its first
    read); of an upstream connection, to the latest request that began before it and used that connection
    (one request at a time on an HTTP/1.1 upstream connection)."""
    client = rows_where(requests, ~pl.col("internal") & pl.col("life_start_us").is_not_null(), (
        "origin", "request_uid", "downstream_conn_id", "upstream_conn_id", "life_start_us"))
    # (one lazy pass: the eager join, columns and filter each copied the millions of slices)
    slices = corrected_slices(in_window(loop.lazy(), traffic_windows(requests)).select_seq(
        *_SLICE_READS, busy_us=pl.col("e") - pl.col("s")).collect())
    # A request begins with the slice holding its first read (its `socket event` line comes a little before).
    down = asof(client.select_seq("origin", "request_uid", conn_id="downstream_conn_id", life="life_start_us"),
                slices, left_on="life", right_on="start_us", by=["origin", "conn_id"], strategy="backward",
                take={"start_us": "read_slice"}).select_seq(
        "origin", "request_uid", "conn_id", begun=pl.coalesce("read_slice", "life"))
    up = client.filter(pl.col("upstream_conn_id").is_not_null()).select_seq(
        "origin", "request_uid", conn_id="upstream_conn_id", begun="life_start_us")
    slices = asof(slices, down, left_on="start_us", right_on="begun", by=["origin", "conn_id"],
                  strategy="backward", take={"request_uid": "by_down"})
    slices = asof(slices, up, left_on="start_us", right_on="begun", by=["origin", "conn_id"],
                  strategy="backward", take={"request_uid": "by_up"})
    return slices.with_columns_seq(request_uid=pl.coalesce("by_down", "by_up")).drop("by_down", "by_up")


#: Loop slices whose requests' CPU is worked out at once, whole origins at a time (every figure of
#: :func:`request_cpu` is per origin). The slices' owners, medians and lookups hold a dozen columns a slice: the
#: 5 GB corpus' 1.4 M slices (44 origins) at once were +410 MiB at the report, the run's peak; 500 k at a time,
#: +160 MiB.
COST_BATCH_SLICES: Final = 500_000
#: The columns of the loop's slices and of the requests :func:`request_cpu` reads.
_SLICE_READS = ("origin", "thread", "conn_id", "start_us", "end_us", "kind", "lines")
_REQUEST_CPU_READS = ("origin", "request_uid", "internal", "complete", "thread", "downstream_conn_id",
                      "upstream_conn_id", "life_start_us", "life_end_us", "queue_before_read_us", "loop_queue_us",
                      "sidecar_added_us")


def origin_batches(requests: pl.DataFrame, loop: pl.DataFrame, most: int = COST_BATCH_SLICES) -> list[list[str]]:
    """The origins of ``requests`` and ``loop`` in batches of at most ``most`` slices (an origin with more is a
    batch of its own), in origin order."""
    slices = dict(loop.group_by("origin").len().iter_rows())
    names = sorted({*slices, *requests.select_seq(pl.col("origin").unique()).to_series().to_list()})
    batches: list[list[str]] = []
    held = 0
    for name in names:
        size = slices.get(name, 0)
        if not batches or held + size > most:
            batches.append([])
            held = 0
        batches[-1].append(name)
        held += size
    return batches


def request_cpu_in_batches(requests: pl.DataFrame, loop: pl.DataFrame, record_costs: RecordCosts | None,
                           most: int = COST_BATCH_SLICES) -> pl.DataFrame:
    """:func:`request_cpu`, a batch of whole origins at a time (:func:`origin_batches`): the same rows, each
    origin's in the same order."""
    batches = origin_batches(requests, loop, most)
    if len(batches) <= 1:
        return request_cpu(requests, loop, record_costs)
    read = [c for c in _REQUEST_CPU_READS if c in requests.columns]
    parts = []
    for names in batches:
        mine = pl.col("origin").is_in(pl.Series(names, dtype=pl.String).implode())
        parts.append(request_cpu(rows_where(requests, mine, read),
                                 rows_where(loop, mine, _SLICE_READS), record_costs))
    return pl.concat(parts)


def request_cpu(requests: pl.DataFrame, loop: pl.DataFrame, record_costs: RecordCosts | None) -> pl.DataFrame:
    """Per complete client request: ``own_cpu_us`` (its slices' CPU, :func:`corrected_slices`), ``cpu_us``
    (plus its equal share of its worker's unowned slices), ``stall_us`` (the same for the time off the CPU taken
    out: ``cpu_us + stall_us`` is its slices' wall time), ``saturated_cpu_us`` (the same at saturation: the
    ceiling's cost), ``own_lines``, ``own_cooling`` and ``own_cold`` (its slices that followed idle),
    ``written_lines`` (its records and its equal share of its worker's records no request owns) and
    ``observer_us`` (its records at ``record_costs``, each slice's first at its idle class's cost, plus the logging
    share of its worker's CPU × the time it queued behind others, plus ``write_out`` × ``written_lines``; null
    without costs)."""
    slices = owned_slices(requests, loop)
    woke = woken_requests(slices)
    client = rows_where(requests, ~pl.col("internal") & pl.col("complete"), (
        "request_uid", "origin", "thread", "queue_before_read_us", "loop_queue_us", "sidecar_added_us"))
    figures = ("cpu_us", "stall_us", "saturated_us")
    cooling, cold = (pl.col("idle") == COOLING).sum(), (pl.col("idle") == COLD).sum()
    # (the columns read, selected before the filter: it copies every column it keeps, of millions of slices)
    own = slices.select_seq("request_uid", *figures, "lines", "idle").filter(pl.col("request_uid").is_not_null()
                                                                          ).group_by("request_uid").agg(
        *(pl.col(f).sum().alias(f"own_{f}") for f in figures), own_lines=pl.col("lines").sum(),
        own_cooling=cooling, own_cold=cold)
    per_worker = client.group_by("origin", "thread").agg(n=pl.len())
    unowned = pl.col("request_uid").is_null()
    worker = slices.group_by("origin", "thread").agg(
        *(pl.col(f).filter(unowned).sum().alias(f"shared_{f}") for f in figures),
        worker_cpu_us=pl.col("cpu_us").sum(), worker_lines=pl.col("lines").sum(), worker_cooling=cooling,
        worker_cold=cold, shared_lines=pl.col("lines").filter(unowned).sum())
    out = (client.select_seq("request_uid", "origin", "thread", "queue_before_read_us", "loop_queue_us",
                             "sidecar_added_us")
           .join(own, on="request_uid", how="left")
           .join(woke, on="request_uid", how="left")
           .join(worker.join(per_worker, on=["origin", "thread"]), on=["origin", "thread"], how="left"))
    def observer(who: str) -> pl.Expr:
        if record_costs is None:
            return pl.lit(None, dtype=pl.Float64)
        return record_costs.observer(*(pl.col(f"{who}_{n}").fill_null(0) for n in ("lines", "cooling", "cold")))

    logging_share = (observer("worker") / pl.col("worker_cpu_us")).clip(0, 1)
    queued = pl.col("queue_before_read_us").fill_null(0) + pl.col("loop_queue_us").fill_null(0)

    def with_share(figure: str) -> pl.Expr:
        return pl.col(f"own_{figure}").fill_null(0) + pl.col(f"shared_{figure}").fill_null(0) / pl.col("n")

    return out.with_columns_seq(
        own_cpu_us=pl.col("own_cpu_us").fill_null(0),
        own_lines=pl.col("own_lines").fill_null(0),
        own_cooling=pl.col("own_cooling").fill_null(0),
        own_cold=pl.col("own_cold").fill_null(0),
        cpu_us=with_share("cpu_us"),
        written_lines=with_share("lines"),
        stall_us=with_share("stall_us"),
        saturated_cpu_us=with_share("saturated_us"),
    ).with_columns_seq(
        observer_us=observer("own") + logging_share * queued
        + (record_costs.write_out if record_costs else 0.0) * pl.col("written_lines"),
    ).pipe(without_wake_up).select_seq(
        "request_uid", "origin", "thread", "own_cpu_us", "cpu_us", "stall_us", "saturated_cpu_us", "woke_worker",
        "own_lines", "own_cooling", "own_cold", "written_lines", "observer_us", "sidecar_added_us")


def woken_requests(slices: pl.DataFrame) -> pl.DataFrame:
    """Per request owning slices: ``woke_worker``, whether it was the first request to begin in its worker's busy
    period (a run of slices each beginning within ``IDLE_CLASS_US[0]`` of the previous one's end, the idle class
    warm): the request that found its worker idle, whose slices run on caches the idle let go cold."""
    period = (pl.col("idle") != WARM).cum_sum().over("origin", "thread", order_by="start_us")
    begun = (slices.select_seq("origin", "thread", "start_us", "request_uid", period=period)
             .filter(pl.col("request_uid").is_not_null())
             .group_by("request_uid").agg(pl.col("origin").first(), pl.col("thread").first(),
                                          period=pl.col("period").sort_by("start_us").first(),
                                          began=pl.col("start_us").min()))
    first = pl.col("began") == pl.col("began").min().over("origin", "thread", "period")
    return begun.select_seq("request_uid", woke_worker=first)


def without_wake_up(per_request: pl.DataFrame) -> pl.DataFrame:
    """``saturated_cpu_us`` of the requests that woke their worker less the wake-up cost: per origin, their
    mean ``saturated_cpu_us`` over the mean of those that found the worker running, when there are
    :data:`MIN_FOUND_RUNNING` of those (a saturated worker never idles, so no request pays it). The slice that
    woke the worker is already costed warm (:func:`corrected_slices`); the request's later slices, still on cold
    caches, are not: in the lab a paced 4-connection step's requests cost 450-660 µs of worker time when they woke
    it and 100-180 µs when they found it running."""
    woke = pl.col("woke_worker")
    found_running = (~woke).sum().over("origin")
    wake_up = (pl.col("saturated_cpu_us").filter(woke).mean().over("origin")
               - pl.col("saturated_cpu_us").filter(~woke).mean().over("origin")).clip(lower_bound=0)
    return per_request.with_columns_seq(saturated_cpu_us=pl.when(woke & (found_running >= MIN_FOUND_RUNNING))
                                        .then((pl.col("saturated_cpu_us") - wake_up).clip(lower_bound=0))
                                        .otherwise(pl.col("saturated_cpu_us")))


@dataclass(frozen=True, kw_only=True)
class Ceiling:
    """Requests/s the proxy could serve at this mix before a worker is always busy."""

    pod: float
    low: float
    high: float
    workers: dict[int, float] = field(default_factory=dict)
    """Per worker thread: ``1e6 / busy µs per request`` on that worker."""
    balance: float = 1.0
    """pod / (workers × mean worker ceiling): 1 when the traffic is spread as evenly as the workers are fast."""
    concurrency: dict[int, float] = field(default_factory=dict)
    """What ``--concurrency N`` would give (same mix, same imbalance, a core per worker)."""

    def as_dict(self) -> dict[str, Any]:
        return {"pod": round(self.pod), "low": round(self.low), "high": round(self.high),
                "workers": {str(t): round(v) for t, v in self.workers.items()}, "balance": round(self.balance, 3),
                "concurrency": {str(n): round(v) for n, v in self.concurrency.items()}}


@dataclass(frozen=True, kw_only=True)
class Cost:
    """What the sidecar cost in one origin of a capture (docs/cost.md)."""

    origin: str
    requests: int
    sidecar_added_us: dict[str, int | None]
    sidecar_added_without_observer_us: dict[str, int | None]
    observer_us: dict[str, int | None]
    record_cost_us: float | None
    """The mean cost of the capture's records (their own slices'), each at its idle class's cost."""
    cpu_ms_per_1000_requests: float | None
    cpu_us_per_request: dict[str, int | None]
    utilisation: dict[int, float]
    ceiling: Ceiling | None
    notes: tuple[str, ...] = ()
    on_cpu: dict[int, float] = field(default_factory=dict)
    """Per worker: the share of the traffic window it ran (``utilisation`` without the time off the CPU that CPU
    leaves out, :func:`corrected_slices`); the saturation finding states it beside the busy share."""
    record_costs: RecordCosts | None = None

    def as_dict(self) -> dict[str, Any]:
        """The summary's ``cost`` entry."""
        return {
            "requests": self.requests,
            "sidecar_added_us": self.sidecar_added_us,
            "sidecar_added_without_observer_us": self.sidecar_added_without_observer_us,
            "observer_us": self.observer_us,
            "record_cost_us": None if self.record_cost_us is None else round(self.record_cost_us, 3),
            "record_cost_by_idle_us": None if self.record_costs is None else self.record_costs.as_dict(),
            "cpu_ms_per_1000_requests": (None if self.cpu_ms_per_1000_requests is None
                                         else round(self.cpu_ms_per_1000_requests, 1)),
            "cpu_us_per_request": self.cpu_us_per_request,
            "utilisation": {str(t): round(u, 4) for t, u in self.utilisation.items()},
            "ceiling_rps": None if self.ceiling is None else self.ceiling.as_dict(),
            "notes": list(self.notes),
        }


def _quantiles(values: pl.Series) -> dict[str, int | None]:
    if values.drop_nulls().len() == 0:
        return dict.fromkeys(QUANTILES)
    frame = values.to_frame("v")
    return {name: round(frame.select_seq(percentile_expr("v", q)).item()) for name, q in QUANTILES.items()}


def ceiling_of(per_request: pl.DataFrame) -> Ceiling | None:
    """The ceiling from one origin's :func:`request_cpu` rows, at each request's ``saturated_cpu_us`` (see the
    module doc and docs/cost.md)."""
    rows = per_request.filter(pl.col("thread").is_not_null() & pl.col("saturated_cpu_us").is_not_null())
    total = rows.height
    if total == 0 or rows["saturated_cpu_us"].sum() <= 0:
        return None
    by_worker = rows.group_by("thread").agg(n=pl.len(), busy=pl.col("saturated_cpu_us").sum()).sort("thread")
    workers = {int(t): 1e6 * n / busy for t, n, busy in by_worker.iter_rows() if busy > 0}
    if not workers:
        return None
    # The pod saturates when its busiest worker does, the traffic split as it was: worker w takes share n_w/N.
    pod = min(workers[int(t)] * total / n for t, n, busy in by_worker.iter_rows() if busy > 0)
    mean = 1e6 * total / float(rows["saturated_cpu_us"].sum())
    balance = pod / (len(workers) * mean)
    cpu = rows["saturated_cpu_us"].cast(pl.Float64)
    sd = float(cpu.std() or 0.0)  # type: ignore[arg-type]
    sampling = 1.96 * sd / math.sqrt(total) / float(cpu.mean() or 1.0)  # type: ignore[arg-type]
    rel = math.hypot(sampling, CEILING_MODEL_UNCERTAINTY)
    steps = sorted({*CONCURRENCY_STEPS, len(workers)})
    return Ceiling(pod=pod, low=pod * max(0.0, 1 - rel), high=pod * (1 + rel), workers=workers, balance=balance,
                   concurrency={n: n * mean * balance for n in steps})


def capture_cost(requests: pl.DataFrame, loop: pl.DataFrame, workers: pl.DataFrame, *,
                 busy_measured: bool = True, gaps: GapCounts | None = None) -> list[Cost]:
    """One :class:`Cost` per origin with complete client requests.

    ``workers`` is ``Capture.workers()`` (utilisation per worker); ``busy_measured`` False (no socket lines:
    the loop's busy time is not measured) leaves CPU, the observer and the ceiling out. ``gaps``: the
    back-to-back record gaps of ``findings.record_gaps`` (:func:`record_costs_from_gaps`); without enough of
    them, :func:`record_cost_us` from the loop's dense slices for every record.
    """
    client = rows_where(requests, ~pl.col("internal") & pl.col("complete"), ("origin", "sidecar_added_us"))
    if client.height == 0:
        return []
    costs = None
    if busy_measured:
        costs = record_costs_from_gaps(gaps) if gaps is not None else None
        dense = record_cost_us(loop) if costs is None else None
        costs = costs if dense is None else RecordCosts.uniform(dense)
    per_request = request_cpu_in_batches(requests, loop, costs) if busy_measured else None
    out = []
    for origin in sorted(client["origin"].unique().to_list()):
        mine = client.filter(pl.col("origin") == origin)
        notes: list[str] = []
        added = mine["sidecar_added_us"]
        util = {int(t): float(u) for t, u in workers.filter((pl.col("origin") == origin)
                                                          & pl.col("utilisation").is_not_null()
                                                          & (pl.col("requests") > 0))
                .select_seq("thread", "utilisation").iter_rows()}
        if per_request is None:
            notes.append("no socket lines: the workers' busy time, CPU, the observer and the ceiling are not "
                         "measured")
            out.append(Cost(origin=origin, requests=mine.height, sidecar_added_us=_quantiles(added),
                            sidecar_added_without_observer_us=dict.fromkeys(QUANTILES),
                            observer_us=dict.fromkeys(QUANTILES), record_cost_us=None,
                            cpu_ms_per_1000_requests=None, cpu_us_per_request=dict.fromkeys(QUANTILES),
                            utilisation=util, ceiling=None, notes=tuple(notes)))
            continue
        rows = per_request.filter(pl.col("origin") == origin)
        if rows["thread"].drop_nulls().lt(0).any():
            notes.append("no thread ids: workers are inferred lanes, so CPU per worker and the ceiling per "
                         "worker are less certain")
        stalled, ran = float(rows["stall_us"].sum()), float(rows["cpu_us"].sum())
        by_thread = rows.group_by("thread").agg(pl.col("cpu_us").sum(), pl.col("stall_us").sum())
        on_cpu = {int(t): util[int(t)] * c / (c + st) for t, c, st in by_thread.iter_rows()
                  if t is not None and int(t) in util and c + st > 0}
        if stalled > 0 and stalled >= STALL_NOTE_SHARE * (stalled + ran):
            notes.append(f"{stalled / (stalled + ran):.0%} of the workers' busy time was events stretched while "
                         "the worker did not run (a busy node, a CPU limit, a blocked log write); CPU and the "
                         "ceiling leave it out")
        if util and max(util.values()) < LIGHT_LOAD:
            notes.append(f"the workers were busy under {LIGHT_LOAD:.0%} of the traffic window: nearly every request "
                         "woke an idle worker, whose cost the ceiling removes only in part, so the ceiling is less "
                         "certain and most often low (docs/cost.md)")
        if costs is None:
            notes.append("too few dense slices to estimate the cost of a log record: the observer is not removed")
        without = (rows["sidecar_added_us"] - rows["observer_us"]).clip(lower_bound=0) if costs else None
        per_record = None
        if costs is not None and rows["own_lines"].sum() > 0:
            own = rows.select_seq(costs.observer(*(pl.col(c).sum() for c in ("own_lines", "own_cooling", "own_cold"))))
            per_record = float(own.item()) / float(rows["own_lines"].sum())
        cpu = rows["cpu_us"]
        out.append(Cost(
            origin=origin, requests=mine.height, sidecar_added_us=_quantiles(added),
            sidecar_added_without_observer_us=(_quantiles(without) if without is not None
                                               else dict.fromkeys(QUANTILES)),
            observer_us=_quantiles(rows["observer_us"]) if costs else dict.fromkeys(QUANTILES),
            record_cost_us=per_record, record_costs=costs,
            # µs per request × 1000 requests / 1000 µs per ms: the mean in µs is the ms per 1000 requests
            cpu_ms_per_1000_requests=float(cpu.mean()) if cpu.len() else None,  # type: ignore[arg-type]
            cpu_us_per_request=_quantiles(cpu), utilisation=util, ceiling=ceiling_of(rows), notes=tuple(notes),
            on_cpu=on_cpu))
    return out


def summary_entry(costs: list[Cost]) -> dict[str, Any] | None:
    """``summary.json``'s ``cost``: one origin's entry, or ``{origin: entry}`` when there are several."""
    if not costs:
        return None
    if len(costs) == 1:
        return costs[0].as_dict()
    return {c.origin: c.as_dict() for c in costs}
