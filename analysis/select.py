"""Restrict a capture to some requests (time window, authority, path, status) for reports and exports."""
from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime

import polars as pl

from envoy_dissector.analysis.capture import Capture
from envoy_dissector.parser.errors import UsageError

_RELATIVE = re.compile(r"^\+?(\d+(?:\.\d+)?)(us|µs|ms|s|m)$")
_UNITS = {"us": 1, "µs": 1, "ms": 1_000, "s": 1_000_000, "m": 60_000_000}


def parse_time(text: str, capture_start_us: int | None) -> int:
    """An absolute ISO time (``2026-01-02T03:04:05.123Z``), epoch seconds, or an offset such as ``+1.5s``
    from the first request."""
    m = _RELATIVE.match(text.strip())
    if m and capture_start_us is not None:
        return capture_start_us + int(float(m.group(1)) * _UNITS[m.group(2)])
    try:
        return int(float(text) * 1_000_000)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise UsageError(f"cannot read time {text!r}: use ISO 8601, epoch seconds, or +OFFSET like +2s") from exc
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1_000_000)


def select(capture: Capture, *, since: str | None = None, until: str | None = None,
           authority: str | None = None, path: str | None = None, status: str | None = None) -> Capture:
    """A capture whose requests (and their phases) match all the given conditions.

    ``authority``/``path`` are regular expressions; ``status`` is ``503``, ``5xx`` or ``>=400``.
    """
    r = capture.requests
    start = r["life_start_us"].min() if r.height else None
    cond = pl.lit(True)
    if since:
        cond = cond & (pl.col("life_start_us") >= parse_time(since, start))  # type: ignore[arg-type]
    if until:
        cond = cond & (pl.col("life_start_us") <= parse_time(until, start))  # type: ignore[arg-type]
    if authority:
        cond = cond & pl.col("authority").fill_null("").str.contains(authority)
    if path:
        cond = cond & pl.col("path").fill_null("").str.contains(path)
    if status:
        cond = cond & _status_condition(status)
    if cond.meta.eq(pl.lit(True)):
        return capture
    kept = r.filter(cond)
    phases = capture.phases.join(kept.select("request_uid"), on="request_uid", how="semi")
    return dataclasses.replace(capture, requests=kept, phases=phases, _cache={})


def _status_condition(text: str) -> pl.Expr:
    t = text.strip().lower()
    if re.fullmatch(r"[1-5]xx", t):
        base = int(t[0]) * 100
        return pl.col("status").is_between(base, base + 99)
    m = re.fullmatch(r"(>=|<=|>|<|=)?\s*(\d{3})", t)
    if not m:
        raise UsageError(f"--status {text!r}: use 503, 5xx, >=400")
    op, value = m.group(1) or "=", int(m.group(2))
    col = pl.col("status")
    return {"=": col == value, ">=": col >= value, "<=": col <= value, ">": col > value, "<": col < value}[op]
