"""parser/distinct.py: every row maps back to a first occurrence holding the same value."""
from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from envoy_dissector.parser.distinct import distinct, distinct_rows


@given(st.lists(st.one_of(st.none(), st.text(alphabet="ab\t\u00e9", max_size=3)), max_size=60))
@settings(max_examples=300, deadline=None)
def test_distinct_rebuilds_the_column(values):
    series = pl.Series("v", values, dtype=pl.String)
    found = distinct(series)
    first = found.first.to_list()
    assert [values[first[i]] for i in found.index.to_list()] == values
    assert len(first) == len(set(values))  # one group per distinct value (None included)
    texts = [r for r in first if values[r] is not None]
    assert texts == sorted(texts)  # in order of first appearance (the null group comes last)
    assert None not in values or values[first[-1]] is None
    assert all(values[r] not in values[:r] for r in first)


def test_binary_values_group_like_their_text():
    text = pl.Series(["x", "\u00e9", "x", "y"])
    assert distinct(text.cast(pl.Binary)).index.to_list() == distinct(text).index.to_list() == [0, 1, 0, 2]


@given(st.lists(st.tuples(st.one_of(st.none(), st.sampled_from(["a", "b"])), st.sampled_from(["", "x"]),
                          st.binary(max_size=2)), max_size=60))
@settings(max_examples=300, deadline=None)
def test_distinct_rows_rebuilds_the_frame(rows):
    frame = pl.DataFrame(rows, schema={"logger": pl.String, "canon": pl.String, "rest": pl.Binary}, orient="row")
    found = distinct_rows(frame)
    first = found.first.to_list()
    assert [rows[first[i]] for i in found.index.to_list()] == rows
    assert len(first) == len(set(rows))  # one group per distinct row (a null equal to a null)
    assert first == sorted(first)  # in order of first appearance
    assert all(rows[r] not in rows[:r] for r in first)
