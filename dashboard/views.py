"""Pure builders of the dashboard's view contents: a dataset (or frames) in, Dash components out.

Everything a callback shows is made here, so it is testable without a browser and callbacks stay a
few lines. Figures come from :mod:`envoy_dissector.analysis.outputs.figures` (shared with notebooks).
"""
from __future__ import annotations

from typing import Any

import polars as pl
from dash import dcc, html

from envoy_dissector.analysis.capture import Capture
from envoy_dissector.analysis.findings import SEVERITY_ORDER, Finding, imbalances
from envoy_dissector.analysis.outputs import figures
from envoy_dissector.analysis.quality import RAISE_LEVEL_HINT
from envoy_dissector.analysis.stats import percentiles
from envoy_dissector.analysis.units import format_us, in_unit, table_unit
from envoy_dissector.dashboard.datasets import Dataset, Job
from envoy_dissector.dashboard.live_job import LiveJob
from envoy_dissector.parser.errors import DissectorError

MAX_LOG_LINES = 2000
MAX_FINDINGS = 25
MAX_WORKER_ROWS = 40
#: plotly's mode bar: its height from the top of the graph, and a title line's
MODEBAR_PX = 34
TITLE_LINE_PX = 22
#: the project's one µs formatter (the report and findings write the same text)
us = format_us


def dataset_options(datasets: list[Dataset]) -> list[dict[str, str]]:
    """Dropdown options: ``{"label", "value"}`` for each visible dataset."""
    return [{"label": (d.name if d.shared else f"uploaded: {d.name}")
             + f" · {d.client_requests} requests", "value": d.id} for d in datasets]


def _table(header: list[str], rows: list[list[Any]], *, id: str | None = None,
           class_name: str = "table") -> html.Table:
    table = html.Table([html.Thead(html.Tr([html.Th(h) for h in header])),
                        html.Tbody([html.Tr([html.Td(c) for c in r]) for r in rows])], className=class_name)
    if id:
        table.id = id  # type: ignore[attr-defined]
    return table


def percentile_table(summary: dict[str, Any]) -> html.Table:
    """Per-phase p50/p90/p99/max in one unit for the whole table (in its headers), as the terminal report writes
    them."""
    stats = ("p50", "p90", "p99", "max")
    phases = summary["phases"]
    unit, decimals = table_unit([v[st] for v in phases.values() for st in stats],
                                summary["capture_quality"]["timestamp_tick_us"])
    rows = [[p, *(in_unit(v[st], unit, decimals) for st in stats)] for p, v in phases.items()]
    return _table(["phase", *(f"{st} ({unit})" for st in stats)], rows, id="percentile-table")


def card(label: str, value: str, id: str | None = None) -> html.Div:
    """One big number of the overview's facts line, with its label."""
    value_div = html.Div(value, className="fact-value", id=id) if id else html.Div(value, className="fact-value")
    return html.Div([value_div, html.Div(label, className="fact-label")], className="fact")


def facts(ds: Dataset) -> html.Div:
    """One line of big numbers: requests, the traffic window and its rate, the log's span apart, format."""
    s = ds.summary()
    cap, diag = s["capture"], s["diagnostics"]
    traffic = cap.get("traffic_s")
    return html.Div([
        card("requests", f"{cap['requests']:,}", "overview-requests"),
        card("complete", f"{cap['requests_complete']:,}", "overview-complete"),
        card("traffic", f"{traffic:,.3f} s" if traffic else "-", "overview-traffic"),
        card("rate over the traffic", f"{cap['rps']:,.0f} rps" if cap["rps"] is not None else "- (< 20 requests)",
             "overview-rps"),
        card("log span", f"{cap['duration_s']:,.3f} s", "overview-span"),
        *cost_card(ds.capture),
        card("format", str(s["format"]), "overview-format"),
        card("lines read", f"{diag['lines_read']:,}", "overview-lines"),
    ], className="facts")


