"""The engine (analysis/engine/streaming.py) gives the same capture however its input is cut: in small blocks (a few
dozen lines per chunk) with each worker's window cut every few hundred events, so requests straddle chunk and
window boundaries everywhere, as with the default blocks and windows (one window per worker for these captures).
The requests, phases and loop frames (sorted both), the notes and the whole summary (diagnostics' line accounting,
percentiles, workers, findings, quality, TLS counts) must be equal.

The captures are threaded ones whose workers log many windows of events, one per kind of work (HTTP/2, ext_authz,
health checks, tracing, Wasm, retries, several pods, restarts); a capture shorter than a window differs only by
its blocks, which the determinism test covers on a sample of every capture (tests/analysis/test_determinism.py,
``blocks-4KiB``). Until the whole-file engine was removed this test compared the two on every fixture.
"""
from __future__ import annotations

import gzip
import json
import re
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from truth import FIXTURES, capture_of, discover

from envoy_dissector.analysis import dissect
from envoy_dissector.analysis.engine import steps
from envoy_dissector.analysis.stages.internal import HealthCheckBursts, WorkKind

#: bytes per parser block: a few dozen lines, so chunk boundaries cut requests inside every window
BLOCK_BYTES = 16384
#: events a worker's window grows by between two cuts
WINDOW_EVENTS = 500


#: Captures (under fixtures/) with thread ids whose workers log many windows of ``WINDOW_EVENTS``: the two text
#: layouts, and one per kind of work. (Origins without thread ids are analysed whole at the end, however they are
#: cut; the envelope formats differ before the engine, in the parser.)
CASES = ["envoy/workers/envoy.log.gz", "istio-thread/workers/envoy.log.gz", "istio-thread/http2/envoy.log.gz",
         "istio-thread/ext-authz/envoy.log.gz", "istio-thread/health-check/envoy.log.gz",
         "istio-thread/tracing-zipkin/envoy.log.gz", "istio-thread/wasm-stats/envoy.log.gz",
         "istio-thread/retries-503/envoy.log.gz", "kubectl/multi-pod/interleaved.log.gz"]


def _cases() -> list[Any]:
    formats = {t.log: t.log_format for t in discover(("trace", "debug", "info"))}
    return [pytest.param(FIXTURES / rel, formats.get(FIXTURES / rel), id=rel) for rel in CASES]


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    columns = sorted(frame.columns)
    return frame.select(columns).sort(columns, nulls_last=True)


def _summary(summary: dict[str, Any]) -> str:
    # (the summary leaves out the run's work counters, which depend on the block size: analysis/capture.py RUN_COUNTERS)
    return json.dumps(summary, indent=1, sort_keys=True, default=str)


@pytest.mark.parametrize(("log", "log_format"), _cases())
def test_windows_and_blocks_cut_anywhere_give_the_same_capture(log: Path, log_format: str | None) -> None:
    whole = capture_of(log, log_format)
    batches: list[int] = []
    cut = dissect(str(log), log_format=log_format, block_bytes=BLOCK_BYTES, window_events=WINDOW_EVENTS,
                  on_finished=lambda requests, _phases: batches.append(requests.height))
    assert len(batches) > 3  # (windows were cut: else this tests the blocks alone)
    for name in ("requests", "phases", "loop"):
        ours, theirs = getattr(cut, name), getattr(whole, name)
        assert set(ours.columns) == set(theirs.columns), name
        assert_frame_equal(_sorted(ours), _sorted(theirs), check_dtypes=True)
    assert cut.notes == whole.notes
    assert _summary(cut.summary()) == _summary(whole.summary())


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
    # (16 KiB blocks: 16 windows emit, 21 with 4 KiB blocks at 2.6 times the CPU, each block a fixed step)
    streamed = dissect(str(log), block_bytes=16384, window_events=200,
                       on_finished=lambda requests, _phases: emitted.extend(requests["request_uid"]))
    assert len(emitted) == len(set(emitted)) == streamed.requests.height > 1


def _restarted(copies: int) -> str:
    """The keepalive capture ``copies`` times, each copy one second after the previous one: a proxy restarted
    ``copies - 1`` times (each copy has Envoy's boot lines)."""
    text = gzip.decompress((FIXTURES / "istio-thread" / "keepalive" / "envoy.log.gz").read_bytes()).decode()
    stamp = re.compile(r"(?m)^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)")
    first, last = (datetime.fromisoformat(m) for m in (stamp.findall(text)[0], stamp.findall(text)[-1]))
    span = timedelta(seconds=int((last - first).total_seconds()) + 2)
    return "".join(stamp.sub(lambda m, k=k: (datetime.fromisoformat(m.group(1)) + k * span).strftime(
        "%Y-%m-%dT%H:%M:%S"), text) for k in range(copies))


def test_many_restarts_are_finished_in_batches_with_the_same_result() -> None:
    text = _restarted(5)
    whole, streamed = dissect(text), dissect(text, window_events=300, block_bytes=8192)
    assert streamed.requests["origin"].n_unique() == 5
    for a, b in ((whole.requests, streamed.requests), (whole.phases, streamed.phases), (whole.loop, streamed.loop)):
        assert a.sort(pl.all()).equals(b.sort(pl.all()))
    assert _summary(streamed.summary()) == _summary(whole.summary())


