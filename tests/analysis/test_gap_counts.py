"""Record gaps held as a count per gap value (analysis/gap_counts.py) say what the gaps themselves say: each statistic
the findings and the cost read equals the one polars gives on the gaps as a Series, and a tally folded any number
of times holds the same counts."""
from __future__ import annotations

import random

import polars as pl
import pytest

from envoy_dissector.analysis.gap_counts import GapCounts, GapTally
from envoy_dissector.analysis.stages.cost import BACK_TO_BACK_US, MIN_GAPS, record_cost_from_gaps
from envoy_dissector.analysis.stats import median


def _gaps(seed: int, n: int) -> pl.Series:
    """Mostly the 0-10 µs of two adjacent statements, some longer (a worker descheduled)."""
    rng = random.Random(seed)
    values = [rng.choice((0, 1, 1, 2, 3, 7, 10, 11)) if rng.random() < 0.9 else rng.randint(0, 5000)
              for _ in range(n)]
    return pl.Series("gap", values, dtype=pl.Int64)


@pytest.mark.parametrize("seed", range(40))
def test_the_counts_give_the_statistics_the_gaps_give(seed: int) -> None:
    gaps = _gaps(seed, random.Random(seed).randint(1, 3000))
    counts = GapCounts.of(gaps)
    assert counts.len() == gaps.len()
    short = gaps.filter(gaps <= BACK_TO_BACK_US)
    assert counts.at_most(BACK_TO_BACK_US).len() == short.len()
    assert counts.at_most(BACK_TO_BACK_US).mean() == (float(short.mean()) if short.len() else None)  # type: ignore[arg-type]
    for limit in (300, 1000, 4000):
        long = gaps.filter(gaps >= limit)
        held = counts.at_least(limit)
        assert (held.len(), held.sum(), held.max(), held.median()) == (
            long.len(), int(long.sum()), long.max(), median(long))
    expected = float(short.mean()) if short.len() >= MIN_GAPS else None  # type: ignore[arg-type]
    assert record_cost_from_gaps(counts) == expected


def test_the_median_takes_the_upper_middle_of_an_even_count() -> None:
    """(polars' nearest rank rounds a half up: of 1, 2, 3, 4 the median is 3, and the counts say so too)"""
    assert GapCounts.of(pl.Series([4, 1, 3, 2])).median() == median(pl.Series([1, 2, 3, 4])) == 3.0
    assert GapCounts.of(pl.Series([], dtype=pl.Int64)).median() is None


@pytest.mark.parametrize("held", [0, 1, 50, 10**9])
def test_a_tally_folded_at_any_size_holds_the_counts_of_all_it_was_given(held: int) -> None:
    parts = [_gaps(seed, 1 + seed * 37 % 200) for seed in range(60)]
    tally = GapTally(held)
    most = 0
    for part in parts:
        tally.add(part)
        most = max(most, tally.rows_held())
    assert tally.counts() == GapCounts.of(pl.concat(parts))
    distinct = pl.concat(parts).n_unique()
    assert most <= held + distinct if held < 10**9 else most == sum(p.len() for p in parts)
