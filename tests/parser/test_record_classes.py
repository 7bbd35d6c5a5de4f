"""The compiled record classes (``extension.record_classes``) against the polars reference (``classify._class_rows``).

A record's class is (logger, the form of its id prefix, the rest of its first line); both paths must give the
same classes in the same order, the same key rows and the same ids, on lines made of the prefix's pieces (every
spelling, broken ones, huge and zero-padded ids, text after them) and on columns of several chunks or sliced.
"""
from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal, assert_series_equal

from envoy_dissector.parser import classify, extension

pytestmark = pytest.mark.skipif(not extension.enabled(), reason="the compiled extension was not built (no cargo) or is off")

_PIECES = ["[", "]", "] ", " ", "[C", "[S", "C", "S", "0", "7", "12", "0042", "18446744073709551615",
           "18446744073709551616", "9223372036854775807", "9223372036854775808", "99999999999999999999999",
           "[Tags: ", '"ConnectionId":"', '\\"ConnectionId\\":\\"', '","StreamId":"', '\\",\\"StreamId\\":\\"',
           '"', '\\"', ",", "Tags", "x", "é", "request headers complete (end_stream=true):", "\t", "918273645"]
_WELL_FORMED = ["[C1] ", "[C12][S34] ", '[Tags: "ConnectionId":"5"] ', '[Tags: "ConnectionId":"5","StreamId":"6"] ',
                '[Tags: \\"ConnectionId\\":\\"5\\"] ', '[Tags: \\"ConnectionId\\":\\"5\\",\\"StreamId\\":\\"6\\"] ']
_lines = st.one_of(
    st.none(),
    st.lists(st.sampled_from(_PIECES), max_size=8).map("".join),
    st.tuples(st.sampled_from(_WELL_FORMED), st.lists(st.sampled_from(_PIECES), max_size=4).map("".join)).map(
        "".join),
)
_loggers = st.sampled_from([None, "", "http", "router", "conn_handler"])


def _compare(records: pl.DataFrame, monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = classify._record_classes(records)
    monkeypatch.setenv("ENVOY_DISSECTOR_NATIVE", "0")
    reference = classify._record_classes(records)
    monkeypatch.delenv("ENVOY_DISSECTOR_NATIVE")
    assert compiled.classes.first.to_list() == reference.classes.first.to_list()
    assert compiled.classes.index.to_list() == reference.classes.index.to_list()
    assert_frame_equal(compiled.keys, reference.keys)
    assert_series_equal(compiled.conn, reference.conn, check_names=False)
    assert_series_equal(compiled.stream, reference.stream, check_names=False)


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.tuples(_loggers, _lines), min_size=1, max_size=40))
def test_compiled_record_classes_equal_the_polars_ones(rows: list[tuple[str | None, str | None]]) -> None:
    records = pl.DataFrame({"logger": [r[0] for r in rows], "first_line": [r[1] for r in rows]},
                           schema={"logger": pl.String, "first_line": pl.String})
    with pytest.MonkeyPatch.context() as monkeypatch:
        _compare(records, monkeypatch)


def test_columns_of_several_chunks_and_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Arrow arrays with an offset, several arrays per column, short (inline) and long texts."""
    lines = [f"[C{i % 7}][S{i}] a line long enough not to fit in a view {i % 3}" if i % 4 else "[C1] x"
             for i in range(300)]
    first = pl.DataFrame({"logger": ["http"] * 300, "first_line": lines})
    second = pl.DataFrame({"logger": [None, "router"] * 100, "first_line": [None, "short"] * 100},
                          schema=first.schema)
    records = pl.concat([first, second, first.slice(17, 101)], rechunk=False).slice(5)
    assert records["first_line"].n_chunks() > 1
    _compare(records, monkeypatch)


def test_an_empty_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    _compare(pl.DataFrame(schema={"logger": pl.String, "first_line": pl.String}), monkeypatch)


def test_a_column_that_is_not_text_goes_the_polars_way() -> None:
    assert extension.record_classes(pl.Series([1, 2]), pl.Series(["a", "b"])) is None
    # (and the compiled pass itself refuses it, should a caller hand it one)
    with pytest.raises(ValueError, match="not a text or bytes column"):
        extension._module().record_classes(pl.Series([1, 2]).__arrow_c_stream__(),
                                           pl.Series(["a", "b"]).__arrow_c_stream__())
