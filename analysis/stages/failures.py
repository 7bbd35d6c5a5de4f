"""Why a request failed: failed upstream connects linked to the connection that failed, and ``failure_reason``.

A connect that is refused, times out or fails TLS verification never reaches ``pool ready``: the stream's
router logs ``upstream reset: reset reason: remote connection failure, transport failure reason: …`` right
after the pool logged ``[Cu] client disconnected, failure reason: …`` (or ``[Cu] connect timeout``) on the
same worker. That connection's own lines (``connecting to``, ``connected``, the TLS error) bound the
request's ``upstream_connect`` and ``tls_handshake`` (docs/phases.md, "Failed connects").

``failure_reason`` is Envoy's response flags and details as its access log prints them
(``%RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS%``): the details of the local reply kept whole, the flags
derived from them as Envoy sets them (docs/output.md).
"""
from __future__ import annotations

import polars as pl

from envoy_dissector.analysis.engine.asof import asof
from envoy_dissector.analysis.engine.frames import joined, pick
from envoy_dissector.parser.kinds import EventKind

#: Reset reasons of a connection that never carried the request (Envoy's ``StreamResetReason`` strings).
CONNECT_FAILURE = r"(?i)connection failure|connection_failure|connection timeout|connection_timeout"
#: Details (regex) -> Envoy's response flag, in the order Envoy prints flags.
DETAIL_FLAGS: tuple[tuple[str, str], ...] = (
    (r"^no_healthy_upstream|^maintenance_mode", "UH"),
    (r"^(response_timeout|upstream_response_timeout|upstream_per_try_timeout|upstream_per_try_idle_timeout)", "UT"),
    (r"^upstream_reset_before_response_started\{(local_reset|local reset)", "LR"),
    (r"^upstream_reset_(before|after)_response_started\{(remote_reset|remote reset|remote_refused)", "UR"),
    (r"^upstream_reset_before_response_started\{[^}]*(connection_failure|connection failure|connection_timeout"
     r"|connection timeout)", "UF"),
    (r"^upstream_reset_(before|after)_response_started\{[^}]*(connection_termination|connection termination)", "UC"),
    (r"^upstream_reset_before_response_started\{[^}]*overflow|^upstream_max_pending_requests|^overflow", "UO"),
    (r"^route_not_found", "NR"),
    (r"^fault_filter_abort", "FI"),
    (r"^(request_rate_limited|local_rate_limited)", "RL"),
    (r"^ext_authz_(denied|error)", "UAEX"),
    (r"^stream_idle_timeout", "SI"),
    (r"^downstream_remote_disconnect", "DC"),
    (r"^cluster_not_found", "NC"),
    (r"^upstream_max_stream_duration_reached", "UMSDR"),
    (r"^overload_manager", "OM"),
)
#: Flags after which Envoy retries (``retry_on``): with retries made, the last one exhausted them.
_RETRIED_FLAGS = ("UF", "UC", "UR", "UT")


