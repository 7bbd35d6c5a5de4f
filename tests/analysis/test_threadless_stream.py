"""A log without thread ids (Istio before 1.17) is windowed as one worker per origin (issue 29,
analysis/engine/lanes.py): its requests are emitted while it is read, its lanes inferred at the end, and the
capture is the one the same input gives held whole and analysed at ``finish`` (the engine's ``window_threadless=False``,
what every such log got before).

Every fixture capture without thread ids is fed in chunks of a few dozen lines with windows of a few hundred events
(requests straddle chunks and windows everywhere): requests, phases and loop frames, notes, summary and findings are
equal. A capture replayed many times with a settle after each copy (a follow of hours, ``replay.py``) holds a bounded
window and carry, and the lane lines and links of its end within the spill's budget.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from replay import replayer

from envoy_dissector.analysis.capture import Capture
from envoy_dissector.analysis.engine.carry import FIRST_OF, LAST_OF
from envoy_dissector.analysis.engine.events import NoEvents
from envoy_dissector.analysis.engine.streaming import StreamingAnalysis
from envoy_dissector.analysis.outputs.report import render
from envoy_dissector.parser.kinds import EventKind
from envoy_dissector.parser.pipeline import Diagnostics, parse

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
#: Every fixture capture whose format has no thread id (Istio's layouts before 1.17, the legacy 1.19 rewrites).
CASES = sorted(str(log.relative_to(FIXTURES)) for pattern in (
    "istio/*/envoy.log*", "istio-json-old/*/envoy.log*", "legacy-1.19/*/*/envoy.log*",
    "old-format/converted/*/envoy.log*", "debug-level/istio/*/envoy.log*") for log in FIXTURES.glob(pattern)) + [
    f"real/{name}" for name in (  # the real excerpts whose timed lines have no thread id
        "006-envoy-13068-stern-tabs-as-spaces-upstream-timeout.log", "012-istio-40241-old-tabs-debug-header-dump.log",
        "013-istio-42147-line-numbered-paste-policy-dump.log", "021-istio-1.13-old-tabs-trace-wasm-tls-cut-start.log",
        "022-istio-1.13-old-tabs-trace-healthcheck-complete.log",
        "023-istio-32037-kubectl-timestamps-tabs-as-spaces-caller-in-msg.log",
        "025-istio-39706-json-no-caller-escaped-multiline-msg.log",
        "054-envoy-17281-istio-1.10-trace-websocket-upgrade-headers.log",
        "061-envoy-21368-istio-1.13-debug-grpc-trailers-only-overflow.log",
        "065-envoy-17892-istio-json-1.11-trace-h2-frames.log",
        "068-istio-1.11-kubectl-logs-from-pod-start-pilot-agent-warning.log",
        "072-istio-graceful-shutdown-blog-debug-503-upstream-reset.log",
        "073-istio-header-grep-paste-with-commands-trace.log")]
#: Rows a chunk holds, and events a window grows by between two steps: small, so that requests are cut anywhere.
CHUNK_ROWS = 97
WINDOW_EVENTS = 300


@dataclass
class _Run:
    capture: Capture
    #: requests emitted (``on_finished``) before ``finish`` was called, and in all
    live: pl.DataFrame
    emitted: list[str]
    #: ``StreamingAnalysis.held_rows()`` after each part fed
    held: list[dict[str, int]]


def _run(parts: list[pl.DataFrame], diagnostics: Diagnostics, *, windowed: bool, settle: bool = False,
         **engine: Any) -> _Run:
    live: list[pl.DataFrame] = []
    emitted: list[str] = []

    def seen(requests: pl.DataFrame, _phases: pl.DataFrame) -> None:
        emitted.extend(requests["request_uid"])
        if not finishing:
            live.append(requests)

    finishing = False
    analysis = StreamingAnalysis(background=False, window_threadless=windowed, on_finished=seen, **engine)
    held = []
    for part in parts:
        analysis.add(part)
        if settle:
            analysis.settle()
        held.append(analysis.held_rows())
    finishing = True
    done = analysis.finish()
    capture = Capture(requests=done.requests, phases=done.phases, loop=done.loop, diagnostics_info=diagnostics,
                      notes=done.notes, stitching=done.stitching, queueing=done.queueing, facts=analysis.facts,
                      event_source=NoEvents(("a test's engine keeps no events",)))
    return _Run(capture, pl.concat(live) if live else pl.DataFrame(), emitted, held)


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    columns = sorted(frame.columns)
    return frame.select(columns).sort(columns, nulls_last=True)


def _said(capture: Capture) -> dict[str, Any]:
    return {"notes": capture.notes, "findings": [asdict(f) for f in capture.findings()],
            "summary": json.dumps(capture.summary(), sort_keys=True, default=str), "report": render(capture)}


def test_the_cases_are_every_fixture_capture_without_thread_ids() -> None:
    assert len(CASES) == 22 + 13 and all((FIXTURES / rel).exists() for rel in CASES)
    assert {"legacy-1.19/plain/workers/envoy.log.gz", "istio/workers/envoy.log.gz"} <= set(CASES)


@pytest.mark.parametrize("rel", CASES)
def test_a_log_without_thread_ids_windowed_gives_the_capture_it_gives_held_whole(rel: str) -> None:
    parsed = parse(FIXTURES / rel)
    events = parsed.events
    timed = events.filter(pl.col("ts_us").is_not_null())
    assert timed.height and timed["thread"].null_count() == timed.height  # (no thread ids at all)
    captured = not rel.startswith("real/")  # (a lab capture: thousands of lines, requests, slices)
    whole = _run([events], parsed.diagnostics, windowed=False)
    windowed = _run(list(events.iter_slices(CHUNK_ROWS)), parsed.diagnostics, windowed=True,
                    window_events=WINDOW_EVENTS)
    for name in ("requests", "phases", "loop"):
        ours, theirs = getattr(windowed.capture, name), getattr(whole.capture, name)
        assert theirs.height > 0 or not captured, name
        assert _sorted(ours).equals(_sorted(theirs)), (name, ours.height, theirs.height)
    assert _said(windowed.capture) == _said(whole.capture)
    # every request once, emitted live or at the end; held whole, none before the end
    final = windowed.capture.requests
    assert sorted(windowed.emitted) == sorted(final["request_uid"]) and not whole.live.height
    if captured and "debug-level" not in rel:  # (at debug level a response's end is too seldom logged for live)
        assert windowed.live.height >= final.height // 3, (windowed.live.height, final.height)
        # a live row has no lane yet (inferred at the end); the final row of the same request has its lane
        lanes = final.join(windowed.live.select("request_uid"), on="request_uid", how="semi")["thread"]
        assert windowed.live["thread"].null_count() == windowed.live.height and lanes.null_count() == 0
        assert lanes.max() < 0  # type: ignore[operator]  (inferred lanes are negative)


#: Captures of Envoy's own work (health checks, ext_authz calls, tracing flushes), fed with their thread ids removed:
#: its bursts, and the own work of its internal requests, are found on the lanes inferred at the end.
OWN_WORK = ["istio-thread/health-check/envoy.log.gz", "istio-thread/ext-authz/envoy.log.gz",
            "istio-thread/tracing-zipkin/envoy.log.gz"]


@pytest.mark.parametrize("rel", OWN_WORK)
def test_envoys_own_work_without_thread_ids_windowed_is_what_it_is_held_whole(rel: str) -> None:
    parsed = parse(FIXTURES / rel)
    events = parsed.events.with_columns(thread=pl.lit(None, dtype=pl.Int64))
    whole = _run([events], parsed.diagnostics, windowed=False)
    windowed = _run(list(events.iter_slices(CHUNK_ROWS)), parsed.diagnostics, windowed=True,
                    window_events=WINDOW_EVENTS)
    own = whole.capture.requests.filter("internal")["internal_work_us"].drop_nulls()
    assert own.len() or "health-check" in rel  # (the calls' and flushes' own work found on the lanes; checks: none)
    assert whole.capture.internal_work().height > 10
    for name in ("requests", "phases", "loop"):
        assert _sorted(getattr(windowed.capture, name)).equals(_sorted(getattr(whole.capture, name))), name
    assert windowed.capture.internal_work().sort(pl.all()).equals(whole.capture.internal_work().sort(pl.all()))
    assert _said(windowed.capture) == _said(whole.capture)
    assert windowed.live.height


#: The replayed follow: a two-worker capture (its workers' lines interleave out of time order) replayed this often.
REPLAYED = "legacy-1.19/plain/workers/envoy.log.gz"
COPIES = 20
SPILL_BUDGET = 4096
#: A held lane line or link holds at least three 8-byte numbers (line number, time, connection id).
MOST_HELD_ROWS = SPILL_BUDGET // 24
HELD_GAPS = 100
MAX_CARRIED = 32


def test_a_long_follow_without_thread_ids_holds_bounded_windows_and_lane_lines() -> None:
    """The window of the one worker holds the last copy's lines at most (each copy comes a second of log time after
    the previous one, and a settle ends it), the carry ``MAX_CARRIED`` connections' lines, and the lane lines and
    links wait in the spill within its budget: none grows with the copies. The final capture is the one the whole
    input gives held whole."""
    parsed = parse(FIXTURES / REPLAYED)
    copy = replayer(parsed.events)
    copies = [copy(k) for k in range(COPIES)]
    per_copy = parsed.events.height
    bounded = _run(copies, parsed.diagnostics, windowed=True, settle=True, spill_budget=SPILL_BUDGET,
                   held_gaps=HELD_GAPS, max_carried=MAX_CARRIED, window_events=WINDOW_EVENTS)
    whole = _run(copies, parsed.diagnostics, windowed=False, settle=True, spill_budget=SPILL_BUDGET,
                 held_gaps=HELD_GAPS, max_carried=MAX_CARRIED, window_events=WINDOW_EVENTS)

    assert whole.held[-1]["whole"] >= (COPIES - 1) * per_copy  # (held whole, the lines grow with the input)
    assert max(h["windows"] + h["whole"] for h in bounded.held) <= per_copy < COPIES * per_copy // 4
    connections = COPIES * parsed.events["conn_id"].drop_nulls().n_unique()
    # (a carried connection keeps a row per carry rule at most)
    assert max(h["carries"] for h in bounded.held) <= MAX_CARRIED * len(LAST_OF + FIRST_OF) < connections
    assert max(h["lanes"] + h["links"] for h in bounded.held) <= MOST_HELD_ROWS
    streams = parsed.events.select((pl.col("kind") == EventKind.NEW_STREAM).sum()).item()
    assert bounded.live.height >= (COPIES - 1) * streams // 2  # emitted while it was read
    assert _sorted(bounded.capture.requests).equals(_sorted(whole.capture.requests))
    assert _sorted(bounded.capture.loop).equals(_sorted(whole.capture.loop))
    assert _said(bounded.capture) == _said(whole.capture)
