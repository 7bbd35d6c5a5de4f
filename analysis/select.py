"""Restrict a capture to some requests (time window, authority, path, status) for reports and exports."""
from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
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
    if m:
        offset = _finite_us(float(m.group(1)) * _UNITS[m.group(2)], text)
        return (capture_start_us or 0) + offset  # no requests: any instant selects nothing
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return _finite_us(seconds * 1_000_000, text)
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise UsageError(f"cannot read time {text!r}: use ISO 8601, epoch seconds, or +OFFSET like +2s") from exc
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1_000_000)


#: epoch µs that fit an int64 (about ±292 000 years around 1970)
_MAX_US = 2**63 - 1


def _finite_us(value: float, text: str) -> int:
    if not math.isfinite(value) or abs(value) > _MAX_US:
        raise UsageError(f"cannot read time {text!r}: out of range")
    return int(value)


def checked_regex(option: str, pattern: str) -> str:
    """``pattern`` if the regex engine polars uses accepts it; else a usage error quoting the engine's reason."""
    try:
        pl.Series([""]).str.contains(pattern)
    except pl.exceptions.PolarsError as exc:
        reason = " ".join(line.strip() for line in str(exc).split("This error occurred")[0].splitlines()
                          if line.strip())
        raise UsageError(f"{option} {pattern!r}: not a valid regular expression: {reason}") from None
    return pattern


#: reading stops once the capture is this far past --until (requests started before it may still be running)
UNTIL_GRACE_US = 10_000_000


def read_until(until: str | None) -> Callable[[int, int], bool] | None:
    """For ``dissect(stop_reading=...)``: stop once records are ``UNTIL_GRACE_US`` past ``until``.

    A relative ``+2s`` counts from the first record (the filter counts from the first request, a little
    later: reading never stops too early). Checks the text now (a usage error before reading anything).
    """
    if not until:
        return None
    parse_time(until, 0)

    def past(first_us: int, latest_us: int) -> bool:
        return latest_us > parse_time(until, first_us) + UNTIL_GRACE_US

    return past


def select(capture: Capture, *, since: str | None = None, until: str | None = None,
           authority: str | None = None, path: str | None = None, status: str | None = None) -> Capture:
    """A capture whose requests (and their phases) match all the given conditions.

    ``authority``/``path`` are regular expressions; ``status`` is ``503``, ``5xx`` or ``>=400``.
    """
    # (the rows without their uid: a capture whose uids are not made yet makes them only when it is filtered)
    rows = capture.rows_without_uid()
    start = rows.select_seq(pl.col("life_start_us").min()).item() if rows.height else None
    cond = pl.lit(True)
    if since:
        cond = cond & (pl.col("life_start_us") >= parse_time(since, start))  # type: ignore[arg-type]
    if until:
        cond = cond & (pl.col("life_start_us") <= parse_time(until, start))  # type: ignore[arg-type]
    if authority:
        cond = cond & pl.col("authority").fill_null("").str.contains(checked_regex("--authority", authority))
    if path:
        cond = cond & pl.col("path").fill_null("").str.contains(checked_regex("--path", path))
    if status:
        cond = cond & _status_condition(status)
    if cond.meta.eq(pl.lit(True)):
        return capture
    kept = capture.requests.filter(cond)
    phases = capture.phases.join(kept.select_seq("request_uid"), on="request_uid", how="semi")
    queueing = capture.queueing.join(kept.select_seq("request_uid"), on="request_uid", how="semi")
    return dataclasses.replace(capture, requests=kept, phases=phases, queueing=queueing, _cache={})


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