def failed_connects(streams: pl.DataFrame, events: pl.DataFrame, setup: pl.DataFrame,
                    real_threads: bool) -> pl.DataFrame:
    """Adds to each stream the connection its last attempt failed to open (``failed_conn_id``) and that
    connection's ``failed_cx_beg_ts`` (connect started), ``failed_cx_end_ts`` (TCP connected, else the
    failure) and ``failed_hs_end_ts`` (the TLS failure after a TCP connect); null where the last attempt did
    not fail to connect; ``failed_reason``, the router's reset reason; ``failed_error``, the connection's own
    error line (``delayed connect error: Connection refused``, the TLS error). ``setup``: per (origin, conn_id)
    the requests stage's connection setup columns."""
    cols = ("origin", "conn_id", "stream_id", "thread", "ts_us", "line_no", "kind", "reason")
    resets = pick(events.select_seq(*(c for c in cols if c in events.columns)),
        (pl.col("kind") == EventKind.UPSTREAM_RESET) & pl.col("stream_id").is_not_null()
        & pl.col("reason").fill_null("").str.contains(CONNECT_FAILURE))
    none = streams.with_columns_seq(*(pl.lit(None, dtype=pl.Int64).alias(c) for c in (
        "failed_conn_id", "failed_cx_beg_ts", "failed_cx_end_ts", "failed_hs_end_ts")),
        failed_reason=pl.lit(None, dtype=pl.String), failed_error=pl.lit(None, dtype=pl.String))
    if resets.height == 0:
        return none
    last = resets.sort("ts_us", "line_no").group_by("origin", "conn_id", "stream_id", maintain_order=True).last()
    closed = pick(events.select_seq("origin", "conn_id", "thread", "ts_us", "line_no", "kind"),
        pl.col("kind").is_in([EventKind.POOL_CLIENT_DISCONNECTED, EventKind.POOL_CONNECT_TIMEOUT])
        & pl.col("conn_id").is_not_null()).rename({"conn_id": "failed_conn_id"})
    by = ["origin", "thread"] if real_threads else ["origin"]
    last = asof(last, closed, left_on="ts_us", right_on="ts_us", by=by, strategy="backward",
                take={"failed_conn_id": "failed_conn_id"}, tolerance=5_000)
    # The TLS error or connect error on that connection: the failure's own time (the pool's line comes after).
    errors = pick(events.select_seq("origin", "conn_id", "ts_us", "line_no", "kind", "reason").sort("ts_us",
                                                                                               "line_no"),
        pl.col("kind").is_in([EventKind.TLS_FAILURE, EventKind.CONNECT_ERROR, EventKind.POOL_CONNECT_TIMEOUT])
        & pl.col("conn_id").is_not_null()).group_by("origin", "conn_id", maintain_order=True).agg(
        failed_at_ts=pl.col("ts_us").min(),
        failed_error=pl.col("reason").drop_nulls().first(),
        tls_failed=(pl.col("kind") == EventKind.TLS_FAILURE).any())
    last = (last.select_seq("origin", "conn_id", "stream_id", "failed_conn_id", reset_ts="ts_us",
                            failed_reason="reason")
            .join(setup.rename({"conn_id": "failed_conn_id"}), on=["origin", "failed_conn_id"], how="left")
            .join(errors.rename({"conn_id": "failed_conn_id"}), on=["origin", "failed_conn_id"], how="left"))
    failed_at = pl.coalesce("failed_at_ts", "reset_ts")
    begin = pl.coalesce("up_in_progress_ts", "up_connecting_ts")
    tls = pl.col("tls_failed").fill_null(False) | pl.col("up_tls").fill_null(False)
    last = last.with_columns_seq(
        failed_cx_beg_ts=pl.when(pl.col("failed_conn_id").is_not_null()).then(pl.min_horizontal(begin, failed_at)),
        failed_cx_end_ts=pl.when(pl.col("failed_conn_id").is_not_null()).then(
            pl.min_horizontal(pl.coalesce("up_connected_ts", failed_at), failed_at)),
        failed_hs_end_ts=pl.when(pl.col("failed_conn_id").is_not_null() & pl.col("up_connected_ts").is_not_null()
                                 & tls).then(pl.max_horizontal(failed_at, "up_connected_ts")),
        reset_ts="reset_ts")
    found = last.select_seq("origin", "conn_id", "stream_id", "failed_conn_id", "failed_cx_beg_ts", "failed_cx_end_ts",
                            "failed_hs_end_ts", "failed_reason", "failed_error", "reset_ts")
    out = joined(streams, found, on=["origin", "conn_id", "stream_id"], how="left", maintain_order="left")
    # Only a last attempt that failed: a connection that carried the request after the failed one (a retry
    # that got `pool ready`) is the request's upstream connection, and its connect is measured as usual.
    failed_last = pl.col("reset_ts").is_not_null() & (pl.col("pool_ready_ts").is_null()
                                                      | (pl.col("reset_ts") > pl.col("pool_ready_ts")))
    return out.with_columns_seq(
        pl.when(failed_last).then(pl.col(c)).alias(c)
        for c in ("failed_conn_id", "failed_cx_beg_ts", "failed_cx_end_ts", "failed_hs_end_ts", "failed_reason",
                  "failed_error")
    ).drop("reset_ts")


def response_flags(details: pl.Expr, retried: pl.Expr) -> pl.Expr:
    """Envoy's response flags (``UF,URX``) for a local reply's ``details``; ``retried``: retries were made."""
    flags = [pl.when(details.str.contains(pattern)).then(pl.lit(flag)) for pattern, flag in DETAIL_FLAGS]
    exhausted = pl.when(retried & pl.any_horizontal(
        details.str.contains(p) for p, f in DETAIL_FLAGS if f in _RETRIED_FLAGS)).then(pl.lit("URX"))
    return pl.concat_str([*flags, exhausted], separator=",", ignore_nulls=True)


def failure_reason(details: pl.Expr, status: pl.Expr, retried: pl.Expr, connect_failure: pl.Expr) -> pl.Expr:
    """``failure_reason``: ``"<flags> <details>"`` of a local reply that answered with an error (or reset the
    stream), the details kept whole; else, for a last attempt that failed to connect with no reply in the
    capture, ``UF`` and the connection's failure. Null for a request that did not fail."""
    flags = response_flags(details, retried)
    reply = pl.when(details.is_not_null() & (status.is_null() | (status >= 400))).then(
        pl.when(flags != "").then(flags + pl.lit(" ")).otherwise(pl.lit("")) + details)
    return pl.coalesce(reply, connect_failure_reason(connect_failure))


def connect_failure_reason(connect_failure: pl.Expr) -> pl.Expr:
    """``failure_reason`` of a request without a local reply's details: ``UF`` and the connection's failure."""
    return pl.when(connect_failure.is_not_null()).then(pl.lit("UF ") + connect_failure)
