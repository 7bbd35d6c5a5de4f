"""What one worker's window carries across a cut: the few dropped events later requests still look up.

The requests stage reads a connection's past in two ways only:

* **as-of lookups backwards** ("the last read event on this connection before the stream began", "the last
  pool line on this thread before `pool ready`"): the latest event of one kind per key is all such a lookup
  can ever find, so keeping, per key, the *last* dropped event of each looked-up kind makes a lookup over
  ``carried + window`` find what it finds over the whole file;
* **per-connection aggregates** (a connection's first line, its `connected`, `raising connection event 2`,
  whether it spoke TLS or HTTP/2 or was handed out by a pool): minima and "any", so the *first* event of each
  kind per connection is enough.

Forward lookups start at a request's own lines, which a window always holds (see ``streaming.py``).

The carry keeps the past of at most ``MAX_CARRIED_CONNECTIONS`` connections, those seen last: a capture of
millions of connections would otherwise keep a few rows for each. A connection silent while that many others
came after it loses its past (its first line, last `new stream`...): a later line of it is looked up as on a
connection first seen in the window (docs/scale.md).
"""
from __future__ import annotations

import polars as pl

from envoy_dissector.analysis.engine.origins import sole_origin
from envoy_dissector.analysis.stages.requests import TLS_KINDS
from envoy_dissector.parser.kinds import EventKind

#: connections whose rows a carry keeps at most (the ones whose last kept row is latest)
MAX_CARRIED_CONNECTIONS = 100_000
_POOL = (EventKind.POOL_CREATING_STREAM, EventKind.POOL_ATTACHING_TO_NEXT_STREAM, EventKind.POOL_USING_EXISTING)
_ON_CONN = pl.col("conn_id").is_not_null()

#: (condition, key) whose latest dropped event is kept: what backward as-of lookups can find.
LAST_OF: tuple[tuple[pl.Expr, tuple[str, ...]], ...] = (
    (pl.col("kind") == EventKind.NEW_STREAM, ("origin", "conn_id")),
    ((pl.col("kind") == EventKind.SOCKET_EVENT) & ((pl.col("events") & 1) == 1), ("origin", "conn_id")),
    (pl.col("kind").is_in([EventKind.PARSING_BYTES, EventKind.H2_DISPATCHING_BYTES]), ("origin", "conn_id")),
    (pl.col("kind") == EventKind.CLIENT_ON_HEADERS_COMPLETE, ("origin", "conn_id")),
    (pl.col("kind").is_in(_POOL) & _ON_CONN, ("origin", "thread")),
    (pl.col("kind").is_in(_POOL) & _ON_CONN, ("origin", "conn_id")),
)
#: (condition, key) whose earliest event is kept: what per-connection minima and "any" read.
FIRST_OF: tuple[tuple[pl.Expr, tuple[str, ...]], ...] = (
    (pl.lit(True), ("origin", "conn_id")),
    (pl.col("kind") == EventKind.CONNECTED, ("origin", "conn_id")),
    (pl.col("kind") == EventKind.CONNECTION_IN_PROGRESS, ("origin", "conn_id")),
    (pl.col("kind").is_in([EventKind.CONNECTING_TO, EventKind.CLIENT_CONNECTING]), ("origin", "conn_id")),
    ((pl.col("kind") == EventKind.RAISING_CONNECTION_EVENT) & (pl.col("event") == 2), ("origin", "conn_id")),
    (pl.col("kind").is_in(TLS_KINDS), ("origin", "conn_id")),
    (pl.col("logger") == "http2", ("origin", "conn_id")),
)


def carried(dropped: pl.DataFrame, max_connections: int = MAX_CARRIED_CONNECTIONS) -> pl.DataFrame:
    """The rows of ``dropped`` (the previous carry plus events leaving the window, in log order) worth keeping,
    for the ``max_connections`` connections seen last."""
    if dropped.height == 0:
        return dropped
    # the rules read a few narrow columns: filtering those is much cheaper than filtering whole events
    indexed = dropped.select_seq("origin", "conn_id", "thread", "kind", "events", "event",
                                 "logger").with_row_index("pos__")
    # a connection whose socket closed leaves: Envoy never logs its id again (its last lines follow the close in
    # the same event, which the window still holds), so no later lookup can need its past
    closed = (pl.col("kind") == EventKind.CLOSING_SOCKET).any().over("origin", "conn_id")
    indexed = indexed.with_columns_seq(open__=_ON_CONN & ~closed)
    # One query for every rule: each filter then makes only the key and position columns it groups (eagerly, a
    # filter copied all eight, 13 times: 23 -> 11 ms for a 309 k-row window's cut); the key without the origin when
    # the rows have one (an integer key groups faster than one with a string).
    one_origin = sole_origin(dropped) is not None
    rules = [(c & pl.col("open__") if "conn_id" in k else c, k, True) for c, k in LAST_OF] + [
        (c & pl.col("open__"), k, False) for c, k in FIRST_OF]
    rows = indexed.lazy()
    chosen = pl.concat([
        rows.filter(condition & pl.all_horizontal(pl.col(k).is_not_null() for k in key))
        .group_by(*(k for k in key if not (one_origin and k == "origin")))
        .agg(pos__=pl.col("pos__").max() if last else pl.col("pos__").min()).select_seq("pos__")
        for condition, key, last in rules]).unique().sort("pos__").collect()["pos__"]
    if chosen.len() == 0:
        return dropped.head(0)
    kept = indexed.select_seq("origin", "conn_id", "pos__")[chosen]
    if kept.select_seq(pl.struct("origin", "conn_id").n_unique()).item() > max_connections:
        latest = kept.group_by("origin", "conn_id").agg(pl.col("pos__").max()).top_k(max_connections, by="pos__")
        chosen = kept.join(latest.select_seq("origin", "conn_id"), on=["origin", "conn_id"], how="semi",
                           maintain_order="left")["pos__"]
    return dropped[chosen]
