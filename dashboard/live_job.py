"""``dashboard --follow``: a followed log (a file's or a pod's) shown to every browser session as an analysis that
keeps running.

A ``LiveJob`` is a shared job (no owner) that never finishes while the server runs: the streaming analysis'
finished requests are added to it as they come (``add_finished``), and every browser shows its provisional
overview (requests so far, percentiles per phase, phase shares, latency over time), redrawn as it grows.
It keeps the newest ``max_rows`` requests, so a server following a log for days holds a bounded frame.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from envoy_dissector.dashboard.datasets import Job, Registry, new_id

#: Requests a live job keeps at most (the oldest dropped first).
MAX_LIVE_ROWS = 200_000


@dataclass
class LiveJob(Job):
    """A shared job whose finished requests grow for as long as the log is followed."""

    max_rows: int = MAX_LIVE_ROWS
    #: client requests finished since the follow began, as the overview counts them (not Envoy's own or admin
    #: requests; the frame keeps the newest ``max_rows`` requests of either kind)
    seen_rows: int = 0
    #: lines of the log read so far (the follow's parser: ``cli/follow_dashboard.py``)
    count_lines: Callable[[], int] | None = None

    def add_finished(self, requests: pl.DataFrame, phases: pl.DataFrame) -> None:
        super().add_finished(requests, phases)
        with self._partial_lock:
            internal = int(requests["internal"].sum()) if "internal" in requests.columns else 0
            self.seen_rows += requests.height - internal
            if self._partial_rows > self.max_rows:
                kept = pl.concat(self._partial).tail(self.max_rows)
                self._partial, self._partial_rows = [kept], kept.height

    @property
    def lines_read(self) -> int:
        return self.count_lines() if self.count_lines is not None else 0

    @property
    def fraction(self) -> float:
        return 0.0  # (a followed log has no end to measure progress against)

    def describe(self) -> str:
        return f"{self.name}: following the log, {self.seen_rows:,} requests so far"


def start_live_job(registry: Registry, name: str, path: Path | None = None) -> LiveJob:
    """Register a shared live job for the log at ``path``, or a pod's (no file); its analysis is the caller's
    (``add_finished``)."""
    # (the registry never runs a live job, so a pod's job has a path that is never read)
    job = LiveJob(id=new_id(), owner=None, name=name, path=path or Path(os.devnull), total_bytes=None, delete=False,
                  state="running", stage="parsing")
    registry.add_job(job)
    return job
