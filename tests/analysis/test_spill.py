"""Finished output spilled to parquet parts (analysis/engine/spill.py) comes back whole, in order, and leaves no files."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from truth import FIXTURES, capture_of

from envoy_dissector.analysis.capture import dissect
from envoy_dissector.analysis.engine.spill import Spill, constant_columns, with_constants
from envoy_dissector.analysis.engine.streaming import StreamingAnalysis

SCHEMA: dict[str, pl.DataType] = {"uid": pl.String(), "n": pl.Int64()}


def _batch(start: int, rows: int) -> pl.DataFrame:
    return pl.DataFrame({"uid": [f"r{i}" for i in range(start, start + rows)], "n": list(range(start, start + rows))},
                        schema={"uid": pl.String, "n": pl.Int32})


def test_within_budget_nothing_is_written(tmp_path: Path) -> None:
    spill = Spill({"a": SCHEMA}, directory=tmp_path)
    spill.add("a", _batch(0, 3))
    spill.add("a", _batch(3, 2))
    assert spill.parts == 0 and list(tmp_path.iterdir()) == []
    out = spill.take("a")
    assert out.schema == pl.Schema(SCHEMA) and out["n"].to_list() == [0, 1, 2, 3, 4]


def test_over_budget_parts_come_back_in_order_and_are_removed(tmp_path: Path) -> None:
    spill = Spill({"a": SCHEMA, "b": SCHEMA}, budget=0, directory=tmp_path)
    for start in range(0, 50, 10):
        spill.add("a", _batch(start, 10))
        spill.add("b", _batch(1000 + start, 10))
    assert spill.parts == 10 and spill.rows("a") == 50
    (directory,) = tmp_path.iterdir()
    assert len(list(directory.glob("*.parquet"))) == 10
    a = spill.take("a")
    assert a["n"].to_list() == list(range(50)) and a.schema == pl.Schema(SCHEMA)
    assert len(list(directory.glob("a-*.parquet"))) == 0 and spill.rows("a") == 0
    assert spill.take("a").height == 0
    spill.close()
    assert not directory.exists()


def test_frames_added_once_held_stay_in_memory_and_come_back_after_the_parts(tmp_path: Path) -> None:
    """``hold`` (``StreamingAnalysis.finish``, which takes everything back at once): the parts already written stay
    on disk, nothing more is written whatever the budget, and ``take`` gives parts then held frames, in order."""
    spill = Spill({"a": SCHEMA, "b": SCHEMA}, budget=0, directory=tmp_path)
    for start in range(0, 20, 10):
        spill.add("a", _batch(start, 10))
    assert spill.parts == 2
    spill.hold()
    for start in range(20, 50, 10):
        spill.add("a", _batch(start, 10))
        spill.add("b", _batch(1000 + start, 10))
    assert spill.parts == 2 and spill.held_rows("a") == 30 and spill.held_rows("b") == 30
    (directory,) = tmp_path.iterdir()
    assert len(list(directory.glob("*.parquet"))) == 2
    assert spill.take("a")["n"].to_list() == list(range(50))
    assert spill.take("b")["n"].to_list() == list(range(1020, 1050))
    spill.close()
    assert not directory.exists()


def test_parts_and_held_frames_come_back_one_chunk_per_column(tmp_path: Path) -> None:
    """A frame of many parts is copied whole by the first step that adds a column to it: parts come back as
    one chunk per column, held frames after them, in the order added."""
    spill = Spill({"a": SCHEMA}, budget=0, directory=tmp_path)
    for start in range(0, 40, 10):
        spill.add("a", _batch(start, 10))
    spill._budget = 1 << 30  # (the last batch stays in memory)
    spill.add("a", _batch(40, 5))
    assert spill.parts == 4
    out = spill.take("a")
    assert out["n"].to_list() == list(range(45)) and out["uid"].to_list() == [f"r{i}" for i in range(45)]
    assert out.schema == pl.Schema(SCHEMA)
    assert [out[c].n_chunks() for c in out.columns] == [1, 1]


def test_an_abandoned_spill_removes_its_directory(tmp_path: Path) -> None:
    spill = Spill({"a": SCHEMA}, budget=0, directory=tmp_path)
    spill.add("a", _batch(0, 5))
    (directory,) = tmp_path.iterdir()
    del spill
    assert not directory.exists()


@pytest.mark.parametrize("rel", ["istio-thread/workers/envoy.log.gz", "istio-thread/http2/envoy.log.gz",
                                 "kubectl/multi-pod/sequential.log.gz"])
def test_streaming_with_every_batch_spilled_equals_the_whole_file(rel: str, monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    parts: list[int] = []
    finish = StreamingAnalysis.finish

    def counted(self: StreamingAnalysis) -> object:
        out = finish(self)
        parts.append(self.spilled_parts)
        return out

    monkeypatch.setattr(StreamingAnalysis, "finish", counted)
    log = FIXTURES / rel
    # (the parts come from the windows of 500 events: 64 KiB blocks spill 36, 21 and 29 parts, 4 KiB blocks 42, 25
    # and 32 at four times the CPU, a fixed step for each of their ~300 blocks; test_streaming cuts blocks anywhere)
    streamed = dissect(str(log), block_bytes=65536, window_events=500, spill_budget=0)
    whole = capture_of(log, None)
    assert parts and parts[0] > 3, "the finished output was not spilled"
    for name in ("requests", "phases", "loop"):
        ours, theirs = getattr(streamed, name), getattr(whole, name)
        columns = sorted(theirs.columns)
        assert_frame_equal(ours.select(columns).sort(columns, nulls_last=True),
                           theirs.select(columns).sort(columns, nulls_last=True))
    assert list(tmp_path.glob("envoy-dissect-spill-*")) == []


WIDE: dict[str, pl.DataType] = {"uid": pl.String(), "never": pl.Int64(), "note": pl.String(), "origin": pl.String(),
                                "conns": pl.List(pl.Int64()), "part": pl.String()}


def _wide(start: int, rows: int, part: str) -> pl.DataFrame:
    return pl.DataFrame({"uid": [f"r{i}" for i in range(start, start + rows)], "never": [None] * rows,
                         "note": [None] * rows, "origin": ["/var/log/a-long-origin-path/envoy.log"] * rows,
                         "conns": [None] * rows, "part": [part] * rows}, schema=WIDE)


def test_a_column_of_one_value_comes_back_as_a_constant_column(tmp_path: Path) -> None:
    """A column holding one value on every row of every part (only nulls; one origin) comes back as one value that
    polars does not materialise; a column constant within each part but not across them comes back whole."""
    rows = 100_000
    spill = Spill({"a": WIDE}, budget=0, directory=tmp_path)
    spill.add("a", _wide(0, rows, "first"))
    spill.add("a", _wide(rows, rows, "second"))
    spill._budget = 1 << 30  # (the last batch stays in memory)
    spill.add("a", _wide(2 * rows, 10, "second"))
    expected = pl.concat([_wide(0, rows, "first"), _wide(rows, rows, "second"), _wide(2 * rows, 10, "second")])
    out = spill.take("a")
    assert_frame_equal(out, expected)
    assert out.schema == pl.Schema(WIDE)
    for name in ("never", "note", "origin", "conns"):
        assert out.select(name).estimated_size() < 1024, f"{name} was materialised"
    assert out.select("part").estimated_size() >= rows  # (materialised: at least a byte a row)
    assert constant_columns(out) == {"never": None, "note": None, "origin": "/var/log/a-long-origin-path/envoy.log",
                                     "conns": None}


def test_constant_columns_are_found_by_value() -> None:
    frame = pl.DataFrame({"n": [1, 1, 1], "m": [1, None, 1], "f": [float("nan"), 1.0, 1.0], "s": ["x", "x", "x"],
                          "b": [True, False, True], "z": [None, None, None]})
    assert constant_columns(frame) == {"n": 1, "s": "x", "z": None}
    assert constant_columns(frame.head(1)) == {}
    rebuilt = with_constants([frame["m"]], {"n": 1, "z": None}, {"n": pl.Int64(), "m": pl.Int64(), "z": pl.Null()},
                             3)
    assert_frame_equal(rebuilt, frame.select("n", "m", "z"))
    only = with_constants([], {"n": 1}, {"n": pl.Int64()}, 3)
    assert only["n"].to_list() == [1, 1, 1]