def cost_card(capture: Capture) -> list[html.Div]:
    """What the sidecar costs (docs/cost.md): added latency p50 without trace logging, and the ceiling."""
    costs = capture.cost()
    if not costs:
        return []
    cost = costs[0]
    added = cost.sidecar_added_without_observer_us["p50"]
    label = "sidecar adds, p50 " + ("without trace logging" if added is not None else "with trace logging")
    if cost.ceiling is not None:
        label += f"; ceiling {cost.ceiling.pod:,.0f} rps"
    if len(costs) > 1:
        label += f" ({cost.origin}, 1 of {len(costs)} origins)"
    value = format_us(added if added is not None else cost.sidecar_added_us["p50"])
    return [card(label, value, "overview-cost")]


def group_findings(findings: list[Finding]) -> list[tuple[Finding, int]]:
    """Findings with the same id and title (one per origin of a many-origin capture) shown once, with how
    many there are; most severe first (the analysis' one severity order)."""
    groups: dict[tuple[str, str], list[Finding]] = {}
    for f in findings:
        groups.setdefault((f.id, f.title), []).append(f)
    out = [(g[0], len(g)) for g in groups.values()]
    return sorted(out, key=lambda fc: SEVERITY_ORDER.get(fc[0].severity, len(SEVERITY_ORDER)))


def findings_list(findings: list[Finding], limit: int = MAX_FINDINGS) -> html.Div:
    """The capture's :class:`Finding` objects, most severe first: title, evidence and the fix."""
    items: list[Any] = []
    groups = group_findings(findings)
    for f, n in groups[:limit]:
        more = f" (and {n - 1} more like it, one per origin)" if n > 1 else ""
        items.append(html.Div([
            html.Div([html.Span(f.severity, className=f"badge {f.severity}"), html.B(f.title)]),
            html.Div(f.evidence + more, className="evidence"),
            html.Div(["Fix: ", f.fix], className="fix") if f.fix else None,
        ], className=f"finding {f.severity}", id=f"finding-{f.id}"))
    if len(groups) > limit:
        items.append(html.Div(f"{len(groups) - limit} more findings (see `envoy-dissect analyze` JSON output).",
                              className="hint"))
    if not items:
        items = [html.Div("No findings: nothing stands out in this capture.", className="finding info")]
    return html.Div(items, id="findings")


def warnings_list(summary: dict[str, Any]) -> html.Div | None:
    warnings = summary["diagnostics"].get("warnings") or []
    if not warnings:
        return None
    return html.Div([html.B("Caveats"), html.Ul([html.Li(w) for w in warnings])], className="warnings")


def quality_panel(summary: dict[str, Any]) -> html.Div | None:
    """What the capture allows to be attributed (level, timestamp tick, thread ids), as the report says first."""
    q = summary.get("capture_quality")
    if not q:
        return None
    head = (f"Capture quality: {q['level']} level · {q['timestamp_resolution']} timestamps · "
            + ("thread ids" if q["thread_ids"] else "no thread ids"))
    return html.Div([html.B(head), html.Ul([html.Li(t) for t in q["statements"]])], className="warnings",
                    id="overview-quality")


def quality_banner(summary: dict[str, Any]) -> html.Div | None:
    """One line above every tab when the capture's level leaves phases unmeasured (debug level: no socket
    lines), naming them; None for a trace-level capture."""
    q = summary.get("capture_quality")
    if not q or (q["socket_lines"] and not q["unmeasured_phases"]):
        return None
    missing = list(q["unmeasured_phases"])
    if not q["socket_lines"]:
        missing += ["event-loop queueing", "worker utilisation"]
    what = ", ".join(missing[:-1]) + (" and " if len(missing) > 1 else "") + missing[-1]
    return html.Div([html.B(f"{str(q['level']).capitalize()}-level capture: "),
                     f"{what} cannot be measured here (shown as 0). To measure them, {RAISE_LEVEL_HINT}."],
                    className="banner", id="quality-banner-text")


