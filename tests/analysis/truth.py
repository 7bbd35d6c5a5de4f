"""Envoy's own truth for the analysis tests: fixture discovery, cached captures, matching and tolerances.

Every capture directory under ``fixtures/`` that holds an ``access.jsonl`` was made by the lab
(``envoy_dissector.lab``) against a real Envoy: ``access.jsonl`` is Envoy's access log
with ``ds_rx_beg_to_<milestone>_us = %COMMON_DURATION(DS_RX_BEG:<MILESTONE>:us)%``,
``connection_id``, ``upstream_connection_id``, ``attempts`` and the request's ``x_request_id``;
``client.jsonl`` is the load generator's view, ``upstream.jsonl`` the upstream's own service time,
``meta.json`` how the run was made. Nothing here looks at what the analysis computes to decide what
is expected: the expectation always comes from these files.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from envoy_dissector.analysis import Capture
from tests.builders import analysed

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

#: Milestones Envoy reports as offsets from DS_RX_BEG (access-log key ``ds_rx_beg_to_<m>_us``).
OFFSET_MILESTONES = ("us_cx_beg", "us_cx_end", "us_tx_beg", "us_tx_end", "us_rx_beg", "us_rx_end",
                     "ds_rx_end", "ds_tx_beg", "ds_tx_end")
#: The ones the issue requires to agree (where Envoy reports them).
CHECKED_MILESTONES = ("us_tx_beg", "us_rx_beg", "ds_tx_beg", "ds_tx_end")
ABS_TOLERANCE_US = 50
REL_TOLERANCE = 0.05


@dataclass(frozen=True)
class Truth:
    """One capture directory with Envoy's truth files; ``log`` is the trace log it belongs to."""

    dir: Path
    log: Path
    meta: dict[str, Any]
    #: the origin prefix of this capture's requests when several captures share one log (kubectl multi-pod)
    origin_prefix: str | None = None

    @property
    def rel(self) -> str:
        """Path under fixtures/ (or the directory itself for a fresh lab capture elsewhere)."""
        try:
            return str(self.dir.relative_to(FIXTURES))
        except ValueError:
            return str(self.dir)

    @property
    def pattern(self) -> str:
        return self.meta["log_format"]["pattern"]

    @property
    def log_format(self) -> str | None:
        """The ``--log-format`` to hand to ``dissect`` (only custom formats need it)."""
        return self.pattern if self.meta["log_format"]["name"] == "custom" else None

    @property
    def has_thread_ids(self) -> bool:
        return "%t" in self.pattern

    @property
    def microseconds(self) -> bool:
        """Envoy wrote µs timestamps (``%f``); ``%e`` is milliseconds."""
        return "%f" in self.pattern

    def access(self) -> pl.DataFrame:
        a = _jsonl(self.dir / "access.jsonl")
        ints = [c for c in a.columns if c.startswith("ds_rx_beg_to_") or c in (
            "connection_id", "upstream_connection_id", "attempts", "status")]
        return a.with_columns(pl.col(c).cast(pl.Int64) for c in ints)

    def client(self) -> pl.DataFrame:
        return _jsonl(self.dir / "client.jsonl")

    def upstream(self) -> pl.DataFrame:
        return _jsonl(self.dir / "upstream.jsonl")

    def capture(self) -> Capture:
        return capture_of(self.log, self.log_format)

    def requests(self) -> pl.DataFrame:
        """Client requests (not internal) of this capture (this pod's only, for multi-pod logs)."""
        r = self.capture().requests.filter(~pl.col("internal"))
        if self.origin_prefix is not None:
            r = r.filter(pl.col("origin").str.starts_with(self.origin_prefix))
        return r


def _jsonl(path: Path) -> pl.DataFrame:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()


def capture_of(log: Path, log_format: str | None = None) -> Capture:
    """``dissect`` once per log for the whole test session (tests/builders.py ``analysed``: every module shares it)."""
    return analysed(log, log_format)


def _log_in(d: Path) -> Path | None:
    logs = sorted(d.glob("envoy.log*"))
    return logs[0] if logs else None


def level_of(meta: dict[str, Any]) -> str:
    """Envoy's ``-l`` level of a lab capture (captures from before the option existed are trace)."""
    return str(meta.get("settings", {}).get("envoy", {}).get("log_level", "trace"))


def discover(levels: tuple[str, ...] = ("trace",)) -> list[Truth]:
    """Every fixture capture with Envoy's access log at one of ``levels`` (multi-pod: one Truth per pod, on the
    interleaved log). Debug-level captures (fixtures/debug-level/) are asked for explicitly."""
    out = []
    for access in sorted(FIXTURES.rglob("access.jsonl")):
        d = access.parent
        meta = json.loads((d / "meta.json").read_text())
        if level_of(meta) not in levels:
            continue
        log = _log_in(d)
        prefix = None
        if log is None:  # kubectl/multi-pod/<pod>/: the pods' logs are interleaved one level up
            log = d.parent / "interleaved.log.gz"
            prefix = d.name
            if not log.exists():
                continue
        out.append(Truth(d, log, meta, prefix))
    return out


def from_lab(out_dir: Path) -> Truth:
    """A capture directory written by ``lab.run.run_scenario`` (outside fixtures/)."""
    meta = json.loads((out_dir / "meta.json").read_text())
    log = _log_in(out_dir)
    assert log is not None, f"no envoy.log in {out_dir}"
    return Truth(out_dir, log, meta)


def truth(rel: str) -> Truth:
    for t in discover():
        if t.rel == rel:
            return t
    raise KeyError(rel)


def matched(t: Truth) -> pl.DataFrame:
    """Envoy's access-log rows left-joined on ``x_request_id`` to our client requests
    (``request_uid`` null = not found)."""
    return t.access().join(t.requests(), on="x_request_id", how="left", suffix="_ours")


def within(ours: pl.Expr, envoy: pl.Expr) -> pl.Expr:
    """Agreement: ``|ours - envoy| <= max(50 µs, 5 % of envoy)``."""
    return (ours - envoy).abs() <= pl.max_horizontal(pl.lit(ABS_TOLERANCE_US), envoy.abs() * REL_TOLERANCE)


def agreement(t: Truth, milestone: str) -> tuple[int, int, pl.DataFrame]:
    """(agreeing, compared, disagreeing rows) for ``milestone`` offsets from DS_RX_BEG over matched complete requests.

    A request is compared when Envoy reports the milestone for it.
    """
    key = f"ds_rx_beg_to_{milestone}_us"
    j = matched(t)
    if key not in j.columns:
        return 0, 0, j.head(0)
    j = j.filter(pl.col("request_uid").is_not_null() & pl.col("complete") & pl.col(key).is_not_null())
    j = j.with_columns(ours=pl.col(f"{milestone}_us") - pl.col("ds_rx_beg_us"))
    ok = j.filter(within(pl.col("ours"), pl.col(key)).fill_null(False))
    bad = j.join(ok.select("x_request_id"), on="x_request_id", how="anti").select(
        "x_request_id", "request_uid", key, "ours")
    return ok.height, j.height, bad


def fixture_ids(truths: list[Truth]) -> list[str]:
    return [t.rel for t in truths]
