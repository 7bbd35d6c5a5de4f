"""content: uploads judged by their bytes; gzip decompressed as a stream, counted and inspected."""
from __future__ import annotations

import gzip

import pytest

from envoy_dissector.dashboard.content import MAX_LINE_BYTES, ContentMeter, ContentRefused

LINE = b"2026-11-22T01:09:40.050266Z\tinfo\tenvoy main source/server/server.cc:467\thello\tthread=1\n"


def meter_of(data: bytes, max_bytes: int = 10**9, step: int = 1000, **kw) -> ContentMeter:
    m = ContentMeter(max_bytes, **kw)
    for i in range(0, len(data), step):
        m.feed(data[i:i + step])
    m.finish()
    return m


def refusal(data: bytes, **kw) -> tuple[int, str]:
    with pytest.raises(ContentRefused) as err:
        meter_of(data, **kw)
    return err.value.status, str(err.value)


def test_text_and_gzip_counted_the_same():
    text = LINE * 500
    plain, packed = meter_of(text), meter_of(gzip.compress(text), step=7)
    assert (plain.kind, packed.kind) == ("text", "gzip")
    assert plain.text_bytes == packed.text_bytes == len(text) and plain.lines == packed.lines == 500
    assert packed.raw_bytes == len(gzip.compress(text))


def test_concatenated_gzip_members_are_one_stream():
    m = meter_of(gzip.compress(LINE * 3) + gzip.compress(LINE * 4), step=5)
    assert m.lines == 7


def test_the_cap_counts_decompressed_bytes():
    status, message = refusal(gzip.compress(LINE * 1000), max_bytes=len(LINE) * 999)
    assert status == 413 and "decompressed" in message


@pytest.mark.parametrize("data,status,words", [
    (b"", 400, "empty"),
    (gzip.compress(b"", mtime=0), 400, "holds no text"),
    (gzip.compress(LINE * 50, mtime=0)[:-9], 400, "ends early"),
    (gzip.compress(LINE, mtime=0)[:10] + b"\x07" + b"\0" * 40, 400, "not a valid gzip file"),  # reserved block type
    (gzip.compress(LINE, mtime=0) + b"trailing junk", 400, "data after the end"),
    (b"PK\x03\x04" + b"\0" * 100, 415, "zip archive"),
    (b"\x28\xb5\x2f\xfd" + b"\0" * 100, 415, "zstd"),
    (b"BZh91AY&SY" + b"\0" * 100, 415, "bzip2"),
    (b"\x00\x01\x02\x03" * 100, 415, "binary content (NUL bytes)"),
    (gzip.compress(b"\0" * 100_000, mtime=0), 415, "inside the gzip file"),
    (bytes(range(1, 9)) * 2000, 415, "binary content"),
])
def test_refusals(data, status, words):
    got, message = refusal(data)
    assert got == status and words in message, message


def test_a_line_longer_than_the_limit_is_refused_even_across_chunks():
    status, message = refusal(LINE + b"a" * 5000 + b"\n", max_line_bytes=4096, step=700)
    assert status == 415 and "line 2 is longer than" in message
    assert meter_of(LINE + b"a" * 4000 + b"\n" + LINE, max_line_bytes=4096, step=700).lines == 3
    assert MAX_LINE_BYTES == 16 * 2**20


def test_nul_bytes_after_the_start_are_left_to_the_parser():
    """A log whose tail was zero-filled by a crash still uploads (the parser accounts for the lines)."""
    m = meter_of(LINE * 2000 + b"\0" * 100 + b"\n")
    assert m.kind == "text" and m.lines == 2001


def test_ansi_colours_are_text():
    assert meter_of(b"\x1b[32m" + LINE * 10).kind == "text"
