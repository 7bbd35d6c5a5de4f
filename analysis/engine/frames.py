"""Frame operations a window step makes dozens of times on a few thousand rows, without a query where the answer
needs none. Each eager ``filter`` or ``join`` plans a query and hands it to polars' thread pool: a fixed
~150-300 µs whatever the rows (bench/README.md, 2026-11-29, twenty-second session).

``pick`` evaluates a filter's condition where the caller runs (``select_seq``) and filters each kept column by it
(``Series.filter``; a null is false, as in a frame's filter): ~30 µs. It reads the frame's columns as Series: on a
frame holding a constant column (``spill.with_constants``) that would keep a full copy of it, so callers pass
frames whose columns are their own (a window's events are, ``streaming._materialized``).

``joined`` answers a join with an empty side without a query (a dozen of a window's 26 joins have one), and a join
of small frames by the compiled pass (``extension.join_positions``: each output row's left and right row, then one
gather per side); polars' join is the reference, and takes larger frames, other joins and keys of other types.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

import polars as pl

from envoy_dissector.parser import extension


def pick(frame: pl.DataFrame, condition: pl.Expr | str, columns: Iterable[str] | None = None) -> pl.DataFrame:
    """The rows of ``frame`` where ``condition`` (an expression, or a boolean column's name) is true, with
    ``columns`` (all without), in their order."""
    names = frame.columns if columns is None else list(columns)
    mask = frame.select_seq(pl.col(condition) if isinstance(condition, str) else condition).to_series()
    if mask.len() != frame.height:  # (a condition of one value: the frame's own filter spreads it over the rows)
        return frame.select_seq(names).filter(mask.item())
    return pl.DataFrame([_one_chunk(frame.get_column(name).filter(mask)) for name in names])


def _one_chunk(column: pl.Series) -> pl.Series:
    """A filtered column of several chunks (a window's parts) made one: ``Series.filter`` keeps a chunk per chunk,
    empty ones too, and polars 1.37's ``pl.format`` over such a frame, sorted, panicked (``i < self.len()``,
    tests/analysis/test_streaming.py's health-check bursts fed in parts). The copy is of the kept rows; on 1 GB the
    run was faster with it and peaked ~40 MiB lower (bench/README.md)."""
    return column.rechunk() if column.n_chunks() > 1 else column


#: The most rows (both sides) a join by the compiled pass has; polars joins larger frames. Where polars' fixed cost
#: is most of a join (a window step's joins of a few dozen rows: 0.2-0.5 ms by polars) the pass is faster; at 10 k
#: rows a side they are even on an integer key and polars is twice as fast on a text and an integer key.
COMPILED_ROWS = 4_000

JoinHow = Literal["left", "inner", "semi", "anti"]


def joined(left: pl.DataFrame, right: pl.DataFrame, on: str | Sequence[str], how: JoinHow = "inner",
           **options: object) -> pl.DataFrame:
    """``left.join(right, on=on, how=how, **options)``; where a side is empty the answer is made without a query:
    a left join adds the right side's other columns as nulls, an inner or semi join keeps no row, an anti join every
    row (or none of an empty left). The columns, their order and types are the join's; rows keep the left's order, as
    the join's ``maintain_order="left"`` does (the order a left join's result has in polars' eager engine)."""
    keys = [on] if isinstance(on, str) else list(on)
    added = [c for c in right.columns if c not in keys]
    plain = set(options) <= {"maintain_order", "nulls_equal"} and not set(added) & set(left.columns)
    if plain and (right.height == 0 or left.height == 0):
        if how == "left":
            return left.with_columns_seq(pl.lit(None, dtype=right.schema[c]).alias(c) for c in added)
        if how == "inner":
            return pl.DataFrame(schema={**left.schema, **{c: right.schema[c] for c in added}})
        if how == "semi":
            return left.head(0)
        if how == "anti" and right.height == 0:
            return left
    order = options.get("maintain_order")
    if plain and not options.get("nulls_equal") and order in (None, "none", "left") and (
            left.height + right.height <= COMPILED_ROWS):
        found = extension.join_positions([left.get_column(k) for k in keys], [right.get_column(k) for k in keys], how)
        if found is not None:
            left_rows, right_rows = found
            out = left if left_rows is None else left[left_rows]
            if right_rows is None or not added:
                return out
            return out.hstack(right.select_seq(pl.col(c).gather(right_rows) for c in added).get_columns())
    return left.join(right, on=on, how=how, **options)  # type: ignore[arg-type]
