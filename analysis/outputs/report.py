"""The one-screen terminal report: at most ``width`` columns (``terminal.report_width``: 60..100), one unit per
table, text wrapped at word boundaries (never cut, never inside a short parenthesis); layout rules in
docs/output.md."""
from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from typing import Any

import polars as pl

from envoy_dissector.analysis.capture import Capture
from envoy_dissector.analysis.findings import Finding
from envoy_dissector.analysis.gap_counts import COLD
from envoy_dissector.analysis.outputs.terminal import MAX_WIDTH
from envoy_dissector.analysis.quality import quality_lines
from envoy_dissector.analysis.schema import PHASE_COLUMNS
from envoy_dissector.analysis.stages.requests import UID_COLUMNS, request_uid
from envoy_dissector.analysis.stages.stitch import render_stitching
from envoy_dissector.analysis.stats import counted, dominant_phase, percentiles
from envoy_dissector.analysis.units import in_unit, table_unit

WIDTH = MAX_WIDTH
#: A parenthesis this short is kept on one line: "(40 complete)" is never split by a wrap.
_SHORT_PAREN = re.compile(r"\([^()]{1,30}\)")
_KEEP = "\u00a0"  # joins a short parenthesis' words while wrapping; a plain space again in the output
#: The phase table: label, four number columns; a row's description follows when it fits the width.
LABEL_W, CELL_W = 20, 9
SEVERITY_MARK = {"critical": "!!", "warning": "! ", "info": "  "}
MAX_ORIGIN_LINES = 8
MAX_WORKERS_LISTED = 4
#: Rows of the phase table below the phases, with what each one is (docs/phases.md).
TOTAL_ROWS = (
    ("total", "total", "first read → last socket write"),
    ("envoy_duration", "envoy_duration", "Envoy's DS_RX_BEG → DS_TX_END"),
    ("loop_queue", "  loop_queue", "queueing, a share of the phases"),
    ("queue_before_read", "queue_before_read", "queueing before the first read"),
)
SHARE_ROWS = (("wasm", "  wasm filters"), ("tracing", "  tracing"), ("internal", "  internal work"))
#: The slowest requests' columns: total, Envoy's duration, queueing inside and before.
SLOW_COLUMNS = ("total_us", "envoy_duration_us", "loop_queue_us", "queue_before_read_us")


def render(capture: Capture, *, top: int = 5, width: int = WIDTH, filters: str = "") -> str:
    """The report; ``filters`` describes the active request filters (said when they match nothing)."""
    sections = [
        _header(capture, width),
        _fit(quality_lines(capture), width),
        _phase_table(capture, width),
        _slowest(capture, top, width),
        _workers(capture, width),
        _cost(capture, width),
        _stitching(capture, width),
        _findings(capture.findings(), width),
    ]
    if filters and counted(capture.rows_without_uid()).height == 0:
        sections.insert(1, [f"no request matches the filters ({filters}): nothing to report", ""])
    return "\n".join(line for section in sections for line in section).rstrip("\n")


def _wrap(text: str, width: int, indent: str, first: str | None = None) -> list[str]:
    """Wrap at spaces only: a word (an id, a URL) is never cut, a short parenthesis never split."""
    kept = _SHORT_PAREN.sub(lambda m: m.group(0).replace(" ", _KEEP), text)
    room = width - len(indent)
    # an origin's label ("/long/path/envoy.log.gz:") longer than a line keeps its end, as the header shows it
    kept = " ".join(_tail(word, room) if len(word) > room and word.endswith(":") and "/" in word else word
                    for word in kept.split(" "))
    lines = textwrap.wrap(kept, width=width, initial_indent=indent if first is None else first,
                          subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)
    return [line.replace(_KEEP, " ") for line in lines] or [first or ""]


def _fit(lines: list[str], width: int) -> list[str]:
    """Lines made elsewhere (the capture-quality block) wrapped to ``width``, continuing under their indent."""
    out = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip()) + 2)
        out += _wrap(line.strip(), width, indent, line[: len(line) - len(line.lstrip())])
    return out


