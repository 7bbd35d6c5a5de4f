"""Phase attribution: cut each request's life at ten boundaries; per-filter breakdown of decode/encode.

Boundaries, in order (docs/phases.md has the exact log lines):
b0 life start (downstream read event) · b1 parse start · b2 request headers complete ·
b3 router start (route match) · b4 pool ready · b5 request written to the upstream socket ·
b6 upstream read event · b7 response headers at the router · b8 response fully encoded ·
b9 last byte written downstream.
Without its own line a boundary falls back to the nearest line that marks the same moment
(analysis/stages/fallbacks.py: debug-level captures have no socket lines); one with no line at all
takes the value of the next one that exists (its phase is empty);
each boundary is clipped to be at least the previous one, so phases never go negative
and always sum to ``total_us = b9 - b0``. ``upstream_connect`` is carved out of the
router span when the request waited for a new upstream connection.
"""
from __future__ import annotations

import polars as pl

from envoy_dissector.analysis.engine.frames import joined, pick
from envoy_dissector.analysis.schema import PHASE_SPANS, PHASED_REQUEST_SCHEMA, PHASES_SCHEMA, Phase, conform
from envoy_dissector.analysis.stages.fallbacks import (
    BOUNDARY_SOURCES,
    UNMEASURED_WITHOUT,
    boundary_sources,
    raw_boundaries,
)
from envoy_dissector.analysis.stages.internal import (
    charged_rows,
    charged_shares,
    internal_streams,
    own_work,
    work_bursts,
)
from envoy_dissector.analysis.stages.wasm import wasm_rows
from envoy_dissector.parser.kinds import EventKind

BOUNDARIES = ("b0", "b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8", "b9")
WASM_FILTER = r"(?i)wasm|^istio\.(stats|metadata_exchange)|stats_(in|out)bound"
TRACING_FILTER = r"(?i)tracing|tracer|zipkin|opentelemetry|datadog|skywalking"


def boundaries(requests: pl.DataFrame) -> pl.DataFrame:
    """Adds b0..b9 (filled and clipped) to requests (with ``boundary_sources``' columns already added).

    Each boundary comes from the first of its sources that exists (``fallbacks.BOUNDARY_SOURCES``); one with
    no source at all takes the value of the next one, so its phase is empty.
    """
    r = raw_boundaries(requests)
    # Missing boundary: borrow the next one that exists (backward fill across the row); then never before an
    # earlier one (a running maximum). Each in one query.
    r = r.with_columns_seq(pl.coalesce(BOUNDARIES[i:]).alias(b) for i, b in enumerate(BOUNDARIES))
    return r.with_columns_seq(pl.max_horizontal(BOUNDARIES[: i + 1]).alias(b) for i, b in enumerate(BOUNDARIES))


