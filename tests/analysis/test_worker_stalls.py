"""Worker stalls (findings.worker_stalls): gaps between two adjacent statements of Envoy.

A real capture is paused at chosen points the way CPU throttling pauses a sidecar (every line logged at or
after the pause moves later by its length); the finding must count exactly the stalls a plain reading of the
raw log counts — per thread, ``socket event`` followed by ``read ready``/``write ready`` ≥ 100 µs later.
"""
from __future__ import annotations

import gzip
import itertools
import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from truth import FIXTURES, truth

from envoy_dissector.analysis import dissect
from envoy_dissector.analysis.findings import STALL_US, Finding

SOURCE = FIXTURES / "istio-thread" / "workers" / "envoy.log.gz"
START = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6})Z\t")
THREAD = re.compile(r"\tthread=(\d+)$")
STAMP = "%Y-%m-%dT%H:%M:%S.%f"
PAUSE_US = 400


def _records(lines: list[str]) -> list[tuple[int, datetime, int, str]]:
    """(line index, time, thread, first line) of every record: a record starts with a timestamp and a header
    dump continues it over several lines, the last of which ends with the thread id."""
    out = []
    starts = [i for i, line in enumerate(lines) if START.match(line)] + [len(lines)]
    for i, nxt in itertools.pairwise(starts):
        start = START.match(lines[i])
        thread = THREAD.search(lines[nxt - 1].rstrip() or lines[max(i, nxt - 2)])
        if start and thread:
            out.append((i, datetime.strptime(start[1], STAMP), int(thread[1]), lines[i]))
    return out


def _adjacent_pairs(lines: list[str]) -> list[tuple[int, int]]:
    """(gap µs, line index of the ready line) of every ``socket event`` → ``read/write ready`` on one thread."""
    by_thread: dict[int, list[tuple[datetime, int, str]]] = {}
    for i, ts, thread, text in _records(lines):
        by_thread.setdefault(thread, []).append((ts, i, text))
    pairs = []
    for recs in by_thread.values():
        recs.sort(key=lambda r: (r[0], r[1]))
        for (ts, _, text), (nts, ni, ntext) in itertools.pairwise(recs):
            if "socket event:" in text and ("] read ready" in ntext or "] write ready" in ntext):
                pairs.append((int((nts - ts) / timedelta(microseconds=1)), ni))
    return pairs


def _paused(lines: list[str], at: list[datetime]) -> list[str]:
    """Every record logged at or after each time in ``at`` moves ``PAUSE_US`` later."""
    out = []
    for line in lines:
        m = START.match(line)
        if m:
            ts = datetime.strptime(m[1], STAMP)
            shift = sum(PAUSE_US for t in at if ts >= t)
            line = (ts + timedelta(microseconds=shift)).strftime(STAMP) + "Z" + line[len(m[1]) + 1:]
        out.append(line)
    return out


def _stalls(log: Path) -> Finding | None:
    return next((f for f in dissect(str(log)).findings() if f.id == "worker-stalls"), None)


@pytest.fixture(scope="module")
def paused_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    lines = gzip.decompress(SOURCE.read_bytes()).decode().split("\n")
    pairs = [p for p in _adjacent_pairs(lines) if p[0] < 20]
    assert len(pairs) >= 40
    chosen = pairs[5::len(pairs) // 5][:5]  # five pauses spread over the capture
    at = [_records([lines[i]])[0][1] for _, i in chosen]
    out = tmp_path_factory.mktemp("stalls") / "envoy.log"
    out.write_text("\n".join(_paused(lines, at)))
    return out


def test_pauses_between_adjacent_statements_are_counted_as_the_raw_log_shows(paused_log: Path) -> None:
    lines = paused_log.read_text().split("\n")
    gaps = [g for g, _ in _adjacent_pairs(lines)]
    raw = [g for g in gaps if g >= STALL_US]
    assert len(raw) >= 5  # the five pauses (and any stall the capture had)
    found = _stalls(paused_log)
    assert found is not None
    assert found.title.endswith(f": {len(raw)} of {len(gaps)} back-to-back record pairs ≥ {STALL_US} µs apart")
    assert f"up to {max(raw):,} µs" in found.evidence
    assert "such stalls" in found.evidence  # enough stalls for a rate per request
    assert "CPU limit" in found.fix


def test_the_unpaused_capture_reports_only_its_own_stalls() -> None:
    lines = gzip.decompress(SOURCE.read_bytes()).decode().split("\n")
    raw = [g for g, _ in _adjacent_pairs(lines) if g >= STALL_US]
    found = _stalls(SOURCE)
    if not raw:
        assert found is None
    else:
        assert found is not None and f": {len(raw)} of " in found.title


def test_a_millisecond_capture_never_claims_stalls() -> None:
    """At a 1 ms tick two adjacent statements can straddle a tick: no stall rests on that."""
    ids = {f.id for f in truth("envoy/workers").capture().findings()}
    assert "worker-stalls" not in ids
