"""The one-screen terminal report."""
from __future__ import annotations

from envoy_dissector.analysis.capture import Capture
from envoy_dissector.analysis.quality import quality_lines
from envoy_dissector.analysis.stats import counted, dominant_phase, percentiles
from envoy_dissector.analysis.stitch import render_stitching

SEVERITY_MARK = {"critical": "!!", "warning": "! ", "info": "  "}


def _us(v: int | float | None, tick_us: int = 1) -> str:
    """µs below 10 ms, else ms with two decimals; whole ms when the timestamps tick in ms. Unit always written."""
    if v is None:
        return "-"
    if tick_us >= 1000:
        return f"{v / 1000:.0f} ms"
    return f"{v / 1000:.2f} ms" if v >= 10_000 else f"{int(v)} µs"


def render(capture: Capture, *, top: int = 5, width: int = 100) -> str:
    d = capture.diagnostics_dict()
    s = capture.span()
    tick = capture.quality().timestamp_tick_us
    lines = [
        f"envoy-dissector · {capture.name}",
        f"format {d['format']} ({d['format_label']})" + (f" · wrappers {', '.join(d['wrappers'])}"
                                                         if d["wrappers"] else "")
        + f" · {d['lines_read']} lines, {d['lines_malformed']} malformed, {d['records']} records, "
          f"{d['records_unknown']} unknown",
        f"capture {s['duration_s']:.3f} s · {s['requests']} requests ({s['requests_complete']} complete, "
        f"{s['requests_incomplete']} cut by the capture) · "
        + (f"{s['rps']:.0f} rps · " if s["rps"] is not None else "")
        + f"{s['internal_requests']} internal/admin",
        "",
        *quality_lines(capture),
    ]
    pct = percentiles(capture.requests)
    if pct:
        lines.append(f"{'phase':<18}{'p50':>12}{'p90':>12}{'p99':>12}{'max':>12}")
        for phase, v in pct.items():
            lines.append(f"{phase:<18}{_us(v['p50'], tick):>12}{_us(v['p90'], tick):>12}{_us(v['p99'], tick):>12}"
                         f"{_us(v['max'], tick):>12}")
        lines.append("")
    slow = counted(capture.requests).sort("total_us", descending=True).head(top)
    if slow.height:
        lines.append(f"slowest {slow.height} requests")
        slow = slow.with_columns(dominant=dominant_phase(slow))
        for row in slow.iter_rows(named=True):
            what = f"{row['method'] or ''} {row['authority'] or ''}{row['path'] or ''} → {row['status']}"
            lines.append(f"  {_us(row['total_us'], tick):>10}  {row['dominant']:<16} queue "
                         f"{_us(row['loop_queue_us'], tick):>10}"
                         f"  {what[:40]:<40} {row['x_request_id'] or row['request_uid']}")
        lines.append("")
    workers = capture.workers()
    if workers.height:
        lines.append("workers: " + " · ".join(
            f"{t}: {u or 0:.0%} busy, {n} req, {c} conn" for _, t, u, _, n, c in workers.iter_rows()))
        lines.append("")
    stitched = render_stitching(capture.stitching, capture.requests)
    if stitched:
        lines.extend([*stitched, ""])
    findings = capture.findings()
    if findings:
        lines.append("findings")
        for f in findings:
            lines.append(f" {SEVERITY_MARK[f.severity]}[{f.severity}] {f.title}")
            lines.append(f"      {f.evidence[: width * 2]}")
            if f.fix:
                lines.append(f"      fix: {f.fix[: width * 2]}")
    return "\n".join(lines)
