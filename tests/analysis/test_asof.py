"""analysis/engine/asof.py against a row-by-row reference: sorted and unsorted inputs (the shortcuts skip the sort
only when the order is already right), null times and keys, ties in time with and without line numbers,
tolerance, and one origin on both sides."""
from __future__ import annotations

import random
from typing import Literal

import polars as pl
import pytest

from envoy_dissector.analysis.engine.asof import asof


def _nearest(left: pl.DataFrame, right: pl.DataFrame, *, left_on: str, right_on: str, by: list[str],
             strategy: Literal["backward", "forward"], take: str, line: str | None,
             tolerance: int | None) -> list[object]:
    """The reference: for each left row, scan every right row."""
    rows = list(right.iter_rows(named=True))
    out: list[object] = []
    for row in left.iter_rows(named=True):
        t = row[left_on]
        best: tuple[tuple[int, int], dict[str, object]] | None = None
        for position, r in enumerate(rows):
            if t is None or r[right_on] is None or any(r[b] is None or r[b] != row[b] for b in by):
                continue
            gap = t - r[right_on] if strategy == "backward" else r[right_on] - t
            if gap < 0 or (tolerance is not None and gap > tolerance):
                continue
            order = r[line] if line else position
            # nearest time first; among one time the later line going back, the earlier going forward
            rank = (gap, -order if strategy == "backward" else order)
            if best is None or rank < best[0]:
                best = (rank, r)
        out.append(None if best is None else best[1][take])
    return out


def _frames(seed: int, *, left_sorted: bool, right_sorted: bool, with_line: bool,
            one_origin: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
    rng = random.Random(seed)
    origins = ["a"] if one_origin else ["a", "b"]

    def maybe(value: int, share: float = 0.1) -> int | None:
        return None if rng.random() < share else value

    n_left, n_right = rng.randint(0, 30), rng.randint(0, 40)
    left_t = [maybe(rng.randint(0, 60)) for _ in range(n_left)]
    if left_sorted:  # as a sorted frame has it: nulls first
        left_t = [None] * left_t.count(None) + sorted(t for t in left_t if t is not None)
    left = pl.DataFrame({"origin": [rng.choice(origins) for _ in range(n_left)],
                         "conn": [maybe(rng.randint(1, 3)) for _ in range(n_left)], "t": left_t,
                         "payload": list(range(n_left))},
                        schema={"origin": pl.String, "conn": pl.Int64, "t": pl.Int64, "payload": pl.Int64})
    # few distinct times: many ties
    right_t = [maybe(rng.randint(0, 20) * 3) for _ in range(n_right)]
    if right_sorted:
        right_t = sorted(t for t in right_t if t is not None) + [None] * right_t.count(None)
    columns: dict[str, list[object]] = {
        "origin": [rng.choice(origins) for _ in range(n_right)],
        "conn": [maybe(rng.randint(1, 3)) for _ in range(n_right)], "ts": right_t,
        "v": [f"v{i}" for i in range(n_right)]}
    schema: dict[str, pl.DataType] = {"origin": pl.String(), "conn": pl.Int64(), "ts": pl.Int64(), "v": pl.String()}
    if with_line:
        lines = rng.sample(range(1000), n_right)
        columns["line_no"] = sorted(lines) if right_sorted else lines
        schema["line_no"] = pl.Int64()
    return left, pl.DataFrame(columns, schema=schema)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("strategy", ["backward", "forward"])
@pytest.mark.parametrize(("left_sorted", "right_sorted"), [(False, False), (True, True), (True, False), (False, True)])
def test_asof_is_the_nearest_row(seed: int, strategy: Literal["backward", "forward"], left_sorted: bool,
                                 right_sorted: bool) -> None:
    rng = random.Random(seed)
    with_line, one_origin = rng.random() < 0.6, rng.random() < 0.5
    tolerance = rng.choice([None, 0, 4, 10])
    left, right = _frames(seed, left_sorted=left_sorted, right_sorted=right_sorted, with_line=with_line,
                          one_origin=one_origin)
    by = ["origin", "conn"]
    got = asof(left, right, left_on="t", right_on="ts", by=by, strategy=strategy, take={"v": "found"},
               tolerance=tolerance)
    assert got.columns == [*left.columns, "found"]
    assert got.drop("found").equals(left)  # rows and their order kept
    want = _nearest(left, right, left_on="t", right_on="ts", by=by, strategy=strategy, take="v",
                    line="line_no" if with_line else None, tolerance=tolerance)
    assert got["found"].to_list() == want


@pytest.mark.parametrize("strategy", ["backward", "forward"])
def test_asof_taking_the_time_under_the_left_name(strategy: Literal["backward", "forward"]) -> None:
    left, right = _frames(3, left_sorted=False, right_sorted=False, with_line=True, one_origin=True)
    right = right.rename({"ts": "t"})
    got = asof(left, right, left_on="t", right_on="t", by=["origin", "conn"], strategy=strategy,
               take={"t": "seen", "v": "found"})
    want = _nearest(left, right, left_on="t", right_on="t", by=["origin", "conn"], strategy=strategy, take="v",
                    line="line_no", tolerance=None)
    assert got.columns == [*left.columns, "seen", "found"]
    assert got["found"].to_list() == want
