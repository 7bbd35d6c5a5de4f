"""Capture-wide facts a streamed capture keeps instead of its events (``Capture.facts``).

The whole-file path reads these from the events frame; the streaming path (``streaming.py``) gathers them
chunk by chunk and worker by worker. Each is a sum, a union, a minimum/maximum or a list of small values,
so the two paths give the same summary.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from envoy_dissector.analysis.quality import RecordFacts

STARTED_SCHEMA = {"origin": pl.String(), "thread": pl.Int64()}


@dataclass
class CaptureFacts:
    #: levels, kinds, request lines, timestamp tick, thread ids, first/last record time per origin
    records: RecordFacts = field(default_factory=RecordFacts)
    #: ``findings.record_gaps``: socket event -> read/write ready gaps, per worker in time order
    gaps: pl.Series = field(default_factory=lambda: pl.Series("gap", [], dtype=pl.Int64))
    #: (origin, thread) of threads that logged `worker entering dispatch loop`
    started: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=STARTED_SCHEMA))
    #: ``tls.handshakes`` of the whole capture
    handshakes: pl.DataFrame | None = None
    #: health-check result lines (``findings.health_checks``)
    health_checks: int = 0
    #: ``internal.work_bursts``: of the finished requests window by window, and the health checker's worker by worker
    internal_work: pl.DataFrame | None = None

    def worker_threads(self, requests: pl.DataFrame) -> pl.DataFrame:
        """``loop.worker_threads`` from the started threads and the requests."""
        served = requests.filter(~pl.col("internal") & pl.col("thread").is_not_null()).select("origin", "thread")
        return pl.concat([self.started, served.cast(STARTED_SCHEMA)]).unique()  # type: ignore[arg-type]
