"""Plotly figures, shared by the Dash app and the notebook API (``Capture.waterfall`` etc.).

Pure functions: frames in, ``go.Figure`` out. Large inputs are aggregated or
decimated here so the browser never receives a whole capture.
"""
from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import polars as pl

from envoy_dissector.analysis.schema import PHASE_COLUMNS, Phase
from envoy_dissector.analysis.stages.internal import WorkKind
from envoy_dissector.analysis.stats import counted, percentile
from envoy_dissector.analysis.units import format_us

PHASE_COLORS: dict[str, str] = {
    Phase.DOWNSTREAM_READ: "#8dd3c7", Phase.HEADER_PARSE: "#80b1d3", Phase.FILTER_CHAIN: "#bebada",
    Phase.ROUTER: "#fb8072", Phase.UPSTREAM_CONNECT: "#fdb462", Phase.UPSTREAM_SEND: "#b3de69",
    Phase.UPSTREAM_WAIT: "#d9d9d9", Phase.RESPONSE_PARSE: "#fccde5", Phase.ENCODE: "#bc80bd",
    Phase.DOWNSTREAM_WRITE: "#ccebc5", Phase.TLS_HANDSHAKE: "#ffed6f", Phase.LOOP_QUEUE: "#e41a1c",
}
MAX_POINTS = 20_000
MAX_SLICES = 5_000
MAX_LANES = 24
MILESTONES = ("ds_rx_beg", "ds_rx_end", "us_cx_beg", "us_cx_end", "us_tx_beg", "us_tx_end", "us_rx_beg",
              "us_rx_end", "ds_tx_beg", "ds_tx_end")


def plain(value: object) -> str:
    """``value`` as text Plotly shows literally.

    Plotly renders a pseudo-HTML subset (``<a href>``, ``<b>``, ``<br>``, ``<span style>``, entities) in
    titles, tick labels, legend names, hover and bar texts. Anything from a log (paths, authorities, filter
    names, ids, file names) goes through here so a ``:path`` of ``<a href=...>`` shows as those characters.

    >>> plain('/<a href="x">y</a>&amp;')
    '/&lt;a href="x"&gt;y&lt;/a&gt;&amp;amp;'
    """
    return str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _lane(origin: pl.Expr) -> pl.Expr:
    """The last path part of an origin, escaped for Plotly (see :func:`plain`)."""
    return (origin.str.split("/").list.last().str.replace_all("&", "&amp;", literal=True)
            .str.replace_all("<", "&lt;", literal=True).str.replace_all(">", "&gt;", literal=True))


#: Height of plotly's mode bar band at the top right; titles start below it so it never covers them.
MODEBAR_PX = 34
TITLE_LINE_PX = 22


def _layout(fig: go.Figure, title: str, **kw: Any) -> go.Figure:
    lines = title.count("<br>") + 1
    fig.update_layout(title=dict(text=title, x=0.01, xanchor="left", xref="container", y=1, yanchor="top",
                                 yref="container", pad=dict(t=MODEBAR_PX)),
                      template="plotly_white", margin=dict(l=10, r=10, t=MODEBAR_PX + TITLE_LINE_PX * lines + 16, b=40),
                      **kw)
    return fig


def _wall_clock(us: pl.Series) -> list[str]:
    """Epoch µs as wall-clock text for hovers (``2026-11-23 18:53:15.863786 UTC``)."""
    return pl.from_epoch(us, time_unit="us").dt.strftime("%Y-%m-%d %H:%M:%S%.6f UTC").to_list()


