"""The rows of a frame that meet a condition, as a frame of some of its columns, filtered on the calling thread.

``DataFrame.filter`` plans a query and hands it to polars' thread pool: ~150 µs for a window step's few thousand
rows whatever it keeps, and a requests-and-phases step makes dozens. Here the condition is evaluated where the
caller runs (``select_seq``) and each kept column is filtered by it (``Series.filter``; a null is false, as in a
frame's filter): ~30 µs (bench/README.md, 2026-11-29, twenty-second session).

The frame's columns are read as Series: on a frame holding a constant column (``spill.with_constants``) that
would keep a full copy of it, so callers pass frames whose columns are their own (a window's events are,
``streaming._materialized``).
"""
from __future__ import annotations

from collections.abc import Iterable

import polars as pl


def pick(frame: pl.DataFrame, condition: pl.Expr | str, columns: Iterable[str] | None = None) -> pl.DataFrame:
    """The rows of ``frame`` where ``condition`` (an expression, or a boolean column's name) is true, with
    ``columns`` (all without), in their order."""
    names = frame.columns if columns is None else list(columns)
    mask = frame.select_seq(pl.col(condition) if isinstance(condition, str) else condition).to_series()
    if mask.len() != frame.height:  # (a condition of one value: the frame's own filter spreads it over the rows)
        return frame.select_seq(names).filter(mask.item())
    return pl.DataFrame([frame.get_column(name).filter(mask) for name in names])
