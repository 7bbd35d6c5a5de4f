"""Sources (parser/sources.py): files, gzip, globs, stdin, errors, and block chunking."""
from __future__ import annotations

import gzip
import random
import shutil
import subprocess
import sys

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from envoy_dissector.parser import sources
from envoy_dissector.parser.errors import InputError
from envoy_dissector.parser.pipeline import iter_parse, parse
from envoy_dissector.parser.sources import Source, expand, read_blocks, text_source

CLI = [sys.executable, "-m", "envoy_dissector.cli.main"]


def gunzip_to(src, dst):
    with gzip.open(src, "rb") as fin, open(dst, "wb") as fout:
        shutil.copyfileobj(fin, fout)
    return dst


def test_gzip_and_plain_give_the_same_events(tmp_path, fixture_by_rel, parsed_fixture):
    fx = fixture_by_rel("istio-thread/workers/envoy.log.gz")
    plain = gunzip_to(fx.path, tmp_path / "envoy.log")
    a = parsed_fixture(fx)
    b = parse(plain)
    assert_frame_equal(a.events.drop("origin"), b.events.drop("origin"))
    assert b.events["origin"].unique().to_list() == [str(plain)]
    # a gzip file whose name does not say so is still recognised by its magic bytes
    odd = tmp_path / "capture.txt"
    shutil.copy(fx.path, odd)
    assert_frame_equal(parse(odd).events.drop("origin"), b.events.drop("origin"))


def test_glob_expands_sorted_and_keeps_origins(fixture_by_rel, fixtures_dir):
    pattern = str(fixtures_dir / "istio" / "*" / "envoy.log.gz")
    sources = expand(pattern)
    assert [s.name for s in sources] == sorted(str(p) for p in (fixtures_dir / "istio").glob("*/envoy.log.gz"))
    parsed = parse(pattern)
    singles = [parse(s.name) for s in sources]
    assert parsed.diagnostics.lines_read == sum(p.diagnostics.lines_read for p in singles)
    assert parsed.diagnostics.records == sum(p.diagnostics.records for p in singles)
    assert parsed.events["origin"].unique(maintain_order=True).to_list() == [s.name for s in sources]
    assert_frame_equal(parsed.events, pl.concat([p.events for p in singles]))


def test_several_paths_in_one_call(fixture_by_rel):
    a, b = fixture_by_rel("istio/keepalive/envoy.log.gz"), fixture_by_rel("old-format/seed000/envoy.log")
    parsed = parse([a.path, b.path])
    assert parsed.events["origin"].unique(maintain_order=True).to_list() == [str(a.path), str(b.path)]
    assert parsed.diagnostics.by_origin[str(b.path)]["records"] == parse(b.path).diagnostics.records


@pytest.mark.parametrize("compressed", [False, True], ids=["zcat-pipe", "gzip-on-stdin"])
def test_stdin_through_the_cli(tmp_path, fixture_by_rel, parsed_fixture, compressed):
    fx = fixture_by_rel("istio-thread/keepalive/envoy.log.gz")
    data = fx.path.read_bytes() if compressed else gzip.decompress(fx.path.read_bytes())
    out = tmp_path / "events.parquet"
    run = subprocess.run([*CLI, "parse", "-", "-q", "-o", str(out)], input=data, capture_output=True, timeout=120)
    assert run.returncode == 0, run.stderr.decode()
    d = parsed_fixture(fx).diagnostics
    assert f"lines read {d.lines_read}: in records {d.lines_in_records}, malformed 0" in run.stdout.decode()
    events = pl.read_parquet(out)
    assert events["origin"].unique().to_list() == ["<stdin>"]
    assert_frame_equal(events.drop("origin"), parsed_fixture(fx).events.drop("origin"), check_dtypes=False)


def test_zcat_shell_pipe(fixture_by_rel):
    if shutil.which("zcat") is None:
        pytest.skip("no zcat on this machine")
    fx = fixture_by_rel("envoy/keepalive/envoy.log.gz")
    cmd = f"zcat {fx.path} | {sys.executable} -m envoy_dissector.cli.main parse - --json -q"
    run = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    import json

    diag = json.loads(run.stdout)
    assert diag["format"] == "envoy" and diag["lines_malformed"] == 0
    assert diag["lines_read"] == diag["lines_in_records"] == parse(fx.path).diagnostics.lines_read


