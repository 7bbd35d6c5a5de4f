"""The compiled envelope scan (``parser/extension.py``, ``native/``) against the polars path it stands in for.

The polars path is the reference: every capture under ``fixtures/`` (lab captures and other people's excerpts,
whole and in small blocks, so that records straddle block boundaries) must parse to the same events and the
same diagnostics with the scan on and off, and so must generated blocks mixing record starts, continuation
lines, stray lines, carriage returns and invalid UTF-8.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from envoy_dissector.parser import extension
from envoy_dissector.parser.errors import InputError
from envoy_dissector.parser.formats import detection_by_id
from envoy_dissector.parser.pipeline import Parsed, parse
from tests.builders import FIXTURE_LOGS, FIXTURES, FixtureLog

needs_scan = pytest.mark.skipif(not extension.enabled(), reason="the compiled scan was not built (no cargo) or is off")

REAL = sorted((FIXTURES / "real").glob("*.log*"))


def test_missing_build_is_noticed() -> None:
    """``pip install`` builds the scan where cargo is found (the build is optional, so that the package installs
    without it): a build that failed must not pass unnoticed as a run of the scan."""
    if extension.available():
        return
    if os.environ.get("ENVOY_DISSECTOR_REQUIRE_NATIVE") or shutil.which("cargo"):
        pytest.fail("cargo is here but the compiled scan did not build: see `pip install -e . -v`")


def _parse(path: Path, scan: bool, monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> tuple[Parsed | str, int]:
    """The parse with the scan on or off, and how many blocks the scan took."""
    monkeypatch.setenv("ENVOY_DISSECTOR_NATIVE", "1" if scan else "0")
    calls = []
    real_scan = extension.scan_text

    def counted(*args: Any) -> Any:
        found = real_scan(*args)
        calls.append(found is not None)
        return found

    monkeypatch.setattr(extension, "scan_text", counted)
    try:
        parsed: Parsed | str = parse(path, **kwargs)
    except InputError as exc:
        parsed = str(exc)
    finally:
        monkeypatch.setattr(extension, "scan_text", real_scan)
    return parsed, sum(calls)


def _assert_same(path: Path, monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> int:
    reference, _ = _parse(path, False, monkeypatch, **kwargs)
    scanned, blocks = _parse(path, True, monkeypatch, **kwargs)
    if isinstance(reference, str) or isinstance(scanned, str):
        assert scanned == reference
        return blocks
    assert_frame_equal(scanned.events, reference.events)
    assert scanned.diagnostics.as_dict() == reference.diagnostics.as_dict()
    return blocks


def _scan_applies(fx: FixtureLog) -> bool:
    return fx.expected_format not in ("istio-json",) and fx.top != "kubectl"


@needs_scan
@pytest.mark.parametrize("fx", FIXTURE_LOGS, ids=[f.rel for f in FIXTURE_LOGS])
def test_lab_captures_parse_the_same(fx: FixtureLog, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = _assert_same(fx.path, monkeypatch, log_format=fx.log_format)
    assert (blocks > 0) == _scan_applies(fx)


@needs_scan
@pytest.mark.parametrize("fx", [f for f in FIXTURE_LOGS if _scan_applies(f)][::12],
                         ids=[f.rel for f in FIXTURE_LOGS if _scan_applies(f)][::12])
def test_lab_captures_in_small_blocks(fx: FixtureLog, monkeypatch: pytest.MonkeyPatch) -> None:
    """Records straddle block boundaries: the lines held back for the next block are cut in bytes."""
    assert _assert_same(fx.path, monkeypatch, log_format=fx.log_format, block_bytes=16384) > 1


@needs_scan
@pytest.mark.parametrize("path", REAL, ids=[p.name for p in REAL])
def test_real_excerpts_parse_the_same(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _assert_same(path, monkeypatch)
    if REAL.index(path) % 4 == 0:  # (a sample in small blocks: the lab captures above are cut in many more)
        _assert_same(path, monkeypatch, block_bytes=1024)


ISTIO = detection_by_id("istio-thread").compiled


def _start(ts: int, level: str, logger: str, message: str, thread: int) -> str:
    return (f"2026-11-27T03:{ts // 60 % 60:02d}:{ts % 60:02d}.{ts * 7919 % 10 ** 6:06d}Z\t{level}\tenvoy {logger} "
            f"source/common/http/conn_manager_impl.cc:{100 + ts % 50}\t{message}\tthread={thread}")


_messages = st.sampled_from([
    "[C1][S2] request headers complete (end_stream=true):", "[C1] read returns: 120", "[C3] closing data_to_write=0",
    "[C1][S2] encoding headers via codec (end_stream=false):", "ends with a colon:", "ünïcödé message ✓",
    "[Tags: \"ConnectionId\":\"7\"] new stream", "a\ttab inside", "thread=5 in the middle", "",
])
_continuations = st.sampled_from([
    "':authority', 'example.com'", "':path', '/a?b=c'", "'cookie', 'session=abc123'", "", "   ", "\tthread=12",
    "  indented detail", "}", "key: value", "policy {", ".",
])
_strays = st.sampled_from(["... omitted", "some other program's output", "=====", "[no envelope here]"])


@st.composite
def _blocks(draw: st.DrawFn) -> bytes:
    lines: list[bytes] = []
    for i in range(draw(st.integers(1, 40))):
        kind = draw(st.sampled_from(["start", "start", "cont", "cont", "stray"]))
        if kind == "start":
            text = _start(i, draw(st.sampled_from(["trace", "debug", "info", "warning"])),
                          draw(st.sampled_from(["http", "connection", "router", "pool"])), draw(_messages),
                          draw(st.integers(1, 30)))
        else:
            text = draw(_continuations if kind == "cont" else _strays)
        line = text.encode()
        if draw(st.integers(0, 30)) == 0:
            line += b"\r"  # a CRLF line: the whole block goes the polars way
        if draw(st.integers(0, 30)) == 0:
            line += b"\xff\xfe"  # invalid UTF-8: likewise
        lines.append(line)
    return b"\n".join(lines) + (b"\n" if draw(st.booleans()) else b"")


@needs_scan
@settings(max_examples=60, deadline=None)
@given(block=_blocks(), size=st.sampled_from([None, 256, 1024]))
def test_generated_blocks_parse_the_same(block: bytes, size: int | None) -> None:
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as monkeypatch:
        path = Path(folder) / "envoy.log"
        path.write_bytes(block)
        _assert_same(path, monkeypatch, format="istio-thread", block_bytes=size)


def _columns(scan: extension.TextScan | None) -> dict[str, list[Any]]:
    assert scan is not None
    return {**scan.records.to_dict(as_series=False), **{f"bad_{k}": v for k, v in
                                                        scan.malformed.to_dict(as_series=False).items()}}


@needs_scan
def test_scan_folds_cuts_the_suffix_and_sets_stray_lines_aside() -> None:
    first = _start(1, "debug", "http", "[C1][S2] request headers complete (end_stream=true):", 21)
    second = _start(2, "trace", "connection", "[C1] read returns: 120", 22)
    block = "\n".join(["stray before any record", first, "':authority', 'example.com'", "':path', '/'",
                       "\tthread=21", second, "... omitted"]).encode() + b"\n"
    found = _columns(extension.scan_text([(block, len(block))], 10, ISTIO))
    prefix = first[: first.index("[C1]")]
    assert found["line_no"] == [11, 15]
    assert found["n_lines"] == [4, 1]
    # the suffix is the end-anchored match: Istio's trailer on a line of its own, after the header dump
    assert found["message"] == [
        "[C1][S2] request headers complete (end_stream=true):\tthread=21\n':authority', 'example.com'\n"
        "':path', '/'\n", "[C1] read returns: 120"]
    assert found["suffix"] == ["\tthread=21", "\tthread=22"]
    assert found["prefix"][0] == prefix
    assert found["bad_line_no"] == [10, 16]
    assert found["bad_raw"] == ["stray before any record", "... omitted"]


@needs_scan
def test_scan_reads_only_up_to_each_stop_and_numbers_lines_across_parts() -> None:
    held = (_start(1, "debug", "http", "[C1] held", 3) + "\n").encode()
    block = (_start(2, "debug", "http", "[C1] next", 3) + "\n" + _start(3, "debug", "http", "[C1] later", 3)
             + "\n").encode()
    stop = block.index(b"\n") + 1
    found = _columns(extension.scan_text([(held, len(held)), (block, stop)], 5, ISTIO))
    assert found["line_no"] == [5, 6]
    assert found["message"] == ["[C1] held", "[C1] next"]
    assert extension.last_start(block, ISTIO) == stop
    assert extension.last_start(b"no record here\n", ISTIO) is None


@needs_scan
@pytest.mark.parametrize("block", [b"a\r\nb\n", b"\xff\xfe\n", b"x" * 64 + b"\n"])
def test_scan_leaves_what_the_line_splitter_would_change_to_the_polars_path(
        block: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVOY_DISSECTOR_MAX_LINE_BYTES", "32")
    assert extension.scan_text([(block, len(block))], 1, ISTIO) is None


@needs_scan
def test_line_counts_match_the_line_splitter() -> None:
    for data in (b"", b"a", b"a\n", b"a\nb", b"a\n\n", b"\n", b"\n\n\n"):
        expected = pl.Series([data.decode()]).str.split("\n").list.len()[0] if data else 0
        expected -= data.endswith(b"\n")
        assert extension.line_count(data) == expected, data
    assert extension.count_newlines(b"a\nb\nc\n", 3) == 1
