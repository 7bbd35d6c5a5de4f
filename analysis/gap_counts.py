"""Record gaps (``findings.record_gaps``) held as how many times each gap occurred.

Everything read from the gaps is order-free: the per-record cost (``stages.cost.record_cost_from_gaps``: the mean
of the gaps of at most 10 µs and how many there are), the observer finding (how many), the stall finding (how
many reach a threshold, the longest, their median and sum). Counts per gap value give each of these numbers
exactly as the gaps themselves do, and they grow with the distinct gaps (timestamps tick in whole µs: a few hundred
values), not with the socket events, so a log followed for hours holds them in a few kilobytes (``GapTally``).

Each gap is also keyed by how long its worker had been idle before the pair's ``socket event`` (:func:`idle_class`:
three classes), because the record that wakes an idle worker costs about ten times one that follows other records
(docs/cost.md, the observer). Classes × distinct gaps keeps the counts bounded.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final

import polars as pl

from envoy_dissector.parser import extension
from envoy_dissector.parser.kinds import EventKind

GAP_COUNTS_SCHEMA: dict[str, pl.DataType] = {"idle": pl.Int8(), "gap": pl.Int64(), "count": pl.Int64()}
#: Gaps a ``GapTally`` holds as they came, at most, before it folds them into its counts.
HELD_GAPS = 65_536
#: Upper bounds (µs of the worker idle before a record) of the idle classes: 0 warm (it follows other records:
#: at most 50 µs), 1 cooling (at most 1 ms), 2 cold (longer, or the worker's first line). The lab's gaps: 0.6-0.8 µs
#: in classes 0 and both sides of 50 µs, 1.1-2.7 µs in class 1, 7.7-8.4 µs in class 2 (docs/cost.md).
IDLE_CLASS_US: Final = (50, 1_000)
WARM, COOLING, COLD = 0, 1, 2


def idle_class(idle_us: pl.Expr) -> pl.Expr:
    """The idle class (:data:`IDLE_CLASS_US`) of a record the worker logged ``idle_us`` after its previous line
    (null: no line before it, counted cold)."""
    return (pl.when(idle_us <= IDLE_CLASS_US[0]).then(pl.lit(WARM)).when(idle_us <= IDLE_CLASS_US[1])
            .then(pl.lit(COOLING)).otherwise(pl.lit(COLD)).cast(pl.Int8))


def back_to_back(lines: pl.DataFrame, over: list[str] | None = None, *, carried: int = 0) -> pl.Series:
    """The gap (µs) between each ``socket event`` line and the ``write ready``/``read ready`` its worker logs next,
    with the idle class of the ``socket event`` (a struct Series of ``gap`` and ``idle``). ``lines`` (``ts_us``,
    ``kind``) are in time order per worker, the workers told apart by the ``over`` columns (None: one worker).
    The first ``carried`` lines (one worker) were paired before: they only give the idle before the next.
    One worker's gaps come from one compiled pass where it is on (``extension.record_gaps``)."""
    found = None if over else extension.record_gaps(lines["ts_us"], lines["kind"], GAP_BITS,
                                                    carried, IDLE_CLASS_US, (WARM, COOLING, COLD))
    if found is not None:
        return found.select_seq(pl.struct(gap="gap", idle="idle").alias("gap"))["gap"]
    return _back_to_back_by_polars(lines, over, carried=carried)


#: Each line kind's part in the record gaps (``extension.record_gaps``), by its name.
GAP_BITS = {EventKind.SOCKET_EVENT.value: extension.SOCKET_EVENT_BIT, EventKind.WRITE_READY.value: extension.READY_BIT,
            EventKind.READ_READY.value: extension.READY_BIT}


def _back_to_back_by_polars(lines: pl.DataFrame, over: list[str] | None = None, *, carried: int = 0) -> pl.Series:
    """``back_to_back`` by polars passes over every line (the reference)."""
    def by_worker(expr: pl.Expr) -> pl.Expr:
        return expr.over(over) if over else expr
    pairs = lines.with_row_index("row__").with_columns_seq(
        nxt__=by_worker(pl.col("kind").shift(-1)),
        gap__=by_worker(pl.col("ts_us").shift(-1)) - pl.col("ts_us"),
        idle__=idle_class(pl.col("ts_us") - by_worker(pl.col("ts_us").shift(1))))
    kept = pairs.filter((pl.col("kind") == EventKind.SOCKET_EVENT) & (pl.col("row__") >= carried)
                        & pl.col("nxt__").is_in([EventKind.WRITE_READY, EventKind.READ_READY]))
    return kept.select_seq(pl.struct(gap=pl.col("gap__").cast(pl.Int64), idle=pl.col("idle__")).alias("gap"))["gap"]


