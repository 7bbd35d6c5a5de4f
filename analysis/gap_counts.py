"""Record gaps (``findings.record_gaps``) held as how many times each gap occurred.

Everything read from the gaps is order-free: the per-record cost (``stages.cost.record_cost_from_gaps``: the mean
of the gaps of at most 10 µs and how many there are), the observer finding (how many), the stall finding (how
many reach a threshold, the longest, their median and sum). Counts per gap value give each of these numbers
exactly as the gaps themselves do, and they grow with the distinct gaps (timestamps tick in whole µs: a few hundred
values), not with the socket events, so a log followed for hours holds them in a few kilobytes (``GapTally``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import polars as pl

GAP_COUNTS_SCHEMA: dict[str, pl.DataType] = {"gap": pl.Int64(), "count": pl.Int64()}
#: Gaps a ``GapTally`` holds as they came, at most, before it folds them into its counts.
HELD_GAPS = 65_536


def _empty() -> pl.DataFrame:
    return pl.DataFrame(schema=GAP_COUNTS_SCHEMA)


def _folded(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """Counts frames as one: a row per distinct gap, ascending (a null gap last)."""
    frames = [f for f in frames if f.height]
    if not frames:
        return _empty()
    both = pl.concat(frames)
    return both.group_by("gap").agg(pl.col("count").sum()).sort("gap", nulls_last=True).cast(
        GAP_COUNTS_SCHEMA)  # type: ignore[arg-type]


@dataclass(frozen=True, eq=False)
class GapCounts:
    """Gaps as ``gap -> count`` (``GAP_COUNTS_SCHEMA``, one row per distinct gap, ascending): the statistics the
    findings and the cost read, each equal to the one the gaps as a ``pl.Series`` give."""

    frame: pl.DataFrame = field(default_factory=_empty)

    @classmethod
    def of(cls, gaps: pl.Series) -> GapCounts:
        counted = gaps.cast(pl.Int64).rename("gap").to_frame().group_by("gap").agg(count=pl.len())
        return cls(_folded([counted.cast(GAP_COUNTS_SCHEMA)]))  # type: ignore[arg-type]

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
        known = self.frame.filter(pl.col("gap").is_not_null())
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
    then folded into the counts: what is held stays below ``held`` plus a row per distinct gap."""

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
