"""The compiled header values (``extension.header_values``) against the regex extracts they stand in for
(``headers.header_values_by_polars``, the reference): the same values on real captures' lines and on generated
dumps built from dump lines, near-misses (spaces, missing quotes, carriage returns) and repeated names."""
from __future__ import annotations

import gzip
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from envoy_dissector.parser import extension
from envoy_dissector.parser.headers import HEADER_NAMES, header_values, header_values_by_polars
from tests.builders import FIXTURES

needs_native = pytest.mark.skipif(not extension.enabled(), reason="the compiled extension was not built or is off")

REAL = sorted((FIXTURES / "real").glob("*.log*"))
NAMES = [*HEADER_NAMES, ":Method", "hostname", "x-request", "it's", ""]
VALUES = ["GET", "", "/a?b='c'", "x', 'y", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "é", "200"]
LINES = st.one_of(
    st.tuples(st.sampled_from(NAMES), st.sampled_from(VALUES)).map(lambda nv: f"'{nv[0]}', '{nv[1]}'"),
    st.tuples(st.sampled_from(NAMES), st.sampled_from(VALUES), st.sampled_from([" ", "\r", "'", "',"])).map(
        lambda nv: f"'{nv[0]}', '{nv[1]}'{nv[2]}"),
    st.sampled_from(["request headers complete (end_stream=false):", "", " ':path', '/x'", "':path','/x'",
                     "':path', '/x", "':path', '"]),
)
DUMPS = st.lists(st.lists(LINES, max_size=8).map("\n".join), min_size=1, max_size=20)


def _assert_same(messages: pl.Series) -> None:
    assert extension.enabled()
    assert_frame_equal(header_values(messages), header_values_by_polars(messages))


@needs_native
@pytest.mark.parametrize("path", REAL, ids=[p.name for p in REAL])
def test_real_capture_lines_give_the_same_values(path: Path) -> None:
    """Every run of eight lines of the capture as one message (the dumps, and whatever else the capture holds)."""
    opened = gzip.open(path, "rt", errors="replace") if path.suffix == ".gz" else path.open(errors="replace")
    with opened as lines:
        texts = lines.read().splitlines()
    _assert_same(pl.Series("message", ["\n".join(texts[i:i + 8]) for i in range(0, len(texts), 8)], pl.String))


@needs_native
def test_nulls_and_messages_without_a_dump_give_nulls() -> None:
    messages = pl.Series("message", [None, "no dump here", "headers:\n':path', '/a'\n':path', '/b'"], pl.String)
    _assert_same(messages)
    assert header_values(messages)[":path"].to_list() == [None, None, "/a"]


@needs_native
@settings(max_examples=300, deadline=None)
@given(messages=DUMPS)
def test_generated_dumps_give_the_same_values(messages: list[str]) -> None:
    _assert_same(pl.Series("message", messages, pl.String))