def _tail(name: str, room: int) -> str:
    """A file or origin name that fits ``room`` columns: its end (the file name) kept, the start elided."""
    return name if len(name) <= room else "…" + name[len(name) - room + 1:]


def _header(capture: Capture, width: int) -> list[str]:
    d = capture.diagnostics_dict()
    title = "envoy-dissector · "
    lines = [title + _tail(capture.name, width - len(title))]
    lines += _wrap(
        f"{d['lines_read']:,} lines, {d['lines_malformed']:,} malformed, {d['records']:,} records, "
        f"{d['records_unknown']:,} unknown" + (f" · wrappers {', '.join(d['wrappers'])}" if d["wrappers"] else ""),
        width, "  ", "")
    origins = capture.origins() or [{"origin": capture.name, "format": d["format"], **capture.span()}]
    if len(origins) == 1:
        o = origins[0]
        lines += _wrap(f"format {o['format']} ({d['format_label']})", width, "  ", "")
        lines += _wrap(_span_text(o), width, "  ", "")
    else:
        lines.append(f"{len(origins)} origins (each its own format and span):")
        for o in origins[:MAX_ORIGIN_LINES]:
            lines += _wrap(f"{_tail(o['origin'], width - 4)}: format {o['format']} · {_span_text(o)}", width,
                           "      ", "  ")
        if len(origins) > MAX_ORIGIN_LINES:
            lines.append(f"  … and {len(origins) - MAX_ORIGIN_LINES} more origins (see --json: capture.origins)")
    s = capture.span()
    lines += _wrap(f"all: {s['requests']} requests ({s['requests_complete']} complete, {s['requests_incomplete']} "
                   f"cut by the capture) · {s['internal_requests']} internal/admin", width, "  ", "")
    lines.append("")
    return lines


def _span_text(o: dict[str, Any]) -> str:
    """Requests and their rate over the traffic window (first to last client request); the log's span apart."""
    rate = f" at {o['rps']:,.0f} rps" if o.get("rps") is not None else ""  # no rate from a handful of requests
    traffic = o.get("traffic_s")
    window = f" over {traffic:.3f} s of traffic" if traffic else ""
    return (f"{o['requests']} requests ({o['requests_complete']} complete){window}{rate} · log span "
            f"{o['duration_s']:,.3f} s")


def _phase_table(capture: Capture, width: int) -> list[str]:
    pct = percentiles(capture.rows_without_uid())
    if not pct:
        return []
    phases = [c.removesuffix("_us") for c in PHASE_COLUMNS]
    shown = [p for p in phases if (pct[p]["max"] or 0) > 0]
    hidden = [p for p in phases if p not in shown]
    shares = [(key, label) for key, label in SHARE_ROWS if (pct[key]["max"] or 0) > 0]
    hidden += [key for key, _ in SHARE_ROWS if not pct[key]["max"]]
    rows = [(p, p, "") for p in shown] + [(k, label, "") for k, label in shares] + list(TOTAL_ROWS)
    stats = ("p50", "p90", "p99", "max")
    unit, decimals = table_unit([pct[key][st] for key, _, _ in rows for st in stats],
                                capture.quality().timestamp_tick_us)
    table_w = LABEL_W + CELL_W * len(stats)
    described = all(table_w + 2 + len(what) <= width for _, _, what in rows)
    lines = [f"{'phase (' + unit + ')':<{LABEL_W}}" + "".join(f"{st:>{CELL_W}}" for st in stats)]
    for key, label, what in rows:
        if key == "total":
            lines.append("-" * table_w)
        cells = "".join(f"{in_unit(pct[key][st], unit, decimals):>{CELL_W}}" for st in stats)
        lines.append(f"{label:<{LABEL_W}}{cells}" + (f"  {what}" if what and described else ""))
    if not described:  # too narrow for the descriptions beside their rows: a legend below the table
        lines += _wrap("(" + "; ".join(f"{key}: {what}" for key, _, what in rows if what) + ")", width, "   ", "  ")
    # (a phase no request measured has no max: it is unmeasured, not zero)
    zero = [p for p in hidden if pct[p]["max"] is not None]
    unmeasured = [p for p in hidden if pct[p]["max"] is None]
    if zero:
        lines += _wrap(f"(zero in every request, not shown: {', '.join(zero)})", width, " ")
    if unmeasured:
        lines += _wrap(f"(not measured in this capture, not shown: {', '.join(unmeasured)})", width, " ")
    lines.append("")
    return lines


