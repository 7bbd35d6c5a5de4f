"""Finished frames kept in memory up to a budget, then written to parquet parts in a private temporary
directory, and read back once at the end (``StreamingAnalysis`` keeps its finished requests, phases and loop
slices here, so memory stays bounded by the open working set and not by the size of the capture).

Parquet parts are compact (the finished output of a 5 GB capture is ~80 MB on disk) and read back with fresh,
contiguous buffers instead of thousands of small batches. Small captures never touch the disk.

A column that holds one value on every row (only nulls: a field the capture's level never logs; one origin) comes
back as a constant column, one value that polars does not materialise (``constant_columns``, ``with_constants``):
a one-line request sets 43 of its 80 columns, and a null integer costs 8 bytes a row, a null text 16.

A column that holds the same values as an earlier one shares that column's buffer (``same_values_as``): a
one-line request's 14 time columns (its first and last line, its start, the ten boundaries) are one timestamp,
its connection id is its line number; 18 columns that vary are 4 buffers (≈ 200 → ≈ 85 bytes a request).
"""
from __future__ import annotations

import shutil
import tempfile
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

#: Bytes (polars' estimate) held in memory before every held frame is written out.
MEMORY_BUDGET = 128 * 1024 * 1024


@dataclass
class _Kind:
    schema: dict[str, pl.DataType]
    held: list[pl.DataFrame] = field(default_factory=list)
    parts: list[Path] = field(default_factory=list)
    rows: int = 0


class Spill:
    """Frames of a few declared kinds, appended in order; ``take(kind)`` gives them all back as one frame."""

    def __init__(self, schemas: dict[str, dict[str, pl.DataType]], *, budget: int = MEMORY_BUDGET,
                 directory: str | Path | None = None) -> None:
        self._kinds = {name: _Kind(schema) for name, schema in schemas.items()}
        self._budget = budget
        self._parent = directory
        self._dir: Path | None = None
        self._held_bytes = 0
        self._cleanup: weakref.finalize | None = None
        self._holding = False

    def add(self, kind: str, frame: pl.DataFrame) -> None:
        """Append ``frame`` (cast to the kind's schema) to ``kind``."""
        if frame.height == 0:
            return
        store = self._kinds[kind]
        frame = frame.select_seq(pl.col(c).cast(t) for c, t in store.schema.items())
        store.held.append(frame)
        store.rows += frame.height
        self._held_bytes += int(frame.estimated_size())
        if self._held_bytes > self._budget and not self._holding:
            self._write_held()

    def hold(self) -> None:
        """Keep every frame added from now on in memory, whatever the budget: for a reader that takes every kind
        back soon after (``StreamingAnalysis.finish``), writing them out would cost the write and the read and
        save no memory, since they come back whole."""
        self._holding = True

    def rows(self, kind: str) -> int:
        return self._kinds[kind].rows

    def held_rows(self, kind: str) -> int:
        """Rows of ``kind`` held in memory (not yet written to a part)."""
        return sum(frame.height for frame in self._kinds[kind].held)

    @property
    def parts(self) -> int:
        """Parquet parts written so far (0: everything is still in memory)."""
        return sum(len(k.parts) for k in self._kinds.values())

    def take(self, kind: str, leave_out: Iterable[str] = ()) -> pl.DataFrame:
        """Every frame of ``kind`` in the order added, as one frame, but its columns ``leave_out`` (not read back);
        the kind is emptied.

        Read back from parts, each column is one chunk, read a column at a time: a frame of many parts would be
        copied whole by the first step that adds a column to it (its columns must be chunked alike), and a
        rechunk of the whole frame holds it twice."""
        store = self._kinds[kind]
        parts, held = store.parts, store.held
        self._held_bytes -= sum(int(f.estimated_size()) for f in held)
        store.held, store.parts, store.rows = [], [], 0
        left_out = set(leave_out)
        schema = {name: dtype for name, dtype in store.schema.items() if name not in left_out}
        if not parts:
            return pl.concat(held, rechunk=False).select_seq(list(schema)) if held else pl.DataFrame(schema=schema)
        columns: list[pl.Series] = []
        distinct: list[pl.Series] = []
        constants: dict[str, Any] = {}
        height = 0
        for name in schema:
            pieces = [*(pl.read_parquet(part, columns=[name]).to_series() for part in parts),
                      *(frame[name] for frame in held)]
            height = sum(len(piece) for piece in pieces)
            values = {_one_value(piece.to_frame(), name) for piece in pieces}
            if len(values) == 1 and (value := values.pop()) is not _VARIES:
                constants[name] = value
            else:
                column = pl.concat(pieces, rechunk=True)
                same = same_values_as(column, distinct)
                if same is None:
                    distinct.append(column)
                columns.append(column if same is None else same.alias(name))
                del column
            del pieces
        for part in parts:
            part.unlink(missing_ok=True)
        return with_constants(columns, constants, schema, height)

    def close(self) -> None:
        """Remove the temporary directory (also done when the spill is garbage-collected)."""
        if self._cleanup is not None:
            self._cleanup()
        self._dir = None
        for store in self._kinds.values():
            store.held, store.parts, store.rows = [], [], 0

    def _write_held(self) -> None:
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="envoy-dissect-spill-", dir=self._parent))
            self._cleanup = weakref.finalize(self, shutil.rmtree, self._dir, True)
        for name, store in self._kinds.items():
            if not store.held:
                continue
            part = self._dir / f"{name}-{len(store.parts):06d}.parquet"
            frame = pl.concat(store.held) if len(store.held) > 1 else store.held[0]
            frame.write_parquet(part, compression="lz4", statistics=False)
            store.parts.append(part)
            store.held = []
        self._held_bytes = 0