def overview(ds: Dataset) -> list[Any]:
    s = ds.summary()
    r = ds.capture.requests
    return [
        html.H3(ds.name, id="overview-title"),
        facts(ds),
        quality_panel(s),
        warnings_list(s),
        html.Div([
            html.Div([html.H4("Percentiles per phase (complete client requests)"), percentile_table(s)],
                     className="col"),
            html.Div([html.H4("Findings"), findings_list(ds.capture.findings())], className="col"),
        ], className="row"),
        dcc.Graph(figure=figures.phase_share(r), id="phase-share", config={"displaylogo": False}),
        dcc.Graph(figure=figures.latency_over_time(r), id="latency-over-time", config={"displaylogo": False}),
        dcc.Graph(figure=figures.phase_distribution(r), id="phase-distribution", config={"displaylogo": False}),
    ]


JOB_PREFIX = "job:"


def job_option(job: Job) -> dict[str, str]:
    """The dropdown entry of an analysis still running (its provisional overview), or of a followed log."""
    if isinstance(job, LiveJob):
        return {"label": f"following: {job.name} · {job.seen_rows:,} requests so far", "value": JOB_PREFIX + job.id}
    return {"label": f"uploaded: {job.name} · analysing…", "value": JOB_PREFIX + job.id}


def provisional_overview(job: Job) -> list[Any]:
    """What is known while the streaming analysis runs: the requests finished so far, their percentiles,
    phase shares and latency over time. Findings, workers and the event-loop queueing split come at the end."""
    r = job.partial()
    client = r.filter(~pl.col("internal"))
    complete = int(client["complete"].sum()) if client.height else 0
    if isinstance(job, LiveJob):
        head = [html.H3(f"{job.name} (following)", id="overview-title"),
                html.Div([card("requests so far", f"{client.height:,}", "overview-requests"),
                          card("complete", f"{complete:,}", "overview-complete"),
                          card("lines read", f"{job.lines_read:,}", "overview-lines-read")], className="facts"),
                html.Div(f"Live: the requests of {job.name} finished so far, redrawn as the log grows (the newest "
                         f"{job.max_rows:,} kept). Findings, workers, TLS handshakes and the event-loop queueing "
                         "split come from a whole analysis (envoy-dissect analyze).", className="hint",
                         id="overview-provisional")]
    else:
        read = (f"{job.done_bytes / 1e6:,.0f} of ~{job.total_bytes / 1e6:,.0f} MB read" if job.total_bytes
                else f"{job.done_bytes / 1e6:,.0f} MB read")
        # (no percentage in the title: it is redrawn every few polls, and the job's line beside the progress bar,
        # redrawn at every poll, gives it)
        head = [html.H3(f"{job.name} (analysing…)", id="overview-title"),
                html.Div([card("requests so far", f"{client.height:,}", "overview-requests"),
                          card("complete", f"{complete:,}", "overview-complete"),
                          card("progress", read)], className="facts"),
                html.Div("Provisional: the requests finished so far. Findings, workers, TLS handshakes and the "
                         "event-loop queueing split appear when the analysis is done.", className="hint",
                         id="overview-provisional")]
    if not client.height:
        return head
    summary = {"phases": percentiles(r), "capture_quality": {"timestamp_tick_us": 1}}
    return [*head,
            html.Div([html.H4("Percentiles per phase (complete client requests so far)"), percentile_table(summary)]),
            dcc.Graph(figure=figures.phase_share(r), id="phase-share", config={"displaylogo": False}),
            dcc.Graph(figure=figures.latency_over_time(r), id="latency-over-time", config={"displaylogo": False})]


def competing_connections(queueing: pl.DataFrame) -> list[dict[str, Any]]:
    """Event-loop queueing of one request (``Capture.request_queueing``): for each wait point, how long and
    which other connections the worker served meanwhile."""
    return [{"where": where, "start_us": start, "end_us": end, "dur_us": dur, "conns": list(conns)}
            for where, start, end, dur, conns in queueing.sort("start_us").select(
                "where", "start_us", "end_us", "dur_us", "conn_ids").iter_rows()]