def _slowest(capture: Capture, top: int, width: int) -> list[str]:
    """The slowest requests, two lines each: their times in one unit and the largest part, then what and which.

    "largest" names queueing for the worker when it is most of the request's time in the proxy (it is a share
    inside the phases, so the largest phase alone would hide it)."""
    if top <= 0:
        return []
    # The order is found on the two columns it reads (with the uids of the counted requests only, when the
    # capture's are not made yet: a flood of cut requests has none); only the slowest rows are read whole (a sort of
    # the wide frame copied all of it: +280 MiB on a 5 GB capture).
    rows = capture.rows_without_uid().with_row_index("row__")
    made = "request_uid" in rows.columns
    keys = counted(rows, ("row__", "total_us", *(("request_uid",) if made else UID_COLUMNS)))
    if not made:
        keys = keys.select_seq("row__", "total_us", request_uid())
    order = keys.sort(["total_us", "request_uid"], descending=[True, False]).head(top)
    if order.height == 0:
        return []
    slow = rows.drop("row__")[order["row__"]]
    if not made:
        slow = slow.with_columns_seq(order["request_uid"])
    slow = slow.with_columns_seq(dominant=dominant_phase(slow))
    unit, decimals = table_unit([v for c in SLOW_COLUMNS for v in slow[c].to_list()],
                                capture.quality().timestamp_tick_us)  # one unit for the whole table
    lines = [f"slowest {slow.height} requests ({unit})",
             f"  {'total':>8} {'envoy':>8} {'queue':>8} {'before':>8}  {'largest':<18} {'status':>6}"]
    for row in slow.iter_rows(named=True):
        cells = " ".join(f"{in_unit(row[c], unit, decimals):>8}" for c in SLOW_COLUMNS)
        lines.append(f"  {cells}  {_largest(row):<18} {row['status']!s:>6}")
        what = f"{row['method'] or ''} {row['authority'] or ''}{row['path'] or ''}".strip()
        ident = str(row["x_request_id"] or row["request_uid"])
        room = width - 6 - len(ident) - 3
        if room >= 12:
            lines.append(f"      {what if len(what) <= room else what[: room - 1] + '…'} · {ident}")
        else:
            lines.append("      " + (what if len(what) <= width - 6 else what[: width - 7] + "…"))
            lines.append("      " + ident)
        if row.get("failure_reason"):  # Envoy's flags and details, whole: a long details word continues below
            lines += textwrap.wrap(f"failed: {row['failure_reason']}", width=width, initial_indent="      ",
                                   subsequent_indent="        ", break_on_hyphens=False)
    lines += _wrap("(queue: waiting for the worker inside total; before: waiting before the first read; "
                   "largest: the largest phase, or queueing when it is most of the time)", width, "   ", "  ")
    lines.append("")
    return lines


def _largest(row: dict[str, Any]) -> str:
    """The largest phase of a request, or ``queueing (worker)`` when waiting for the worker (before the first
    read and inside) is at least half of its time in the proxy."""
    queued = (row["loop_queue_us"] or 0) + (row["queue_before_read_us"] or 0)
    in_proxy = (row["total_us"] or 0) + (row["queue_before_read_us"] or 0)
    return "queueing (worker)" if in_proxy and queued * 2 >= in_proxy else str(row["dominant"])


