"""The compiled passes over a worker's lines against their polars references: the loop slices
(``extension.loop_slices`` / ``loop._thread_slices_by_polars``) and the record gaps (``extension.record_gaps`` /
``gap_counts._back_to_back_by_polars``).

Both must give the same frame or Series (rows, order, dtypes): on every fixture's workers, whole and cut anywhere (a
part's first line is a slice of its own unless it is a socket event; a part's first lines may be carried ones), and
on generated lines with idle gaps, timer, wake and ready kinds, lines of no connection and equal times.
"""
from __future__ import annotations

import random

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal, assert_series_equal

from envoy_dissector.analysis import gap_counts
from envoy_dissector.analysis.engine.loop_stream import LINE_COLUMNS
from envoy_dissector.analysis.stages import loop
from envoy_dissector.parser import extension
from envoy_dissector.parser.kinds import EventKind
from envoy_dissector.parser.schema import EVENT_SCHEMA
from tests.builders import FIXTURE_LOGS, FixtureLog, analysed

pytestmark = pytest.mark.skipif(not extension.enabled(), reason="the compiled extension was not built (no cargo) or is off")


def _compare(lines: pl.DataFrame, carried: int = 0) -> None:
    assert extension.loop_slices(lines["ts_us"], lines["kind"], lines["conn_id"], loop.SLICE_BITS,
                                 loop.IDLE_GAP_US, loop.UNATTRIBUTED_IDLE_US) is not None
    assert extension.record_gaps(lines["ts_us"], lines["kind"], gap_counts.GAP_BITS, 0,
                                 gap_counts.IDLE_CLASS_US, (0, 1, 2)) is not None
    assert_frame_equal(loop._thread_slices(lines), loop._thread_slices_by_polars(lines))
    for skipped in {0, min(carried, lines.height)}:
        assert_series_equal(gap_counts.back_to_back(lines, carried=skipped),
                            gap_counts._back_to_back_by_polars(lines, carried=skipped))


@pytest.mark.parametrize("log", FIXTURE_LOGS, ids=lambda log: log.rel)
def test_every_fixtures_workers_give_the_same_slices_and_gaps(log: FixtureLog) -> None:
    events = analysed(log.path, log.log_format).events.filter(pl.col("thread").is_not_null())
    rng = random.Random(log.rel)
    for lines in events.select(LINE_COLUMNS).partition_by("origin", "thread", maintain_order=True):
        lines = lines.sort("ts_us", "line_no")
        _compare(lines)
        for _ in range(3):  # (a part of the worker's lines, as a step of the streaming analysis cuts them)
            start = rng.randrange(lines.height)
            _compare(lines.slice(start, rng.randrange(1, lines.height - start + 1)), carried=rng.randrange(3))


_KINDS = [EventKind.SOCKET_EVENT, EventKind.NEW_STREAM, EventKind.WRITE_READY, EventKind.READ_READY,
          *loop.TIMER_RESUME_KINDS, *loop.WAKE_KINDS]


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from([0, 1, 50, 51, 100, 101, 1_000, 1_001, 5_000, 9_999, 10_000, 20_000]),
                               st.sampled_from(_KINDS), st.one_of(st.none(), st.integers(0, 3)),
                               st.one_of(st.none(), st.integers(1, 7))), max_size=40),
       carried=st.integers(0, 3))
def test_generated_lines_give_the_same_slices_and_gaps(rows: list[tuple[int, EventKind, int | None, int | None]],
                                                       carried: int) -> None:
    ts, t = [], 1_000_000
    for gap, *_ in rows:
        t += gap
        ts.append(t)
    lines = pl.DataFrame({"origin": ["o"] * len(rows), "thread": [3] * len(rows), "ts_us": ts,
                          "line_no": list(range(len(rows))), "kind": [r[1].value for r in rows],
                          "conn_id": [r[2] for r in rows], "events": [r[3] for r in rows]},
                         schema={c: EVENT_SCHEMA[c] for c in LINE_COLUMNS})
    _compare(lines, carried)


def test_columns_of_several_chunks_and_slices() -> None:
    """Arrow arrays with an offset and several arrays per column."""
    rows = 200
    lines = pl.DataFrame({"origin": ["o"] * rows, "thread": [1] * rows, "ts_us": [i * 60 for i in range(rows)],
                          "line_no": list(range(rows)),
                          "kind": [_KINDS[i % len(_KINDS)].value for i in range(rows)],
                          "conn_id": [None if i % 5 == 0 else i for i in range(rows)], "events": [i % 8 for i in range(rows)]},
                         schema={c: EVENT_SCHEMA[c] for c in LINE_COLUMNS})
    chunked = pl.concat([lines.slice(3, 50), lines.slice(60, 100), lines.slice(170, 30)], rechunk=False)
    assert chunked["ts_us"].n_chunks() > 1
    _compare(chunked, carried=2)
    _compare(lines.slice(17, 90), carried=1)


def test_null_times_take_the_polars_paths() -> None:
    lines = pl.DataFrame({"origin": ["o", "o"], "thread": [1, 1], "ts_us": [None, 5], "line_no": [1, 2],
                          "kind": [EventKind.SOCKET_EVENT.value] * 2, "conn_id": [1, 1], "events": [1, 1]},
                         schema={c: EVENT_SCHEMA[c] for c in LINE_COLUMNS})
    assert extension.loop_slices(lines["ts_us"], lines["kind"], lines["conn_id"], loop.SLICE_BITS,
                                 loop.IDLE_GAP_US, loop.UNATTRIBUTED_IDLE_US) is None
    assert extension.record_gaps(lines["ts_us"], lines["kind"], gap_counts.GAP_BITS, 0,
                                 gap_counts.IDLE_CLASS_US, (0, 1, 2)) is None
    assert_frame_equal(loop._thread_slices(lines), loop._thread_slices_by_polars(lines))
    assert_series_equal(gap_counts.back_to_back(lines), gap_counts._back_to_back_by_polars(lines))
