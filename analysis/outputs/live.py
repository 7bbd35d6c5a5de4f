"""The rolling view of a followed log (``analyze --follow``, ``watch``): a bounded sliding window of the requests
finished lately, and its text — a screen that fits 80 columns, or one plain line per refresh when the output is
not a terminal. No I/O: the caller feeds finished batches in and prints what comes out (docs/follow.md).

The window is measured in log time (the newest finished request's start), not wall time, so a log read faster
than it was written (catching up on a file) still shows the rates it was written at.
"""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime

import polars as pl

from envoy_dissector.analysis.findings import Finding, churn, failed_connects, retries, shares, slow_filters
from envoy_dissector.analysis.schema import PHASE_COLUMNS, REQUEST_FRAME_SCHEMA
from envoy_dissector.analysis.stats import counted, dominant_phase, percentile
from envoy_dissector.analysis.units import format_us

#: Log seconds of finished requests the view's rates and percentiles are computed over.
WINDOW_S = 60.0
#: Requests the window holds at most (the oldest dropped first): bounds memory at any rate.
MAX_WINDOW_REQUESTS = 20_000
#: Columns of a finished request the window keeps (the phases, and what the slow list and findings read).
WINDOW_COLUMNS: tuple[str, ...] = (
    "request_uid", "origin", "x_request_id", "method", "authority", "path", "status", "complete", "internal",
    "upstream_conn_id", "upstream_attempts", "us_cx_beg_us", "failure_reason", "failed_upstream_conn_id",
    "failed_upstream_error", "first_line_no", "ds_rx_beg_us", "ds_tx_end_us", *PHASE_COLUMNS, "wasm_us",
    "tracing_us", "total_us")
SLOW_SHOWN = 5
FINDINGS_SHOWN = 4
WIDTH = 80


@dataclass(frozen=True)
class Snapshot:
    """What the view shows at one refresh."""

    requests_total: int
    window_requests: int
    #: log seconds the window's requests span (0 with fewer than two)
    window_s: float
    rate: float | None
    #: phase -> (p50, p99) µs over the window's counted requests; only phases with a value
    phases: dict[str, tuple[float, float | None]]
    slow_threshold_us: float | None
    slow: list[dict[str, object]]
    findings: list[Finding]
    #: findings first seen at this refresh
    new_findings: list[Finding]
    newest_us: int | None


