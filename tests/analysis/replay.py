"""A capture's events replayed one copy after another, as a log followed for hours would bring them: each copy
later by the capture's span, with its own line numbers, connection and stream ids (connection 0, Envoy's async
client on every thread, stays 0), and no `initializing epoch` line after the first copy (that would be a restart)."""
from __future__ import annotations

from collections.abc import Callable

import polars as pl

from envoy_dissector.parser.kinds import EventKind

#: Log time between the last line of a copy and the first of the next.
PAUSE_US = 1_000_000
#: Copy ``k`` flips stream ids by ``k`` shifted this far (an id taken out of a 64-bit random number).
STREAM_BITS = 40


def replayer(events: pl.DataFrame) -> Callable[[int], pl.DataFrame]:
    """A function of ``k``: the ``k``-th copy of ``events`` (the 0-th is ``events``)."""
    boot = ((pl.col("kind") == EventKind.SERVER_LIFECYCLE_NOISE)
            & pl.col("message").str.starts_with("initializing epoch")).fill_null(False)
    running = events.filter(~boot)
    span = int(events["ts_us"].max() - events["ts_us"].min()) + PAUSE_US  # type: ignore[operator]
    lines = int(events["line_no"].max()) + 1  # type: ignore[arg-type]
    conns = int(events["conn_id"].max() or 0) + 1  # type: ignore[arg-type]

    def copy(k: int) -> pl.DataFrame:
        if k == 0:
            return events

        def moved(column: str) -> pl.Expr:
            return pl.when(pl.col(column) == 0).then(0).otherwise(pl.col(column) + k * conns)

        return running.with_columns(
            ts_us=pl.col("ts_us") + k * span, line_no=pl.col("line_no") + k * lines,
            conn_id=moved("conn_id"), upstream_conn_id=moved("upstream_conn_id"),
            # (stream ids are random 64-bit numbers: flipping high bits keeps them apart without overflowing)
            stream_id=pl.col("stream_id").xor(pl.lit(k << STREAM_BITS, pl.UInt64))).cast(events.schema)  # type: ignore[arg-type]

    return copy
