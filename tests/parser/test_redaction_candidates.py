"""The compiled redaction candidates (``extension.redaction_candidates``) against the polars string tests they stand
in for (``redact._candidates_by_polars``, the reference): the same rows on real captures' lines, with and without a
multiline mask, with rules given extra names, and on generated messages built from the marks, words and tokens the
rules look for, their near-misses, other cases and characters beyond ASCII."""
from __future__ import annotations

import gzip
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_series_equal

from envoy_dissector.parser import extension
from envoy_dissector.parser.redact import (
    _LONG_TOKEN_VALUE,
    _MARKS,
    DEFAULT,
    Redaction,
    _candidates,
    _candidates_by_polars,
    redact_frame,
)
from tests.builders import FIXTURES

needs_native = pytest.mark.skipif(not extension.enabled(), reason="the compiled extension was not built or is off")

REAL = sorted((FIXTURES / "real").glob("*.log*"))
EXTRA = Redaction(headers=("x-tenant-*",), params=("ticket",))
PIECES = ["completed header: key=", "completed header: key", "c", "'", "' x,", " ,", "completed header: key=Cookie value=", "?", ";", "#", "%", "' ,", "',", "'  ,",
          "?code=", "&key=", ";sig=", "key=", "COOKIE", "Authorization", "bearer ", "eyJ", "x-tenant-id", "ticket=",
          "\n", "'x', 'y'", "=abcdefabcdefabcdefabcdefabcdefab", "=abcdefabcdefabcdefabcdefabcdefgz",
          "'Zz0123456789abcdefghijklmnopqrstuv", "é", "\u212a", "plain text", " ", "/a/b"]
MESSAGES = st.lists(st.one_of(st.none(), st.lists(st.sampled_from(PIECES), max_size=6).map("".join)),
                    min_size=1, max_size=30)


def _assert_same(messages: pl.Series, multiline: pl.Series | None, rules: Redaction = DEFAULT) -> None:
    frame = messages.to_frame()
    compiled = extension.redaction_candidates(messages, multiline, marks=_MARKS, words=rules.words,
                                              token=_LONG_TOKEN_VALUE)
    assert compiled is not None
    assert_series_equal(compiled, _candidates_by_polars(frame, "message", rules, multiline), check_names=False)


def _lines(path: Path) -> list[str]:
    opened = gzip.open(path, "rt", errors="replace") if path.suffix == ".gz" else path.open(errors="replace")
    with opened as lines:
        return lines.read().splitlines()


@needs_native
@pytest.mark.parametrize("path", REAL, ids=[p.name for p in REAL])
def test_real_capture_lines_give_the_same_rows(path: Path) -> None:
    """Each line of the capture as a message, and every run of eight lines as one (the dumps, multiline or not)."""
    texts = _lines(path)
    _assert_same(pl.Series("message", texts, pl.String), None)
    runs = pl.Series("message", ["\n".join(texts[i:i + 8]) for i in range(0, len(texts), 8)], pl.String)
    _assert_same(runs, None, EXTRA)
    _assert_same(runs, pl.Series([i % 3 != 0 for i in range(runs.len())], dtype=pl.Boolean))


@needs_native
@settings(max_examples=300, deadline=None)
@given(messages=MESSAGES, mask=st.lists(st.one_of(st.none(), st.booleans()), min_size=30, max_size=30))
def test_generated_messages_give_the_same_rows(messages: list[str | None], mask: list[bool | None]) -> None:
    series = pl.Series("message", messages, pl.String)
    _assert_same(series, None)
    _assert_same(series, pl.Series(mask[:len(messages)], dtype=pl.Boolean), EXTRA)


@needs_native
def test_redaction_takes_the_compiled_rows_and_redacts_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = pl.DataFrame({"message": ["completed header: key=cookie value=a=b", "GET /x?access_token=abc&y=1",
                                         "headers:\n'authorization', 'Bearer abc'", None, "nothing here"]})
    compiled = redact_frame(messages)
    assert _candidates(messages, "message", DEFAULT, None).to_list() == [0, 1, 2]
    monkeypatch.setenv("ENVOY_DISSECTOR_NATIVE", "0")
    assert extension.redaction_candidates(messages["message"], None, marks="x", words=["y"], token="z") is None
    assert_series_equal(redact_frame(messages)["message"], compiled["message"])
    assert compiled["message"].to_list()[:3] == ["completed header: key=cookie value=[redacted]",
                                                 "GET /x?access_token=[redacted]&y=1",
                                                 "headers:\n'authorization', '[redacted]'"]
