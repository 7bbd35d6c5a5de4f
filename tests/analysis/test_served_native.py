"""The compiled list of connections served during each queueing window (``extension.served_connections``) against
its polars reference (``loop._served_by_polars``): the same ``List(Int64)`` column on every fixture's queueing
windows, and on generated windows and slices with empty, reversed and missing ranges, windows without a downstream
or upstream connection, slices of no connection and connections served again."""
from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_series_equal

from envoy_dissector.analysis.stages import loop
from envoy_dissector.parser import extension
from tests.builders import FIXTURE_LOGS, FixtureLog, analysed

pytestmark = pytest.mark.skipif(not extension.enabled(), reason="the compiled extension was not built (no cargo) or is off")


def _both(monkeypatch: pytest.MonkeyPatch, windows: pl.DataFrame, slices: pl.DataFrame) -> tuple[pl.Series, pl.Series]:
    compiled = loop._served_during(windows, slices)
    monkeypatch.setattr(extension, "served_connections", lambda *columns: None)
    return compiled, loop._served_during(windows, slices)


@pytest.mark.parametrize("log", FIXTURE_LOGS, ids=lambda log: log.rel)
def test_every_fixtures_queueing_windows_list_the_same_connections(log: FixtureLog,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    capture = analysed(log.path, log.log_format)  # (a capture without queueing windows compares two empty lists)
    windows = capture.queueing.select("request_uid", "start_us", "end_us").join(
        capture.requests.select("request_uid", "origin", "thread", "downstream_conn_id", "upstream_conn_id"),
        on="request_uid", how="left", maintain_order="left")
    compiled, reference = _both(monkeypatch, windows, capture.loop)
    assert_series_equal(compiled, reference)


_IDS = st.one_of(st.none(), st.integers(0, 5))


@settings(max_examples=300, deadline=None)
@given(slices=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 60), _IDS), max_size=40),
       windows=st.lists(st.tuples(st.integers(0, 1), st.integers(-5, 60), st.integers(-5, 70), _IDS, _IDS),
                        max_size=20))
def test_generated_windows_list_the_same_connections(slices: list[tuple[int, int, int | None]],
                                                     windows: list[tuple[int, int, int, int | None, int | None]]
                                                     ) -> None:
    loop_frame = pl.DataFrame({"origin": ["o"] * len(slices), "thread": [s[0] for s in slices],
                               "start_us": [s[1] for s in slices], "end_us": [s[1] + 1 for s in slices],
                               "conn_id": [s[2] for s in slices]},
                              schema={"origin": pl.String, "thread": pl.Int64, "start_us": pl.Int64,
                                      "end_us": pl.Int64, "conn_id": pl.Int64})
    window_frame = pl.DataFrame({"origin": ["o"] * len(windows), "thread": [w[0] for w in windows],
                                 "start_us": [w[1] for w in windows], "end_us": [w[2] for w in windows],
                                 "downstream_conn_id": [w[3] for w in windows],
                                 "upstream_conn_id": [w[4] for w in windows]},
                                schema={"origin": pl.String, "thread": pl.Int64, "start_us": pl.Int64,
                                        "end_us": pl.Int64, "downstream_conn_id": pl.Int64,
                                        "upstream_conn_id": pl.Int64})
    with pytest.MonkeyPatch.context() as patch:
        compiled, reference = _both(patch, window_frame, loop_frame)
    assert_series_equal(compiled, reference)
