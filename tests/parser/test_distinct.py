"""parser/distinct.py and ``extension.distinct``: every row maps back to a first occurrence holding the same value."""
from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envoy_dissector.parser import extension
from envoy_dissector.parser.distinct import distinct_by_categories, distinct_rows
from envoy_dissector.parser.extension import distinct


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


@pytest.mark.skipif(not extension.enabled(), reason="the compiled extension was not built (no cargo) or is off")
@given(st.lists(st.one_of(st.none(), st.text(alphabet="ab\t\u00e9", max_size=20)), max_size=60),
       st.integers(0, 5), st.booleans(), st.sampled_from([{}, {"from_byte": 1}, {"from_byte": 14}, {"head_chars": 0},
                                                          {"head_chars": 3}, {"head_chars": 13}]))
@settings(max_examples=300, deadline=None)
def test_the_compiled_pass_numbers_groups_as_the_categorical_cast(values, cut, as_bytes, part):
    """The same groups numbered alike, on text and bytes, on a column of several chunks with an offset (texts
    short enough to sit inside an Arrow view and longer), whole or by a part of each value (the bytes from an
    offset on, the first characters) as the sliced column groups."""
    series = pl.Series("v", values, dtype=pl.String)
    series = pl.concat([series, series.slice(cut)], rechunk=False).slice(min(cut, series.len()))
    if "from_byte" in part:  # (bytes cut inside a character would not be text: these texts are ASCII)
        series = series.str.replace_all("\u00e9", "e")
    if as_bytes and "head_chars" not in part:
        series = series.cast(pl.Binary)
    sliced = (series.cast(pl.Binary).bin.slice(part["from_byte"]) if "from_byte" in part
              else series.str.slice(0, part["head_chars"]) if "head_chars" in part else series)
    compiled, reference = distinct(series, **part), distinct_by_categories(sliced)
    assert compiled.first.to_list() == reference.first.to_list()
    assert compiled.index.to_list() == reference.index.to_list()
    assert compiled.first.dtype == reference.first.dtype and compiled.index.dtype == reference.index.dtype


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
