"""Saturation's severity follows harm (docs/findings.md): critical only when most of a worker's requests
(more than half) waited ≥ 1 ms for it and waiting was at least half of the median request's time in the proxy."""
from __future__ import annotations

import polars as pl
import pytest
from truth import Truth, discover, fixture_ids

from envoy_dissector.analysis.findings import saturated_workers
from envoy_dissector.analysis.stages.loop import WAITED_US

ALL = [t for t in discover() if t.origin_prefix is None]


def _requests(waits_us: list[int], total_us: int) -> pl.DataFrame:
    n = len(waits_us)
    return pl.DataFrame({"complete": [True] * n, "internal": [False] * n, "origin": ["o"] * n, "thread": [1] * n,
                         "total_us": [total_us] * n, "queue_before_read_us": [0] * n, "loop_queue_us": waits_us})


WORKER = pl.DataFrame({"origin": ["o"], "thread": [1], "utilisation": [0.9], "connections": [8]})


@pytest.mark.parametrize("waited, n, wait_us, severity", [
    (5, 10, 4_000, "warning"),    # exactly half waited: not most
    (6, 10, 4_000, "critical"),   # most waited, and waiting is most of the median request's time
    (6, 10, 1_500, "warning"),    # most waited, but only 1.5 of 5 ms: a cost, not the request's time lost
    (3, 10, 4_000, "warning"),    # 30 %: some requests
    (2, 10, 4_000, None),         # below the 25 % (and 3 requests) floor
])
def test_severity_at_the_thresholds(waited: int, n: int, wait_us: int, severity: str | None) -> None:
    waits = [wait_us] * waited + [0] * (n - waited)
    found = saturated_workers(WORKER, _requests(waits, total_us=5_000))
    assert [f.severity for f in found] == ([severity] if severity else [])


@pytest.mark.parametrize("t", ALL, ids=fixture_ids(ALL))
def test_critical_means_most_requests_suffered(t: Truth) -> None:
    """On every fixture: a saturation finding is critical exactly when, from the requests themselves, more than
    half of the worker's complete requests waited ≥ 1 ms and the median waiting share is at least one half."""
    cap = t.capture()
    r = cap.requests.filter(pl.col("complete") & ~pl.col("internal"))
    for f in cap.findings():
        if not f.id.startswith("saturated-worker-"):
            continue
        mine = r.filter(pl.col("thread") == int(f.id.removeprefix("saturated-worker-")))
        wait = mine["queue_before_read_us"].fill_null(0) + mine["loop_queue_us"].fill_null(0)
        most = (wait >= WAITED_US).sum() * 2 > mine.height
        share = (wait / (mine["total_us"].fill_null(0) + mine["queue_before_read_us"].fill_null(0)).clip(1)).median()
        assert (f.severity == "critical") == (most and share >= 0.5), (f.severity, most, share)
