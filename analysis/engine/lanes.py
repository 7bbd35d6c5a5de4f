"""Worker lanes of origins whose log has no thread ids (Istio before 1.17), as the streaming engine infers them.

Such an origin's lines are in time order as a whole, so the engine windows it as one worker (``streaming.py``): its
requests and phases are built and emitted live, like a threaded worker's, because the stages look lines up by
origin when no thread id exists (``requests.link_upstream``, ``failures``). Its *lanes* (``loop.infer_threads``)
cannot be: a connection group's lane depends on the slices of every group that started before it, up to their
last line, and on links made later (a pool connection shared by two downstream connections joins their groups).

So each window step keeps only what the lanes and what depends on them need of its lines (``lane_lines``: a few
numbers a line, the worker's start-up line and a filter's return where the internal work reads them), which waits in
the spill with the finished requests, and ``with_lanes`` runs the whole-file inference once, at the end, on those
lines and the finished requests' links: the same lanes, loop slices, record gaps, workers and internal work bursts
as the analysis of the whole file, and the requests' ``thread`` filled from their connection's lane.
"""
from __future__ import annotations

import polars as pl

from envoy_dissector.analysis.schema import LINK_SCHEMA
from envoy_dissector.analysis.stages.loop import infer_threads
from envoy_dissector.parser.kinds import EventKind
from envoy_dissector.parser.schema import EVENT_SCHEMA

#: The columns of a line that the lanes and what is built on them read (``infer_threads``, ``slices``,
#: ``record_gaps``, ``worker_threads``, ``work_bursts``).
LANE_COLUMNS = ("origin", "line_no", "ts_us", "kind", "conn_id", "stream_id", "events", "message", "filter",
                "filter_status")
#: (narrower than the events' types where the values are small: the origin a category, a socket event's mask and a
#: filter's status a few bits; ~35 bytes a line)
LANE_SCHEMA: dict[str, pl.DataType] = {**{c: EVENT_SCHEMA[c] for c in LANE_COLUMNS}, "origin": pl.Categorical(),
                                       "events": pl.Int16(), "filter_status": pl.Int16()}


def lane_lines(events: pl.DataFrame) -> pl.DataFrame:
    """``events`` reduced to ``LANE_COLUMNS``: the text columns only on the lines that read them (a worker's
    `worker entering dispatch loop`, a decoder filter's return), null elsewhere."""
    kind = pl.col("kind")
    return events.select_seq(
        *(c for c in LANE_COLUMNS if c not in ("message", "filter", "filter_status")),
        message=pl.when(kind == EventKind.WORKER_NOISE).then(pl.col("message")),
        filter=pl.when(kind == EventKind.DECODE_HEADERS_CALLED).then(pl.col("filter")),
        filter_status=pl.when(kind == EventKind.DECODE_HEADERS_CALLED).then(pl.col("filter_status")),
    ).select_seq(LANE_COLUMNS).cast(LANE_SCHEMA)  # type: ignore[arg-type]


def as_events(lines: pl.DataFrame) -> pl.DataFrame:
    """Lane lines as the stages that read them take events (their types, a null ``thread``), in log order. (Only
    those columns: every other event column, null on each line, would cost more than the lines themselves.)"""
    return lines.cast({c: EVENT_SCHEMA[c] for c in lines.columns}).sort(  # type: ignore[arg-type]
        "origin", "line_no", maintain_order=True).with_columns_seq(pl.lit(None, dtype=EVENT_SCHEMA["thread"]).alias(
            "thread"))


def with_lanes(lines: pl.DataFrame, links: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, str | None]:
    """The lane lines placed on inferred lanes (``thread``), each connection's lane (``origin, conn_id, lane``)
    and the inference's note; without links (no request) nothing is inferred, as for the whole file."""
    events = as_events(lines)
    none = pl.DataFrame(schema={"origin": pl.String(), "conn_id": pl.Int64(), "lane": pl.Int64()})
    if links.height == 0:
        return events, none, None
    placed, note = infer_threads(events, links.select_seq(list(LINK_SCHEMA)))
    lanes = placed.filter(pl.col("conn_id").is_not_null()).select_seq(
        "origin", "conn_id", lane="thread").unique(["origin", "conn_id"], keep="first")
    return placed, lanes, note


def requests_on_lanes(requests: pl.DataFrame, lanes: pl.DataFrame) -> pl.DataFrame:
    """``requests`` with the ``thread`` of the lane of their downstream connection where they have none (a request's
    thread is its stream's lines' first, and they are all on its connection's lane)."""
    if lanes.height == 0:
        return requests
    lane = requests.select_seq("origin", "downstream_conn_id").join(
        lanes.rename({"conn_id": "downstream_conn_id"}), on=["origin", "downstream_conn_id"], how="left",
        maintain_order="left")["lane"]
    return requests.with_columns_seq(thread=pl.coalesce(pl.col("thread"), lane).cast(requests.schema["thread"]))