def phase_durations(r: pl.DataFrame) -> pl.DataFrame:
    """``<phase>_us`` columns, ``total_us`` and ``envoy_duration_us``; connect time is carved out of the router
    span."""
    # A new connection's milestones, else the one the last attempt failed to open (analysis/stages/failures.py).
    cx_from = pl.coalesce("us_cx_beg_us", "failed_cx_beg_ts")
    hs_to = pl.coalesce("us_hs_end_us", "failed_hs_end_ts")
    cx_beg = pl.max_horizontal("b3", pl.min_horizontal("b4", cx_from))
    cx_end = pl.max_horizontal(cx_beg, pl.min_horizontal("b4", pl.coalesce("us_cx_end_us", "failed_cx_end_ts", "b4")))
    hs_end = pl.max_horizontal(cx_end, pl.min_horizontal("b4", pl.coalesce(hs_to, cx_end)))
    connect = pl.when(cx_from.is_not_null()).then(cx_end - cx_beg).otherwise(0)
    handshake = pl.when(cx_from.is_not_null() & hs_to.is_not_null()).then(hs_end - cx_end)
    exprs = {f"{phase.value}_us": pl.col(b) - pl.col(a) for phase, a, b in PHASE_SPANS}
    exprs["upstream_connect_us"] = connect
    exprs["tls_handshake_us"] = handshake  # null where the request waited for no handshake
    exprs["router_us"] = pl.col("b4") - pl.col("b3") - connect - handshake.fill_null(0)
    # Unmeasured is not zero: a phase whose boundary line is not in the capture (no socket lines) is null.
    for b, phase in UNMEASURED_WITHOUT.items():
        exprs[f"{phase}_us"] = pl.when(pl.col(BOUNDARY_SOURCES[b][0][0]).is_not_null()).then(exprs[f"{phase}_us"])
    return r.with_columns_seq(cx_beg_ts=cx_beg, cx_end_ts=cx_end, hs_end_ts=hs_end, connected__=cx_from.is_not_null(),
                              shook__=cx_from.is_not_null() & hs_to.is_not_null()).with_columns_seq(
        **{k: v.cast(pl.Int64) for k, v in exprs.items()}, total_us=(pl.col("b9") - pl.col("b0")).cast(pl.Int64),
        # What Envoy's access log reports (%DURATION%, DS_RX_BEG:DS_TX_END), beside our socket-to-socket total.
        envoy_duration_us=(pl.col("ds_tx_end_us") - pl.col("ds_rx_beg_us")).cast(pl.Int64))


def phase_rows(r: pl.DataFrame) -> pl.DataFrame:
    """Long form: one row per phase span of every request (``part_of_total`` rows sum to total_us)."""
    parts = []
    for phase, a, b in PHASE_SPANS:
        if phase == Phase.ROUTER:
            parts.append(_rows(r, phase, "b3", "cx_beg_ts", None))
            parts.append(_rows(pick(r, "connected__"), Phase.UPSTREAM_CONNECT, "cx_beg_ts", "cx_end_ts", None))
            parts.append(_rows(pick(r, "shook__"), Phase.TLS_HANDSHAKE, "cx_end_ts", "hs_end_ts", "upstream"))
            parts.append(_rows(pick(r, "connected__"), Phase.ROUTER, "hs_end_ts", "b4", "after connect"))
            continue
        parts.append(_rows(r, phase, a, b, None))
    rows = pl.concat(parts)
    return pick(rows, pl.col("dur_us") > 0).with_columns_seq(part_of_total=pl.lit(True))


def _rows(r: pl.DataFrame, phase: Phase, a: str, b: str, detail: str | None) -> pl.DataFrame:
    start = pl.col(a)
    end = pl.col(b) if b != "cx_beg_ts" else pl.when("connected__").then(pl.col("cx_beg_ts")).otherwise(pl.col("b4"))
    return r.select_seq(
        "request_uid", phase=pl.lit(phase.value), detail=pl.lit(detail, dtype=pl.String),
        start_us=start, end_us=end, dur_us=(end - start),
    )


#: A filter named by the address of its wrapper (Envoy <= 1.22), e.g. ``0x55d5c8a07e50``.
FILTER_ADDRESS = r"^0x[0-9a-fA-F]+$"
_POSITIONAL = r"^(filter|encoder)#[0-9]+$"


def _positional_names(called: pl.DataFrame) -> pl.DataFrame:
    """Filters logged by address (Envoy <= 1.22: one heap address per filter per stream) get a name that is the
    same on every stream: their position among the stream's ``decode headers called`` lines (``filter#1`` is
    the first decoder filter) or ``encode headers called`` lines (``encoder#1`` is the first encoder to run,
    i.e. the last one configured). Configured names (1.23+) are kept."""
    position = pl.int_range(1, pl.len() + 1).over("request_uid", "kind", order_by=["ts_us", "line_no"])
    decoder = pl.col("kind") == EventKind.DECODE_HEADERS_CALLED
    prefix = pl.when(decoder).then(pl.lit("filter#")).otherwise(pl.lit("encoder#"))
    return called.with_columns_seq(filter=pl.when(pl.col("filter").str.contains(FILTER_ADDRESS)).then(
        prefix + position.cast(pl.String)).otherwise(pl.col("filter")))


