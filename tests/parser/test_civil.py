"""``civil.epoch_us_of`` (Python integers) against ``civil.epoch_us`` (the polars expression, the reference), and the
few-seconds path of the envelope's timestamps against the expression it stands in for."""
from __future__ import annotations

from datetime import UTC, datetime

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from envoy_dissector.parser import envelope
from envoy_dissector.parser.civil import epoch_us, epoch_us_of

FIELDS = ("y", "mo", "d", "h", "mi", "s")
#: around and beyond every field's limits (month 0 and 13, day 0 and 32, hour 24, second 60 and 61, year 0)
ROWS = st.lists(st.tuples(st.integers(-1, 10_001), st.integers(-1, 14), st.integers(-1, 33), st.integers(-1, 25),
                          st.integers(-1, 61), st.integers(-1, 62)), min_size=1, max_size=40)


def _expression(rows: list[tuple[int, ...]]) -> list[int | None]:
    frame = pl.DataFrame(rows, schema=dict.fromkeys(FIELDS, pl.Int64), orient="row")
    return frame.select(epoch_us(*(pl.col(f) for f in FIELDS))).to_series().to_list()


@settings(max_examples=200, deadline=None)
@given(rows=ROWS)
def test_python_arithmetic_gives_the_expressions_value(rows: list[tuple[int, ...]]) -> None:
    assert [epoch_us_of(*row) for row in rows] == _expression(rows)


def test_valid_dates_read_as_utc_and_impossible_ones_as_null() -> None:
    assert epoch_us_of(2024, 2, 29, 23, 59, 59) == int(datetime(2024, 2, 29, 23, 59, 59, tzinfo=UTC).timestamp()) * 10**6
    assert epoch_us_of(2023, 2, 29, 0, 0, 0) is None and epoch_us_of(1900, 2, 29, 0, 0, 0) is None
    assert epoch_us_of(2000, 2, 29, 0, 0, 0) is not None
    assert epoch_us_of(2024, 12, 31, 23, 59, 60) == epoch_us_of(2025, 1, 1, 0, 0, 0)  # a leap second: the next one


HEAD = {"Y": (0, 4), "mo": (5, 2), "d": (8, 2), "H": (11, 2), "Mi": (14, 2), "S": (17, 2)}
HEADS = st.lists(st.one_of(
    st.none(),
    st.builds(lambda y, mo, d, h, mi, s: f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}",
              st.integers(0, 9999), st.integers(0, 99), st.integers(0, 99), st.integers(0, 99), st.integers(0, 99),
              st.integers(0, 99)),
    st.text(alphabet="0123456789-T: x+", min_size=0, max_size=21),
), min_size=1, max_size=20)


@settings(max_examples=200, deadline=None)
@given(heads=HEADS)
def test_few_seconds_give_the_expressions_values_or_leave_them_to_it(heads: list[str | None]) -> None:
    series = pl.Series("s", heads, dtype=pl.String)
    reference = series.to_frame().select(envelope._whole_seconds(
        pl.col("s").str.slice(*HEAD[g]) for g in envelope._DATE_TIME)).to_series()
    found = envelope._few_seconds(series, HEAD)
    digits_only = all(h is None or all(h[o:o + w].isascii() and h[o:o + w].isdigit() for o, w in HEAD.values())
                      for h in heads)
    assert (found is not None) == digits_only
    if found is not None:
        assert found.to_list() == reference.to_list()
