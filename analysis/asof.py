"""As-of lookups between frames: "the nearest event of this kind before/after this time on this key"."""
from __future__ import annotations

from typing import Literal

import polars as pl


def asof(left: pl.DataFrame, right: pl.DataFrame, *, left_on: str, right_on: str, by: list[str],
         strategy: Literal["backward", "forward"], take: dict[str, str],
         tolerance: int | None = None) -> pl.DataFrame:
    """Add ``take`` columns (right name -> new name) from the nearest ``right`` row on the same ``by`` keys.

    Rows whose ``left_on`` is null, or with no match, get nulls. Row order of ``left`` is kept.
    """
    left = left.with_row_index("__row")
    keyed = left.filter(pl.col(left_on).is_not_null()).select("__row", left_on, *by).sort(left_on)
    right = (right.filter(pl.col(right_on).is_not_null() & pl.all_horizontal(pl.col(b).is_not_null() for b in by))
             .select(right_on, *by, *[pl.col(k).alias(v) for k, v in take.items()]).sort(right_on))
    if right_on == left_on:
        right = right.rename({right_on: "__right_on"})
        right_on = "__right_on"
    found = keyed.join_asof(right, left_on=left_on, right_on=right_on, by=by, strategy=strategy,
                            tolerance=tolerance, check_sortedness=False)
    found = found.select("__row", *take.values())
    existing = [v for v in take.values() if v in left.columns]
    if existing:
        left = left.drop(existing)
    return left.join(found, on="__row", how="left").sort("__row").drop("__row")
