"""A column of one value repeated ``n`` times, made without a query.

``pl.repeat(value, n, eager=True)`` and ``Series.clear(n)`` each run a polars query: ~70-100 µs of fixed cost,
however short the column. A block's parse made ~15 such columns (a field no record of the block has, the
scatter targets of the header columns), which small blocks pay at every block (bench/README.md).
"""
from __future__ import annotations

from typing import Any

import polars as pl


def constant(value: Any, n: int, dtype: pl.DataType | type[pl.DataType], name: str = "") -> pl.Series:
    """``pl.repeat(value, n, dtype=dtype, eager=True).alias(name)``, one chunk."""
    return pl.Series(name, [value], dtype=dtype).new_from_index(0, n)