def test_workers_fed_alike_step_in_different_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two workers fed at the same rate would reach a window's growth in the same chunk and step back to back,
    stalling the parser behind them; every worker but the first takes its first step early, by a share of a
    window that differs between workers. The result does not change."""
    from envoy_dissector.analysis.engine import streaming

    first_step: dict[int, int] = {}  # worker thread -> its pending rows at its first step
    order: list[int] = []  # worker threads in the order they appeared
    advance = streaming.StreamingAnalysis._advance

    def recorded(self: streaming.StreamingAnalysis, worker: Any) -> None:
        first_step.setdefault(worker.thread, worker.pending_rows)
        advance(self, worker)

    def appeared(self: streaming.StreamingAnalysis, origin: str, thread: int | None, lines: pl.DataFrame) -> None:
        if thread not in order:
            order.append(thread)  # type: ignore[arg-type]
        add_lines(self, origin, thread, lines)

    add_lines = streaming.StreamingAnalysis._add_worker_lines
    monkeypatch.setattr(streaming.StreamingAnalysis, "_advance", recorded)
    monkeypatch.setattr(streaming.StreamingAnalysis, "_add_worker_lines", appeared)
    log = FIXTURES / "istio-thread" / "workers" / "envoy.log.gz"
    window = 800
    streamed = dissect(str(log), block_bytes=16384, window_events=window)
    workers = [t for t in order if t in first_step]
    assert len(workers) >= 2, (order, first_step)
    shares = [streaming._stagger(order.index(t)) for t in workers]
    assert len(set(shares)) == len(shares)
    for t, share in zip(workers, shares, strict=True):  # each stepped once its early due was reached
        due = window - int(window * share)
        assert due <= first_step[t] < due + 400, (t, first_step[t], due)
    assert min(first_step[t] for t in workers[1:]) < window  # not all at a whole window
    assert_frame_equal(streamed.requests, capture_of(log).requests, check_row_order=False)


def _streamed_in_steps(log: Path, background: bool) -> tuple[Any, list[list[str]]]:
    """``dissect`` with the window steps on their own thread or in line; the batches ``on_finished`` saw."""
    batches: list[list[str]] = []
    streamed = dissect(str(log), block_bytes=16384, window_events=500, background_steps=background,
                       on_finished=lambda requests, _phases: batches.append(requests["request_uid"].to_list()))
    return streamed, batches


@pytest.mark.parametrize("log", [FIXTURES / "istio-thread" / "workers" / "envoy.log.gz",
                                 FIXTURES / "kubectl" / "multi-pod" / "sequential.log.gz"],
                         ids=["workers", "restarts"])
def test_window_steps_on_their_own_thread_give_what_steps_in_line_give(log: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The steps run on step threads, a worker's after its previous one and beside other workers', on what the
    intake held when it gave them, and add their output in the order they were given (a step's loop slices, gaps
    and health-check bursts made beside its stages, added after them): the same batches in the same order (a
    batch's own row order is polars' either way), the same requests and loop frames row for row, the same phase
    rows and summary."""
    from envoy_dissector.analysis.engine import streaming

    threads: set[str] = set()
    side_threads: set[str] = set()
    step, side = streaming.StreamingAnalysis._advance_step, streaming.StreamingAnalysis._lines_side

    def noted(self: streaming.StreamingAnalysis, *args: Any) -> Any:
        threads.add(threading.current_thread().name)
        return step(self, *args)

    def noted_side(self: streaming.StreamingAnalysis, *args: Any) -> Any:
        side_threads.add(threading.current_thread().name)
        return side(self, *args)

    monkeypatch.setattr(streaming.StreamingAnalysis, "_advance_step", noted)
    monkeypatch.setattr(streaming.StreamingAnalysis, "_lines_side", noted_side)
    inline, inline_batches = _streamed_in_steps(log, False)
    assert threads == side_threads == {threading.main_thread().name}
    threads.clear()
    side_threads.clear()
    background, background_batches = _streamed_in_steps(log, True)
    step_threads = {f"envoy-dissect-window_{n}" for n in range(steps.STEP_THREADS)}
    side_pool = {f"envoy-dissect-window-side_{n}" for n in range(steps.STEP_THREADS)}
    assert threads and threads <= step_threads, threads
    # (a worker with no new lines at the end has its loop closed on the step thread itself)
    assert side_threads & side_pool and side_threads <= side_pool | step_threads, side_threads
    assert len(background_batches) > 3
    assert [sorted(b) for b in background_batches] == [sorted(b) for b in inline_batches]
    assert_frame_equal(background.requests, inline.requests)
    assert_frame_equal(background.loop, inline.loop)
    assert_frame_equal(_sorted(background.phases), _sorted(inline.phases))
    assert _summary(background.summary()) == _summary(inline.summary())


def test_a_failing_window_step_is_raised_to_the_caller_and_its_thread_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    from envoy_dissector.analysis.engine import streaming

    calls = 0
    build = streaming.build_requests

    def failing(events: pl.DataFrame) -> pl.DataFrame:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise RuntimeError("step failed")
        return build(events)

    monkeypatch.setattr(streaming, "build_requests", failing)
    log = FIXTURES / "istio-thread" / "workers" / "envoy.log.gz"
    with pytest.raises(RuntimeError, match="step failed"):
        dissect(str(log), block_bytes=4096, window_events=400)
    # the steps given after the failing one were dropped, not run (but for those already running beside it)
    assert 3 <= calls <= 3 + steps.STEP_THREADS - 1
    assert not [t for t in threading.enumerate() if t.name.startswith("envoy-dissect-window")]
