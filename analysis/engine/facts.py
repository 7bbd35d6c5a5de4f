"""Capture-wide facts every capture carries (``Capture.facts``): what its summary reads besides its frames.

The engine (``streaming.py``) gathers them chunk by chunk and worker by worker, so that no events frame is kept for
them. Each is a sum, a union, a minimum/maximum or a list of small values: however the input is cut, the summary
is the same (``tests/analysis/test_facts.py`` proves they say what the capture's events say).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from envoy_dissector.analysis.gap_counts import GapCounts
from envoy_dissector.analysis.quality import RecordFacts
from envoy_dissector.analysis.stages.internal import BURSTS_SCHEMA
from envoy_dissector.analysis.stages.tls import counts_of

STARTED_SCHEMA = {"origin": pl.String(), "thread": pl.Int64()}


@dataclass
class CaptureFacts:
    #: levels, kinds, request lines, timestamp tick, thread ids, first/last record time per origin
    records: RecordFacts = field(default_factory=RecordFacts)
    #: ``findings.record_gaps``: socket event -> read/write ready gaps, as a count per gap value (``gap_counts.py``)
    gaps: GapCounts = field(default_factory=GapCounts)
    #: (origin, thread) of threads that logged `worker entering dispatch loop`
    started: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=STARTED_SCHEMA))
    #: ``tls.handshakes`` of the whole capture
    handshakes: pl.DataFrame | None = None
    #: health-check result lines (``findings.health_checks``)
    health_checks: int = 0
    #: ``internal.work_bursts``: of the finished requests window by window, and the health checker's worker by worker
    internal_work: pl.DataFrame | None = None

    def handshake_counts(self) -> dict[str, dict[str, int]]:
        """``tls.counts``: completed handshakes per origin and direction."""
        return counts_of(self.handshakes) if self.handshakes is not None else {}

    def work_bursts(self) -> pl.DataFrame:
        """``internal_work``, or no burst when none was gathered."""
        return self.internal_work if self.internal_work is not None else pl.DataFrame(schema=BURSTS_SCHEMA)

    def worker_threads(self, requests: pl.DataFrame) -> pl.DataFrame:
        """``loop.worker_threads`` from the started threads and the requests."""
        served = requests.filter(~pl.col("internal") & pl.col("thread").is_not_null()).select_seq("origin", "thread")
        return pl.concat([self.started, served.cast(STARTED_SCHEMA)]).unique()  # type: ignore[arg-type]