def waterfall(request: dict[str, Any], phases: pl.DataFrame) -> go.Figure:
    """One bar per phase on a µs axis from the request's first read; filter rows and loop queueing below
    their phase; Envoy's milestones as markers."""
    t0 = int(request.get("life_start_us") or (phases["start_us"].min() if phases.height else 0) or 0)  # type: ignore[arg-type]
    rows = phases.sort("start_us", "part_of_total", descending=[False, True])
    labels: list[str] = []
    bases: list[int] = []
    widths: list[int] = []
    colors: list[str] = []
    texts: list[str] = []
    for phase, detail, start, dur, top in rows.select_seq(
            "phase", "detail", "start_us", "dur_us", "part_of_total").iter_rows():
        if top:
            label = phase if not detail else f"{phase} ({plain(detail)})"
        elif phase == Phase.LOOP_QUEUE:
            label = f"  ↳ loop queue — {plain(detail)}"
        else:
            label = f"  ↳ {phase}: {plain(detail)}"
        labels.append(label)
        bases.append((start or t0) - t0)
        widths.append(max(int(dur or 0), 1))
        colors.append(PHASE_COLORS.get(phase, "#999999"))
        texts.append(format_us(dur))
    fig = go.Figure(go.Bar(
        y=labels, x=widths, base=bases, orientation="h", marker_color=colors, text=texts,
        textposition="outside", hovertemplate="%{y}<br>start +%{base} µs<br>%{x} µs<extra></extra>",
    ))
    marks = [(m, int(request[f"{m}_us"])) for m in MILESTONES if request.get(f"{m}_us") is not None]
    if marks:
        fig.add_trace(go.Scatter(
            x=[v - t0 for _, v in marks], y=[labels[0]] * len(marks) if labels else [""] * len(marks),
            mode="markers", marker=dict(symbol="line-ns-open", size=18, color="#333"),
            text=[m.upper() for m, _ in marks], hovertemplate="%{text} at +%{x} µs<extra></extra>",
            name="Envoy milestones", showlegend=False))
    target = f"{request.get('method') or ''} {request.get('authority') or ''}{request.get('path') or ''}"
    title = (f"{plain(target)} → {request.get('status')}<br><sup>total {format_us(request.get('total_us'))} (Envoy's "
             f"duration {format_us(request.get('envoy_duration_us'))}) · loop queue "
             f"{format_us(request.get('loop_queue_us'))} inside, {format_us(request.get('queue_before_read_us'))} "
             "before the first read</sup>")
    fig.update_traces(cliponaxis=False, selector=dict(type="bar"))
    fig.update_yaxes(autorange="reversed", automargin=True)
    left = min(min(bases, default=0), 0)
    right = max((b + w for b, w in zip(bases, widths)), default=1)
    fig.update_xaxes(title="µs since the request's first read", zeroline=True,
                     range=[left, right + (right - left) * 0.08])
    return _layout(fig, title, height=max(300, 28 * len(labels) + 120), showlegend=False, bargap=0.25)


def phase_distribution(requests: pl.DataFrame) -> go.Figure:
    """Box plot of each phase over complete client requests (server-side quantiles, not raw points), each box
    at its own labelled x. Phases zero in every request are left out and named in the title; on the log axis
    a zero quantile is drawn at 1 µs (the hover gives the measured value)."""
    r = counted(requests)
    fig = go.Figure()
    hidden = []
    for col in PHASE_COLUMNS:
        if r.height == 0:
            break
        s = r[col]
        q = [percentile(s, x) or 0.0 for x in (0.0, 0.25, 0.5, 0.75, 0.99)]
        name = col.removesuffix("_us")
        if not any(q):
            hidden.append(name)
            continue
        shown = [max(v, 1.0) for v in q]
        hover = (f"<b>{name}</b><br>min {format_us(q[0])}<br>p25 {format_us(q[1])}<br>median {format_us(q[2])}"
                 f"<br>p75 {format_us(q[3])}<br>p99 {format_us(q[4])}<extra></extra>")
        fig.add_trace(go.Box(name=name, x=[name], q1=[shown[1]], median=[shown[2]], q3=[shown[3]],
                             lowerfence=[shown[0]], upperfence=[shown[4]], hovertemplate=hover,
                             fillcolor=PHASE_COLORS.get(name, "#999"), line=dict(color="#444", width=1.5)))
    fig.update_yaxes(title="µs (whiskers: min .. p99)", type="log")
    fig.update_xaxes(type="category", tickangle=-30)
    title = f"Phase durations over {r.height} complete requests"
    if hidden:
        title += f"<br><sup>zero in every request, not shown: {', '.join(hidden)}</sup>"
    return _layout(fig, title, showlegend=False)


def phase_share(requests: pl.DataFrame) -> go.Figure:
    """Stacked bar: share of total time per phase (all requests, and by status)."""
    r = counted(requests)
    fig = go.Figure()
    if r.height == 0:
        return _layout(fig, "Phase share")
    total = float(r["total_us"].sum() or 1)
    for col in PHASE_COLUMNS:
        name = col.removesuffix("_us")
        share = float(r[col].sum() or 0) / total
        fig.add_trace(go.Bar(name=name, x=[share], y=["all requests"], orientation="h",
                             marker_color=PHASE_COLORS.get(name, "#999"),
                             hovertemplate=f"{name}: %{{x:.1%}}<extra></extra>"))
    fig.update_layout(barmode="stack")
    fig.update_xaxes(tickformat=".0%", range=[0, 1])
    return _layout(fig, "Where the time goes (share of total)", height=260)


