"""The one-screen terminal report: at most ``width`` (100) columns, one unit per column, evidence wrapped at
word boundaries (never cut)."""
from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import polars as pl

from envoy_dissector.analysis.capture import Capture
from envoy_dissector.analysis.findings import Finding
from envoy_dissector.analysis.quality import quality_lines
from envoy_dissector.analysis.schema import PHASE_COLUMNS
from envoy_dissector.analysis.stats import counted, dominant_phase, percentiles
from envoy_dissector.analysis.stitch import render_stitching
from envoy_dissector.analysis.units import in_unit, table_units

WIDTH = 100
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
        _stitching(capture),
        _findings(capture.findings(), width),
    ]
    if filters and counted(capture.requests).height == 0:
        sections.insert(1, [f"no request matches the filters ({filters}): nothing to report", ""])
    return "\n".join(line for section in sections for line in section).rstrip("\n")


def _wrap(text: str, width: int, indent: str, first: str | None = None) -> list[str]:
    """Wrap at spaces only: a word (an id, a URL) is never cut."""
    return textwrap.wrap(text, width=width, initial_indent=indent if first is None else first,
                         subsequent_indent=indent, break_long_words=False, break_on_hyphens=False) or [first or ""]


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
        f"{d['lines_read']} lines, {d['lines_malformed']} malformed, {d['records']} records, "
        f"{d['records_unknown']} unknown" + (f" · wrappers {', '.join(d['wrappers'])}" if d["wrappers"] else ""),
        width, "  ", "")
    origins = capture.origins() or [{"origin": capture.name, "format": d["format"], **capture.span()}]
    if len(origins) == 1:
        o = origins[0]
        lines += _wrap(f"format {o['format']} ({d['format_label']}) · {_span_text(o)}", width, "  ", "")
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
    rate = f" · {o['rps']:.0f} rps" if o.get("rps") is not None else ""  # no rate from a handful of requests
    return f"span {o['duration_s']:.3f} s · {o['requests']} requests ({o['requests_complete']} complete){rate}"


def _phase_table(capture: Capture, width: int) -> list[str]:
    pct = percentiles(capture.requests)
    if not pct:
        return []
    phases = [c.removesuffix("_us") for c in PHASE_COLUMNS]
    shown = [p for p in phases if (pct[p]["max"] or 0) > 0]
    hidden = [p for p in phases if p not in shown]
    shares = [(key, label) for key, label in SHARE_ROWS if (pct[key]["max"] or 0) > 0]
    hidden += [key for key, _ in SHARE_ROWS if not pct[key]["max"]]
    rows = [(p, p, "") for p in shown] + [(k, label, "") for k, label in shares] + list(TOTAL_ROWS)
    stats = ("p50", "p90", "p99", "max")
    units, decimals = table_units({st: [pct[key][st] for key, _, _ in rows] for st in stats},
                                  capture.quality().timestamp_tick_us)
    lines = [f"{'phase':<22}" + "".join(f"{st + ' ' + units[st]:>10}" for st in stats)]
    for key, label, what in rows:
        if key == "total":
            lines.append("-" * 62)
        cells = "".join(f"{in_unit(pct[key][st], units[st], decimals):>10}" for st in stats)
        lines.append(f"{label:<22}{cells}" + (f"  {what}" if what else ""))
    if hidden:
        lines += _wrap(f"(zero in every request, not shown: {', '.join(hidden)})", width, " ")
    lines.append("")
    return lines


def _slowest(capture: Capture, top: int, width: int) -> list[str]:
    slow = counted(capture.requests).sort("total_us", descending=True).head(top)
    if slow.height == 0 or top <= 0:
        return []
    slow = slow.with_columns(dominant=dominant_phase(slow))
    units, decimals = table_units({"all": [v for c in SLOW_COLUMNS for v in slow[c].to_list()]},
                                  capture.quality().timestamp_tick_us)  # one unit for the whole table
    unit = units["all"]
    lines = [f"slowest {slow.height} requests ({unit})",
             f"  {'total':>8} {'envoy':>8} {'queue':>8} {'before':>8}  {'largest phase':<16} {'status':>6}  id"]
    for row in slow.iter_rows(named=True):
        cells = " ".join(f"{in_unit(row[c], unit, decimals):>8}" for c in SLOW_COLUMNS)
        lines.append(f"  {cells}  {row['dominant']:<16} {row['status']!s:>6}  "
                     f"{row['x_request_id'] or row['request_uid']}")
        what = f"{row['method'] or ''} {row['authority'] or ''}{row['path'] or ''}".strip()
        room = width - 6
        lines.append("      " + (what if len(what) <= room else what[: room - 1] + "…"))
    lines.append("  (queue: waiting for the worker inside total; before: waiting before the first read)")
    lines.append("")
    return lines


def _workers(capture: Capture, width: int) -> list[str]:
    w = capture.workers()
    if w.height == 0:
        return []
    served = w.filter(pl.col("requests") > 0)
    if w.height <= MAX_WORKERS_LISTED:
        text = "workers: " + " · ".join(
            f"{r['thread']}: {(r['utilisation'] or 0):.0%} busy, {r['requests']} req, {r['connections']} conn, "
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


def _stitching(capture: Capture) -> list[str]:
    """Requests stitched across proxies (mesh captures), when there are any."""
    stitched = render_stitching(capture.stitching, capture.requests)
    return [*stitched, ""] if stitched else []


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


