"""first_window_events: an analysis' first requests are out after fewer lines (the dashboard's provisional
overview), and the result is the same as with the default windows."""
from __future__ import annotations

import polars as pl
import pytest

from envoy_dissector.analysis.capture import dissect

FIXTURES = ["fixtures/istio-thread/workers/envoy.log.gz", "fixtures/envoy-us/workers/envoy.log.gz"]


def _run(path: str, **kw: int) -> tuple[int | None, pl.DataFrame, pl.DataFrame]:
    """Bytes read when the first requests were finished, and the requests and phases."""
    read, first = [0], []

    def progress(n: int) -> None:
        read[0] += n

    def finished(requests: pl.DataFrame, _phases: pl.DataFrame) -> None:
        if requests.height and not first:
            first.append(read[0])

    cap = dissect(path, block_bytes=1 << 15, progress=progress, on_finished=finished, **kw)
    requests = cap.requests.drop("request_uid").sort("origin", "thread", "downstream_conn_id", "stream_id",
                                                     "first_line_no", nulls_last=True)
    phases = cap.phases.sort(pl.all(), nulls_last=True)
    return (first[0] if first else None), requests, phases


@pytest.mark.parametrize("path", FIXTURES)
def test_a_small_first_window_finishes_requests_sooner_with_the_same_result(path):
    default_first, requests, phases = _run(path)
    early_first, early_requests, early_phases = _run(path, first_window_events=200)
    assert default_first is not None and early_first is not None
    assert early_first < default_first
    assert early_requests.equals(requests) and early_phases.equals(phases)
