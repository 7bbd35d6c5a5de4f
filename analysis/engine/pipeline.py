"""The analysis stages in order, as the engine (``streaming.py``) runs them on a window: ``stage`` (threads,
requests, phases, loop slices), then ``conclude`` on the finished requests. Pure functions over frames, no I/O."""
from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import polars as pl

from envoy_dissector.analysis.engine.spill import constant_columns, gathered, with_constants
from envoy_dissector.analysis.schema import PHASES_SCHEMA, QUEUEING_SCHEMA, REQUEST_FRAME_SCHEMA
from envoy_dissector.analysis.stages.cost import UPSTREAM_WAIT_QUEUE, with_sidecar_added
from envoy_dissector.analysis.stages.loop import has_thread_ids, infer_threads, loop_queue, render_queueing, slices
from envoy_dissector.analysis.stages.phases import attribute_phases
from envoy_dissector.analysis.stages.requests import UID_COLUMNS, build_requests, connection_links, request_uid
from envoy_dissector.analysis.stages.stitch import Stitching, stitch
from envoy_dissector.analysis.stages.tls import downstream_waits
from envoy_dissector.parser.kinds import EventKind


def _no_queueing() -> pl.DataFrame:
    return pl.DataFrame(schema=QUEUEING_SCHEMA)


@dataclass(frozen=True)
class Analysis:
    """What the engine (``streaming.StreamingAnalysis``) gives: the frames of a capture but its events."""

    requests: pl.DataFrame  # REQUEST_FRAME_SCHEMA: the contract columns, then the declared detail and peers
    phases: pl.DataFrame  # PHASES_SCHEMA
    loop: pl.DataFrame  # LOOP_SCHEMA
    notes: tuple[str, ...]
    stitching: Stitching = field(default_factory=Stitching)
    #: QUEUEING_SCHEMA: event-loop queueing windows and the connections served meanwhile
    queueing: pl.DataFrame = field(default_factory=_no_queueing)
    #: False: ``requests``' uid is not made yet, one null value (``StreamingAnalysis(uids_on_access=True)``):
    #: ``uids.UidsToMake`` makes it where it is read
    uids_made: bool = True


