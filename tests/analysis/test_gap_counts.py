"""Record gaps held as a count per gap value (analysis/gap_counts.py) say what the gaps themselves say: each statistic
the findings and the cost read equals the one polars gives on the gaps as a Series, and a tally folded any number
of times holds the same counts."""
from __future__ import annotations

import random

import polars as pl
import pytest

from envoy_dissector.analysis.gap_counts import COLD, COOLING, WARM, GapCounts, GapTally, back_to_back
from envoy_dissector.analysis.stages.cost import (
    BACK_TO_BACK_US,
    COLD_BACK_TO_BACK_US,
    MIN_GAPS,
    UNSEEN_BASE_US,
    UNSEEN_PER_COLD_US,
    record_cost_from_gaps,
    record_costs_from_gaps,
    unseen_record_us,
)
from envoy_dissector.analysis.stats import median
from envoy_dissector.parser.kinds import EventKind


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


def _keyed(seed: int, n: int) -> pl.Series:
    """Gaps with an idle class each, the cold ones longer (a record waking an idle worker)."""
    rng = random.Random(seed)
    idle = [rng.choice((WARM, WARM, WARM, COOLING, COLD)) for _ in range(n)]
    gap = [rng.randint(8, 14) if i == COLD else rng.choice((0, 1, 1, 2, 11)) for i in idle]
    return pl.DataFrame({"gap": gap, "idle": idle}, schema={"gap": pl.Int64, "idle": pl.Int8}).select(
        pl.struct("gap", "idle").alias("gap"))["gap"]


@pytest.mark.parametrize("seed", range(10))
def test_gaps_keyed_by_idle_class_give_each_class_its_mean_and_stay_bounded(seed: int) -> None:
    keyed = _keyed(seed, 2_000)
    frame = keyed.struct.unnest()
    counts = GapCounts.of(keyed)
    assert counts.len() == keyed.len() and counts == GapCounts.of(pl.concat([keyed.head(700), keyed.tail(1_300)]))
    assert counts.frame.height <= 3 * frame["gap"].n_unique()
    assert counts.median() == median(frame["gap"])  # (over every class, as the plain gaps)
    costs = record_costs_from_gaps(counts)
    assert costs is not None
    for idle, limit, cost in ((WARM, BACK_TO_BACK_US, costs.warm), (COOLING, BACK_TO_BACK_US, costs.cooling),
                              (COLD, COLD_BACK_TO_BACK_US, costs.cold)):
        mine = frame.filter((pl.col("idle") == idle) & (pl.col("gap") <= limit))["gap"]
        assert cost == pytest.approx(float(mine.mean()))  # type: ignore[arg-type]
    assert costs.unseen == unseen_record_us(costs.warm, costs.cold) and costs.cold > costs.warm


def test_a_class_with_too_few_gaps_takes_the_mean_of_all() -> None:
    plain = GapCounts.of(pl.Series([0, 1, 1, 2, 3, 9], dtype=pl.Int64))  # (no idle class known)
    costs = record_costs_from_gaps(plain)
    assert costs is not None
    assert costs.warm == costs.cooling == costs.cold == record_cost_from_gaps(plain)


def test_back_to_back_keys_each_gap_by_the_idle_before_its_socket_event() -> None:
    socket, ready, other = EventKind.SOCKET_EVENT, EventKind.READ_READY, EventKind.TIMER_NOISE
    lines = pl.DataFrame({"ts_us": [0, 1, 3, 4, 400, 402, 5_000, 5_009],
                          "kind": [str(k) for k in (socket, ready, other, socket, ready, socket, ready, socket)]})
    got = back_to_back(lines).struct.unnest()
    assert got.rows() == [(1, COLD), (396, WARM), (4_598, WARM)]
    # (carried lines were paired before: they give only the idle class of the next)
    assert back_to_back(lines.slice(3), carried=1).struct.unnest().rows() == [(4_598, WARM)]


def test_what_no_gap_shows_grows_with_the_waking_records_excess() -> None:
    """The unseen part is a base plus a share of the cold record's excess over a warm one (the price of a cache
    miss on the machine at the time), never below the base when the cold record costs less."""
    assert unseen_record_us(0.6, 0.6) == pytest.approx(UNSEEN_BASE_US)
    assert unseen_record_us(0.6, 0.5) == pytest.approx(UNSEEN_BASE_US)
    assert unseen_record_us(0.5, 7.5) == pytest.approx(UNSEEN_BASE_US + 7 * UNSEEN_PER_COLD_US)
    assert unseen_record_us(0.5, 7.5) > unseen_record_us(0.5, 2.5)
