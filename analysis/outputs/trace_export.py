"""Chrome Trace Event JSON (opens in Perfetto / chrome://tracing).

One process per origin, one track (tid) per worker thread with the busy slices
as complete (``X``) events; each request as an async track (``b``/``e`` keyed by
its uid) with its phases nested inside; flows (``s``/``f``) tie the downstream
work of a request to the upstream connection's slices (write, then response read).
Timestamps are µs since the capture's first slice.
"""
from __future__ import annotations

from typing import Any

import polars as pl

from envoy_dissector.analysis.capture import Capture
from envoy_dissector.analysis.schema import Phase

MAX_REQUESTS = 20_000  # beyond this only the slowest requests get async tracks (the loop stays whole)


def trace_events(capture: Capture) -> dict[str, Any]:
    loop = capture.loop
    reqs = capture.requests.filter(~pl.col("internal") & pl.col("life_start_us").is_not_null())
    first_request = reqs["life_start_us"].min() if reqs.height else None
    starts = [x for x in (loop["start_us"].min(), first_request) if x is not None]
    t0 = int(min(starts)) if starts else 0  # type: ignore[arg-type]
    origins = sorted(set(loop["origin"].to_list()) | set(reqs["origin"].to_list()))
    pid = {o: i + 1 for i, o in enumerate(origins)}
    out: list[dict[str, Any]] = []
    for origin, p in pid.items():
        out.append({"ph": "M", "name": "process_name", "pid": p, "tid": 0, "args": {"name": f"envoy {origin}"}})
    for origin, thread in loop.select_seq("origin", "thread").unique().sort("origin", "thread").iter_rows():
        out.append({"ph": "M", "name": "thread_name", "pid": pid[origin], "tid": int(thread),
                    "args": {"name": f"worker {thread}"}})
    for origin, thread, start, end, conn, kind, lines in loop.iter_rows():
        out.append({"ph": "X", "name": f"C{conn} {kind}" if conn is not None else kind, "cat": "loop",
                    "pid": pid[origin], "tid": int(thread), "ts": start - t0, "dur": max(end - start, 1),
                    "args": {"conn_id": conn, "lines": lines}})
    if reqs.height > MAX_REQUESTS:
        reqs = reqs.sort("total_us", descending=True, nulls_last=True).head(MAX_REQUESTS)
    phases = capture.phases.join(reqs.select_seq("request_uid", "origin", "thread"), on="request_uid")
    for uid, origin, thread, start, end, method, path, status, total, envoy, queue, before in reqs.select_seq(
            "request_uid", "origin", "thread", "life_start_us", "life_end_us", "method", "path", "status",
            "total_us", "envoy_duration_us", "loop_queue_us", "queue_before_read_us").iter_rows():
        if end is None:
            continue
        base = {"cat": "request", "id": uid, "pid": pid[origin], "tid": int(thread or 0)}
        out.append({**base, "ph": "b", "name": f"{method or ''} {path or ''} {status or ''}".strip(),
                    "ts": start - t0, "args": {"request_uid": uid, "total_us": total, "envoy_duration_us": envoy,
                                               "loop_queue_us": queue, "queue_before_read_us": before}})
        out.append({**base, "ph": "e", "name": f"{method or ''} {path or ''} {status or ''}".strip(),
                    "ts": end - t0})
    for uid, phase, detail, start, end, _dur, top, origin, thread in phases.filter(
            pl.col("part_of_total") | (pl.col("phase") == Phase.LOOP_QUEUE)).iter_rows():
        base = {"cat": "request", "id": uid, "pid": pid[origin], "tid": int(thread or 0)}
        name = phase if top else f"{phase}: {detail}"
        out.append({**base, "ph": "b", "name": name, "ts": start - t0, "args": {"detail": detail}})
        out.append({**base, "ph": "e", "name": name, "ts": max(end, start) - t0})
    out.extend(_flows(reqs, pid, t0))
    return {"traceEvents": out, "displayTimeUnit": "ns",
            "otherData": {"generator": "envoy-dissector", "format": capture.format}}


def _flows(reqs: pl.DataFrame, pid: dict[str, int], t0: int) -> list[dict[str, Any]]:
    """Downstream work -> upstream write, and upstream response read -> downstream encode."""
    out: list[dict[str, Any]] = []
    cols = ("request_uid", "origin", "thread", "b4", "b5", "b6", "b7")
    for n, (_uid, origin, thread, b4, b5, b6, b7) in enumerate(reqs.select_seq(cols).iter_rows()):
        if thread is None or b5 is None or b6 is None or b4 is None or b7 is None or b5 <= b4:
            continue
        for k, (a, b) in enumerate(((b4, b5), (b6, b7))):
            fid = 2 * n + k + 1
            common = {"cat": "flow", "name": "upstream" if k == 0 else "response", "id": fid,
                      "pid": pid[origin], "tid": int(thread)}
            out.append({**common, "ph": "s", "ts": a - t0})
            out.append({**common, "ph": "f", "bp": "e", "ts": b - t0})
    return out