def split_restarts(events: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Connection ids restart at 0 when Envoy restarts; give each run inside one origin its own origin."""
    lifecycle = events.filter(pl.col("kind") == EventKind.SERVER_LIFECYCLE_NOISE)
    boots = lifecycle.filter(pl.col("message").str.starts_with("initializing epoch")).group_by("origin").len()
    if boots.height == 0 or int(boots["len"].max() or 0) <= 1:  # type: ignore[arg-type]
        return events, 0
    restarts = int(boots.select_seq((pl.col("len") - 1).clip(lower_bound=0).sum()).item())
    starts = ((pl.col("kind") == EventKind.SERVER_LIFECYCLE_NOISE)
              & pl.col("message").str.starts_with("initializing epoch"))
    marked = events.with_columns_seq(run__=starts.cast(pl.Int64).cum_sum().over("origin"))
    out = marked.with_columns_seq(origin=pl.when(pl.col("run__") > 1).then(
        pl.col("origin") + pl.lit("#") + pl.col("run__").cast(pl.String)).otherwise(pl.col("origin"))).drop("run__")
    return out, restarts


@dataclass(frozen=True)
class Staged:
    """What the per-request stages give before the capture-wide ones (``conclude``) run."""

    events: pl.DataFrame
    requests: pl.DataFrame  # PHASED_REQUEST_SCHEMA (empty: REQUEST_FRAME_SCHEMA)
    phases: pl.DataFrame
    loop: pl.DataFrame
    notes: tuple[str, ...]


@dataclass(frozen=True)
class Concluded:
    requests: pl.DataFrame
    phases: pl.DataFrame
    stitching: Stitching
    notes: tuple[str, ...]
    queueing: pl.DataFrame
    uids_made: bool = True


def analysed_events(events: pl.DataFrame) -> pl.DataFrame:
    """The events as the analysis reads them (``Capture.events``): each restart run its own origin, connections
    placed on inferred lanes where the format logs no thread ids. Records without a usable time (an impossible
    date; a format without one) cannot be placed on a timeline: they take no part, and come last."""
    timeless = events.filter(pl.col("ts_us").is_null())
    if timeless.height:
        events = events.filter(pl.col("ts_us").is_not_null())
    events, _ = with_threads(split_restarts(events)[0])
    if timeless.height == 0:
        return events
    return pl.concat([events, timeless.select_seq(events.columns).cast(events.schema)])  # type: ignore[arg-type]


def restart_note(restarts: int) -> str:
    return (f"Envoy restarted {restarts} time(s) inside the capture: connection ids restart, so each "
            "run is analysed as its own origin (ORIGIN#2, ...)")


def stage(events: pl.DataFrame, notes: list[str]) -> Staged:
    """Thread inference, requests, phases and the loop slices of timed events (restarts already split)."""
    notes = list(notes)
    events, note = with_threads(events)
    if note:
        notes.append(note)
    requests = build_requests(events)  # once: thread inference needs only the links
    loop = slices(events)
    if requests.height == 0:
        return Staged(events, pl.DataFrame(schema=REQUEST_FRAME_SCHEMA), pl.DataFrame(schema=PHASES_SCHEMA), loop,
                      tuple(notes))
    requests, phases = attribute_phases(requests, events)
    return Staged(events, requests, phases, loop, tuple(notes))


def with_threads(events: pl.DataFrame) -> tuple[pl.DataFrame, str | None]:
    """``events`` with their connections placed on inferred lanes where the format logs no thread ids
    (``loop.infer_threads``), and its note."""
    if has_thread_ids(events):
        return events, None
    links = connection_links(events)
    return infer_threads(events, links) if links.height else (events, None)


def conclude(requests: pl.DataFrame, phases: pl.DataFrame, loop: pl.DataFrame, shakes: pl.DataFrame,
             notes: tuple[str, ...], *, make_uids: bool = True) -> Concluded:
    """The capture-wide steps on finished requests: downstream TLS waits (``shakes``: ``tls.handshakes``),
    event-loop queueing (its lower bounds are minima over the origin), order, stitching, notes.

    ``make_uids=False``: the uids are left to make where they are read (``Concluded.uids_made`` false) unless a
    step here reads them all (stitching several origins, upstream-wait windows joined to their requests)."""
    out = list(notes)
    # The uid (~70 bytes of text a request: the origin's path, the connection, the stream) is not carried
    # through the steps below, which copy and sort the frame: it stands as one null value (a constant column,
    # not materialised) and is made from the columns it is made of (``requests.request_uid``) where a step reads
    # it, and for every request once they are in order (``with_uids``).
    requests = requests.drop("request_uid", strict=False)
    # (a frame of many parts whose columns differ in chunks is copied whole by the next step that adds a
    # column: each is made one chunk here, one column at a time)
    # (a constant column, spill.py, stays one value: ``get_columns`` would materialise it)
    schema, height, fixed = {**requests.schema, "request_uid": pl.String()}, requests.height, constant_columns(requests)
    columns = requests.drop(list(fixed)).get_columns()
    del requests
    requests = with_constants(one_chunk_each(columns), {**fixed, "request_uid": None}, schema, height)
    requests, handshake_rows = tls_waits(requests, shakes)
    phases = pl.concat([phases, handshake_rows.cast(PHASES_SCHEMA)])  # type: ignore[arg-type]
    # Without its read event (no socket lines) a request's queueing cannot be placed: unmeasured (null), not 0,
    # and so are its waits: no queueing window (nor loop_queue phase row, nor share of sidecar_added_us)
    placed = ~pl.col("unmeasured_phases").fill_null("").str.contains("downstream_read")
    requests, queueing = loop_queue(requests, loop, placed=placed)
    # (the windows' phase rows are written on a thread of their own while the requests are put in order: the text
    # of 233 k windows took 0.08 s of a 1 GB run's tail with one core idle)
    side = ThreadPoolExecutor(max_workers=1, thread_name_prefix="envoy-dissect-conclude")
    rendering = side.submit(render_queueing, queueing)
    side.shutdown(wait=False)  # (the thread ends once the rows are written)
    schema, height, fixed = requests.schema, requests.height, constant_columns(requests)
    fixed["request_uid"] = None
    columns = requests.drop(list(fixed)).get_columns()
    order = request_order(requests, fixed)
    del requests
    requests = with_constants(in_order_of(columns, order), fixed, schema, height)
    del columns, order  # (4 bytes a request: let go before the uids are made)
    uids_read = (queueing.select_seq((pl.col("where") == UPSTREAM_WAIT_QUEUE).any()).item()
                 or requests.select_seq(pl.col("origin").n_unique()).item() > 1)
    uids_made = make_uids or bool(uids_read)
    requests = with_sidecar_added(with_uids(requests) if uids_made else requests, queueing)
    requests, stitching = stitch(requests)
    # (not sorted: a sort would copy millions of rows at the moment memory peaks; ``Capture.request_phases``
    # gives one request's rows in time order)
    phases = pl.concat([phases, rendering.result()])
    # (counted, not filtered: a filter copies every column of the wide frame it keeps)
    incomplete = int(requests.select_seq((~pl.col("complete") & ~pl.col("internal")).sum()).item())
    if incomplete:
        out.append(f"{incomplete} request(s) cut by the capture's start or end are marked complete=false "
                   "and left out of statistics")
    for offset in stitching.clock_offsets:
        if offset.negative_network:
            out.append(f"{offset.negative_network} stitched request(s) {offset.from_} → {offset.to} have a negative "
                       f"network time beyond the clock offset's uncertainty (±{offset.uncertainty_us} µs): "
                       "their log timestamps contradict causality")
    return Concluded(requests, phases, stitching, tuple(out), queueing, uids_made)


def tls_waits(requests: pl.DataFrame, shakes: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``tls.downstream_waits`` on a frame without its uid (``conclude``): the requests with
    ``downstream_tls_handshake_us`` and its phase rows. The uid is made for the lookup only when a downstream
    handshake was logged; without one the column is null on every request (one value, not materialised)."""
    if shakes.filter(pl.col("direction") == "downstream").height == 0:
        return (requests.with_columns_seq(pl.lit(None, dtype=pl.Int64).alias("downstream_tls_handshake_us")),
                pl.DataFrame(schema=PHASES_SCHEMA))
    narrow, rows = downstream_waits(requests.select_seq("origin", "conn_id", "life_start_us",
                                                        request_uid=request_uid()), shakes)
    return requests.with_columns_seq(narrow.get_column("downstream_tls_handshake_us")), rows


#: Rows of the uid made at once by ``with_uids``
UID_ROWS = 1 << 20


def with_uids(requests: pl.DataFrame) -> pl.DataFrame:
    """``requests`` with their ``request_uid`` made from its columns (``requests.request_uid``), a block of
    ``UID_ROWS`` at a time: the text's parts (the connection and line numbers as text) are a block's, not the
    frame's. The blocks are made one chunk, as the other columns are (a column in chunks of its own makes the
    next step that reads the frame row-wise copy it whole): text is views into its buffers, so that copies the
    views, 16 bytes a request, and not the text."""
    if requests.height <= UID_ROWS:
        return requests.with_columns_seq(request_uid())
    uids = pl.concat([requests.slice(at, UID_ROWS).select_seq(*UID_COLUMNS).select_seq(request_uid()).to_series()
                      for at in range(0, requests.height, UID_ROWS)], rechunk=True)
    return requests.with_columns_seq(uids)


#: The requests frame's order: by origin and start (line number and uid break ties: millisecond captures start
#: many requests in one tick).
REQUEST_ORDER = ("origin", "ds_rx_beg_us", "life_start_us", "first_line_no", "request_uid")


def request_order(requests: pl.DataFrame, constants: Mapping[str, object]) -> pl.Series:
    """The rows' positions in ``REQUEST_ORDER``, sorted on its columns that vary: a column of one value on every
    row (``constants``: the one origin) orders nothing. A sort on several columns encodes each row's keys, and a
    text key costs its length a row (the uid ~60 bytes, the origin's file name ~50; 0.5 GB each for 10 M at the
    moment memory peaks): the rows are sorted on the first key alone, then without the uid (last, it only breaks
    ties), and on every key only while two neighbours tie on all the keys sorted on (a key of unique starts, as a
    flood of one-line requests has, is one sort of one column)."""
    keys = [key for key in REQUEST_ORDER if key not in constants or key == "request_uid"]
    if len(keys) == 1:  # (the uid alone: the frame has fewer than two rows or it is made from constants)
        return pl.int_range(requests.height, dtype=pl.UInt32, eager=True)
    tries = [keys[:1]] if len(keys) > 1 else []
    if len(keys) > 2 and keys[-1] == "request_uid":
        tries.append(keys[:-1])
    for leading in tries:
        order = requests.select_seq(pl.arg_sort_by(leading, nulls_last=True)).to_series()
        if not _ties(requests, leading, order):
            return order
        del order
    # (the uid carried as one null value, ``conclude``, is made from its columns for this sort)
    made = [request_uid() if key == "request_uid" and key in constants else key for key in keys]
    return requests.select_seq(pl.arg_sort_by(made, nulls_last=True)).to_series()


def _ties(frame: pl.DataFrame, keys: list[str], order: pl.Series) -> bool:
    """Whether two neighbours in ``order`` hold the same values (nulls alike) in every one of ``keys``, a column
    at a time."""
    tied: pl.Series | None = None
    for key in keys:
        column = frame.select_seq(pl.col(key).gather(order)).to_series()
        same = column.slice(1).eq_missing(column.slice(0, column.len() - 1))
        tied = same if tied is None else tied & same
        del column
        if not tied.any():
            return False
    return tied is not None and bool(tied.any())


def one_chunk_each(columns: list[pl.Series]) -> list[pl.Series]:
    """``columns`` each made one chunk, one at a time (as ``in_order_of``: one column's copy in flight)."""
    for i in range(len(columns)):
        columns[i] = columns[i].rechunk()
    return columns


def in_order_of(columns: list[pl.Series], order: pl.Series) -> list[pl.Series]:
    """``columns`` gathered in ``order``, one at a time, each dropped from the list once its copy is made: a
    frame of millions of wide rows is sorted with one column's copy in flight, not a second frame (the caller
    holds no other reference to the columns). Columns of the same values are gathered once and share the copy
    (``spill.gathered``: a one-line request's 14 time columns are one timestamp)."""
    return gathered(columns, order)
