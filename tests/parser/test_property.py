"""Property tests (hypothesis): whatever lines come in, every one is accounted for, and the
fast path says what the grammar says."""
from __future__ import annotations

import gzip
import re

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from envoy_dissector.parser.classify import MASK, classify
from envoy_dissector.parser.errors import FormatError
from envoy_dissector.parser.pipeline import parse_text

FIXTURES = ["istio-thread/http2/envoy.log.gz", "istio-thread/retries-503/envoy.log.gz",
            "istio-thread/large-body/envoy.log", "envoy/keepalive/envoy.log.gz",
            "istio-json/keepalive/envoy.log.gz", "kubectl/timestamps/envoy.log.gz", "old-format/seed000/envoy.log"]
SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _read(path) -> list[str]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as fh:
        return fh.read().splitlines()


@pytest.fixture(scope="module")
def corpus(fixtures_dir) -> dict[str, list[str]]:
    """Real lines per fixture (a sample, to keep examples small)."""
    out = {}
    for rel in FIXTURES:
        lines = _read(fixtures_dir / rel)
        out[rel] = lines[:: max(1, len(lines) // 1500)]
    return out


garbage = st.one_of(
    st.text(max_size=80),  # any unicode (no surrogates), incl. control characters
    st.binary(max_size=60).map(lambda b: b.decode("latin-1")),
    st.just(""), st.just("   "), st.just("\t"),
    st.just("':path', '/x'"), st.just("\tthread=12"),
)


@st.composite
def soups(draw, corpus: dict[str, list[str]]) -> str:
    lines = corpus[draw(st.sampled_from(FIXTURES))]
    out: list[str] = []
    for _ in range(draw(st.integers(1, 40))):
        choice = draw(st.integers(0, 9))
        real = lines[draw(st.integers(0, len(lines) - 1))]
        if choice <= 4:
            out.append(real)
        elif choice <= 6:  # truncated anywhere
            out.append(real[: draw(st.integers(0, len(real)))])
        elif choice == 7:  # only the envelope prefix, message cut off
            cut = real.find("] ") + 2 if real.startswith("[") else real.find("\t", real.find("\t") + 1) + 1
            out.append(real[: max(cut, 0)])
        else:
            out.append(draw(garbage))
    text = "\n".join(out)
    if draw(st.booleans()):
        text += "\n"
    if draw(st.booleans()):
        text = text.replace("\n", "\r\n")
    return text


@given(data=st.data())
@SETTINGS
def test_every_line_is_accounted_for(corpus, data):
    text = data.draw(soups(corpus))
    try:
        parsed = parse_text(text)
    except FormatError:
        return  # too little of a known format in this soup: refusing is the right answer
    d = parsed.diagnostics
    body = text[:-2] if text.endswith("\r\n") else text.removesuffix("\n")
    physical = len(re.split(r"\r?\n", body)) if text else 0  # empty input has no lines; "\n" has one
    assert d.lines_read == physical
    assert d.lines_read == d.lines_in_records + d.lines_malformed
    assert d.records == parsed.events.height <= d.lines_read
    assert int(parsed.events["n_lines"].sum() or 0) == d.lines_in_records
    assert parsed.events["line_no"].is_unique().all()
    assert d.records == sum(d.events_by_kind.values())


@given(data=st.data())
@SETTINGS
def test_fast_path_agrees_on_soups(corpus, data):
    text = data.draw(soups(corpus))
    try:
        fast = parse_text(text, fast=True)
    except FormatError:
        return
    assert_frame_equal(fast.events, parse_text(text, fast=False).events)


@pytest.fixture(scope="module")
def messages(fixtures_dir) -> list[tuple[str, str]]:
    """(logger, first line of message) pairs from real captures, one per distinct shape."""
    frames = [parse_text("\n".join(_read(fixtures_dir / rel)) + "\n").events for rel in FIXTURES[:4]]
    records = pl.concat(frames).select("logger", first_line=pl.col("message").str.split("\n").list.first())
    shapes = records.with_columns(shape=pl.col("first_line").str.replace_all(MASK, "\x00"))
    return shapes.unique(subset=["logger", "shape"], keep="first", maintain_order=True).select(
        "logger", "first_line").rows()


_TOKEN = re.compile(MASK)
REPLACEMENTS = st.sampled_from(["0", "7", "12345678901234567890", "-3", "x1", "1a", "abc2def", "a.b-2", "0x1f",
                                "0xZZ", "''", "'q r'", '"s"', '"ConnectionId"', '"Foo"', "_9", "9_", "1.2.3"])


@given(data=st.data())
@SETTINGS
def test_fast_path_agrees_when_values_change_class(messages, data):
    """Lines of one shape whose masked values differ in kind (number vs word vs quoted) must not
    inherit the representative's parse: the grammar decides each class of value."""
    rows = []
    for _ in range(data.draw(st.integers(1, 30))):
        logger, line = messages[data.draw(st.integers(0, len(messages) - 1))]
        spots = list(_TOKEN.finditer(line))
        rows.append((logger, line))
        if spots:
            m = spots[data.draw(st.integers(0, len(spots) - 1))]
            rows.append((logger, line[: m.start()] + data.draw(REPLACEMENTS) + line[m.end():]))
    records = pl.DataFrame(rows, schema={"logger": pl.String, "first_line": pl.String}, orient="row")
    assert_frame_equal(classify(records, fast=True), classify(records, fast=False))
