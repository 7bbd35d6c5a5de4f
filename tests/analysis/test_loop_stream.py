"""A worker's loop slices cut part by part (analysis/engine/loop_stream.py) are the same whether its open slice is
held as lines or, once longer than ``WorkerSlices.held`` lines, as its summary row and last line: on the captures,
the slices of the worker's lines fed a few at a time with the open slice summarised are those of all its lines
fed at once and held whole (one step: the reference costs no step of its own per part)."""
from __future__ import annotations

import random

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from truth import FIXTURES, capture_of

from envoy_dissector.analysis.engine.loop_stream import LINE_COLUMNS, WorkerSlices
from envoy_dissector.parser.kinds import EventKind
from envoy_dissector.parser.schema import EVENT_SCHEMA


def _sliced(lines: pl.DataFrame, part_lines: int, held: int) -> tuple[pl.DataFrame, int]:
    """Every slice of one worker's ``lines`` fed ``part_lines`` at a time, and how many steps ended with the open
    slice held as a summary."""
    slices = WorkerSlices(held=held)
    out, summarised = [], 0
    for part in lines.iter_slices(part_lines):
        out.append(slices.step(part))
        summarised += slices.open_slice is not None
        assert slices.open_lines is None or slices.open_lines.height <= max(held, part_lines) + 1
    out.append(slices.step(lines.head(0), final=True))
    assert slices.open_lines is None and slices.open_slice is None and slices.before is None
    return pl.concat(out), summarised


@pytest.mark.parametrize("log", ["istio-thread/workers/envoy.log.gz", "istio-thread/health-check/envoy.log.gz",
                                 "istio-thread/keepalive/envoy.log.gz", "envoy/workers/envoy.log.gz"])
@pytest.mark.parametrize("part_lines", [3, 40])
def test_a_captures_slices_are_the_same_with_its_open_slices_summarised(log: str, part_lines: int) -> None:
    events = capture_of(FIXTURES / log).events.filter(pl.col("thread").is_not_null())
    summarised = 0
    for lines in events.partition_by("origin", "thread", maintain_order=True):
        expected, _ = _sliced(lines, lines.height, held=10**9)
        got, held_as_summary = _sliced(lines, part_lines, held=2)
        summarised += held_as_summary
        assert_frame_equal(got, expected)
    assert summarised > 0  # (the summary was exercised)


def _flood(n: int, seed: int) -> pl.DataFrame:
    """``n`` lines of one worker, mostly one-line `new stream` records a few µs apart with no `socket event` (one
    slice that never closes), now and then an idle gap, a line of no connection or a socket event."""
    rng = random.Random(seed)
    ts, kinds, conns, events = [], [], [], []
    t = 1_000_000
    for i in range(n):
        t += rng.choice([2, 4, 4, 4, 4, 4, 150, 20_000]) if i else 0
        socket = rng.random() < 0.01
        ts.append(t)
        kinds.append((EventKind.SOCKET_EVENT if socket else EventKind.NEW_STREAM).value)
        conns.append(None if rng.random() < 0.02 else i + 1)
        events.append(3 if socket else None)
    frame = pl.DataFrame({"origin": ["flood"] * n, "thread": [7] * n, "ts_us": ts, "line_no": list(range(1, n + 1)),
                          "kind": kinds, "conn_id": conns, "events": events})
    return frame.cast({c: EVENT_SCHEMA[c] for c in LINE_COLUMNS})  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_flood_of_one_line_requests_holds_a_bounded_open_slice(seed: int) -> None:
    lines = _flood(5_000, seed)
    expected, _ = _sliced(lines, 97, held=10**9)
    got, summarised = _sliced(lines, 97, held=50)
    assert summarised > 0
    assert got["lines"].sum() == lines.height  # (each line in one slice)
    assert_frame_equal(got, expected)