def _empty() -> pl.DataFrame:
    return pl.DataFrame(schema=GAP_COUNTS_SCHEMA)


def _folded(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """Counts frames as one: a row per distinct gap, ascending (a null gap last)."""
    frames = [f for f in frames if f.height]
    if not frames:
        return _empty()
    both = pl.concat(frames)
    return both.group_by("idle", "gap").agg(pl.col("count").sum()).sort("idle", "gap", nulls_last=True).cast(
        GAP_COUNTS_SCHEMA)  # type: ignore[arg-type]


@dataclass(frozen=True, eq=False)
class GapCounts:
    """Gaps as ``(idle class, gap) -> count`` (``GAP_COUNTS_SCHEMA``, one row per class and distinct gap,
    ascending): the statistics the findings and the cost read, each equal to the one the gaps as a ``pl.Series``
    give (over every class; :meth:`in_class` for one)."""

    frame: pl.DataFrame = field(default_factory=_empty)

    @classmethod
    def of(cls, gaps: pl.Series) -> GapCounts:
        """Counts of ``back_to_back``'s gaps, or of plain gaps (an integer Series: idle class unknown, null)."""
        if isinstance(gaps.dtype, pl.Struct):
            frame = gaps.struct.unnest().select_seq("idle", "gap")
        else:
            frame = gaps.cast(pl.Int64).rename("gap").to_frame().select_seq(pl.lit(None, dtype=pl.Int8).alias("idle"),
                                                                       "gap")
        counted = frame.group_by("idle", "gap").agg(count=pl.len())
        return cls(_folded([counted.cast(GAP_COUNTS_SCHEMA)]))  # type: ignore[arg-type]

    def in_class(self, idle: int) -> GapCounts:
        """The gaps whose ``socket event`` came after idle of class ``idle`` (:func:`idle_class`)."""
        return GapCounts(self.frame.filter(pl.col("idle") == idle))

    def len(self) -> int:
        """How many gaps (``Series.len``)."""
        return int(self.frame["count"].sum())

    def at_most(self, limit: int) -> GapCounts:
        """The gaps ``<= limit`` (``gaps.filter(gaps <= limit)``)."""
        return GapCounts(self.frame.filter(pl.col("gap") <= limit))

    def at_least(self, limit: int) -> GapCounts:
        """The gaps ``>= limit`` (``gaps.filter(gaps >= limit)``)."""
        return GapCounts(self.frame.filter(pl.col("gap") >= limit))

    def sum(self) -> int:
        return int((self.frame["gap"] * self.frame["count"]).sum())

    def max(self) -> int | None:
        value = self.frame["gap"].max()
        return None if value is None else int(value)  # type: ignore[arg-type]

    def mean(self) -> float | None:
        """``Series.mean``: the sum and the count are whole numbers, so their quotient is the one polars gives."""
        n = int(self.frame.filter(pl.col("gap").is_not_null())["count"].sum())
        return self.sum() / n if n else None

    def median(self) -> float | None:
        """``stats.median``: the value at rank ``round(0.5·(n−1))`` of the sorted gaps, rounding a half up as
        polars' ``interpolation="nearest"`` does."""
        known = self.frame.filter(pl.col("gap").is_not_null()).group_by("gap").agg(pl.col("count").sum()).sort("gap")
        n = int(known["count"].sum())
        if n == 0:
            return None
        rank = math.floor(0.5 * (n - 1) + 0.5)
        reached = known.filter(pl.col("count").cum_sum() > rank)
        return float(reached["gap"][0])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GapCounts) and self.frame.equals(other.frame)


@dataclass
class GapTally:
    """Gaps added step by step (``StreamingAnalysis``), held as they came until there are more than ``held``,
    then folded into the counts: what is held stays below ``held`` plus a row per idle class and distinct gap."""

    held: int = HELD_GAPS
    _raw: list[pl.Series] = field(default_factory=list)
    _raw_rows: int = 0
    _counts: pl.DataFrame = field(default_factory=_empty)

    def add(self, gaps: pl.Series) -> None:
        if not gaps.len():
            return
        self._raw.append(gaps)
        self._raw_rows += gaps.len()
        if self._raw_rows > self.held:
            self._fold()

    def rows_held(self) -> int:
        """Rows held: gaps not folded yet and the counts' rows."""
        return self._raw_rows + self._counts.height

    def counts(self) -> GapCounts:
        self._fold()
        return GapCounts(self._counts)

    def _fold(self) -> None:
        if self._raw:
            raw = pl.concat(self._raw) if len(self._raw) > 1 else self._raw[0]
            self._counts = _folded([self._counts, GapCounts.of(raw).frame])
        self._raw, self._raw_rows = [], 0
