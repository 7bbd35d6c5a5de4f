"""TLS handshakes (Istio mTLS between sidecars): which connections shook hands, when, and who waited.

Envoy 1.40 logs no "handshake complete" line. A TLS connection is one whose transport logs ``ssl …`` lines;
its handshake ends at its ``raising connection event 2`` (Connected is raised after the handshake):

* upstream (Envoy connects): from ``connected`` (TCP) to that event — Envoy's own ``US_HS_END``. A request
  that waited for the new connection shows it as the ``tls_handshake`` phase (between ``upstream_connect``
  and the rest of ``router``; requests.py and phases.py).
* downstream (Envoy accepts): from the connection's first line (``new connection from``) to that event.
  It lies before the first request's first read, outside ``total_us``: the connection's first request gets
  ``downstream_tls_handshake_us`` and a ``tls_handshake`` row with detail ``downstream``.
"""
from __future__ import annotations

import polars as pl

from envoy_dissector.analysis.engine.origins import group_per_origin
from envoy_dissector.analysis.stages.requests import TLS_KINDS
from envoy_dissector.parser.kinds import EventKind

HANDSHAKE_SCHEMA = {"origin": pl.String(), "conn_id": pl.Int64(), "direction": pl.String(),
                    "start_us": pl.Int64(), "end_us": pl.Int64()}
_CONNECT_KINDS = (EventKind.CONNECTING_TO, EventKind.CLIENT_CONNECTING, EventKind.CONNECTION_IN_PROGRESS,
                  EventKind.CONNECTED)


def handshakes(events: pl.DataFrame) -> pl.DataFrame:
    """One row per TLS connection that completed a handshake: ``origin, conn_id, direction, start_us, end_us``."""
    return handshakes_of(connection_facts(events))


def _per_connection(frame: pl.DataFrame) -> pl.DataFrame:
    """Facts per connection of ``frame`` (flags and times of lines, or facts of parts): any flag, earliest time."""
    return group_per_origin(frame, ["conn_id"], dict(
        tls=pl.col("tls").sum() > 0, outgoing=pl.col("outgoing").sum() > 0, first_us=pl.col("first_us").min(),
        connected_us=pl.col("connected_us").min(), established_us=pl.col("established_us").min(),
    )).select_seq("origin", "conn_id", "tls", "outgoing", "first_us", "connected_us", "established_us")


def connection_facts(events: pl.DataFrame) -> pl.DataFrame:
    """Per connection: what ``handshakes`` needs (``any`` and minima, so facts of parts merge with
    ``merge_facts``)."""
    lines = events.select_seq("origin", "conn_id", "ts_us", "kind", "event").filter(pl.col("conn_id").is_not_null())
    # (conditional columns reduced with plain sums and minima: filtering or `any` inside groups costs more; a
    # `sum > 0` of a flag without nulls is its `any`)
    return _per_connection(lines.select_seq(
        "origin", "conn_id", tls=pl.col("kind").is_in(TLS_KINDS), outgoing=pl.col("kind").is_in(_CONNECT_KINDS),
        first_us="ts_us", connected_us=pl.when(pl.col("kind") == EventKind.CONNECTED).then(pl.col("ts_us")),
        established_us=pl.when((pl.col("kind") == EventKind.RAISING_CONNECTION_EVENT) & (pl.col("event") == 2))
        .then(pl.col("ts_us"))))


def merge_facts(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """``connection_facts`` of consecutive parts of a capture, merged into those of the whole."""
    return _per_connection(pl.concat(parts))


def handshakes_of(per_conn: pl.DataFrame) -> pl.DataFrame:
    """``handshakes`` from ``connection_facts``."""
    done = per_conn.filter(pl.col("tls") & pl.col("established_us").is_not_null())
    return done.select_seq(
        "origin", "conn_id",
        direction=pl.when(pl.col("outgoing")).then(pl.lit("upstream")).otherwise(pl.lit("downstream")),
        start_us=pl.when(pl.col("outgoing")).then(pl.coalesce("connected_us", "first_us"))
        .otherwise(pl.col("first_us")),
        end_us="established_us").cast(HANDSHAKE_SCHEMA)  # type: ignore[arg-type]


def downstream_waits(requests: pl.DataFrame, events: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Requests with ``downstream_tls_handshake_us`` (on each TLS connection's first request), and its rows.

    ``events`` may also be their ``handshakes`` already (``handshakes_of(merged facts)`` when streaming)."""
    shakes = events if "direction" in events.columns else handshakes(events)
    shakes = shakes.filter(pl.col("direction") == "downstream")
    # (a few columns are filtered and sorted, and the wait is put at its rows: the wide frame is not copied)
    # (without a downstream handshake no connection's first request is looked for: millions of rows otherwise)
    mine = requests if shakes.height else requests.head(0)
    firsts = mine.select_seq("origin", "conn_id", "life_start_us", pos__=pl.int_range(pl.len(), dtype=pl.UInt32)
                             ).filter(pl.col("life_start_us").is_not_null()).sort(
        "life_start_us", maintain_order=True).group_by("origin", "conn_id").agg(pos__=pl.col("pos__").first())
    # (sorted: the handshakes' and the join's orders are unspecified, and the rows join the phases frame, whose
    # order the outputs keep)
    waited = shakes.join(firsts, on=["origin", "conn_id"], how="inner").sort("origin", "conn_id")
    waited = waited.with_columns_seq(request_uid=requests["request_uid"].gather(waited["pos__"]))
    rows = waited.select_seq("request_uid", phase=pl.lit("tls_handshake"), detail=pl.lit("downstream"),
                             start_us="start_us", end_us="end_us", dur_us=pl.col("end_us") - pl.col("start_us"),
                             part_of_total=pl.lit(False))
    wait = pl.repeat(None, requests.height, dtype=pl.Int64, eager=True).alias("downstream_tls_handshake_us")
    if waited.height:
        wait = wait.scatter(waited["pos__"], rows["dur_us"])
    return requests.drop("downstream_tls_handshake_us", strict=False).with_columns_seq(wait), rows


def counts(events: pl.DataFrame) -> dict[str, dict[str, int]]:
    """Completed handshakes per origin and direction (compare with Envoy's ``ssl.handshake`` counters)."""
    return counts_of(handshakes(events))


def counts_of(shakes: pl.DataFrame) -> dict[str, dict[str, int]]:
    """``counts`` from ``handshakes``."""
    out: dict[str, dict[str, int]] = {}
    for origin, direction, n in shakes.group_by("origin", "direction").len().iter_rows():
        out.setdefault(origin, {})[direction] = n
    return out
