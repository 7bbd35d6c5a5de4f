"""parser/constant.py: the same column as ``pl.repeat(..., eager=True)``, whatever the value, type and length."""
from __future__ import annotations

from typing import Any

import polars as pl
import pytest

from envoy_dissector.parser.constant import constant


@pytest.mark.parametrize(("value", "dtype"), [(None, pl.String), (True, pl.Boolean), (7, pl.Int64), (None, pl.Int64),
                                              ([], pl.List(pl.Int64)), ("x", pl.String), (0, pl.Int8)])
@pytest.mark.parametrize("n", [0, 1, 3, 100_000])
def test_a_constant_column_is_the_repeated_value(value: Any, dtype: pl.DataType, n: int) -> None:
    made = constant(value, n, dtype, "c")
    assert made.equals(pl.repeat(value, n, dtype=dtype, eager=True).alias("c"), check_names=True, check_dtypes=True)
    assert made.n_chunks() == 1