@dataclass
class LiveWindow:
    """Finished requests of the last ``window_s`` log seconds (at most ``max_requests``), fed by the streaming
    analysis' ``on_finished`` (from its step threads: every method takes the lock)."""

    window_s: float = WINDOW_S
    max_requests: int = MAX_WINDOW_REQUESTS
    #: a request at least this slow (µs) is listed; None: the window's p99 of ``total_us``
    slow_us: float | None = None
    requests_total: int = 0
    _batches: deque[tuple[pl.DataFrame, pl.DataFrame]] = field(default_factory=deque)
    _rows: int = 0
    _newest_us: int | None = None
    _seen_findings: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, requests: pl.DataFrame, phases: pl.DataFrame) -> None:
        """A batch of finished requests and their phase rows (``StreamingAnalysis.on_finished``)."""
        kept = requests.select_seq(pl.col(c) if c in requests.columns else pl.lit(None,
                                                                                  REQUEST_FRAME_SCHEMA[c]).alias(c)
                                   for c in WINDOW_COLUMNS)
        spans = phases.filter(~pl.col("part_of_total"))  # filter spans, for the slow-filter findings
        with self._lock:
            self.requests_total += int(kept.select_seq((~pl.col("internal")).sum()).item())
            newest = kept["ds_rx_beg_us"].max()
            if newest is not None and (self._newest_us is None or int(newest) > self._newest_us):  # type: ignore[arg-type]
                self._newest_us = int(newest)  # type: ignore[arg-type]
            self._batches.append((kept, spans))
            self._rows += kept.height
            self._trim()

    def _trim(self) -> None:
        """Drop what fell out of the window: batches wholly older than its start, then the oldest rows beyond
        ``max_requests``."""
        start = None if self._newest_us is None else self._newest_us - int(self.window_s * 1e6)
        while self._batches and start is not None:
            latest = self._batches[0][0]["ds_rx_beg_us"].max()
            if latest is not None and int(latest) >= start:  # type: ignore[arg-type]
                break
            self._rows -= self._batches.popleft()[0].height
        while self._rows > self.max_requests:
            oldest, spans = self._batches[0]
            excess = self._rows - self.max_requests
            if oldest.height <= excess:
                self._batches.popleft()
                self._rows -= oldest.height
                continue
            keep = oldest.tail(oldest.height - excess)
            self._batches[0] = (keep, spans.join(keep.select_seq("request_uid"), on="request_uid", how="semi"))
            self._rows = self.max_requests

    def frames(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The window's requests (inside the log-time window) and their filter phase rows."""
        with self._lock:
            batches = list(self._batches)
            newest = self._newest_us
        if not batches:
            empty = pl.DataFrame(schema={c: REQUEST_FRAME_SCHEMA[c] for c in WINDOW_COLUMNS})
            return empty, pl.DataFrame()
        requests = pl.concat([b for b, _ in batches], how="vertical_relaxed")
        spans = pl.concat([s for _, s in batches], how="diagonal_relaxed")
        if newest is not None:
            requests = requests.filter(pl.col("ds_rx_beg_us") >= newest - int(self.window_s * 1e6))
        return requests, spans

    def snapshot(self) -> Snapshot:
        """The numbers of the view now; findings not shown before are in ``new_findings``."""
        requests, spans = self.frames()
        client = counted(requests)
        starts = requests.filter(~pl.col("internal"))["ds_rx_beg_us"].drop_nulls()
        window_s = (int(starts.max()) - int(starts.min())) / 1e6 if starts.len() > 1 else 0.0  # type: ignore[arg-type]
        rate = (starts.len() - 1) / window_s if window_s > 0 else None
        phases: dict[str, tuple[float, float | None]] = {}
        for column in (*PHASE_COLUMNS, "total_us"):
            p50 = percentile(client[column], 0.5)
            if p50 is not None:
                phases[column.removesuffix("_us")] = (p50, percentile(client[column], 0.99))
        threshold = self.slow_us if self.slow_us is not None else percentile(client["total_us"], 0.99)
        slow: list[dict[str, object]] = []
        if threshold is not None and client.height:
            rows = client.filter(pl.col("total_us") >= threshold).sort("ds_rx_beg_us", descending=True,
                                                                       nulls_last=True).head(SLOW_SHOWN)
            slow = rows.with_columns_seq(dominant=dominant_phase(rows)).to_dicts()
        findings = self._findings(requests, spans)
        with self._lock:
            new = [f for f in findings if f.id not in self._seen_findings]
            self._seen_findings.update(f.id for f in new)
            total = self.requests_total
        return Snapshot(requests_total=total, window_requests=client.height, window_s=window_s, rate=rate,
                        phases=phases, slow_threshold_us=threshold, slow=slow, findings=findings, new_findings=new,
                        newest_us=self._newest_us)

    @staticmethod
    def _findings(requests: pl.DataFrame, spans: pl.DataFrame) -> list[Finding]:
        """The findings rules that read requests (and filter spans) only, over the window; the capture-wide ones
        (workers, event-loop queueing, stalls) wait for the final report."""
        if requests.height == 0:
            return []
        found = shares(requests) + churn(requests) + retries(requests) + failed_connects(requests)
        if spans.height:
            found += slow_filters(requests, spans)
        return sorted(found, key=lambda f: f.rank)


def _clock(us: int | None) -> str:
    return "--:--:--" if us is None else datetime.fromtimestamp(us / 1e6, tz=UTC).strftime("%H:%M:%S")


def _cut(text: str, room: int) -> str:
    return text if len(text) <= room else text[: max(room - 1, 0)] + "…"


def render_screen(snap: Snapshot, *, source: str, lines_read: int, width: int = WIDTH, note: str | None = None) -> str:
    """The rolling view: a header (and ``note``, what the view cannot show), the window's rate and phase
    percentiles, the newest slow requests, the findings; every line at most ``width`` columns."""
    rate = "–" if snap.rate is None else f"{snap.rate:,.1f}/s"
    out = [_cut(f"envoy-dissect follow · {source}", width),
           _cut(f"log time {_clock(snap.newest_us)} UTC · {snap.requests_total:,} requests · {lines_read:,} lines "
                "· Ctrl-C: final report", width),
           *([_cut(note, width)] if note else []),
           "",
           _cut(f"last {snap.window_s:,.0f} s: {snap.window_requests:,} complete requests, {rate}", width),
           f"  {'phase':<20} {'p50':>12} {'p99':>12}"]
    for phase, (p50, p99) in snap.phases.items():
        out.append(f"  {phase:<20} {format_us(p50):>12} {format_us(p99):>12}")
    if not snap.phases:
        out.append("  (no complete request yet)")
    out.append("")
    threshold = format_us(snap.slow_threshold_us)
    out.append(_cut(f"newest slow requests (total ≥ {threshold})", width))
    for row in snap.slow:
        head = (f"  {_clock(row['ds_rx_beg_us'])}  {format_us(row['total_us']):>10}  {row['status']!s:>4}  "  # type: ignore[arg-type]
                f"{row['dominant']!s:<18} ")
        what = f"{row['method'] or ''} {row['authority'] or ''}{row['path'] or ''}".strip()
        out.append(head + _cut(what, width - len(head)))
    if not snap.slow:
        out.append("  (none)")
    out.append("")
    out.append("findings (last window; workers and queueing in the final report)")
    for f in snap.findings[:FINDINGS_SHOWN]:
        out.append(_cut(f"  {f.severity:<8} {f.title}", width))
    if len(snap.findings) > FINDINGS_SHOWN:
        out.append(f"  … and {len(snap.findings) - FINDINGS_SHOWN} more")
    if not snap.findings:
        out.append("  (none)")
    return "\n".join(out)


def render_line(snap: Snapshot, *, width: int = WIDTH) -> list[str]:
    """The plain form, for an output that is not a terminal: one line per refresh (then a line per finding
    first seen), each at most ``width`` columns."""
    rate = "–" if snap.rate is None else f"{snap.rate:,.1f}/s"
    total = snap.phases.get("total")
    totals = "" if total is None else f" total p50 {format_us(total[0])} p99 {format_us(total[1])}"
    slow = "" if not snap.slow else f" slow {len(snap.slow)}"
    lines = [_cut(f"{_clock(snap.newest_us)} requests {snap.requests_total:,} rate {rate}{totals}{slow}", width)]
    lines += [_cut(f"{_clock(snap.newest_us)} finding {f.severity}: {f.title}", width) for f in snap.new_findings]
    return lines
