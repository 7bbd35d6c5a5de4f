"""Wrappers that tools put around each physical log line: ``kubectl logs --prefix`` and ``--timestamps``."""
from __future__ import annotations

import re

import polars as pl

KUBECTL_PREFIX = r"\[pod/(?P<pod>[^/\]\s]+)/(?P<container>[^\]\s]+)\] "
KUBECTL_TIMESTAMP = r"(?P<kts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d)) "
_PREFIX_RE = re.compile("^" + KUBECTL_PREFIX)
_TS_RE = re.compile("^" + KUBECTL_TIMESTAMP)


def detect_wrappers(lines: list[str]) -> list[str]:
    """Which wrappers most sample lines carry, outermost first (kubectl writes the prefix first)."""
    sample = [line for line in lines if line][:2000]
    if not sample:
        return []
    found = []
    if sum(1 for line in sample if _PREFIX_RE.match(line)) > 0.8 * len(sample):
        found.append("kubectl-prefix")
        sample = [_PREFIX_RE.sub("", line, count=1) for line in sample]
    if sum(1 for line in sample if _TS_RE.match(line)) > 0.8 * len(sample):
        found.append("kubectl-timestamps")
    return found


def strip_sample(lines: list[str], wrappers: list[str]) -> list[str]:
    out = lines
    if "kubectl-prefix" in wrappers:
        out = [_PREFIX_RE.sub("", line, count=1) for line in out]
    if "kubectl-timestamps" in wrappers:
        out = [_TS_RE.sub("", line, count=1) for line in out]
    return out


def unwrap(lines: pl.DataFrame, wrappers: list[str], default_origin: str) -> pl.DataFrame:
    """Strip wrappers from ``raw``; adds ``origin`` (pod/container or the file) and ``wrapper_ts_us``."""
    raw = pl.col("raw")
    origin = pl.lit(default_origin)
    wrapper_ts = pl.lit(None, dtype=pl.Int64)
    if "kubectl-prefix" in wrappers:
        parts = raw.str.extract_groups("^" + KUBECTL_PREFIX)
        lines = lines.with_columns(_pod=parts.struct.field("pod"), _container=parts.struct.field("container"))
        origin = pl.when(pl.col("_pod").is_not_null()).then(
            pl.col("_pod") + "/" + pl.col("_container")).otherwise(pl.lit(default_origin))
        lines = lines.with_columns(raw=raw.str.replace("^" + KUBECTL_PREFIX, ""))
    if "kubectl-timestamps" in wrappers:
        kts = pl.col("raw").str.extract("^" + KUBECTL_TIMESTAMP.replace("(?P<kts>", "("), 1)
        wrapper_ts = kts.str.to_datetime(time_unit="ns", time_zone="UTC", strict=False).dt.epoch("us")
        lines = lines.with_columns(wrapper_ts_us=wrapper_ts,
                                   raw=pl.col("raw").str.replace("^" + KUBECTL_TIMESTAMP, ""))
    else:
        lines = lines.with_columns(wrapper_ts_us=wrapper_ts)
    return lines.with_columns(origin=origin).drop("_pod", "_container", strict=False)