def _workers(capture: Capture, width: int) -> list[str]:
    w = capture.workers()
    if w.height == 0:
        return []
    served = w.filter(pl.col("requests") > 0)
    if w.height <= MAX_WORKERS_LISTED:
        text = "workers: " + " · ".join(
            f"{r['thread']}: " + (f"{r['utilisation']:.0%} busy, " if r["utilisation"] is not None else "")
            + f"{r['requests']} req, {r['connections']} conn, "
            f"{r['waited']} waited" for r in w.iter_rows(named=True))
    else:
        util = w["utilisation"].fill_null(0.0)
        busiest = w.sort("utilisation", descending=True, nulls_last=True).row(0, named=True)
        text = (f"workers: {w.height} in {w['origin'].n_unique()} origin(s), {served.height} of them served "
                f"requests; busy "
                f"{float(util.min() or 0):.0%}..{float(util.max() or 0):.0%}; "  # type: ignore[arg-type]
                f"{int(w['waited'].sum())} requests waited ≥ 1 ms; busiest {busiest['thread']} "
                f"({(busiest['utilisation'] or 0):.0%}, {busiest['requests']} req) — per worker: --json")
    lines = _wrap(text, width, "  ", "")
    return lines + [""]


def _cost(capture: Capture, width: int) -> list[str]:
    """What the sidecar costs (docs/cost.md): added latency with and without the observer, CPU, the ceiling."""
    costs = capture.cost()
    if not costs:
        return []
    quantiles = ("p50", "p90", "p99")
    unit, decimals = table_unit([c.sidecar_added_us[q] for c in costs for q in quantiles],
                                capture.quality().timestamp_tick_us)
    lines = [f"{f'what the sidecar costs ({unit})':<{LABEL_W + 8}}" + "".join(f"{q:>{CELL_W}}" for q in quantiles)]
    for cost in costs[:MAX_ORIGIN_LINES]:
        if len(costs) > 1:
            lines.append(_tail(cost.origin, width))
        for label, values in (("added latency", cost.sidecar_added_us),
                              ("  without trace logging", cost.sidecar_added_without_observer_us)):
            if values["p50"] is not None:
                lines.append(f"{label:<{LABEL_W + 8}}" + "".join(
                    f"{in_unit(values[q], unit, decimals):>{CELL_W}}" for q in quantiles))
        facts = []
        if cost.cpu_ms_per_1000_requests is not None:
            busy = ", ".join(f"{u:.0%}" for u in cost.utilisation.values())
            facts.append(f"CPU {cost.cpu_ms_per_1000_requests:,.0f} ms per 1000 requests"
                         + (f" (workers {busy} busy)" if busy else ""))
        if cost.record_cost_us is not None:
            by_idle = cost.record_costs
            facts.append(f"trace logging {cost.record_cost_us:.1f} µs per record" + (
                f" ({by_idle.warm + by_idle.unseen:.1f} warm, {by_idle.cold + by_idle.unseen:.1f} waking the worker)"
                if by_idle is not None and COLD in by_idle.measured else ""))
        if cost.ceiling is not None:
            c = cost.ceiling
            more = ", ".join(f"{n}: {v:,.0f}" for n, v in c.concurrency.items() if n != len(c.workers))
            facts.append(f"ceiling {c.pod:,.0f} req/s ({c.low:,.0f}..{c.high:,.0f}) on {len(c.workers)} "
                         f"worker(s); --concurrency {more}")
        facts += list(cost.notes)
        for fact in facts:
            lines += _wrap(fact, width, "    ", "  ")
    return [*lines, ""]


def _stitching(capture: Capture, width: int) -> list[str]:
    """Requests stitched across proxies (mesh captures), when there are any."""
    stitched = render_stitching(capture.stitching, capture.rows_without_uid())
    return [*_fit(stitched, width), ""] if stitched else []


def _findings(findings: Sequence[Finding], width: int) -> list[str]:
    if not findings:
        return []
    lines = ["findings"]
    for f in findings:
        lines += _wrap(f"{SEVERITY_MARK[f.severity]}[{f.severity}] {f.title}", width, "      ", " ")
        lines += _wrap(f.evidence, width, "      ")
        if f.fix:
            lines += _wrap(f"fix: {f.fix}", width, "      ")
    return lines


