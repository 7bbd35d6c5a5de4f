"""Boundary sources in order of preference, so captures without socket lines still cut phases where they belong.

At trace level every boundary has its own line (``socket event``, ``parsing N bytes``, ``write returns``...).
Debug-level captures (and trace captures whose ``connection`` logger is below trace) lack the socket lines;
excerpts cut by hand lack whatever lies outside them. Each boundary then falls back to the nearest line that
*does* exist and marks the same moment on the same side (docs/phases.md has the table), instead of borrowing
its neighbour's value and moving a whole phase's time into the next one.

``boundary_sources`` adds the fallback timestamps these lookups need; ``BOUNDARY_SOURCES`` lists, per
boundary, the columns tried in order with the words the report uses for them.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Literal

import polars as pl

from envoy_dissector.analysis.engine.asof import asof
from envoy_dissector.analysis.engine.frames import joined, pick
from envoy_dissector.parser.kinds import EventKind

UPSTREAM_CONN = ["origin", "upstream_conn_id"]

#: boundary -> ((column, what the line is), ...) in order of preference; the first is the primary source.
BOUNDARY_SOURCES: dict[str, tuple[tuple[str, str], ...]] = {
    "b0": (("read_start_ts", "downstream read event"), ("parse_start_ts", "parsing N bytes"),
           ("new_stream_ts", "new stream")),
    "b1": (("parse_start_ts", "parsing N bytes"), ("new_stream_ts", "new stream")),
    "b2": (("hdr_ts", "request headers complete"),),
    "b3": (("route_ts", "route match"), ("router_any_ts", "first router line")),
    "b4": (("pool_ready_ts", "pool ready"),),
    "b5": (("us_written_ts", "upstream write returns"), ("us_writing_ts", "upstream writing N bytes"),
           ("us_encode_complete_ts", "upstream encode complete"),
           ("pool_ready_ts", "pool ready (request encoded in the same event)")),
    "b6": (("us_read_start_ts", "upstream read event"), ("us_parsing_ts", "upstream parsing N bytes")),
    "b7": (("us_resp_router_ts", "upstream headers at the router"), ("us_rx_beg_us", "upstream headers parsed"),
           ("upstream_timeout_ts", "upstream timeout"), ("ds_tx_beg_us", "encoding headers via codec")),
    "b8": (("ds_tx_end_us", "response encoded (DS_TX_END)"), ("response_end_ts", "upstream response complete")),
    "b9": (("life_end_ts", "downstream write returns"),
           ("response_end_ts", "response end (no downstream write seen)")),
}
#: Short names of the boundaries (used in ``missing_boundaries``).
BOUNDARY_NAMES = {
    "b0": "downstream read", "b1": "parse start", "b2": "request headers", "b3": "route match", "b4": "pool ready",
    "b5": "request written upstream", "b6": "upstream read", "b7": "response headers", "b8": "response encoded",
    "b9": "response written downstream",
}
#: A phase that cannot be measured when this boundary's primary line is missing: it would only ever be 0.
UNMEASURED_WITHOUT = {"b0": "downstream_read", "b6": "response_parse", "b9": "downstream_write"}


def _on_upstream(events: pl.DataFrame, kinds: list[EventKind], condition: pl.Expr | None = None) -> pl.DataFrame:
    """Lines of ``kinds`` (meeting ``condition``, tested on those lines only) as upstream-connection times."""
    needed = {"origin", "conn_id", "ts_us", "kind", *(condition.meta.root_names() if condition is not None else ())}
    lines = pick(events.select_seq(*(c for c in events.columns if c in needed)),
        pl.col("kind").is_in(kinds) & pl.col("conn_id").is_not_null())
    if condition is not None:
        lines = pick(lines, condition)
    return lines.select_seq("origin", "ts_us", upstream_conn_id="conn_id")


def boundary_sources(requests: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """Adds the fallback timestamps of ``BOUNDARY_SOURCES`` that the requests stage does not compute.

    - ``us_writing_ts``: the first ``writing N bytes`` on the upstream connection at/after the router handed
      the request over (trace level without socket lines);
    - ``us_encode_complete_ts``: the codec client's ``encode complete`` on the upstream connection at/after
      ``pool ready`` (debug level: the request is encoded into the connection's buffer);
    - ``us_parsing_ts``: the last ``parsing N bytes``/``dispatching N bytes`` on the upstream connection before
      the router saw the response (trace level without socket lines);
    - ``upstream_timeout_ts``: the router's ``upstream timeout`` (else the last per-try timeout).
    """
    r = requests
    # A fallback is looked up only for the requests that lack every source before it in its boundary's list
    # (no boundary reads it on the others: they stay null), and only when some request does (a trace-level
    # capture has them all).
    if _lacks(r, "us_written_ts"):
        writing = functools.partial(_on_upstream, events, [EventKind.WRITING_BYTES])
        r = _fallback(r, _none_of("us_written_ts"), writing, left_on="us_tx_start_ts", strategy="forward",
                      name="us_writing_ts", tolerance=100_000)
    if _lacks(r, "us_written_ts", "us_writing_ts"):
        encoded = functools.partial(_on_upstream, events, [EventKind.CODEC_CLIENT_NOISE],
                                    pl.col("message").fill_null("").str.ends_with("encode complete"))
        r = _fallback(r, _none_of("us_written_ts", "us_writing_ts"), encoded, left_on="pool_ready_ts",
                      strategy="forward", name="us_encode_complete_ts", tolerance=100_000)
    if _lacks(r, "us_read_start_ts"):
        parsing = functools.partial(_on_upstream, events, [EventKind.PARSING_BYTES, EventKind.H2_DISPATCHING_BYTES])
        r = _fallback(r, _none_of("us_read_start_ts"), parsing, left_on="us_resp_router_ts", strategy="backward",
                      name="us_parsing_ts", tolerance=1_000_000)
        # Never before the request was handed over (a keep-alive connection's previous response).
        r = r.with_columns_seq(us_parsing_ts=pl.when(pl.col("us_parsing_ts") >= pl.col("us_tx_start_ts")).then(
            pl.col("us_parsing_ts")))
    r = r.with_columns_seq(pl.lit(None, dtype=pl.Int64).alias(c) for c in _FALLBACK_COLUMNS if c not in r.columns)
    if not _lacks(r, "us_resp_router_ts", "us_rx_beg_us"):
        return r.with_columns_seq(upstream_timeout_ts=pl.lit(None, dtype=pl.Int64))
    stream = ["origin", "conn_id", "stream_id"]
    timeouts = pick(events.select_seq(*stream, "ts_us", "kind"),
        pl.col("kind").is_in([EventKind.UPSTREAM_TIMEOUT, EventKind.PER_TRY_TIMEOUT])
        & pl.col("stream_id").is_not_null()
    ).group_by(stream).agg(
        upstream_timeout_ts=pl.coalesce(pl.col("ts_us").filter(pl.col("kind") == EventKind.UPSTREAM_TIMEOUT).min(),
                                        pl.col("ts_us").max()))
    return joined(r, timeouts, on=stream, how="left", maintain_order="left")


_FALLBACK_COLUMNS = ("us_writing_ts", "us_encode_complete_ts", "us_parsing_ts")


def _none_of(*columns: str) -> pl.Expr:
    return pl.all_horizontal(pl.col(c).is_null() for c in columns)


def _fallback(r: pl.DataFrame, lacking: pl.Expr, lines: Callable[[], pl.DataFrame], *, left_on: str,
              strategy: Literal["backward", "forward"], name: str, tolerance: int) -> pl.DataFrame:
    """``r`` with ``name``: the time of the nearest of ``lines()`` (upstream-connection times) on the request's
    upstream connection, looked up for the rows where ``lacking`` holds (null on the others).

    Few requests lack a boundary's own line (cut ones, Envoy's own streams): the lookup takes only them and
    the lines of their connections, not every request and every line of the window."""
    wanted = pick(r.select_seq(*dict.fromkeys([*UPSTREAM_CONN, left_on, *lacking.meta.root_names()]),
                          row__=pl.int_range(pl.len(), dtype=pl.UInt32)),
        lacking & pl.col(left_on).is_not_null() & pl.col("upstream_conn_id").is_not_null())
    column = pl.select(pl.repeat(None, r.height, dtype=pl.Int64).alias(name)).to_series()
    if wanted.height:
        right = pick(lines(), pl.col("upstream_conn_id").is_in(wanted["upstream_conn_id"].unique().implode()))
        found = asof(wanted.select_seq(*UPSTREAM_CONN, left_on, "row__"), right, left_on=left_on, right_on="ts_us",
                     by=UPSTREAM_CONN, strategy=strategy, take={"ts_us": name}, tolerance=tolerance)
        column = column.scatter(found["row__"], found[name])
    return r.with_columns_seq(column)


def _lacks(r: pl.DataFrame, *columns: str) -> bool:
    """Some row has none of ``columns`` (one not looked up yet counts as none)."""
    nulls = [pl.col(c).is_null() for c in columns if c in r.columns]
    return bool(r.height) and (not nulls or bool(r.select_seq(pl.all_horizontal(nulls).any()).item()))


def raw_boundaries(r: pl.DataFrame) -> pl.DataFrame:
    """``b0``..``b9`` from the first source that exists (null when none does), and where each came from.

    ``boundary_fallbacks`` lists the boundaries taken from a fallback line (``b5=upstream encode complete``),
    ``missing_boundaries`` the ones with no line at all, ``unmeasured_phases`` the phases that are 0 only
    because their boundary's line is not in the capture (``downstream_read`` without socket lines, ...).
    """
    values, fallbacks, missing = [], [], []
    for b, sources in BOUNDARY_SOURCES.items():
        values.append(pl.coalesce(*(pl.col(c) for c, _ in sources)).alias(b))
        primary = pl.col(sources[0][0]).is_not_null()
        chosen: pl.Expr = pl.lit(None, dtype=pl.String)
        for column, label in reversed(sources[1:]):
            chosen = pl.when(pl.col(column).is_not_null()).then(pl.lit(f"{b}={label}")).otherwise(chosen)
        fallbacks.append(pl.when(primary).then(None).otherwise(chosen))
        missing.append(pl.when(pl.all_horizontal(pl.col(c).is_null() for c, _ in sources)).then(
            pl.lit(f"{b} {BOUNDARY_NAMES[b]}")))
    unmeasured = [pl.when(pl.col(BOUNDARY_SOURCES[b][0][0]).is_null()).then(pl.lit(phase))
                  for b, phase in UNMEASURED_WITHOUT.items()]
    return r.with_columns_seq(*values,
                              boundary_fallbacks=pl.concat_str(fallbacks, separator=", ", ignore_nulls=True),
                              missing_boundaries=pl.concat_str(missing, separator=", ", ignore_nulls=True),
                              unmeasured_phases=pl.concat_str(unmeasured, separator=", ", ignore_nulls=True))
