"""Statistics over requests: percentiles per phase, overall and by group; capture span and rate."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import polars as pl

from envoy_dissector.analysis.schema import PHASE_COLUMNS

SUMMARY_COLUMNS: tuple[str, ...] = (*PHASE_COLUMNS, "wasm_us", "tracing_us", "internal_us", "total_us", "loop_queue_us",
                                     "queue_before_read_us", "envoy_duration_us")
QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99}


def percentile_expr(column: str | pl.Expr, q: float) -> pl.Expr:
    """The one percentile definition of the project (report, findings, summary.json, dashboard, notebook).

    The value at rank ``round(q·(n−1))`` of the sorted non-null values (polars ``interpolation="nearest"``):
    always a value that was measured, never one interpolated between two requests.
    """
    expr = pl.col(column) if isinstance(column, str) else column
    return expr.quantile(q, interpolation="nearest")


def percentile(values: pl.Series, q: float) -> float | None:
    """:func:`percentile_expr` over one series; ``None`` when it holds no value.

    >>> percentile(pl.Series([1, 2, 3, 4]), 0.5), percentile(pl.Series([], dtype=pl.Int64), 0.5)
    (3.0, None)
    """
    if values.drop_nulls().len() == 0:
        return None
    value = values.to_frame("v").select_seq(percentile_expr("v", q)).item()
    return None if value is None else float(value)


def median(values: pl.Series) -> float | None:
    """The p50 of :func:`percentile` (the same number as the report's p50 column)."""
    return percentile(values, 0.5)


def counted(requests: pl.DataFrame, columns: Iterable[str] | None = None) -> pl.DataFrame:
    """Requests that enter statistics: complete client requests (not internal, not cut by the capture); with
    ``columns``, only those (a filter copies every column it keeps: the wide frame is 0.5 KB a request)."""
    return rows_where(requests, pl.col("complete") & ~pl.col("internal"), columns)


def rows_where(requests: pl.DataFrame, condition: pl.Expr, columns: Iterable[str] | None = None) -> pl.DataFrame:
    """The rows of ``requests`` that meet ``condition``, with only ``columns`` (all without): the filter gathers
    the columns read, not the whole frame."""
    if columns is None:
        return requests.filter(condition)
    return requests.lazy().filter(condition).select_seq(list(dict.fromkeys(columns))).collect()


def percentiles(requests: pl.DataFrame, columns: tuple[str, ...] = SUMMARY_COLUMNS
                ) -> dict[str, dict[str, int | None]]:
    """``{phase: {p50, p90, p99, max}}`` in µs over counted requests (phase names without ``_us``); ``None``
    where no counted request has a value (``tls_handshake_us`` without TLS, ``envoy_duration_us`` without
    milestones)."""
    r = counted(requests, columns)
    out: dict[str, dict[str, int | None]] = {}
    if r.height == 0:
        return out
    exprs = []
    for c in columns:
        for name, q in QUANTILES.items():
            exprs.append(percentile_expr(c, q).alias(f"{c}|{name}"))
        exprs.append(pl.col(c).max().alias(f"{c}|max"))
    row = r.select_seq(exprs).row(0, named=True)
    for key, value in row.items():
        c, stat = key.split("|")
        out.setdefault(c.removesuffix("_us"), {})[stat] = int(value) if value is not None else None
    return out


GROUPED_COLUMNS: tuple[str, ...] = ("total_us", "envoy_duration_us", "upstream_wait_us", "loop_queue_us",
                                    "queue_before_read_us")


def grouped(requests: pl.DataFrame, by: str, columns: tuple[str, ...] = GROUPED_COLUMNS) -> pl.DataFrame:
    """Count and p50/p90/p99/max of ``columns`` per value of ``by`` (authority, path, cluster, status)."""
    r = counted(requests, (by, *columns))
    exprs: list[pl.Expr] = [pl.len().alias("requests")]
    for c in columns:
        for name, q in QUANTILES.items():
            exprs.append(percentile_expr(c, q).cast(pl.Int64).alias(f"{c[:-3]}_{name}"))
        exprs.append(pl.col(c).max().alias(f"{c[:-3]}_max"))
    # ties in the count are ordered by value: the summary is the same on every run
    return r.group_by(by).agg(exprs).sort(["requests", by], descending=[True, False], nulls_last=True)


def span(requests: pl.DataFrame) -> dict[str, Any]:
    """Capture span over client requests, request counts and rate."""
    client = rows_where(requests, ~pl.col("internal"), ("life_start_us", "life_end_us", "complete"))
    if client.height == 0:
        return {"start_us": None, "end_us": None, "duration_s": 0.0, "requests": 0, "requests_complete": 0,
                "requests_incomplete": 0, "internal_requests": requests.height, "rps": 0.0}
    start = client["life_start_us"].min()
    end = client["life_end_us"].max()
    duration = max((end - start) / 1e6, 1e-6) if isinstance(start, int) and isinstance(end, int) else 0.0
    complete = int(client["complete"].sum())
    return {"start_us": start, "end_us": end, "duration_s": duration, "requests": client.height,
            "requests_complete": complete, "requests_incomplete": client.height - complete,
            "internal_requests": requests.height - client.height,
            "rps": client.height / duration if duration else 0.0}


def dominant_phase(requests: pl.DataFrame) -> pl.Expr:
    """Name of the largest phase of each request."""
    cols = list(PHASE_COLUMNS)
    return pl.concat_list([pl.col(c) for c in cols]).list.arg_max().replace_strict(
        dict(enumerate(c.removesuffix("_us") for c in cols)), return_dtype=pl.String)
