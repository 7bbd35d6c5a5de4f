"""Wasm VM time per request, from Envoy's VM call tracing (``[host->vm] proxy_on_…`` / ``[host<-vm] … return``).

VM lines carry no connection or stream id. A callback runs on the worker thread inside the processing of
one stream, so a call is placed by the records logged before it on the same thread: on the stream of the
last record with a stream id (the request's own ``request headers complete`` before
``proxy_on_request_headers``, its ``Codec completed encoding stream.`` before ``proxy_on_log``) when the call
lies inside that request's life; otherwise on the request of the last record's connection whose life holds
the call (Envoy ≤ 1.19 ran the stats plugin's stream callbacks before ``new stream`` was logged). Only
outermost calls count: the host may call into the module again while serving the module's own host call
(``proxy_on_memory_allocate``), and a plugin's root context (VM start, configure, timers) works for no request.

Older captures (Envoy ≤ 1.19 / Istio 1.11) often have no VM call lines, only what the module logged
(``wasm log …``) and CEL errors (``expr evaluate value error``). There a run of consecutive wasm records is
one VM episode, from the record before the run to the run's last record. Without thread ids (Istio's old
text format) a wasm record has no worker: the origin's line order stands in for the worker's (exact with one
worker, an approximation with several). There two workers may be inside the same callback at once, and a
return line names no context: a return of a callback the host follows at once with the same stream context's
next call (``proxy_on_context_create`` → ``proxy_on_request_headers``, ``proxy_on_log`` → ``proxy_on_done`` →
``proxy_on_delete``) closes the call of the context whose call comes next, and a stream callback is outermost
whatever another worker's call around it (the host never makes one from inside a VM call). On a lab capture of
two workers rewritten without thread ids this brings 53 of 60 requests' ``wasm_us`` within 10% of the
thread-id placement, from 47 (tests/real/test_wasm_threadless.py). Placing calls by their context's lifetime
instead of line order did worse there (45-48 of 60): each worker numbers its own contexts, so one id lives on
two workers at once.
"""
from __future__ import annotations

import polars as pl

from envoy_dissector.analysis.engine.asof import asof
from envoy_dissector.parser.kinds import EventKind

ENTER, EXIT = EventKind.WASM_VM_ENTER, EventKind.WASM_VM_EXIT
MODULE_LINES = (EventKind.WASM_LOG, EventKind.CEL_ERROR)
#: Callbacks of a plugin's root context (VM and plugin life, timers, queues): work for no request.
ROOT_CALLS = ("proxy_on_vm_start", "proxy_on_configure", "proxy_on_tick", "proxy_on_queue_ready",
              "proxy_on_foreign_function")
#: The lane of an origin whose wasm lines carry no thread id: the whole origin, in line order.
WHOLE_ORIGIN = -1
_LANE = ["origin", "lane"]
_CALLS_SCHEMA = {"origin": pl.String(), "lane": pl.Int64(), "wasm_call": pl.String(), "start_us": pl.Int64(),
                 "end_us": pl.Int64(), "start_line": pl.Int64()}
ROWS_SCHEMA = {"request_uid": pl.String(), "detail": pl.String(), "start_us": pl.Int64(), "end_us": pl.Int64(),
               "dur_us": pl.Int64()}


def _with_lanes(events: pl.DataFrame, wasm: pl.Expr) -> pl.DataFrame:
    """Events with ``lane``: the thread, or :data:`WHOLE_ORIGIN` for origins whose wasm lines have no thread."""
    # (inferred lanes, negative, are the analysis's guess: the origin's line order is the better one for VM lines)
    threadless = events.filter(wasm).group_by("origin").agg(
        (pl.col("thread").is_null() | (pl.col("thread") < 0)).all().alias("threadless"))
    return events.join(threadless, on="origin", how="left").with_columns_seq(
        lane=pl.when(pl.col("threadless").fill_null(False)).then(pl.lit(WHOLE_ORIGIN)).otherwise(pl.col("thread"))
    ).drop("threadless").filter(pl.col("lane").is_not_null())


