"""``engine/frames.py``: ``pick`` and ``joined`` give what polars' own filter and join give (rows, columns, order,
types), on frames with nulls in the condition, empty sides and a condition of one value."""
from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from envoy_dissector.analysis.engine.frames import joined, pick

FRAME = pl.DataFrame({"k": [1, 2, None, 4, 2], "s": ["a", None, "c", "d", "e"], "b": [True, None, False, True, True]})
OTHER = pl.DataFrame({"k": [2, 4, 5], "v": ["two", "four", "five"], "n": [20, 40, 50]})


@pytest.mark.parametrize("condition", [pl.col("k") > 1, pl.col("b"), "b", pl.col("s").is_null(), pl.lit(True),
                                       pl.lit(False), pl.col("k").is_in([2, 4]) & pl.col("b")])
def test_pick_is_the_frames_own_filter(condition: pl.Expr | str) -> None:
    assert_frame_equal(pick(FRAME, condition), FRAME.filter(condition))
    assert_frame_equal(pick(FRAME, condition, ["s", "k"]), FRAME.filter(condition).select("s", "k"))
    assert_frame_equal(pick(FRAME.head(0), condition), FRAME.head(0).filter(condition))


def test_pick_of_a_frame_in_parts_gives_one_chunk_a_column() -> None:
    parts = pl.concat([FRAME, FRAME, FRAME], rechunk=False)
    picked = pick(parts, pl.col("k") == 4)
    assert_frame_equal(picked, parts.filter(pl.col("k") == 4))
    assert [picked[c].n_chunks() for c in picked.columns] == [1, 1, 1]


@pytest.mark.parametrize("how", ["left", "inner", "semi", "anti"])
@pytest.mark.parametrize("sides", ["both", "right empty", "left empty", "both empty"])
def test_joined_is_the_join(how: str, sides: str) -> None:
    left = FRAME.head(0) if sides in ("left empty", "both empty") else FRAME
    right = OTHER.head(0) if sides in ("right empty", "both empty") else OTHER
    expected = left.join(right, on="k", how=how, maintain_order="left")  # type: ignore[arg-type]
    assert_frame_equal(joined(left, right, "k", how, maintain_order="left"), expected)  # type: ignore[arg-type]
    assert_frame_equal(joined(left, right, ["k"], how), expected)  # type: ignore[arg-type]


def test_a_join_whose_columns_clash_is_left_to_polars() -> None:
    right = OTHER.head(0).rename({"v": "s"})
    assert_frame_equal(joined(FRAME, right, "k", "left"), FRAME.join(right, on="k", how="left"))
    assert "s_right" in joined(FRAME, right, "k", "left").columns
