"""Distinct values of a text column and, for every row, which one it holds: the fast path's "compute once
per distinct text, apply to all" step, without a join over the whole chunk.

A cast to a categorical with its own (fresh, unshared) category table numbers the distinct
values 0, 1, 2... in order of first appearance, with exact string equality; the compiled extension does the same
in one hashing pass (FxHash over the bytes). ``extension.distinct`` chooses between the two; this module holds the
Python side only.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl


@dataclass(frozen=True)
class Distinct:
    """``first``: row of each distinct value's first occurrence; ``index``: per row, its position in ``first``."""

    first: pl.Series
    index: pl.Series

    def spread(self, per_distinct: pl.DataFrame) -> pl.DataFrame:
        """Rows of ``per_distinct`` (one per distinct value, in ``first`` order) repeated for every row."""
        return per_distinct[self.index]


def distinct_by_categories(values: pl.Series) -> Distinct:
    """``extension.distinct`` by a categorical cast (the reference)."""
    if values.dtype == pl.Binary:
        values = values.cast(pl.String)
    codes = values.cast(pl.Categorical(pl.Categories.random())).to_physical()
    if codes.null_count():
        codes = codes.fill_null(codes.n_unique() - 1)  # the next number (codes count from 0; null is one value)
        first = codes.is_first_distinct().arg_true()
        order = np.argsort(codes.gather(first).to_numpy(), kind="stable")  # null group's number is the last
        first = first.gather(pl.Series(order))
        return Distinct(first, codes)
    return Distinct(codes.is_first_distinct().arg_true(), codes)


def distinct_rows(frame: pl.DataFrame) -> Distinct:
    """Group rows by all of ``frame``'s columns (nulls equal), groups in order of first appearance."""
    groups = frame.with_row_index("row__").group_by(frame.columns, maintain_order=True).agg(pl.col("row__"))["row__"]
    index = np.empty(frame.height, dtype=np.uint32)
    index[groups.explode().to_numpy()] = np.repeat(np.arange(groups.len(), dtype=np.uint32),
                                                     groups.list.len().to_numpy())
    return Distinct(groups.list.first(), pl.Series(index))