def vm_calls(events: pl.DataFrame) -> pl.DataFrame:
    """Outermost VM calls of request contexts: ``origin, lane, wasm_call, start_us, end_us, start_line``."""
    is_vm = pl.col("kind").is_in([ENTER, EXIT])
    vm = _with_lanes(events.select_seq("origin", "thread", "line_no", "ts_us", "kind", "wasm_call", "wasm_context"
                                       ).filter(is_vm), is_vm).with_columns_seq(pl.col("kind").cast(pl.String))
    if vm.height == 0:
        return pl.DataFrame(schema=_CALLS_SCHEMA)
    enters = vm.filter(pl.col("kind") == ENTER).select_seq(*_LANE, "wasm_call", "wasm_context", "line_no",
                                                           start_line="line_no", start_us="ts_us")
    exits = vm.filter(pl.col("kind") == EXIT).select_seq(*_LANE, "wasm_call", end_line="line_no", end_us="ts_us")
    # Each return closes the latest call of the same callback on the same lane.
    paired = asof(exits, enters, left_on="end_line", right_on="line_no", by=[*_LANE, "wasm_call"],
                  strategy="backward", take={"start_line": "start_line", "start_us": "start_us",
                                             "wasm_context": "wasm_context"}
                  ).filter(pl.col("start_line").is_not_null())
    paired = _by_next_call(paired, exits, enters)
    paired = paired.unique([*_LANE, "start_line"], keep="first").sort(*_LANE, "start_line")
    reach = pl.col("end_line").cum_max().shift(1).over(_LANE)
    stream_call = (pl.col("lane") == WHOLE_ORIGIN) & pl.col("wasm_call").is_in(STREAM_CALLS)
    outer = paired.filter(reach.is_null() | (pl.col("start_line") > reach) | stream_call)
    roots = enters.filter(pl.col("wasm_call").is_in(ROOT_CALLS)).select_seq(*_LANE, "wasm_context").unique()
    per_request = outer.join(roots, on=[*_LANE, "wasm_context"], how="anti", nulls_equal=True)
    return per_request.select_seq(list(_CALLS_SCHEMA)).cast(_CALLS_SCHEMA)  # type: ignore[arg-type]


#: Callbacks the host follows at once with another call of the same stream context (create -> request headers,
#: log -> done -> delete).
FOLLOWED = ("proxy_on_context_create", "proxy_on_log", "proxy_on_done")
#: Callbacks of a stream context: the host makes them while processing the stream, never inside a VM call.
STREAM_CALLS = ("proxy_on_context_create", "proxy_on_request_headers", "proxy_on_request_body",
                "proxy_on_request_trailers", "proxy_on_response_headers", "proxy_on_response_body",
                "proxy_on_response_trailers", "proxy_on_log", "proxy_on_done", "proxy_on_delete")


def _by_next_call(paired: pl.DataFrame, exits: pl.DataFrame, enters: pl.DataFrame) -> pl.DataFrame:
    """On lanes without thread ids two workers may be in the same callback at once; a return of a callback the
    host follows at once with the same context's next call closes the call of the context that comes next."""
    whole = exits.filter((pl.col("lane") == WHOLE_ORIGIN) & pl.col("wasm_call").is_in(FOLLOWED))
    if whole.height == 0:
        return paired
    nxt = asof(whole, enters.select_seq(*_LANE, "line_no", next_ctx="wasm_context"), left_on="end_line",
               right_on="line_no", by=_LANE, strategy="forward", take={"next_ctx": "next_ctx"})
    same = asof(nxt.filter(pl.col("next_ctx").is_not_null()), enters.rename({"wasm_context": "next_ctx"}),
                left_on="end_line", right_on="line_no", by=[*_LANE, "wasm_call", "next_ctx"], strategy="backward",
                take={"start_line": "start_line", "start_us": "start_us"}).filter(pl.col("start_line").is_not_null())
    same = same.select_seq(*_LANE, "wasm_call", "end_line", "end_us", "start_line", "start_us", wasm_context="next_ctx")
    rest = paired.join(same.select_seq(*_LANE, "end_line"), on=[*_LANE, "end_line"], how="anti")
    rest = rest.join(same.select_seq(*_LANE, "start_line"), on=[*_LANE, "start_line"], how="anti")
    return pl.concat([same, rest.select_seq(same.columns)]).sort(*_LANE, "end_line")