def wait_window(ds: Dataset, uid: str, wait: int, margin_us: int) -> tuple[int, int, int | None]:
    """``(start, end, thread)`` to show in the event loop for the request's ``wait``-th queueing point
    (its whole life when there is no such point), with ``margin_us`` either side."""
    row = ds.request(uid)
    waits = competing_connections(ds.request_queueing(row))
    w = waits[wait] if 0 <= wait < len(waits) else {}
    start = int(w.get("start_us") or row.get("life_start_us") or 0) - margin_us
    end = int(w.get("end_us") or row.get("life_end_us") or 0) + margin_us
    return start, end, row.get("thread")


def request_facts(row: dict[str, Any]) -> html.Div:
    """Upstream connection new or reused, attempts/retries, loop queueing, ids."""
    up = row.get("upstream_conn_id")
    if up is None:
        upstream = "no upstream connection (local reply or cut by the capture)"
    elif row.get("new_upstream_conn"):
        upstream = f"C{up}: NEW connection (connect {us(row.get('upstream_connect_us'))})"
    else:
        upstream = f"C{up}: reused connection"
    retries = row.get("retries") or 0
    items = [
        ("request", f"{row.get('method') or ''} {row.get('authority') or ''}{row.get('path') or ''}"),
        ("status", str(row.get("status"))),
        ("outcome", row.get("outcome") or "–"),
        ("total (first read → last write)", us(row.get("total_us"))),
        ("Envoy's duration (DS_RX_BEG → DS_TX_END)", us(row.get("envoy_duration_us"))),
        ("downstream connection", f"C{row.get('downstream_conn_id')} · worker thread {row.get('thread')}"),
        ("upstream connection", upstream),
        ("upstream attempts", f"{row.get('upstream_attempts')} ({retries} retr{'y' if retries == 1 else 'ies'})"),
        ("event-loop queueing inside total (estimate)", us(row.get("loop_queue_us"))),
        ("event-loop queueing before the first read (outside total)", us(row.get("queue_before_read_us"))),
        ("x-request-id", row.get("x_request_id") or "–"),
        ("complete", "yes" if row.get("complete") else "no (cut by the capture)"),
    ]
    return html.Div([html.Div([html.Span(k, className="k"), html.Span(v, className="v")], className="kv")
                     for k, v in items], className="request-facts", id="request-facts")


def competing_panel(waits: list[dict[str, Any]]) -> html.Div:
    """Each wait point with buttons per competing connection: to the event loop, or to its requests."""
    if not waits:
        return html.Div("No event-loop queueing estimated for this request.", id="competing")
    rows = []
    for i, w in enumerate(waits):
        buttons: list[Any] = []
        for c in w["conns"][:40]:
            buttons.append(html.Span([
                html.Button(f"C{c}", id={"type": "conn-loop", "conn": c, "wait": i}, className="conn-btn",
                            title=f"show C{c} in the event-loop view"),
                html.Button("requests", id={"type": "conn-requests", "conn": c, "wait": i},
                            className="conn-btn small", title=f"list the requests of C{c}"),
            ], className="conn"))
        if not w["conns"]:
            buttons.append(html.Span("no other connection logged (the worker was busy with unlogged work)"))
        rows.append(html.Div([html.Span(f"{w['where']}: {us(w['dur_us'])}", className="wait"), *buttons],
                             className="wait-row"))
    return html.Div([html.H4("Event-loop queueing: the worker served these connections meanwhile"), *rows],
                    id="competing")


def waterfall_view(ds: Dataset, uid: str) -> tuple[Any, list[Any]]:
    """Figure and side panel for one request."""
    row = ds.request(uid)
    phases = ds.request_phases(row)
    # A call stitched across two proxies (x-request-id in two origins): both timelines, the inbound nested.
    fig = stitched_waterfall(ds, row) if row.get("peer_request_uid") else figures.waterfall(row, phases)
    side = [request_facts(row), competing_panel(competing_connections(ds.request_queueing(row)))]
    return clear_of_modebar(fig), side


