"""As-of lookups between frames: "the nearest event of this kind before/after this time on this key"."""
from __future__ import annotations

from typing import Literal

import polars as pl

from envoy_dissector.analysis.engine.origins import sole_origin


def asof(left: pl.DataFrame, right: pl.DataFrame, *, left_on: str, right_on: str, by: list[str],
         strategy: Literal["backward", "forward"], take: dict[str, str],
         tolerance: int | None = None) -> pl.DataFrame:
    """Add ``take`` columns (right name -> new name) from the nearest ``right`` row on the same ``by`` keys.

    Rows whose ``left_on`` is null, or with no match, get nulls. Row order of ``left`` is kept.
    """
    if "origin" in by and len(by) > 1 and left.height and right.height:
        # one origin on both sides (most windows): the other keys alone match the same rows, more cheaply
        mine, theirs = sole_origin(left), sole_origin(right)
        if mine is not None and mine == theirs:
            by = [b for b in by if b != "origin"]
    row = pl.int_range(pl.len(), dtype=pl.UInt32).alias("__row")
    # Select before filtering: a filter copies every column it keeps.
    keyed = left.select(row, left_on, *by).filter(pl.col(left_on).is_not_null()).sort(left_on)
    # Rows of one time: the earlier line is nearer going forward, the later one going back. Ties are broken by
    # line number where the frame has one, else by the frame's own order (a stable sort): never by chance.
    line = next((c for c in ("line_no", "first_line_no") if c in right.columns and c != right_on), None)
    right = (right.select(right_on, *by, *[pl.col(k).alias(v) for k, v in take.items()],
                          *([pl.col(line).alias("__line")] if line else []))
             .filter(pl.col(right_on).is_not_null() & pl.all_horizontal(pl.col(b).is_not_null() for b in by)))
    right = right.sort(right_on, "__line").drop("__line") if line else right.sort(right_on, maintain_order=True)
    if right_on == left_on:
        right = right.rename({right_on: "__right_on"})
        right_on = "__right_on"
    found = keyed.join_asof(right, left_on=left_on, right_on=right_on, by=by, strategy=strategy,
                            tolerance=tolerance, check_sortedness=False)
    # Put the found values back at their rows (a scatter, no join).
    rows = found["__row"]
    columns = []
    for name in take.values():
        values = found[name]
        full = pl.select(pl.repeat(None, left.height, dtype=values.dtype).alias(name)).to_series()
        columns.append(full.scatter(rows, values) if rows.len() else full)
    existing = [v for v in take.values() if v in left.columns]
    if existing:
        left = left.drop(existing)
    return left.with_columns(columns)
