"""Wasm VM time per request, from Envoy's VM call tracing (``[host->vm] proxy_on_…`` / ``[host<-vm] … return``).

VM lines carry no connection or stream id. A callback runs on the worker thread inside the processing of
one stream, so each call is placed on the stream of the last record with a stream id logged before it on
the same thread (the request's own ``request headers complete`` before ``proxy_on_request_headers``, its
``Codec completed encoding stream.`` before ``proxy_on_log``). Only outermost calls count: the host may
call into the module again while serving the module's own host call (``proxy_on_memory_allocate``).

Older captures (Envoy ≤ 1.19 / Istio 1.11) often have no VM call lines, only what the module logged
(``wasm log …``) and CEL errors (``expr evaluate value error``). There a run of consecutive wasm records on
a thread is one VM episode, from the record before the run to the run's last record.
"""
from __future__ import annotations

import polars as pl

from envoy_dissector.analysis.asof import asof

ENTER, EXIT = "wasm_vm_enter", "wasm_vm_exit"
MODULE_LINES = ("wasm_log", "cel_error")
_THREAD = ["origin", "thread"]
#: Callbacks of a plugin's root context (VM and plugin life, timers, queues): work for no request.
ROOT_CALLS = ("proxy_on_vm_start", "proxy_on_configure", "proxy_on_tick", "proxy_on_queue_ready",
              "proxy_on_foreign_function")
_COLUMNS = ("origin", "thread", "line_no", "ts_us", "kind", "wasm_call", "wasm_context", "conn_id", "stream_id")


def vm_calls(events: pl.DataFrame) -> pl.DataFrame:
    """Outermost VM calls: ``origin, thread, wasm_call, start_us, end_us, start_line``."""
    if "wasm_call" not in events.columns:
        return _empty_calls()
    vm = events.filter(pl.col("kind").is_in([ENTER, EXIT]) & pl.col("thread").is_not_null()).select(
        *_THREAD, "line_no", "ts_us", pl.col("kind").cast(pl.String), "wasm_call", "wasm_context")
    if vm.height == 0:
        return _empty_calls()
    enters = vm.filter(pl.col("kind") == ENTER).select(*_THREAD, "wasm_call", "wasm_context", "line_no",
                                                       start_line="line_no", start_us="ts_us")
    exits = vm.filter(pl.col("kind") == EXIT).select(*_THREAD, "wasm_call", end_line="line_no", end_us="ts_us")
    # Each return closes the latest call of the same callback on the same thread.
    paired = asof(exits, enters, left_on="end_line", right_on="line_no", by=[*_THREAD, "wasm_call"],
                  strategy="backward", take={"start_line": "start_line", "start_us": "start_us",
                                             "wasm_context": "wasm_context"}
                  ).filter(pl.col("start_line").is_not_null())
    paired = paired.unique([*_THREAD, "start_line"], keep="first").sort(*_THREAD, "start_line")
    reach = pl.col("end_line").cum_max().shift(1).over(_THREAD)
    outer = paired.filter(reach.is_null() | (pl.col("start_line") > reach))
    roots = enters.filter(pl.col("wasm_call").is_in(ROOT_CALLS)).select(*_THREAD, "wasm_context").unique()
    per_request = outer.join(roots, on=[*_THREAD, "wasm_context"], how="anti", nulls_equal=True)
    return per_request.select(*_THREAD, "wasm_call", "start_us", "end_us", "start_line")


def module_episodes(events: pl.DataFrame) -> pl.DataFrame:
    """Runs of wasm module records (no VM call lines): ``origin, thread, wasm_call, start_us, end_us, start_line``."""
    lines = events.filter(pl.col("thread").is_not_null()).select(
        *_THREAD, "line_no", "ts_us", wasm=pl.col("kind").cast(pl.String).is_in(MODULE_LINES)).sort(*_THREAD, "line_no")
    if lines.height == 0 or not lines["wasm"].any():
        return _empty_calls()
    lines = lines.with_columns(prev_ts=pl.col("ts_us").shift(1).over(_THREAD),
                               run=(pl.col("wasm") != pl.col("wasm").shift(1).over(_THREAD)).fill_null(True)
                               .cast(pl.Int64).cum_sum().over(_THREAD))
    runs = lines.filter("wasm").group_by(*_THREAD, "run").agg(
        start_us=pl.coalesce(pl.col("prev_ts").first(), pl.col("ts_us").first()),
        end_us=pl.col("ts_us").last(), start_line=pl.col("line_no").first())
    return runs.select(*_THREAD, wasm_call=pl.lit("wasm module log"), start_us="start_us", end_us="end_us",
                       start_line="start_line")


def _empty_calls() -> pl.DataFrame:
    return pl.DataFrame(schema={"origin": pl.String(), "thread": pl.Int64(), "wasm_call": pl.String(),
                                "start_us": pl.Int64(), "end_us": pl.Int64(), "start_line": pl.Int64()})


def wasm_rows(requests: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """Per-request Wasm detail rows: ``request_uid, detail, start_us, end_us, dur_us``.

    ``requests`` needs ``request_uid, origin, conn_id, stream_id``. Origins with VM call lines use them;
    the others fall back to module-log episodes.
    """
    calls = vm_calls(events)
    with_vm = calls.select("origin").unique()
    episodes = module_episodes(events.join(with_vm, on="origin", how="anti") if with_vm.height else events)
    calls = pl.concat([calls, episodes])
    if calls.height == 0:
        return pl.DataFrame(schema={"request_uid": pl.String(), "detail": pl.String(), "start_us": pl.Int64(),
                                    "end_us": pl.Int64(), "dur_us": pl.Int64()})
    on_stream = events.filter(pl.col("stream_id").is_not_null() & pl.col("thread").is_not_null()).select(
        *_THREAD, "line_no", "conn_id", "stream_id")
    calls = calls.drop("conn_id", "stream_id", strict=False)
    placed = asof(calls, on_stream, left_on="start_line", right_on="line_no", by=_THREAD, strategy="backward",
                  take={"conn_id": "conn_id", "stream_id": "stream_id"})
    keys = requests.select("request_uid", "origin", "conn_id", "stream_id")
    return placed.join(keys, on=["origin", "conn_id", "stream_id"], how="inner").select(
        "request_uid", detail=pl.lit("wasm ") + pl.col("wasm_call"), start_us="start_us", end_us="end_us",
        dur_us=(pl.col("end_us") - pl.col("start_us")).clip(lower_bound=0))
