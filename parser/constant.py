"""A column of one value repeated ``n`` times, made without a query; and the one value a column holds.

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


def sole_string(values: pl.Series) -> str | None:
    """The value every element of ``values`` has, as text (None: several, a null, or no elements); the ends are
    compared first, so a column of several values is usually told without a pass."""
    if values.len() == 0 or values.null_count():
        return None
    first = values[0]
    return str(first) if values[-1] == first and bool((values == first).all()) else None