def filter_rows(r: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """Per-filter spans inside ``filter_chain`` (decode) and ``encode``, from ``... headers called`` lines.

    A filter's line is logged when its callback returns, so its span runs from the previous
    marker (headers complete, or the previous filter's line) to its own line. Decode filters
    are the ones whose line comes before the router starts; the router's own line closes the
    router span and is not listed. The time from the last filter to the route match is the
    router's route lookup.
    """
    keys = r.select_seq("request_uid", "origin", "conn_id", "stream_id", "b2", "b3", "b7", "ds_tx_beg_us")
    called = pick(events.select_seq("origin", "conn_id", "stream_id", "ts_us", "line_no", "kind", "filter"),
        pl.col("kind").is_in([EventKind.DECODE_HEADERS_CALLED, EventKind.ENCODE_HEADERS_CALLED])
        & pl.col("stream_id").is_not_null())
    called = _positional_names(joined(called, keys, on=["origin", "conn_id", "stream_id"], how="inner"))
    decode = pick(called, (pl.col("kind") == EventKind.DECODE_HEADERS_CALLED) & (pl.col("ts_us") <= pl.col("b3")))
    encode = pick(called, (pl.col("kind") == EventKind.ENCODE_HEADERS_CALLED) & (pl.col("ts_us") >= pl.col("b7"))
                           & (pl.col("ts_us") <= pl.col("ds_tx_beg_us").fill_null(pl.col("ts_us"))))
    # A decoder filter that stopped iteration (fault delay, ext_authz, Lua httpCall) holds the request until
    # `continuing filter chain`: that wait is the stopped filter's ("<filter> (paused)"), not route lookup.
    resumed = pick(events.select_seq("origin", "conn_id", "stream_id", "ts_us", "line_no", "kind"),
        (pl.col("kind") == EventKind.CONTINUING_FILTER_CHAIN) & pl.col("stream_id").is_not_null()).with_columns_seq(
        pl.lit(None, dtype=pl.String).alias("filter"))
    resumed = pick(joined(resumed, keys, on=["origin", "conn_id", "stream_id"], how="inner"),
        (pl.col("ts_us") >= pl.col("b2")) & (pl.col("ts_us") <= pl.col("b3")))
    decode_marks = pl.concat([decode, resumed.select_seq(decode.columns)], how="vertical_relaxed")
    out = []
    for frame, phase, origin_col in ((decode_marks, Phase.FILTER_CHAIN, "b2"), (encode, Phase.ENCODE, "b7")):
        if frame.height == 0:
            continue
        is_resume = pl.col("kind") == EventKind.CONTINUING_FILTER_CHAIN
        frame = frame.sort("request_uid", "ts_us", "line_no").with_columns_seq(
            start_us=pl.col("ts_us").shift(1).over("request_uid"),
            stopped=pl.col("filter").shift(1).over("request_uid"))
        frame = frame.with_columns_seq(start_us=pl.coalesce("start_us", origin_col))
        detail = pl.when(is_resume).then(pl.coalesce(pl.col("stopped"), pl.lit("?")) + pl.lit(" (paused)")).otherwise(
            pl.coalesce(pl.col("filter"), pl.lit("?")))
        out.append(frame.select_seq("request_uid", phase=pl.lit(phase.value), detail=detail,
                                    start_us="start_us", end_us="ts_us",
                                    dur_us=(pl.col("ts_us") - pl.col("start_us"))))
    lookup = decode_marks.group_by("request_uid").agg(last=pl.col("ts_us").max())
    # The router filter's own decodeHeaders: from the previous filter's line to the router's line
    # (the last decode line at or after the route match). It spans router, connect and send.
    router_line = pick(called, (pl.col("kind") == EventKind.DECODE_HEADERS_CALLED) & (pl.col("ts_us") >= pl.col("b3"))
                                & ~pl.col("filter").fill_null("").str.contains("upstream_codec")
                                ).group_by("request_uid").agg(end=pl.col("ts_us").max(),
                                                              name=pl.col("filter").sort_by("ts_us").last())
    # Envoy <= 1.22 names filters by address: the line closing the router span is the router's.
    router_line = router_line.with_columns_seq(
        name=pl.when(pl.col("name").str.contains(_POSITIONAL)).then(pl.lit("router")).otherwise(pl.col("name")))
    router_span = joined(joined(router_line, keys.select_seq("request_uid", "b2"), on="request_uid"),
        lookup, on="request_uid", how="left").with_columns_seq(start=pl.coalesce("last", "b2"))
    out.append(router_span.select_seq("request_uid", phase=pl.lit(Phase.ROUTER.value),
                                      detail=pl.coalesce("name", pl.lit("router")) + pl.lit(" (decodeHeaders)"),
                                      start_us="start", end_us="end", dur_us=pl.col("end") - pl.col("start")))
    rest = joined(keys, lookup, on="request_uid", how="left").with_columns_seq(start=pl.coalesce("last", "b2"))
    out.append(pick(rest, pl.col("b3") > pl.col("start")).select_seq(
        "request_uid", phase=pl.lit(Phase.FILTER_CHAIN.value), detail=pl.lit("router (route lookup)"),
        start_us="start", end_us="b3", dur_us=pl.col("b3") - pl.col("start")))
    if not out:
        return pl.DataFrame(schema=PHASES_SCHEMA)
    rows = pl.concat(out, how="vertical_relaxed").with_columns_seq(part_of_total=pl.lit(False))
    return rows.with_columns_seq(pl.col("dur_us").clip(lower_bound=0))


def in_phase(rows: pl.DataFrame, spans: pl.DataFrame) -> pl.DataFrame:
    """Detail rows (``request_uid, detail, start_us, end_us, dur_us``) labelled with the phase they start in."""
    if rows.height == 0:
        return pl.DataFrame(schema=PHASES_SCHEMA)
    starts = spans.select_seq("request_uid", "phase", phase_start="start_us").sort("phase_start")
    found = rows.sort("start_us").join_asof(starts, left_on="start_us", right_on="phase_start", by="request_uid",
                                            strategy="backward", check_sortedness=False)
    return found.select_seq("request_uid", phase=pl.coalesce("phase", pl.lit(Phase.DOWNSTREAM_READ.value)),
                            detail="detail",
                            start_us="start_us", end_us="end_us", dur_us="dur_us", part_of_total=pl.lit(False))


def _filters_traced(r: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """``request_uid, filters_traced``: the requests whose filter callbacks (``... headers called``) are logged."""
    called = pick(events.select_seq("origin", "conn_id", "stream_id", "kind"),
        pl.col("kind").is_in([EventKind.DECODE_HEADERS_CALLED, EventKind.ENCODE_HEADERS_CALLED])
        & pl.col("stream_id").is_not_null()).select_seq("origin", "conn_id", "stream_id").unique()
    return joined(r.select_seq("request_uid", "origin", "conn_id", "stream_id"),
        called, on=["origin", "conn_id", "stream_id"], how="semi").select_seq("request_uid",
                                                                              filters_traced=pl.lit(True))


def attribute_phases(requests: pl.DataFrame, events: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The phases stage: requests (``REQUEST_LINES_SCHEMA``) with boundaries and ``*_us`` phase columns
    (``PHASED_REQUEST_SCHEMA``), and the long ``phases`` frame (spans, filter, Wasm and tracing details;
    ``PHASES_SCHEMA``)."""
    r = phase_durations(boundaries(boundary_sources(requests, events)))
    details = filter_rows(r, events)
    # Few distinct filter names: match the patterns once per name, not once per row.
    kinds = details.select_seq("detail").unique().with_columns_seq(
        is_wasm=pl.col("detail").str.contains(WASM_FILTER), is_tracing=pl.col("detail").str.contains(TRACING_FILTER))
    share = joined(details, kinds, on="detail", how="left", nulls_equal=True).group_by("request_uid").agg(
        wasm_us=pl.col("dur_us").filter(pl.col("is_wasm")).sum(),
        tracing_us=pl.col("dur_us").filter(pl.col("is_tracing")).sum(),
    )
    spans = phase_rows(r)
    vm = in_phase(wasm_rows(r, events), spans)
    # Time inside the Wasm VM, where Envoy traced its calls; else the Wasm filters' own callbacks.
    vm_share = vm.group_by("request_uid").agg(vm_us=pl.col("dur_us").sum())
    # Envoy's own work (tracing flushes, filter calls, health checks) and the client requests it took time from.
    streams = internal_streams(r, events)
    bursts = work_bursts(r, events, streams)
    charged = charged_rows(r, bursts, streams)
    internal = in_phase(charged.drop("tracing"), spans)
    r = joined(r, own_work(bursts, streams), on="request_uid", how="left")
    # Wasm and tracing shares are measured where the request's filter callbacks are logged (trace level), or its
    # VM calls / a charged flush are; else (debug level) they are unmeasured: null, not 0.
    traced = _filters_traced(r, events)
    r = joined(joined(r, share, on="request_uid", how="left"), vm_share, on="request_uid", how="left")
    r = (joined(joined(r, charged_shares(charged), on="request_uid", how="left"), traced, on="request_uid", how="left")
         .with_columns_seq(pl.col("filters_traced").fill_null(False))
         .with_columns_seq(
             wasm_us=pl.when(pl.col("filters_traced") | pl.col("vm_us").is_not_null()).then(
                 pl.coalesce("vm_us", "wasm_us").fill_null(0)).cast(pl.Int64),
             tracing_us=pl.when(pl.col("filters_traced") | pl.col("flush_us").is_not_null()).then(
                 pl.col("tracing_us").fill_null(0) + pl.col("flush_us").fill_null(0)).cast(pl.Int64),
             internal_us=pl.col("internal_us").fill_null(0).cast(pl.Int64))
         .drop("vm_us", "flush_us", "filters_traced"))
    phases = pl.concat([spans, details, vm, internal], how="vertical_relaxed").cast(PHASES_SCHEMA)  # type: ignore[arg-type]
    return conform(r, PHASED_REQUEST_SCHEMA), _in_order(phases)


#: The phase rows' order. Every column is a key: rows that tie on time (a zero-length span, filters in one tick)
#: keep one order.
PHASE_ORDER = ("request_uid", "start_us", "part_of_total", "end_us", "phase", "detail", "dur_us")


def _in_order(phases: pl.DataFrame) -> pl.DataFrame:
    """``phases`` sorted by ``PHASE_ORDER`` (``part_of_total`` first where times tie, nulls last).

    The request's id is sorted as its rank among the frame's ids (an Enum of the sorted distinct ids: the same
    order, compared as integers): a sort by a string key first cost twice the rest of the sort."""
    ids = phases.select_seq(pl.col("request_uid").drop_nulls().unique().sort()).to_series()
    rank = pl.col("request_uid").cast(pl.Enum(ids)).to_physical()
    keys = [rank if c == "request_uid" else pl.col(c) for c in PHASE_ORDER]
    # (on one thread: the steps already run two at a time, and polars' parallel sort costs ~1.6x the CPU; every
    # column is a key, so rows that tie are equal and the order is the same either way)
    return phases.sort(keys, descending=[c == "part_of_total" for c in PHASE_ORDER], nulls_last=True,
                       multithreaded=False)
