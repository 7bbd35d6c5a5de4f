"""The streaming analysis (analysis/streaming.py) gives what the whole-file analysis gives, on every fixture.

Each capture is parsed in tiny blocks (a few lines per chunk) and its workers' windows are cut every few hundred
events, so requests straddle chunk and window boundaries everywhere; the requests, phases and loop frames (sorted
both), the notes and the whole summary (diagnostics' line accounting, percentiles, workers, findings, quality,
TLS counts) must be equal to ``dissect``'s.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from truth import FIXTURES, capture_of, discover

from envoy_dissector.analysis.internal import HealthCheckBursts, WorkKind
from envoy_dissector.analysis.stream_capture import dissect_stream
from envoy_dissector.parser.errors import InputError

#: bytes per parser block: a few lines, so every chunk boundary cuts some request
BLOCK_BYTES = 4096
#: events a worker's window grows by between two cuts
WINDOW_EVENTS = 500


def _cases() -> list[Any]:
    seen: dict[tuple[Path, str | None], None] = {}
    for t in discover(("trace", "debug", "info")):
        seen.setdefault((t.log, t.log_format), None)
    manifest = json.loads((FIXTURES / "real" / "manifest.json").read_text(encoding="utf-8"))
    for excerpt in manifest["excerpts"]:
        if excerpt["format"] is not None:
            seen.setdefault((FIXTURES / "real" / excerpt["file"], None), None)
    # one origin whose Envoy restarted (its runs are origins ORIGIN#2, ...)
    seen.setdefault((FIXTURES / "kubectl" / "multi-pod" / "sequential.log.gz", None), None)
    for log in sorted((FIXTURES / "legacy-1.19").rglob("envoy.log*")) + sorted((FIXTURES / "old-format").rglob(
            "envoy.log*")):
        seen.setdefault((log, None), None)
    return [pytest.param(log, fmt, id=str(log.relative_to(FIXTURES))) for log, fmt in seen]


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    columns = sorted(frame.columns)
    return frame.select(columns).sort(columns, nulls_last=True)


def _summary(summary: dict[str, Any]) -> str:
    # How many records the parser's fast path handed to the grammar one by one depends on its block size (a
    # parser fact, not line accounting): the tiny blocks here change it, nothing else.
    summary["diagnostics"].pop("fallback_lines")
    return json.dumps(summary, indent=1, sort_keys=True, default=str)


@pytest.mark.parametrize(("log", "log_format"), _cases())
def test_streaming_equals_whole_file(log: Path, log_format: str | None) -> None:
    try:
        whole = capture_of(log, log_format)
    except InputError:
        with pytest.raises(InputError):
            dissect_stream(str(log), log_format=log_format, block_bytes=BLOCK_BYTES, window_events=WINDOW_EVENTS)
        return
    streamed = dissect_stream(str(log), log_format=log_format, block_bytes=BLOCK_BYTES, window_events=WINDOW_EVENTS)
    for name in ("requests", "phases", "loop"):
        ours, theirs = getattr(streamed, name), getattr(whole, name)
        assert set(ours.columns) == set(theirs.columns), name
        assert_frame_equal(_sorted(ours), _sorted(theirs), check_dtypes=True)
    assert streamed.notes == whole.notes
    assert _summary(streamed.summary()) == _summary(whole.summary())


@pytest.mark.parametrize("part_lines", [7, 64])
def test_health_check_bursts_fed_in_parts_are_the_whole_files(part_lines: int) -> None:
    """Each thread's lines fed a few at a time: every burst is found once, whole (a burst that straddles two parts
    is carried; the checker's first bursts come before its first result line and wait for it)."""
    whole = capture_of(FIXTURES / "istio-thread" / "health-check" / "envoy.log.gz")
    expected = whole.internal_work().filter(pl.col("kind") == WorkKind.HEALTH_CHECK.value)
    found = []
    for (origin, thread), lines in whole.events.filter(pl.col("thread").is_not_null()).partition_by(
            "origin", "thread", as_dict=True, maintain_order=True).items():
        checks = HealthCheckBursts(str(origin), int(thread))
        found += [checks.step(part) for part in lines.iter_slices(part_lines)]
        found.append(checks.step(lines.head(0), final=True))
    got = pl.concat(found).select(expected.columns)
    assert expected.height > 100
    assert_frame_equal(_sorted(got), _sorted(expected))


def test_a_request_cut_by_the_window_is_not_emitted_twice() -> None:
    """One worker, windows of a few events: each request is emitted once, by the window that saw its end."""
    log = FIXTURES / "istio-thread" / "keepalive" / "envoy.log.gz"
    emitted: list[str] = []
    streamed = dissect_stream(str(log), block_bytes=2048, window_events=60,
                              on_finished=lambda requests, _phases: emitted.extend(requests["request_uid"]))
    assert len(emitted) == len(set(emitted)) == streamed.requests.height > 1


def test_streamed_capture_refuses_request_lines() -> None:
    streamed = dissect_stream(str(FIXTURES / "istio-thread" / "keepalive" / "envoy.log.gz"))
    with pytest.raises(ValueError, match="keeps no log records"):
        streamed.request_lines(0)
