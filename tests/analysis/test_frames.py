"""``engine/frames.py``: ``pick`` and ``joined`` give what polars' own filter and join give (rows, columns, order,
types), on frames with nulls in the condition, empty sides and a condition of one value; ``joined`` by the compiled
pass (``extension.join_positions``) on generated frames with null, repeated, integer and text keys, and every
fixture's analysis with its joins by polars alone."""
from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from envoy_dissector.analysis import dissect
from envoy_dissector.analysis.engine.frames import joined, pick
from envoy_dissector.parser import extension
from tests.builders import FIXTURE_LOGS, FixtureLog

FRAME = pl.DataFrame({"k": [1, 2, None, 4, 2], "s": ["a", None, "c", "d", "e"], "b": [True, None, False, True, True]})
OTHER = pl.DataFrame({"k": [2, 4, 5], "v": ["two", "four", "five"], "n": [20, 40, 50]})


@pytest.mark.parametrize("condition", [pl.col("k") > 1, pl.col("b"), "b", pl.col("s").is_null(), pl.lit(True),
                                       pl.lit(False), pl.col("k").is_in([2, 4]) & pl.col("b")])
def test_pick_is_the_frames_own_filter(condition: pl.Expr | str) -> None:
    assert_frame_equal(pick(FRAME, condition), FRAME.filter(condition))
    assert_frame_equal(pick(FRAME, condition, ["s", "k"]), FRAME.filter(condition).select("s", "k"))
    assert_frame_equal(pick(FRAME.head(0), condition), FRAME.head(0).filter(condition))


def test_pick_of_a_frame_in_parts_gives_one_chunk_a_column() -> None:
    parts = pl.concat([FRAME, FRAME, FRAME], rechunk=False)
    picked = pick(parts, pl.col("k") == 4)
    assert_frame_equal(picked, parts.filter(pl.col("k") == 4))
    assert [picked[c].n_chunks() for c in picked.columns] == [1, 1, 1]


@pytest.mark.parametrize("how", ["left", "inner", "semi", "anti"])
@pytest.mark.parametrize("sides", ["both", "right empty", "left empty", "both empty"])
def test_joined_is_the_join(how: str, sides: str) -> None:
    left = FRAME.head(0) if sides in ("left empty", "both empty") else FRAME
    right = OTHER.head(0) if sides in ("right empty", "both empty") else OTHER
    expected = left.join(right, on="k", how=how, maintain_order="left")  # type: ignore[arg-type]
    assert_frame_equal(joined(left, right, "k", how, maintain_order="left"), expected)  # type: ignore[arg-type]
    assert_frame_equal(joined(left, right, ["k"], how), expected)  # type: ignore[arg-type]


def test_a_join_whose_columns_clash_is_left_to_polars() -> None:
    right = OTHER.head(0).rename({"v": "s"})
    assert_frame_equal(joined(FRAME, right, "k", "left"), FRAME.join(right, on="k", how="left"))
    assert "s_right" in joined(FRAME, right, "k", "left").columns


_INT_KEYS = st.one_of(st.none(), st.integers(0, 3))
_TEXT_KEYS = st.one_of(st.none(), st.sampled_from(["pod-a", "pod-b", "pod-é"]))


@st.composite
def _sides(draw: st.DrawFn) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
    key_types = draw(st.lists(st.sampled_from([pl.Int64, pl.UInt64, pl.UInt8, pl.String]), min_size=1, max_size=3))

    def frame(prefix: str) -> pl.DataFrame:
        rows = draw(st.integers(0, 12))
        columns = [pl.Series(f"k{k}", draw(st.lists(_TEXT_KEYS if t == pl.String else _INT_KEYS, min_size=rows,
                                                     max_size=rows)), dtype=t) for k, t in enumerate(key_types)]
        return pl.DataFrame([*columns, pl.Series(f"{prefix}row", list(range(rows)), dtype=pl.UInt32),
                             pl.Series(f"{prefix}text", [f"{prefix}{i}" for i in range(rows)], dtype=pl.String)])

    return frame("l"), frame("r"), [f"k{k}" for k in range(len(key_types))]


@settings(max_examples=300, deadline=None)
@given(sides=_sides(), how=st.sampled_from(["left", "inner", "semi", "anti"]))
def test_joined_by_the_compiled_pass_is_the_join(sides: tuple[pl.DataFrame, pl.DataFrame, list[str]],
                                                 how: str) -> None:
    left, right, on = sides
    answered: list[bool] = []
    compiled = extension.join_positions

    def counted(*args: object) -> object:
        found = compiled(*args)  # type: ignore[arg-type]
        answered.append(found is not None)
        return found

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(extension, "join_positions", counted)
        got = joined(left, right, on, how, maintain_order="left")  # type: ignore[arg-type]
    assert_frame_equal(got, left.join(right, on=on, how=how, maintain_order="left"))  # type: ignore[arg-type]
    # (a join of an empty side is mostly answered before the pass)
    assert answered == [extension.enabled()] if left.height and right.height else len(answered) <= 1


@pytest.mark.parametrize("log", FIXTURE_LOGS, ids=lambda log: log.rel)
def test_a_fixtures_analysis_is_the_same_with_every_join_by_polars(log: FixtureLog,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = dissect(log.path, log_format=log.log_format)
    monkeypatch.setattr(extension, "join_positions", lambda *args: None)
    reference = dissect(log.path, log_format=log.log_format)
    assert_frame_equal(compiled.requests, reference.requests)
    assert_frame_equal(compiled.phases, reference.phases)
