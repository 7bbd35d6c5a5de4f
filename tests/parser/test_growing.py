"""growing: a file read while it is written (a dashboard upload) gives the blocks of the finished file, reads only
bytes already written, and fails with the writer's reason (or when the writer stalls)."""
from __future__ import annotations

import gzip
import threading
import time
from pathlib import Path

import pytest

from envoy_dissector.parser.errors import InputError
from envoy_dissector.parser.growing import GrowingFile
from envoy_dissector.parser.sources import Block, Source, read_blocks

FIXTURE = Path("fixtures/istio-thread/workers/envoy.log.gz")


def _write_slowly(path: Path, data: bytes, growing: GrowingFile, piece: int, *, fail_at: int | None = None) -> None:
    """Append ``data`` in pieces, each flushed a moment before it is announced; fail after ``fail_at`` bytes."""
    with path.open("ab") as out:
        for pos in range(0, len(data), piece):
            if fail_at is not None and pos >= fail_at:
                growing.fail("the upload was cut off")
                return
            out.write(data[pos:pos + piece])
            out.flush()
            time.sleep(0.002)
            growing.wrote(len(data[pos:pos + piece]))
    growing.end()


def _read_growing(path: Path, data: bytes, block_bytes: int, piece: int,
                  fail_at: int | None = None) -> tuple[list[Block], list[int], BaseException | None]:
    """Blocks of the file read while a thread writes it; with ``written`` when each block came."""
    path.write_bytes(b"")
    growing = GrowingFile()
    writer = threading.Thread(target=_write_slowly, args=(path, data, growing, piece), kwargs={"fail_at": fail_at})
    blocks, written_then, error = [], [], None
    writer.start()
    try:
        for block in read_blocks(Source(path.name, path=path, growing=growing), block_bytes=block_bytes):
            blocks.append(block)
            written_then.append(growing.written)
    except InputError as exc:
        error = exc
    finally:
        writer.join()
    return blocks, written_then, error


def _complete(path: Path, data: bytes, block_bytes: int) -> list[tuple[bytes, int]]:
    path.write_bytes(data)
    return [(b.data, b.bytes_read) for b in read_blocks(Source(path.name, path=path), block_bytes=block_bytes)]


def test_blocks_of_a_growing_file_are_those_of_the_finished_file(tmp_path):
    data = gzip.decompress(FIXTURE.read_bytes())
    blocks, written_then, error = _read_growing(tmp_path / "up.log", data, block_bytes=8192, piece=3001)
    assert error is None
    assert len(blocks) > 20
    assert [(b.data, b.bytes_read) for b in blocks] == _complete(tmp_path / "whole.log", data, 8192)
    # every block was read from bytes already written (announced), never past them
    assert all(b.bytes_read <= w for b, w in zip(blocks, written_then, strict=True))
    # and the reader went along with the writer instead of waiting for its end
    assert written_then[0] < len(data)


def test_a_long_line_across_a_block_end_is_read_as_the_finished_file_reads_it(tmp_path):
    # a line with no line break in a block's tail sends the reader to the stream path, which waits too
    data = b"".join(b"%05d " % i + b"x" * (300 if i % 7 else 20_000) + b"\n" for i in range(60))
    blocks, _, error = _read_growing(tmp_path / "up.log", data, block_bytes=4096, piece=1000)
    assert error is None
    assert b"".join(b.data for b in blocks) == data
    assert [(b.data, b.bytes_read) for b in blocks] == _complete(tmp_path / "whole.log", data, 4096)


def test_a_writer_that_fails_fails_the_reader_with_its_reason(tmp_path):
    data = gzip.decompress(FIXTURE.read_bytes())
    blocks, _, error = _read_growing(tmp_path / "up.log", data, block_bytes=8192, piece=3001, fail_at=len(data) // 2)
    assert isinstance(error, InputError) and "the upload was cut off" in str(error) and "up.log" in str(error)
    assert 0 < sum(len(b.data) for b in blocks) <= len(data) // 2


def test_a_stalled_writer_fails_the_reader(tmp_path):
    path = tmp_path / "stalled.log"
    path.write_bytes(b"a line\n")
    growing = GrowingFile(stall_s=0.3)
    growing.wrote(7)
    started = time.monotonic()
    with pytest.raises(InputError, match="stopped growing"):
        list(read_blocks(Source(path.name, path=path, growing=growing), block_bytes=4096))
    assert 0.3 <= time.monotonic() - started < 5


def test_a_reader_after_the_end_reads_the_whole_file_at_once(tmp_path):
    path = tmp_path / "done.log"
    path.write_bytes(b"one\ntwo\n")
    growing = GrowingFile()
    growing.wrote(8)
    growing.end()
    assert [b.data for b in read_blocks(Source(path.name, path=path, growing=growing))] == [b"one\ntwo\n"]
