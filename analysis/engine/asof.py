"""As-of lookups between frames: "the nearest event of this kind before/after this time on this key".

Most calls look up a few dozen to a few thousand rows, where each frame-level polars operation costs a fixed
~50 µs whatever its size: the lookup builds its input from columns (no select), and filters and sorts it only
when a cheap check (null counts, ``Series.is_sorted``) says it has to. The compiled pass
(``extension.asof_positions``) gives each row the position of its match, and one select gathers the columns
taken; polars' ``join_asof`` (``_asof_by_polars``, the reference) looks them up where the pass is off, the
columns' types are not its own, or the lookup is larger than ``COMPILED_ROWS``.
"""
from __future__ import annotations

from typing import Literal

import numpy as np
import polars as pl

from envoy_dissector.analysis.engine.origins import sole_origin
from envoy_dissector.parser import extension

#: The most rows (both sides) the compiled pass looks up; polars' ``join_asof`` takes larger lookups. Below it the
#: pass is 2-4x faster (polars' fixed cost); above ~40 k rows polars is, its searches running on every core where
#: the pass binary-searches one row at a time out of time order (bench/README.md).
COMPILED_ROWS = 20_000


def asof(left: pl.DataFrame, right: pl.DataFrame, *, left_on: str, right_on: str, by: list[str],
         strategy: Literal["backward", "forward"], take: dict[str, str],
         tolerance: int | None = None) -> pl.DataFrame:
    """Add ``take`` columns (right name -> new name) from the nearest ``right`` row on the same ``by`` keys.

    Rows whose ``left_on`` is null, or with no match, get nulls. Row order of ``left`` is kept.
    """
    lookup, on = _lookup(right, left_on, right_on, by, take)
    positions = None if left.height + lookup.height > COMPILED_ROWS else extension.asof_positions(
        left.get_column(left_on), [left.get_column(b) for b in by], lookup.get_column(on),
        [lookup.get_column(b) for b in by], forward=strategy == "forward", tolerance=tolerance)
    if positions is not None:
        columns = lookup.select_seq(pl.col(name).gather(positions) for name in take.values()).get_columns()
    else:
        if "origin" in by and len(by) > 1 and left.height and right.height:
            # one origin on both sides (most windows): the other keys alone match the same rows, more cheaply
            mine, theirs = sole_origin(left), sole_origin(right)
            if mine is not None and mine == theirs:
                by = [b for b in by if b != "origin"]
        columns = _asof_by_polars(left, lookup, left_on=left_on, right_on=on, by=by, strategy=strategy, take=take,
                                  tolerance=tolerance)
    existing = [v for v in take.values() if v in left.columns]
    if existing:
        left = left.drop(existing)
    return left.hstack(columns)


def _asof_by_polars(left: pl.DataFrame, lookup: pl.DataFrame, *, left_on: str, right_on: str, by: list[str],
                    strategy: Literal["backward", "forward"], take: dict[str, str],
                    tolerance: int | None) -> list[pl.Series]:
    """The ``take`` columns (their new names) per row of ``left`` found in ``lookup`` (``_lookup``'s) by polars'
    ``join_asof``: the reference of the compiled lookup (``extension.asof_positions``)."""
    keyed, reordered = _keyed(left, left_on, by)
    found = keyed.join_asof(lookup, left_on=left_on, right_on=right_on, by=by, strategy=strategy,
                            tolerance=tolerance, check_sortedness=False)
    columns = [found.get_column(name) for name in take.values()]
    if reordered and columns:  # back to the rows of ``left`` (every row is there: none was filtered)
        rows = found.get_column("__row").to_numpy()
        back = np.empty_like(rows)
        back[rows] = np.arange(rows.size, dtype=rows.dtype)
        # (one take of the taken columns by a Series of positions: cheaper than sorting the frame, and than a
        # gather per column, which goes through an expression and converts the numpy positions each time)
        columns = pl.DataFrame(columns)[pl.Series(back)].get_columns()
    return columns


def _keyed(left: pl.DataFrame, left_on: str, by: list[str]) -> tuple[pl.DataFrame, bool]:
    """The left keys sorted on ``left_on`` (null times first: ``join_asof`` finds nothing for them), and whether
    that reordered the rows (then a ``__row`` column tells where each came from)."""
    keys = [left.get_column(left_on), *(left.get_column(b) for b in by)]
    if keys[0].is_sorted():
        return pl.DataFrame(keys), False
    row = pl.Series("__row", np.arange(left.height, dtype=np.uint32))
    return pl.DataFrame([row, *keys]).sort(left_on), True


def _lookup(right: pl.DataFrame, left_on: str, right_on: str, by: list[str],
            take: dict[str, str]) -> tuple[pl.DataFrame, str]:
    """The right rows that can match (time and keys known), sorted on ``right_on``, and the time's name in it.

    Rows of one time: the earlier line is nearer going forward, the later one going back. Ties are broken by
    line number where the frame has one, else by the frame's own order (a stable sort): never by chance.
    """
    line = next((c for c in ("line_no", "first_line_no") if c in right.columns and c != right_on), None)
    on = "__right_on" if right_on == left_on else right_on
    columns = [right.get_column(right_on).alias(on), *(right.get_column(b) for b in by),
               *(right.get_column(k).alias(v) for k, v in take.items())]
    if line:
        columns.append(right.get_column(line).alias("__line"))
    lookup = pl.DataFrame(columns)
    if any(c.null_count() for c in columns[:1 + len(by)]):
        lookup = lookup.filter(pl.col(on).is_not_null() & pl.all_horizontal(pl.col(b).is_not_null() for b in by))
    # (already in order: time ascending and, where there is one, line number ascending too, so within a time)
    if not (lookup.get_column(on).is_sorted() and (not line or lookup.get_column("__line").is_sorted())):
        lookup = lookup.sort(on, "__line") if line else lookup.sort(on, maintain_order=True)
    return (pl.DataFrame(lookup.get_columns()[:-1]) if line else lookup), on  # (without __line)
