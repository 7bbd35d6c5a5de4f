"""The requests' CPU worked out a batch of whole origins at a time gives the rows it gives for all at once.

``request_cpu_in_batches`` bounds what the cost holds at the report (the slices' owners and medians, a dozen
columns a slice) by batching origins: every figure of ``request_cpu`` is per origin, so each origin's rows, in
their order, must be the same. Real captures of several fixtures analysed together (an origin each), batches of
one origin, of one or two, and all at once.
"""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from envoy_dissector.analysis import dissect
from envoy_dissector.analysis.stages.cost import (
    origin_batches,
    record_costs_from_gaps,
    request_cpu,
    request_cpu_in_batches,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CAPTURES = [FIXTURES / "istio-thread" / name / "envoy.log" for name in ("workers", "keepalive", "http2", "lua-cpu")]


@pytest.fixture(scope="module")
def together() -> tuple[pl.DataFrame, pl.DataFrame, object]:
    found = [p if p.exists() else p.with_suffix(".log.gz") for p in CAPTURES]
    capture = dissect([str(p) for p in found])
    requests = capture.requests
    assert requests["origin"].n_unique() == len(CAPTURES)
    return requests, capture.loop, record_costs_from_gaps(capture.facts.gaps)


def test_batches_hold_whole_origins_in_order() -> None:
    loop = pl.DataFrame({"origin": ["b", "a", "b", "c", "c", "c"]})
    requests = pl.DataFrame({"origin": ["d", "a", "b"]})  # (d: requests, no slice)
    assert origin_batches(requests, loop, most=3) == [["a", "b"], ["c", "d"]]
    assert origin_batches(requests, loop, most=2) == [["a"], ["b"], ["c"], ["d"]]
    assert origin_batches(requests, loop, most=100) == [["a", "b", "c", "d"]]


@pytest.mark.parametrize("most", [1, 400, 10**9])
def test_each_origins_rows_are_the_same(together: tuple[pl.DataFrame, pl.DataFrame, object], most: int) -> None:
    requests, loop, costs = together
    whole = request_cpu(requests, loop, costs)  # type: ignore[arg-type]
    batched = request_cpu_in_batches(requests, loop, costs, most=most)  # type: ignore[arg-type]
    batches = len(origin_batches(requests, loop, most))
    assert batches == {1: len(CAPTURES), 400: 3, 10**9: 1}[most]  # (the fixtures hold 152-345 slices each)
    assert whole.height == batched.height > 0
    for origin in whole["origin"].unique().to_list():
        mine = pl.col("origin") == origin
        assert_frame_equal(batched.filter(mine), whole.filter(mine), check_exact=True)
