"""Follow mode's flush on a pause (``iter_parse(flush_idle=True)``): what a live stream wrote before it went quiet
is handed on whole, its last record included, while the stream stays open; and the chunks add up to what a parse of
the same text gives."""
from __future__ import annotations

import gzip
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import polars as pl

from envoy_dissector.parser.pipeline import Chunk, iter_parse, parse
from envoy_dissector.parser.sources import Source, text_source

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
KEEPALIVE = FIXTURES / "istio-thread" / "keepalive" / "envoy.log.gz"


def _write(fd: int, data: bytes, *, close: bool = False) -> threading.Thread:
    """``data`` into the pipe on a thread of its own (a pipe holds 64 KiB: the writer waits for the reader)."""
    thread = threading.Thread(target=_write_all, args=(fd, data, close), daemon=True)
    thread.start()
    return thread


def _write_all(fd: int, data: bytes, close: bool) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    if close:
        os.close(fd)


def _until_settled(chunks: Iterator[Chunk]) -> list[Chunk]:
    got: list[Chunk] = []
    while not got or not got[-1].settled:
        got.append(next(chunks))
    return got


def _events(chunks: list[Chunk]) -> pl.DataFrame:
    return pl.concat([c.events for c in chunks]).drop("origin")


def _two_parts(lines: list[bytes], at: int) -> tuple[bytes, bytes]:
    return b"".join(lines[:at]), b"".join(lines[at:])


def _lines() -> list[bytes]:
    return gzip.decompress(KEEPALIVE.read_bytes()).splitlines(keepends=True)


def _record_start_from(lines: list[bytes], at: int) -> int:
    while not lines[at][:4].isdigit():  # (a record's first line starts with its time)
        at += 1
    return at


def test_a_quiet_stream_hands_on_its_last_record_while_it_stays_open() -> None:
    lines = _lines()
    at = _record_start_from(lines, 3000)
    first, second = _two_parts(lines, at)
    read_fd, write_fd = os.pipe()
    try:
        run = iter_parse(Source("live", path=Path(f"/proc/self/fd/{read_fd}")), flush_idle=True,
                         block_bytes=64 * 1024, stop_reading=lambda _first, _latest: False)
        chunks = iter(run)
        writer = _write(write_fd, first)
        got = _until_settled(chunks)  # (the writer is still open: only the pause ends the wait)
        writer.join()
        whole_first = parse(text_source(first.decode(), name="live"))
        assert _events(got).equals(whole_first.events.drop("origin"))
        assert run.diagnostics.lines_read == at

        writer = _write(write_fd, second)
        rest = []
        while writer.is_alive() or not rest or not rest[-1].settled:
            rest.append(next(chunks))
        os.close(write_fd)
        write_fd = -1
        rest += list(chunks)
        whole = parse(text_source((first + second).decode(), name="live"))
        assert _events(got + rest).equals(whole.events.drop("origin"))
        diag = run.diagnostics
        assert diag.lines_read == len(lines) == diag.lines_in_records + diag.lines_malformed
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)


def test_text_never_pauses_so_no_chunk_is_settled() -> None:
    text = gzip.decompress(KEEPALIVE.read_bytes()).decode()
    chunks = list(iter_parse(text_source(text), block_bytes=64 * 1024, flush_idle=True))
    assert chunks and not any(c.settled for c in chunks)  # (text and files never pause)


def test_a_pause_inside_a_record_cuts_it_and_its_late_lines_are_counted() -> None:
    lines = _lines()
    at = _record_start_from(lines, 3000) - 1  # (the last line of a record of several lines comes after the pause)
    assert not lines[at][:4].isdigit()
    first, second = _two_parts(lines, at)
    read_fd, write_fd = os.pipe()
    try:
        run = iter_parse(Source("live", path=Path(f"/proc/self/fd/{read_fd}")), flush_idle=True,
                         block_bytes=64 * 1024)
        chunks = iter(run)
        writer = _write(write_fd, first)
        got = _until_settled(chunks)
        writer.join()
        _write(write_fd, second, close=True)
        write_fd = -1
        got += list(chunks)
        diag = run.diagnostics
        assert diag.lines_read == len(lines) == diag.lines_in_records + diag.lines_malformed
        assert diag.lines_malformed == 1 + parse(text_source(b"".join(lines).decode())).diagnostics.lines_malformed
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)
