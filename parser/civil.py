"""Epoch microseconds from calendar fields, as a polars expression that never raises.

``pl.datetime`` raises on an impossible date (February 30, month 13, hour 25), which one corrupt
line would turn into a failed run. Here such a date is null (the record keeps no time, like a line
without a date), using the days-from-civil arithmetic of the proleptic Gregorian calendar.
``epoch_us_of`` is the same arithmetic on Python integers, for a handful of values (the distinct seconds of a
block), where evaluating the expression's ~100 nodes costs milliseconds whatever the row count.
"""
from __future__ import annotations

import polars as pl

_DAYS_BEFORE_1970 = 719_468  # days from 0000-03-01 to 1970-01-01


def _leap(year: pl.Expr) -> pl.Expr:
    return ((year % 4 == 0) & (year % 100 != 0)) | (year % 400 == 0)


def _days_in_month(year: pl.Expr, month: pl.Expr) -> pl.Expr:
    thirty = month.is_in([4, 6, 9, 11])
    return (pl.when(month == 2).then(pl.when(_leap(year)).then(29).otherwise(28))
            .when(thirty).then(30).otherwise(31))


def _days_in_month_of(year: int, month: int) -> int:
    if month == 2:
        return 29 if (year % 4 == 0 and year % 100 != 0) or year % 400 == 0 else 28
    return 30 if month in (4, 6, 9, 11) else 31


def epoch_us_of(year: int, month: int, day: int, hour: int, minute: int, second: int) -> int | None:
    """``epoch_us`` of one set of fields."""
    if not (1 <= year <= 9999 and 1 <= month <= 12 and 1 <= day <= _days_in_month_of(year, month)
            and 0 <= hour <= 23 and 0 <= minute <= 59 and 0 <= second <= 60):
        return None
    shifted = year - (month <= 2)
    era = shifted // 400
    year_of_era = shifted - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    days = era * 146_097 + day_of_era - _DAYS_BEFORE_1970
    return (days * 86_400 + hour * 3_600 + minute * 60 + second) * 1_000_000


def epoch_us(year: pl.Expr, month: pl.Expr, day: pl.Expr, hour: pl.Expr, minute: pl.Expr,
             second: pl.Expr) -> pl.Expr:
    """Epoch µs (Int64) of the fields (any integer-castable expressions); null when not a real date/time.

    A leap second (``:60``) counts as the next second's start, as most log readers do.
    """
    y, mo, d, h, mi, s = (e.cast(pl.Int64, strict=False) for e in (year, month, day, hour, minute, second))
    valid = (y.is_between(1, 9999) & mo.is_between(1, 12) & (d >= 1) & (d <= _days_in_month(y, mo))
             & h.is_between(0, 23) & mi.is_between(0, 59) & s.is_between(0, 60))
    shifted = y - (mo <= 2).cast(pl.Int64)
    era = shifted // 400
    year_of_era = shifted - era * 400
    day_of_year = (153 * (mo + pl.when(mo > 2).then(-3).otherwise(9)) + 2) // 5 + d - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    days = era * 146_097 + day_of_era - _DAYS_BEFORE_1970
    seconds = days * 86_400 + h * 3_600 + mi * 60 + s
    return pl.when(valid).then(seconds * 1_000_000).otherwise(None)
