"""The compiled as-of lookup (``extension.asof_positions``) against its polars reference (``asof._asof_by_polars``,
taken when the compiled pass answers None): the same frame from ``asof`` for every lookup the analysis makes on
each fixture, and for generated lookups with null times and keys, ties of one time, integer and text keys of
several types, both strategies and tolerances."""
from __future__ import annotations

from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from envoy_dissector.analysis import dissect
from envoy_dissector.analysis.engine import asof as asof_module
from envoy_dissector.parser import extension
from tests.builders import FIXTURE_LOGS, FixtureLog

pytestmark = pytest.mark.skipif(not extension.enabled(), reason="the compiled extension was not built (no cargo) or is off")

Lookup = tuple[pl.DataFrame, pl.DataFrame, dict[str, Any]]


def _both(left: pl.DataFrame, right: pl.DataFrame, options: dict[str, Any]) -> tuple[pl.DataFrame, pl.DataFrame, bool]:
    """``asof`` by the compiled pass and by polars, and whether the compiled pass answered."""
    answered: list[bool] = []
    compiled_positions = extension.asof_positions

    def counted(*args: Any, **kwargs: Any) -> pl.Series | None:
        found = compiled_positions(*args, **kwargs)
        answered.append(found is not None)
        return found

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(extension, "asof_positions", counted)
        patch.setattr(asof_module, "COMPILED_ROWS", 1 << 62)  # (larger lookups too: the pass must agree at any size)
        compiled = asof_module.asof(left, right, **options)
        patch.setattr(extension, "asof_positions", lambda *args, **kwargs: None)
        reference = asof_module.asof(left, right, **options)
    return compiled, reference, all(answered)


@pytest.mark.parametrize("log", FIXTURE_LOGS, ids=lambda log: log.rel)
def test_every_lookup_of_a_fixtures_analysis_finds_the_same_rows(log: FixtureLog,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    lookups: list[Lookup] = []
    lookup = asof_module.asof

    def recording(left: pl.DataFrame, right: pl.DataFrame, **options: Any) -> pl.DataFrame:
        lookups.append((left, right, options))
        return lookup(left, right, **options)

    for module in ("requests", "wasm", "loop"):
        monkeypatch.setattr(f"envoy_dissector.analysis.stages.{module}.asof", recording)
    capture = dissect(log.path, log_format=log.log_format)
    monkeypatch.undo()
    if capture.requests.height:
        assert lookups, "an analysis that found requests made as-of lookups"
    answered = 0
    for left, right, options in lookups:
        compiled, reference, by_compiled = _both(left, right, options)
        assert_frame_equal(compiled, reference)
        answered += by_compiled
    # (the analysis' time and key columns are the compiled pass' types: it answers every lookup)
    assert answered == len(lookups)


_TIMES = st.one_of(st.none(), st.integers(-3, 12))
_INT_KEYS = st.one_of(st.none(), st.integers(0, 3))
_TEXT_KEYS = st.one_of(st.none(), st.sampled_from(["pod-a", "pod-b", "pod-é"]))


@st.composite
def _lookups(draw: st.DrawFn) -> Lookup:
    # (a key at least: the engine's lookups all have one, and polars 2.1's join_asof of two empty frames without
    # one panics)
    key_types = draw(st.lists(st.sampled_from([pl.Int64, pl.UInt64, pl.UInt32, pl.String]), min_size=1, max_size=3))
    time_type = draw(st.sampled_from([pl.Int64, pl.Int32, pl.UInt32]))

    def frame(rows: int, time: str, prefix: str) -> pl.DataFrame:
        columns: dict[str, pl.Series] = {}
        times = draw(st.lists(st.one_of(st.none(), st.integers(0, 12)) if time_type == pl.UInt32 else _TIMES,
                              min_size=rows, max_size=rows))
        columns[time] = pl.Series(time, times, dtype=time_type)
        for k, key_type in enumerate(key_types):
            values = draw(st.lists(_TEXT_KEYS if key_type == pl.String else _INT_KEYS, min_size=rows, max_size=rows))
            columns[f"k{k}"] = pl.Series(f"k{k}", values, dtype=key_type)
        columns[f"{prefix}value"] = pl.Series(f"{prefix}value", list(range(rows)), dtype=pl.Int64)
        return pl.DataFrame(list(columns.values()))

    left = frame(draw(st.integers(0, 25)), "t", "left_")
    right_time = draw(st.sampled_from(["t", "rt"]))
    right = frame(draw(st.integers(0, 25)), right_time, "")
    if draw(st.booleans()):
        right = right.with_columns_seq(line_no=pl.Series(draw(st.permutations(range(right.height))), dtype=pl.Int64))
    options = {"left_on": "t", "right_on": right_time, "by": [f"k{k}" for k in range(len(key_types))],
               "strategy": draw(st.sampled_from(["backward", "forward"])), "take": {"value": "found"},
               "tolerance": draw(st.one_of(st.none(), st.integers(0, 4)))}
    return left, right, options


@settings(max_examples=400, deadline=None)
@given(lookup=_lookups())
def test_generated_lookups_find_the_same_rows(lookup: Lookup) -> None:
    left, right, options = lookup
    compiled, reference, by_compiled = _both(left, right, options)
    assert_frame_equal(compiled, reference)
    assert by_compiled
