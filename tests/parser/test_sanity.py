"""Time going backwards is counted the same however the records are cut into chunks (parser/sanity.py)."""
from __future__ import annotations

import random

import polars as pl
import pytest

from envoy_dissector.parser.sanity import BACKWARD_STEP_US, UNTHREADED_STEP_US, Sanity


def _records(seed: int, origins: tuple[str, ...] = ("a", "b")) -> pl.DataFrame:
    """Two origins (or ``origins``), threads 1, 2 and none (null), time mostly forward with steps back small and
    large."""
    rng = random.Random(seed)
    rows = []
    clock: dict[tuple[str, int | None], int] = {}
    for line in range(600):
        key = (rng.choice(origins), rng.choice([1, 2, None]))
        step = rng.choice([5, 40, 300, -3, -800, -5_000, -2_000_000, 0])
        clock[key] = clock.get(key, 1_000_000_000) + step
        rows.append({"origin": key[0], "thread": key[1], "ts_us": None if line % 97 == 0 else clock[key],
                     "conn_id": 1, "message": "x"})
    return pl.DataFrame(rows, schema={"origin": pl.String, "thread": pl.Int64, "ts_us": pl.Int64,
                                      "conn_id": pl.Int64, "message": pl.String})


def _reference(records: pl.DataFrame) -> tuple[int, int, int]:
    """backward_steps, big_backward_steps, largest_backward_us over the whole input, line by line."""
    last: dict[tuple[str, int | None], int] = {}
    back = big = largest = 0
    for origin, thread, ts in records.select("origin", "thread", "ts_us").iter_rows():
        if ts is None:
            continue
        prev = last.get((origin, thread))
        last[(origin, thread)] = ts
        if prev is None or ts >= prev:
            continue
        back += thread is not None
        big += ts - prev < -(BACKWARD_STEP_US if thread is not None else UNTHREADED_STEP_US)
        largest = max(largest, prev - ts)
    return back, big, largest


@pytest.mark.parametrize("origins", [("a", "b"), ("a",)], ids=["two origins", "one origin"])
@pytest.mark.parametrize("seed", range(6))
def test_backward_steps_do_not_depend_on_the_chunks(seed, origins):
    """A chunk of one origin is cut by thread in numpy, of several by a group_by: the counts are the same."""
    records = _records(seed, origins)
    expected = _reference(records)
    assert expected[0] and expected[1]  # the input has both kinds of step back
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, records.height), 7))
    sanity = Sanity()
    for start, end in zip([0, *cuts], [*cuts, records.height]):
        sanity.check(records.slice(start, end - start))
    assert (sanity.backward_steps, sanity.big_backward_steps, sanity.largest_backward_us) == expected
    assert sanity.no_time == records["ts_us"].null_count()