def test_missing_file_exit_code_and_one_line_error(tmp_path):
    missing = tmp_path / "nope.log"
    run = subprocess.run([*CLI, "parse", str(missing)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert run.stderr.strip() == f"envoy-dissect: error: {missing}: no such file"
    assert "Traceback" not in run.stderr and run.stdout == ""
    with pytest.raises(InputError) as err:
        expand([str(missing)])
    assert err.value.path == str(missing)


def test_directory_gives_a_clear_error(fixtures_dir):
    with pytest.raises(InputError, match="is a directory; give the log files inside it"):
        expand(str(fixtures_dir))
    run = subprocess.run([*CLI, "parse", str(fixtures_dir)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "is a directory" in run.stderr and "Traceback" not in run.stderr


def test_empty_glob_and_no_input(tmp_path):
    with pytest.raises(InputError, match="no file matches this pattern"):
        expand(str(tmp_path / "*.log"))
    with pytest.raises(InputError, match="no input given"):
        expand([])


def test_corrupt_gzip_is_an_input_error(tmp_path, fixture_by_rel):
    data = fixture_by_rel("istio/keepalive/envoy.log.gz").path.read_bytes()
    bad = tmp_path / "cut.log.gz"
    bad.write_bytes(data[: len(data) // 2])  # truncated download
    with pytest.raises(InputError, match="read failed"):
        parse(bad)


def test_read_blocks_yields_whole_lines(tmp_path):
    path = tmp_path / "x.log"
    lines = [f"line {i} " + "x" * (i % 50) for i in range(2000)]
    path.write_text("\n".join(lines))  # no final newline
    blocks = list(read_blocks(Source(str(path), path=path), block_bytes=1000))
    assert len(blocks) > 20
    assert b"".join(b.data for b in blocks) == path.read_bytes()
    for b in blocks:
        assert b is blocks[-1] or b.data.endswith(b"\n")
    assert blocks[-1].bytes_read == path.stat().st_size


@pytest.mark.parametrize("block", [64, 1000, 4096])
@pytest.mark.parametrize("final_newline", [True, False])
def test_a_regular_file_reads_as_a_stream_of_the_same_bytes_does(tmp_path, block, final_newline):
    """Files are read with ``os.pread`` up to the last newline of each block (sources._file_blocks); lines
    longer than a block send the rest of the file to the stream reader. Both give the same lines."""
    rng = random.Random(block)
    lines = [f"l{i} " + "x" * rng.choice([0, 5, 40, 200, 3 * block]) for i in range(600)]
    data = ("\n".join(lines) + ("\n" if final_newline else "")).encode()
    path = tmp_path / "x.log"
    path.write_bytes(data)
    from_file = list(read_blocks(Source(str(path), path=path), block_bytes=block))
    with open(path, "rb") as fh:  # the same bytes through the stream reader
        from_stream = list(sources._stream_blocks(fh, None, str(path), block, 0))
    assert b"".join(b.data for b in from_file) == b"".join(b.data for b in from_stream) == data
    for blocks in (from_file, from_stream):
        assert all(b.data.endswith(b"\n") for b in blocks[:-1])
        assert blocks[-1].bytes_read == len(data)


def test_a_failed_file_read_is_an_input_error_as_a_failed_stream_read_is(tmp_path, monkeypatch):
    path = tmp_path / "x.log"
    path.write_bytes(b"line\n" * 1000)

    def failing(fd: int, size: int, offset: int) -> bytes:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(sources.os, "pread", failing)
    with pytest.raises(InputError, match=r"read failed: .*Input/output error"):
        list(read_blocks(Source(str(path), path=path), block_bytes=1024))


def test_a_file_of_short_lines_never_needs_the_stream_reader(tmp_path, monkeypatch):
    path = tmp_path / "x.log"
    path.write_bytes(b"".join(b"line %d %s\n" % (i, b"y" * (i % 70)) for i in range(5000)))

    def refuse(*args: object) -> None:
        raise AssertionError("the stream reader was used")

    monkeypatch.setattr(sources, "_stream_blocks", refuse)
    blocks = list(read_blocks(Source(str(path), path=path), block_bytes=4096))
    assert b"".join(b.data for b in blocks) == path.read_bytes()
    assert all(len(b.data) <= 4096 and b.data.endswith(b"\n") for b in blocks)


@pytest.mark.parametrize(("rel", "block"), [
    ("kubectl/multi-pod/interleaved.log.gz", 4096), ("istio-thread/large-body/envoy.log", 4096),
    ("old-format/seed000/envoy.log", 4096), ("envoy/workers/envoy.log.gz", 16384),
    ("istio-json/keepalive/envoy.log.gz", 32768), ("custom/keepalive/envoy.log.gz", 16384)])
def test_tiny_blocks_give_the_same_events(rel, block, fixture_by_rel, parsed_fixture):
    """Blocks of 4-32 KiB cut header dumps and multi-pod interleavings; nothing may change."""
    fx = fixture_by_rel(rel)
    whole = parsed_fixture(fx)
    run = iter_parse(fx.path, log_format=fx.log_format, block_bytes=block)
    chunks = list(run)
    diag = run.diagnostics
    assert len(chunks) > 10
    assert_frame_equal(pl.concat([c.events for c in chunks]), whole.events)
    for name in ("lines_read", "lines_in_records", "lines_malformed", "records", "records_unknown"):
        assert getattr(diag, name) == getattr(whole.diagnostics, name), name
    assert diag.by_origin == whole.diagnostics.by_origin


def test_quiet_origin_keeps_memory_bounded_and_loses_nothing(tmp_path, fixture_by_rel, monkeypatch):
    """One pod logs at the start and the end, another 16k lines between: the tail held back for the
    quiet pod's open record is capped (10k lines), so that record comes out late — but whole, once."""
    import envoy_dissector.parser.pipeline as pipeline

    src = gzip.open(fixture_by_rel("istio-thread/workers/envoy.log.gz").path, "rt").read().splitlines()
    quiet = [f"[pod/quiet/istio-proxy] {line}" for line in src[:3]]
    busy = [f"[pod/busy/istio-proxy] {line}" for line in src * 2]
    path = tmp_path / "pods.log"
    path.write_text("\n".join(quiet + busy + quiet[:1]) + "\n")
    held: list[int] = []
    real = pipeline._split_carry

    def spy(lines, fmt, max_hold):
        keep, hold = real(lines, fmt, max_hold)
        held.append(hold.height)
        return keep, hold

    monkeypatch.setattr(pipeline, "_split_carry", spy)
    whole = parse(path)
    chunked = parse(path, block_bytes=16384)
    assert max(held) <= 10_000 + 200  # the cap, plus one block
    d = chunked.diagnostics
    assert d.lines_read == len(quiet) + len(busy) + 1 == d.lines_in_records
    key = ["origin", "line_no"]
    assert_frame_equal(chunked.events.sort(key), whole.events.sort(key))
    assert not chunked.events["line_no"].equals(whole.events["line_no"])  # the capped record came out late


def test_text_source_and_progress_callback(fixture_by_rel):
    fx = fixture_by_rel("istio-thread/retries-503/envoy.log.gz")
    text = gzip.decompress(fx.path.read_bytes()).decode()
    seen: list[int] = []
    parsed = parse(fx.path, progress=seen.append, block_bytes=64 * 1024)
    assert sum(seen) == len(text.encode())
    assert_frame_equal(parse(text_source(text, name=str(fx.path))).events, parsed.events)


def test_empty_inputs_have_no_lines(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    for parsed in (parse(empty), parse(text_source(""))):
        assert parsed.events.height == 0 and parsed.diagnostics.lines_read == 0
        assert dict(parsed.events.schema) == dict(parse(text_source("")).events.schema)


def _reference_lines(text: str) -> list[str]:
    body = text[:-1] if text.endswith("\n") else text
    return [line.removesuffix("\r") for line in body.split("\n")]


@pytest.mark.parametrize("text", [
    "a\rb\n\r\n\rx\n  \r\n#c\n\"a\"b\n\n", "x\r", "a\nb", "a\r\r\nb\r", "\n", "\r", "\n\n\n", "é\n\x00z\r\n",
    "a\x1fb\r\nc",  # holds the reader's separator: split the slow way
])
def test_lines_frame_matches_str_split(text):
    from envoy_dissector.parser.pipeline import _lines_frame
    from envoy_dissector.parser.sources import Block

    frame = _lines_frame(Block("o", text.encode(), len(text)), 7)
    assert frame["raw"].to_list() == _reference_lines(text)
    assert frame["line_no"].to_list() == list(range(7, 7 + frame.height))


@given(st.text(alphabet=st.sampled_from(list("ab \t\r\n'\",#é\x00")), max_size=200))
@settings(max_examples=300, deadline=None)
def test_lines_frame_on_random_text(text):
    from envoy_dissector.parser.pipeline import _lines_frame
    from envoy_dissector.parser.sources import Block

    if text:
        assert _lines_frame(Block("o", text.encode(), len(text)))["raw"].to_list() == _reference_lines(text)


@pytest.mark.parametrize("data", [b"a\xffb\n", b"\xe2\x82\nx\xe2\x82x", b"\xf0\x9f\x98\r\n\xed\xa0\x80",
                                  b"\xc0\xaf\n\n"])
def test_lines_frame_replaces_invalid_utf8_like_python(data):
    from envoy_dissector.parser.pipeline import _lines_frame
    from envoy_dissector.parser.sources import Block

    expected = _reference_lines(data.decode("utf-8", errors="replace"))
    assert _lines_frame(Block("o", data, len(data)))["raw"].to_list() == expected