def stitched_waterfall(ds: Dataset, row: dict[str, Any]) -> Any:
    """``Capture.stitched_waterfall`` from the dataset's detail on disk: the call this request belongs to
    across two proxies, the outbound side outside."""
    peer = ds.request(row["peer_request_uid"])
    outer, inner = (row, peer) if row.get("network_out_us") is not None else (peer, row)
    offset = next((c.offset_us for c in ds.capture.stitching.clock_offsets
                   if c.from_ == outer["origin"] and c.to == inner["origin"]), 0)
    return figures.stitched_waterfall(outer, ds.request_phases(outer), inner, ds.request_phases(inner), offset)


def clear_of_modebar(fig: Any) -> Any:
    """The figure with its title below plotly's mode bar (drawn over the top right of the graph): the title
    starts ``MODEBAR_PX`` from the top and the plot's top margin grows by as much."""
    title = fig.layout.title.text
    if not title:
        return fig
    lines = str(title).count("<br>") + 1
    margin = fig.layout.margin.t if fig.layout.margin.t is not None else 80
    fig.update_layout(title={"yref": "container", "y": 1, "yanchor": "top", "pad": {"t": MODEBAR_PX}},
                      margin={"t": max(margin, MODEBAR_PX + TITLE_LINE_PX * lines + 8)})
    if fig.layout.height is not None:
        fig.update_layout(height=fig.layout.height + MODEBAR_PX)
    return fig


def log_lines(ds: Dataset, uid: str, limit: int = MAX_LOG_LINES) -> html.Div:
    """The request's own log records (already redacted by the parser), as text. A streamed capture reads them
    again from its input file; one read from stdin or several files cannot, and says so."""
    row = ds.request(uid)
    try:
        lines = ds.request_lines(row)
    except (ValueError, OSError, DissectorError) as exc:
        return html.Div(f"The log lines cannot be shown: {exc}", className="hint", id="log-lines-unavailable")
    shown = lines.head(limit)
    t0 = shown["ts_us"].min() if shown.height else 0
    text = "\n".join(
        f"{line_no:>8}  +{(ts - t0) if ts is not None and t0 is not None else 0:>8} µs  "
        f"[{thread}] {kind}: {message}"
        for line_no, ts, thread, kind, message in shown.select(
            "line_no", "ts_us", "thread", pl.col("kind").cast(pl.String), "message").iter_rows())
    more = f" (first {limit} of {lines.height})" if lines.height > limit else ""
    return html.Div([html.Div(f"{lines.height} log records{more}; header values of secrets are redacted."),
                     html.Pre(text, className="log-lines", id="log-lines-text")])


def workers_panel(workers: pl.DataFrame) -> html.Div:
    """Per-worker utilisation, requests, connections, and the imbalance between workers."""
    top = workers.sort("busy_us", descending=True, nulls_last=True).head(MAX_WORKER_ROWS)
    rows = [[str(o).split("/")[-1], t, f"{(u or 0):.0%}", us(b), f"{n:,}", f"{c:,}"]
            for o, t, u, b, n, c in top.select("origin", "thread", "utilisation", "busy_us", "requests",
                                               "connections").iter_rows()]
    header = ["origin", "thread", "busy share", "busy", "requests", "conns"]
    if workers["origin"].n_unique() <= 1:  # one capture: its name is in the title already
        header, rows = header[1:], [r[1:] for r in rows]
    table = html.Div(_table(header, rows, id="workers-table"), className="table-scroll")
    more = (html.Div(f"The {MAX_WORKER_ROWS} busiest of {workers.height} workers.", className="hint")
            if workers.height > MAX_WORKER_ROWS else None)
    imbalance = imbalance_text(workers)
    if workers["origin"].n_unique() > 5:
        imbalance = " ".join(imbalance.split(". ")[:5]) + f" … ({workers['origin'].n_unique()} origins)"
    return html.Div([table, more, html.Div(imbalance, id="imbalance")])


