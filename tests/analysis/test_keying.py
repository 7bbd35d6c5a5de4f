"""Cheaper keys give the same groups: analysis/engine/origins.py (no ``origin`` key when a frame holds one) and the
streaming intake's split of a chunk by thread."""
from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from envoy_dissector.analysis.engine.asof import asof
from envoy_dissector.analysis.engine.origins import group_per_origin, sole_origin
from envoy_dissector.analysis.engine.streaming import _per_thread


def _lines(origins: list[str | None]) -> pl.DataFrame:
    n = len(origins)
    return pl.DataFrame({"origin": origins, "conn_id": [i % 3 for i in range(n)],
                         "ts_us": [100 * i for i in range(n)]}, schema_overrides={"origin": pl.String})


@pytest.mark.parametrize(("origins", "sole"), [
    (["a", "a", "a"], "a"), (["a", "b", "a"], None), (["a", "a", "b"], None), (["a", None, "a"], None), ([], None)])
def test_sole_origin(origins: list[str | None], sole: str | None) -> None:
    assert sole_origin(_lines(origins)) == sole


@pytest.mark.parametrize("origins", [["a"] * 7, ["a", "b", "a", "b", "b", "a", "a"]])
def test_group_per_origin_is_group_by_origin(origins: list[str]) -> None:
    lines = _lines(origins)
    got = group_per_origin(lines, ["conn_id"], {"first_ts": pl.col("ts_us").min(), "n": pl.len()})
    want = lines.group_by("origin", "conn_id").agg(first_ts=pl.col("ts_us").min(), n=pl.len()).select(
        "conn_id", "origin", "first_ts", "n")
    assert got.columns == want.columns
    assert_frame_equal(got.sort("origin", "conn_id"), want.sort("origin", "conn_id"))


@pytest.mark.parametrize(("left_origin", "right_origin", "found"), [("a", "a", True), ("a", "b", False)])
def test_asof_matches_only_within_an_origin(left_origin: str, right_origin: str, found: bool) -> None:
    left = pl.DataFrame({"origin": [left_origin] * 2, "conn_id": [1, 2], "at": [150, 250]})
    right = _lines([right_origin] * 6)
    got = asof(left, right, left_on="at", right_on="ts_us", by=["origin", "conn_id"], strategy="backward",
               take={"ts_us": "seen"})
    assert got["seen"].to_list() == ([100, 200] if found else [None, None])


@pytest.mark.parametrize("threads", [[7, 7, 7], [7, 9, 7, 9, 9], [7, 9, 8, 7, 8, 9]])
def test_per_thread_is_partition_by_thread(threads: list[int]) -> None:
    lines = pl.DataFrame({"thread": threads, "line_no": range(len(threads))})
    got = _per_thread(lines)
    want = lines.partition_by("thread", as_dict=True, maintain_order=True)
    assert list(got) == list(want)
    for key, part in want.items():
        assert_frame_equal(got[key], part)
