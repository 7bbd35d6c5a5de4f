"""Capture-wide facts every capture carries (``Capture.facts``): what its summary reads besides its frames.

The whole-file path (``dissect``) reads them from its events at once (``facts_of``); the streaming path
(``streaming.py``) gathers them chunk by chunk and worker by worker. Each is a sum, a union, a minimum/maximum or
a list of small values, so the two paths give the same summary.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from envoy_dissector.analysis.findings import health_checks, record_gaps
from envoy_dissector.analysis.quality import RecordFacts
from envoy_dissector.analysis.stages.internal import BURSTS_SCHEMA, work_bursts
from envoy_dissector.analysis.stages.loop import worker_threads
from envoy_dissector.analysis.stages.tls import counts_of, handshakes

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

    def handshake_counts(self) -> dict[str, dict[str, int]]:
        """``tls.counts``: completed handshakes per origin and direction."""
        return counts_of(self.handshakes) if self.handshakes is not None else {}

    def work_bursts(self) -> pl.DataFrame:
        """``internal_work``, or no burst when none was gathered."""
        return self.internal_work if self.internal_work is not None else pl.DataFrame(schema=BURSTS_SCHEMA)

    def worker_threads(self, requests: pl.DataFrame) -> pl.DataFrame:
        """``loop.worker_threads`` from the started threads and the requests."""
        served = requests.filter(~pl.col("internal") & pl.col("thread").is_not_null()).select("origin", "thread")
        return pl.concat([self.started, served.cast(STARTED_SCHEMA)]).unique()  # type: ignore[arg-type]


def facts_of(events: pl.DataFrame, requests: pl.DataFrame) -> CaptureFacts:
    """The facts of a capture analysed whole, read from its analysed ``events`` (every record, the timeless ones
    included) and its ``requests``."""
    records = RecordFacts()
    records.add(events)
    spans = events.group_by("origin").agg(low=pl.col("ts_us").min(), high=pl.col("ts_us").max())
    for origin, low, high in spans.iter_rows():
        if low is not None:
            records.spans[origin] = (low, high)
    started = worker_threads(events, requests.head(0)).select("origin", "thread").cast(STARTED_SCHEMA)  # type: ignore[arg-type]
    bursts = work_bursts(requests.with_columns(conn_id=pl.col("downstream_conn_id")), events)
    return CaptureFacts(records=records, gaps=record_gaps(events), started=started, handshakes=handshakes(events),
                        health_checks=health_checks(events), internal_work=bursts)