def module_episodes(events: pl.DataFrame) -> pl.DataFrame:
    """Runs of wasm module records (captures without VM call lines), shaped like :func:`vm_calls`."""
    is_wasm = pl.col("kind").cast(pl.String).is_in(MODULE_LINES)
    lines = _with_lanes(events.select_seq("origin", "thread", "line_no", "ts_us", "kind"), is_wasm).select_seq(
        *_LANE, "line_no", "ts_us", wasm=is_wasm).sort(*_LANE, "line_no")
    if lines.height == 0 or not lines["wasm"].any():
        return pl.DataFrame(schema=_CALLS_SCHEMA)
    lines = lines.with_columns_seq(prev_ts=pl.col("ts_us").shift(1).over(_LANE),
                                   run=(pl.col("wasm") != pl.col("wasm").shift(1).over(_LANE)).fill_null(True)
                                   .cast(pl.Int64).cum_sum().over(_LANE))
    runs = lines.filter("wasm").group_by(*_LANE, "run").agg(
        start_us=pl.coalesce(pl.col("prev_ts").first(), pl.col("ts_us").first()),
        end_us=pl.col("ts_us").last(), start_line=pl.col("line_no").first())
    return runs.select_seq(*_LANE, wasm_call=pl.lit("module log"), start_us="start_us", end_us="end_us",
                           start_line="start_line").cast(_CALLS_SCHEMA)  # type: ignore[arg-type]


def _place(calls: pl.DataFrame, events: pl.DataFrame, requests: pl.DataFrame) -> pl.DataFrame:
    """``calls`` with the ``request_uid`` they ran for (see the module docstring), unplaced ones dropped."""
    # (an origin whose calls are on the whole origin's lane: so is every line of it, with or without a thread; a
    # window of a log without thread ids has none, the whole file its inferred lanes)
    whole = calls.filter(pl.col("lane") == WHOLE_ORIGIN)["origin"].unique().implode()
    lanes = events.select_seq("origin", "line_no", "conn_id", "stream_id",
                              lane=pl.when(pl.col("origin").is_in(whole)).then(
        pl.lit(WHOLE_ORIGIN, dtype=pl.Int64)).otherwise(pl.col("thread"))).filter(pl.col("lane").is_not_null())
    # (a request cut by the excerpt has no life bounds: its own first and last lines stand in)
    life = requests.select_seq("request_uid", "origin", "conn_id", "stream_id",
                               life_start_us=pl.coalesce("life_start_us", "first_ts"),
                               life_end_us=pl.coalesce("life_end_us", "last_ts"))
    inside = pl.col("start_us").is_between("life_start_us", "life_end_us")
    by_stream = asof(calls, lanes.filter(pl.col("stream_id").is_not_null()), left_on="start_line",
                     right_on="line_no", by=_LANE, strategy="backward",
                     take={"conn_id": "conn_id", "stream_id": "stream_id"})
    by_stream = by_stream.join(life, on=["origin", "conn_id", "stream_id"], how="left")
    placed = by_stream.filter(inside)
    rest = by_stream.filter(~inside.fill_null(False)).select_seq(calls.columns)
    by_conn = asof(rest, lanes.filter(pl.col("conn_id").is_not_null()), left_on="start_line", right_on="line_no",
                   by=_LANE, strategy="backward", take={"conn_id": "conn_id"})
    on_conn = asof(by_conn, life.drop("stream_id").rename({"life_start_us": "life_start"}), left_on="start_us",
                   right_on="life_start", by=["origin", "conn_id"], strategy="backward",
                   take={"request_uid": "request_uid", "life_start": "life_start_us", "life_end_us": "life_end_us"})
    return pl.concat([placed.select_seq(*calls.columns, "request_uid"),
                      on_conn.filter(inside).select_seq(*calls.columns, "request_uid")])


def wasm_rows(requests: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """Per-request Wasm detail rows: ``request_uid, detail, start_us, end_us, dur_us``.

    ``requests`` needs ``request_uid, origin, conn_id, stream_id, life_start_us, life_end_us, first_ts,
    last_ts``. Origins with
    VM call lines use them; the others fall back to module-log episodes.
    """
    if not events.select_seq(pl.col("kind").is_in([ENTER, EXIT, *MODULE_LINES]).any()).item():
        return pl.DataFrame(schema=ROWS_SCHEMA)  # (most captures: no Wasm line to place)
    calls = vm_calls(events)
    traced = calls["origin"].unique().implode()
    episodes = module_episodes(events.filter(~pl.col("origin").is_in(traced)))
    calls = pl.concat([calls, episodes])
    if calls.height == 0:
        return pl.DataFrame(schema=ROWS_SCHEMA)
    placed = _place(calls, events, requests)
    return placed.select_seq("request_uid", detail=pl.lit("wasm ") + pl.col("wasm_call"), start_us="start_us",
                             end_us="end_us", dur_us=(pl.col("end_us") - pl.col("start_us")).clip(lower_bound=0)
                             ).cast(ROWS_SCHEMA)  # type: ignore[arg-type]