def imbalance_text(workers: pl.DataFrame) -> str:
    """How unevenly work is spread across the workers of each origin (the findings' imbalance rule)."""
    parts = []
    for im in imbalances(workers):
        name = im.origin.split("/")[-1]
        if im.workers < 2:
            parts.append(f"{name}: one worker, no imbalance to measure.")
            continue
        verdict = ""
        if im.severity is not None:
            verdict = (" Imbalanced, and the busiest worker's requests waited longer: consider exact_balance on "
                       "the listener." if im.severity == "warning" else
                       " Imbalanced, without measurable harm (no extra waiting); exact_balance on the listener "
                       "would even it out.")
        parts.append(f"{name}: {im.workers} workers; requests per worker {im.min_requests}..{im.max_requests} "
                     f"(max/min {im.ratio:.1f}×), utilisation {im.min_utilisation:.0%}..{im.max_utilisation:.0%}."
                     + verdict)
    return " ".join(parts)


def compare_view(a: Dataset, b: Dataset) -> tuple[html.Table, Any]:
    """Per-phase percentiles of two datasets with the difference (B − A), and the grouped bar figure."""
    sa, sb = a.summary(), b.summary()
    rows = figures.compare_table(sa, sb)
    cols = ["phase", "a_p50", "a_p90", "a_p99", "b_p50", "b_p90", "b_p99", "diff_p50", "diff_p99"]

    def cell(k: str, v: Any) -> Any:
        if k == "phase":
            return v
        text = us(v)
        if k.startswith("diff") and v:
            return html.Span(("+" if v > 0 else "") + text, className="worse" if v > 0 else "better")
        return text

    body = [[cell(k, r[k]) for k in cols] for r in rows]
    header = ["phase", "A p50", "A p90", "A p99", "B p50", "B p90", "B p99", "Δ p50 (B−A)", "Δ p99 (B−A)"]
    return _table(header, body, id="compare-table"), figures.compare(sa, sb, label_a="A", label_b="B")


def loop_window(capture: Capture, start_us: int | None, end_us: int | None) -> tuple[int, int, int]:
    """``(zero, start, end)``: the loop frame's origin and a valid window inside it."""
    loop = capture.loop
    if loop.height == 0:
        return 0, 0, 0
    zero = int(loop["start_us"].min())  # type: ignore[arg-type]
    last = int(loop["end_us"].max())  # type: ignore[arg-type]
    start = zero if start_us is None else max(zero, int(start_us))
    end = last if end_us is None else min(last, int(end_us))
    if end <= start:
        start, end = zero, last
    return zero, start, end


def window_from_relayout(relayout: dict[str, Any] | None, zero: int) -> tuple[int | None, int | None] | None:
    """A new absolute window (epoch µs) from a plotly ``relayoutData`` (x in ms since ``zero``, epoch µs);
    ``(None, None)`` to reset (autorange); ``None`` when the event is not an x zoom/pan."""
    if not relayout:
        return None
    if relayout.get("xaxis.autorange"):
        return None, None
    if "xaxis.range[0]" in relayout and "xaxis.range[1]" in relayout:
        x0, x1 = relayout["xaxis.range[0]"], relayout["xaxis.range[1]"]
    elif isinstance(relayout.get("xaxis.range"), list) and len(relayout["xaxis.range"]) == 2:
        x0, x1 = relayout["xaxis.range"]
    else:
        return None
    try:
        return zero + round(float(x0) * 1000), zero + round(float(x1) * 1000)
    except (TypeError, ValueError, OverflowError):
        return None


def event_loop_figure(capture: Capture, *, thread: int | None, start_us: int | None, end_us: int | None,
                      highlight: list[int] | None) -> Any:
    """The event-loop figure for a window, x axis in ms since the capture's first slice, zoomed to it."""
    zero, start, end = loop_window(capture, start_us, end_us)
    fig = figures.event_loop(capture.loop, thread=thread, start_us=start, end_us=end, highlight=highlight,
                             zero_us=zero, internal=capture.internal_work())
    fig.update_xaxes(range=[(start - zero) / 1000, (end - zero) / 1000], autorange=False)
    fig.update_layout(uirevision=f"{start}-{end}-{thread}")
    return fig


def thread_options(capture: Capture) -> list[dict[str, Any]]:
    threads = capture.loop.select("origin", "thread").unique().sort("origin", "thread")
    return [{"label": f"{str(o).split('/')[-1]} · thread {t}", "value": t} for o, t in threads.iter_rows()]