def latency_over_time(requests: pl.DataFrame) -> go.Figure:
    """Total latency per request over time (WebGL; at most MAX_POINTS points, evenly sampled)."""
    r = counted(requests).sort("life_start_us")
    if r.height > MAX_POINTS:
        r = r.gather_every(r.height // MAX_POINTS + 1)
    t0 = r["life_start_us"].min() if r.height else 0
    queued = r["loop_queue_us"].null_count() < r.height  # unknown (no thread ids, or not computed yet): no colour
    marker = (dict(size=4, color=r["loop_queue_us"].fill_null(0).to_list(), colorscale="Reds",
                   colorbar=dict(title="loop queue µs")) if queued else dict(size=4, color="#1f77b4"))
    fig = go.Figure(go.Scattergl(
        x=((r["life_start_us"] - t0) / 1e6).to_list() if r.height else [], y=r["total_us"].to_list(),
        mode="markers", marker=marker,
        text=[plain(u) for u in r["request_uid"].to_list()], hovertemplate="%{text}<br>%{y} µs<extra></extra>"))
    fig.update_xaxes(title="seconds since first request")
    fig.update_yaxes(title="total µs", type="log")
    return _layout(fig, "Latency over time" + (" (colour: event-loop queueing)" if queued else ""))


#: Fill and outline of each kind of Envoy's own work in the event-loop view (analysis/stages/internal.py ``WorkKind``).
INTERNAL_WORK_COLOURS: dict[str, tuple[str, str]] = {
    WorkKind.TRACING_FLUSH: ("#ff7f00", "#a65628"), WorkKind.EXT_AUTHZ: ("#f781bf", "#984ea3"),
    WorkKind.RATE_LIMIT: ("#a6d854", "#4d9221"), WorkKind.FILTER_CALL: ("#ffd92f", "#b8860b"),
    WorkKind.INTERNAL_REQUEST: ("#e5c494", "#8c6d31"), WorkKind.HEALTH_CHECK: ("#66c2a5", "#1b7837"),
}


def event_loop(loop: pl.DataFrame, *, thread: int | None = None, start_us: int | None = None,
               end_us: int | None = None, highlight: list[int] | None = None,
               zero_us: int | None = None, internal: pl.DataFrame | None = None) -> go.Figure:
    """One lane per worker, busy slices as bars (coloured by event kind). Windows with too many slices
    are shown as busy-fraction buckets instead.

    ``internal`` (``origin, thread, start_us, end_us, kind, label``: Envoy's own work — tracing flushes, ext_authz
    and other filter calls, health checks) is drawn over the slices it ran inside, one trace per kind
    (``internal work: <kind>``), each bar labelled (``health check C0``, ``ext_authz call S…``).
    ``highlight`` connection ids get a red outline and their own trace. The x axis is in ms since ``zero_us``
    (epoch µs; by default the first slice shown), the wall clock in each hover: ``zero_us`` keeps the coordinates
    of the whole capture in a zoomed window (the dashboard re-queries the window server-side on zoom)."""
    lo = loop
    if thread is not None:
        lo = lo.filter(pl.col("thread") == thread)
    if start_us is not None:
        lo = lo.filter(pl.col("end_us") >= start_us)
    if end_us is not None:
        lo = lo.filter(pl.col("start_us") <= end_us)
    fig = go.Figure()
    if lo.height == 0:
        return _layout(fig, "Event loop (no slices in this window)")
    lo, note = _busiest_lanes(lo, keep_conns=highlight)
    first = int(lo["start_us"].min())  # type: ignore[arg-type]
    t0 = first if zero_us is None else int(zero_us)
    lanes = lo.with_columns_seq(lane=_lane(pl.col("origin")) + pl.lit(" · thread ")
                                + pl.col("thread").cast(pl.String))
    if lo.height > MAX_SLICES:
        span = int(lo["end_us"].max()) - first + 1  # type: ignore[arg-type]
        bucket = max(span // 400, 1)
        agg = lanes.with_columns_seq(b=((pl.col("start_us") - first) // bucket) * bucket).group_by("lane", "b").agg(
            busy=((pl.col("end_us") - pl.col("start_us")).sum() / bucket).clip(0, 1)).sort("lane", "b")
        fig.add_trace(go.Heatmap(x=_ms(agg["b"] + (first - t0)), y=agg["lane"].to_list(),
                                 z=agg["busy"].to_list(), colorscale="Reds", zmin=0, zmax=1,
                                 colorbar=dict(title="busy")))
        fig.update_xaxes(title=f"ms since the capture's start ({_wall_clock(pl.Series([t0]))[0]}; buckets of "
                               f"{format_us(bucket)}; zoom in for slices)", tickformat=",~r")
        return _layout(fig, f"Event loop: busy fraction per worker ({lo.height} slices; zoom in){note}",
                       height=260 + 22 * lanes["lane"].n_unique())
    colors = {"read": "#377eb8", "write": "#4daf4a", "read+write": "#984ea3", "other": "#999999"}
    for (kind,), part in lanes.group_by("kind", maintain_order=True):
        conns = part["conn_id"].to_list()
        line_color = ["#e41a1c" if highlight and c in highlight else "rgba(0,0,0,0)" for c in conns]
        names = [f"C{c} {kind}" if c is not None else str(kind) for c in conns]
        fig.add_trace(go.Bar(
            y=part["lane"].to_list(), x=_ms((part["end_us"] - part["start_us"]).clip(lower_bound=1)),
            base=_ms(part["start_us"] - t0), orientation="h", name=str(kind),
            marker=dict(color=colors.get(str(kind), "#ff7f00"), line=dict(color=line_color, width=2)),
            customdata=_slice_hover(part, names, t0), hovertemplate="%{customdata}<extra></extra>"))
    if highlight:
        mine = lanes.filter(pl.col("conn_id").is_in(list(highlight)))
        if mine.height:
            fig.add_trace(go.Bar(
                y=mine["lane"].to_list(), x=_ms((mine["end_us"] - mine["start_us"]).clip(lower_bound=1)),
                base=_ms(mine["start_us"] - t0), orientation="h",
                name="highlighted: " + ", ".join(f"C{c}" for c in highlight),
                marker=dict(color="#e41a1c", line=dict(color="#e41a1c", width=2)), width=0.35,
                customdata=_slice_hover(mine, [f"C{c} (highlighted)" for c in mine["conn_id"].to_list()], t0),
                hovertemplate="%{customdata}<extra></extra>"))
    if internal is not None and internal.height:
        work = internal.join(lo.select_seq("origin", "thread").unique(), on=["origin", "thread"], how="semi").filter(
            (pl.col("end_us") >= first) & (pl.col("start_us") <= int(lo["end_us"].max())))  # type: ignore[arg-type]
        if "kind" not in work.columns:
            work = work.with_columns_seq(kind=pl.lit("internal"))
        work = work.with_columns_seq(
            lane=_lane(pl.col("origin")) + pl.lit(" · thread ") + pl.col("thread").cast(pl.String))
        for (kind,), part in work.group_by("kind", maintain_order=True):
            fill, edge = INTERNAL_WORK_COLOURS.get(str(kind), ("#ff7f00", "#a65628"))
            fig.add_trace(go.Bar(
                y=part["lane"].to_list(), x=_ms((part["end_us"] - part["start_us"]).clip(lower_bound=1)),
                base=_ms(part["start_us"] - t0), orientation="h", name=f"internal work: {kind}", width=0.3,
                marker=dict(color=fill, line=dict(color=edge, width=1)),
                customdata=_slice_hover(part, [plain(label) for label in part["label"].to_list()], t0),
                hovertemplate="%{customdata}<extra></extra>"))
    fig.update_layout(barmode="overlay")
    shown: list[float] | None = None
    served = lo.filter(pl.col("conn_id").is_not_null() & pl.col("kind").is_in(list(colors)))
    if start_us is None and end_us is None and served.height:
        # Opens on the traffic (the bulk of the slices serving connections), not on the seconds of start-up and
        # shutdown around it; zooming out (double click) shows the whole capture.
        a = int(served["start_us"].quantile(0.02, "lower")) - t0  # type: ignore[arg-type]
        b = int(served["end_us"].quantile(0.98, "higher")) - t0  # type: ignore[arg-type]
        if (b - a) < (int(lo["end_us"].max()) - first) * 0.5:  # type: ignore[arg-type]
            pad = max((b - a) * 0.03, 1)
            shown = [(a - pad) / 1000, (b + pad) / 1000]
    fig.update_xaxes(title=f"ms since the capture's start ({_wall_clock(pl.Series([t0]))[0]}; hover: wall clock)",
                     range=shown, tickformat=",~r")
    return _layout(fig, f"Event loop: busy slices per worker{note}", height=200 + 40 * lanes["lane"].n_unique())


def _ms(us: pl.Series) -> list[float]:
    """µs offsets as the event-loop axis' ms coordinates."""
    return (us / 1000).to_list()


def _slice_hover(part: pl.DataFrame, names: list[str], t0: int) -> list[str]:
    """Hover text of slices: what it was, its wall-clock start, its offset from ``t0`` in ms and its length."""
    walls = _wall_clock(part["start_us"])
    offsets = ((part["start_us"] - t0) / 1000).to_list()
    lengths = (part["end_us"] - part["start_us"]).to_list()
    return [f"{name}<br>{wall}<br>+{off:,.3f} ms · {format_us(length)}"
            for name, wall, off, length in zip(names, walls, offsets, lengths)]


def _busiest_lanes(loop: pl.DataFrame, limit: int = MAX_LANES,
                   keep_conns: list[int] | None = None) -> tuple[pl.DataFrame, str]:
    """At most ``limit`` (origin, thread) lanes: the busiest, plus any serving ``keep_conns``; and a title note.
    Captures with many origins (pods, or an Envoy restarting) would otherwise draw hundreds of lanes."""
    lanes = loop.group_by("origin", "thread").agg(busy=(pl.col("end_us") - pl.col("start_us")).sum(),
                                                   keep=pl.col("conn_id").is_in(list(keep_conns or [])).any())
    if lanes.height <= limit:
        return loop, ""
    chosen = lanes.sort(["keep", "busy"], descending=True).head(limit).select_seq("origin", "thread")
    return (loop.join(chosen, on=["origin", "thread"], how="semi"),
            f" — busiest {limit} of {lanes.height} worker lanes (pick a worker to see another)")


def utilisation(loop: pl.DataFrame, buckets: int = 200) -> go.Figure:
    """Busy fraction per worker over time (the busiest MAX_LANES workers, and the mean of all when there
    are more)."""
    fig = go.Figure()
    if loop.height == 0:
        return _layout(fig, "Worker utilisation")
    t0 = int(loop["start_us"].min())  # type: ignore[arg-type]
    span = int(loop["end_us"].max()) - t0 + 1  # type: ignore[arg-type]
    bucket = max(span // buckets, 1)
    binned = loop.with_columns_seq(b=((pl.col("start_us") - t0) // bucket) * bucket)
    shown, note = _busiest_lanes(binned, limit=MAX_LANES // 2)
    agg = shown.group_by("origin", "thread", "b").agg(  # lanes in a fixed order: the same colours every run
        busy=((pl.col("end_us") - pl.col("start_us")).sum() / bucket).clip(0, 1)).sort("origin", "thread", "b")
    for (origin, thread), part in agg.group_by("origin", "thread", maintain_order=True):
        x, y = _broken_at_gaps(part["b"].to_list(), part["busy"].to_list(), bucket)
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", marker=dict(size=4), connectgaps=False,
                                 line=dict(simplify=False),  # every bucket a vertex: the drawing is the data
                                 name=f"{plain(str(origin).split('/')[-1])} · {thread}",
                                 hovertemplate="+%{x:.3f} s: %{y:.0%} busy<extra>%{fullData.name}</extra>"))
    if note:
        n = loop.select_seq("origin", "thread").unique().height
        mean = binned.group_by("b").agg(busy=((pl.col("end_us") - pl.col("start_us")).sum() / bucket / n)
                                        .clip(0, 1)).sort("b")
        x, y = _broken_at_gaps(mean["b"].to_list(), mean["busy"].to_list(), bucket)
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", connectgaps=False,
                                 name=f"mean of all {n}", line=dict(color="black", width=3, simplify=False)))
    fig.update_yaxes(tickformat=".0%", range=[0, 1.05], title="busy")
    fig.update_xaxes(title=f"seconds since the capture's start ({_wall_clock(pl.Series([t0]))[0]}; buckets of "
                           f"{format_us(bucket)}; a break: no work logged)")
    return _layout(fig, "Worker utilisation over time" + note.replace(" (pick a worker to see another)", ""))


def _broken_at_gaps(buckets: list[int], busy: list[float], bucket: int) -> tuple[list[float | None],
                                                                                list[float | None]]:
    """A line's points in seconds with ``None`` between buckets that are not adjacent: a stretch with no slice
    is not interpolated across (plotly breaks the line at ``None``)."""
    x: list[float | None] = []
    y: list[float | None] = []
    for i, (b, v) in enumerate(zip(buckets, busy)):
        if i and b - buckets[i - 1] > bucket:
            x.append(None)
            y.append(None)
        x.append(b / 1e6)
        y.append(v)
    return x, y


def compare(summary_a: dict[str, Any], summary_b: dict[str, Any], label_a: str = "A",
            label_b: str = "B") -> go.Figure:
    """Per-phase p50/p99 of two captures side by side."""
    fig = go.Figure()
    phases = [p for p in summary_a["phases"] if p in summary_b["phases"]]
    for summary, label, color in ((summary_a, label_a, "#377eb8"), (summary_b, label_b, "#e41a1c")):
        fig.add_trace(go.Bar(name=f"{plain(label)} p50", x=phases, y=[summary["phases"][p]["p50"] for p in phases],
                             marker_color=color))
        fig.add_trace(go.Bar(name=f"{plain(label)} p99", x=phases, y=[summary["phases"][p]["p99"] for p in phases],
                             marker_color=color, opacity=0.45))
    fig.update_layout(barmode="group")
    fig.update_yaxes(title="µs", type="log")
    return _layout(fig, f"Compare: {plain(label_a)} vs {plain(label_b)}")


def compare_table(summary_a: dict[str, Any], summary_b: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of per-phase percentiles for both captures and the difference (B − A)."""
    rows = []
    for phase in summary_a["phases"]:
        if phase not in summary_b["phases"]:
            continue
        a, b = summary_a["phases"][phase], summary_b["phases"][phase]
        rows.append({"phase": phase, **{f"a_{k}": a[k] for k in ("p50", "p90", "p99")},
                     **{f"b_{k}": b[k] for k in ("p50", "p90", "p99")},
                     **{f"diff_{k}": b[k] - a[k] if a[k] is not None and b[k] is not None else None
                        for k in ("p50", "p99")}})
    return rows


def stitched_waterfall(outer: dict[str, Any], outer_phases: pl.DataFrame, inner: dict[str, Any],
                       inner_phases: pl.DataFrame, offset_us: int) -> go.Figure:
    """One call across two proxies, Jaeger-style: the outbound proxy's phases, the inbound proxy's nested inside.

    ``offset_us`` is how far the inbound origin's clock runs ahead of the outbound's (the stitching estimate);
    the inbound times are moved onto the outbound clock. The gaps between them are the network
    (``network_out_us`` / ``network_back_us``).
    """
    t0 = int(outer["life_start_us"] or outer["ds_rx_beg_us"] or 0)
    labels: list[str] = []
    bases: list[int] = []
    widths: list[int] = []
    colors: list[str] = []
    def add(label: str, start: int, width: int, color: str) -> None:
        labels.append(label)
        bases.append(start - t0)
        widths.append(max(width, 1))
        colors.append(color)

    def add_phases(side: str, rows: pl.DataFrame, shift: int, indent: str) -> None:
        for phase, detail, start, dur in rows.filter(pl.col("part_of_total")).select_seq(
                "phase", "detail", "start_us", "dur_us").iter_rows():
            add(f"{indent}{side} · {phase}" + (f" ({plain(detail)})" if detail else ""), int(start) - shift,
                int(dur or 0),
                PHASE_COLORS.get(phase, "#999999"))

    def add_network(name: str, start: int | None, end: int | None) -> None:
        if start is not None and end is not None:
            add(f"  {name}", int(start), int(end) - int(start), "#4daf4a")

    add_phases("outbound", outer_phases, 0, "")
    inner_rx = inner.get("ds_rx_beg_us")
    inner_tx = inner.get("ds_tx_end_us")
    add_network("network out", outer.get("us_tx_beg_us"), None if inner_rx is None else inner_rx - offset_us)
    add_phases("inbound", inner_phases, offset_us, "    ")
    add_network("network back", None if inner_tx is None else inner_tx - offset_us, outer.get("us_rx_beg_us"))
    fig = go.Figure(go.Bar(y=labels, x=widths, base=bases, orientation="h", marker_color=colors,
                           text=[f"{w} µs" for w in widths], textposition="outside",
                           hovertemplate="%{y}<br>start +%{base} µs<br>%{x} µs<extra></extra>"))
    fig.update_traces(cliponaxis=False)
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_xaxes(title="µs since the outbound request's first read")
    title = (f"{plain(outer.get('method') or '')} {plain(outer.get('path') or '')} across two proxies<br><sup>clock "
             f"offset {offset_us:+d} µs (inbound times moved onto the outbound clock)</sup>")
    return _layout(fig, title, height=max(300, 24 * len(labels) + 120), showlegend=False, bargap=0.25)