#: ``_one_value``'s answer for a column of several values
_VARIES = object()
#: dtypes whose minimum equal to their maximum means one value (a float's NaN is neither; lists do not compare)
_COMPARABLE = (pl.Boolean, pl.String, pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32,
               pl.UInt64)


def _one_value(frame: pl.DataFrame, name: str) -> Any:
    """The value every row of ``frame[name]`` holds (``None``: only nulls), or ``_VARIES``; from its null count,
    minimum and maximum, which polars answers for a constant column without materialising it."""
    column = pl.col(name)
    nulls = frame.select_seq(column.null_count()).item()
    if nulls == frame.height:
        return None
    if nulls or not isinstance(frame.schema[name], _COMPARABLE):
        return _VARIES
    low, high = frame.select_seq(column.min(), column.max().alias("high__")).row(0)
    return low if low == high else _VARIES


#: dtypes whose equal values are equal bytes (a float's -0.0 equals 0.0): a column of these may share an equal one's
#: buffer without changing a byte of any output
_SHAREABLE = (pl.Boolean, pl.String, pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32,
              pl.UInt64, pl.Date, pl.Datetime, pl.Duration)
#: rows compared first: most columns that differ differ there, before a comparison of every row
_HEAD_ROWS = 64


def same_values_as(column: pl.Series, others: Iterable[pl.Series]) -> pl.Series | None:
    """The first of ``others`` that holds ``column``'s values (nulls alike, same dtype), or ``None``. Its buffer can
    stand for both (``other.alias(name)`` copies nothing)."""
    return next((other for other in others if _same_values(column, other)), None)


def sharing_equal_columns(columns: list[pl.Series]) -> list[int]:
    """For each of ``columns``, the position of the first column that holds the same values (its own when none
    does): the columns one buffer can stand for (``same_values_as``)."""
    firsts: list[int] = []
    distinct: list[int] = []
    for i, column in enumerate(columns):
        first = next((j for j in distinct if _same_values(column, columns[j])), i)
        if first == i:
            distinct.append(i)
        firsts.append(first)
    return firsts


def gathered(columns: list[pl.Series], order: pl.Series) -> list[pl.Series]:
    """``columns`` gathered in ``order``, one at a time, each replaced in the list once its copy is made (one
    column's copy in flight, not a second frame, when the caller holds no other reference to them); columns of
    the same values are gathered once and share the copy (``sharing_equal_columns``)."""
    firsts = sharing_equal_columns(columns)
    for i, first in enumerate(firsts):
        columns[i] = columns[first].alias(columns[i].name) if first != i else columns[i].gather(order)
    return columns


def _same_values(column: pl.Series, other: pl.Series) -> bool:
    if not isinstance(column.dtype, _SHAREABLE) or other.dtype != column.dtype or other.len() != column.len():
        return False
    if other.null_count() != column.null_count() or not other.head(_HEAD_ROWS).equals(column.head(_HEAD_ROWS)):
        return False
    return other.equals(column)


def constant_columns(frame: pl.DataFrame) -> dict[str, Any]:
    """``frame``'s columns that hold one value on every row (``None``: only nulls), with that value, a column at
    a time. A frame of fewer than two rows has none (nothing to save)."""
    if frame.height < 2:
        return {}
    # (two queries for all the columns, as _one_value asks of one: a query a column cost ~70 us each, ~280 a
    # small capture's run)
    nulls = dict(zip(frame.columns, frame.select_seq(pl.all().null_count()).row(0)))
    full = [name for name, n in nulls.items() if n == 0 and isinstance(frame.schema[name], _COMPARABLE)]
    lows = [pl.col(name).min().alias(f"low__{i}") for i, name in enumerate(full)]
    highs = [pl.col(name).max().alias(f"high__{i}") for i, name in enumerate(full)]
    bounds = frame.select_seq(*lows, *highs).row(0) if full else ()
    one = {name: bounds[i] for i, name in enumerate(full) if bounds[i] == bounds[len(full) + i]}
    return {name: one.get(name) for name in frame.columns if name in one or nulls[name] == frame.height}


def grouped_by_varying(frame: pl.DataFrame, keys: tuple[str, ...], **aggregates: pl.Expr) -> pl.DataFrame:
    """``frame.group_by(keys).agg(**aggregates)`` (without aggregates: the distinct keys), grouped by the keys that
    vary only: a key of one value on every row (``constant_columns``: one origin) is added back as that value, not
    hashed a row at a time (10 M one-line requests: 0.9 GiB for the file name and the connections' distinct
    count)."""
    fixed = constant_columns(frame.select_seq(keys))
    varying = [key for key in keys if key not in fixed]
    if varying:
        out = frame.group_by(varying).agg(**aggregates)
    elif aggregates:
        out = frame.select_seq(**aggregates)
    else:  # (every key one value: one row of them)
        return frame.head(1).select_seq(keys)
    return out.with_columns_seq(pl.lit(value, dtype=frame.schema[key]).alias(key) for key, value in fixed.items()
                                ).select_seq(*keys, *aggregates)


def with_constants(columns: list[pl.Series], constants: dict[str, Any], schema: Mapping[str, pl.DataType],
                   height: int) -> pl.DataFrame:
    """A frame of ``schema``'s columns in its order: ``columns`` as they are, and each of ``constants`` its one
    value on ``height`` rows, a constant column (not materialised)."""
    if not constants:
        return pl.DataFrame(columns)
    base = pl.DataFrame(columns) if columns else pl.select(pl.repeat(0, height, dtype=pl.Int8).alias("rows__"))
    return base.with_columns_seq(pl.lit(value, dtype=schema[name]).alias(name)
                                 for name, value in constants.items()).select_seq(list(schema))
