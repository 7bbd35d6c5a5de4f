"""The .trace.json export is valid Chrome Trace Event JSON: tracks, slices, async requests, flows."""
from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from pathlib import Path

import pytest

import envoy_dissector.analysis as ed
from envoy_dissector.analysis.outputs.trace_export import trace_events

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def trace() -> tuple[ed.Capture, dict]:
    cap = ed.dissect(ROOT / "fixtures/istio-thread/workers/envoy.log.gz")
    return cap, trace_events(cap)


def test_top_level_and_event_keys(trace: tuple[ed.Capture, dict]) -> None:
    _, t = trace
    assert t["displayTimeUnit"] in ("ns", "ms")
    allowed = {"M", "X", "b", "e", "s", "f"}
    for ev in t["traceEvents"]:
        assert ev["ph"] in allowed
        assert isinstance(ev["pid"], int) and isinstance(ev["tid"], int)
        if ev["ph"] != "M":
            assert isinstance(ev["ts"], (int, float)) and ev["ts"] >= 0
        if ev["ph"] == "X":
            assert ev["dur"] >= 1


def test_one_named_track_per_worker_with_non_overlapping_slices(trace: tuple[ed.Capture, dict]) -> None:
    cap, t = trace
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in t["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    slices = defaultdict(list)
    for e in t["traceEvents"]:
        if e["ph"] == "X":
            slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    assert set(slices) <= set(names)
    assert len(names) == cap.loop.select("origin", "thread").unique().height
    for spans in slices.values():  # X events must nest strictly per track: ours never overlap
        spans.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))


def test_requests_are_balanced_async_tracks_with_phases(trace: tuple[ed.Capture, dict]) -> None:
    cap, t = trace
    opened: Counter[tuple[str, str]] = Counter()
    for e in t["traceEvents"]:
        if e["ph"] == "b":
            opened[(e["id"], e["name"])] += 1
        elif e["ph"] == "e":
            opened[(e["id"], e["name"])] -= 1
    assert all(v == 0 for v in opened.values())
    ids = {e["id"] for e in t["traceEvents"] if e["ph"] == "b"}
    client = cap.requests.filter(~cap.requests["internal"] & cap.requests["life_end_us"].is_not_null())
    assert set(client["request_uid"]) <= ids
    phase_names = {e["name"] for e in t["traceEvents"] if e["ph"] == "b"}
    assert {"upstream_wait", "header_parse", "encode"} <= phase_names


def test_flows_pair_start_and_finish(trace: tuple[ed.Capture, dict]) -> None:
    _, t = trace
    starts = {e["id"]: e for e in t["traceEvents"] if e["ph"] == "s"}
    finishes = {e["id"]: e for e in t["traceEvents"] if e["ph"] == "f"}
    assert starts and set(starts) == set(finishes)
    for fid, s in starts.items():
        f = finishes[fid]
        assert f["bp"] == "e" and f["ts"] >= s["ts"] and f["tid"] == s["tid"]
