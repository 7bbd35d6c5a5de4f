"""A log followed for hours (``analyze --follow``, ``watch``: the streaming engine with ``settle`` whenever the log
goes quiet, issue 29): what the engine keeps of the whole run for the final report — the record gaps behind the
observer and stall findings, the internal work bursts — is held in memory within a bound that does not grow with
the input, and the final capture (findings, summary, report) is the one the same input gives held whole.

The input is a capture replayed ten times (``replay.py``: each copy later, with ids of its own), a settle after each
copy; the engine is run bounded (gaps folded into counts beyond ``HELD_GAPS``, finished rows spilled beyond
``SPILL_BUDGET`` bytes) and unbounded (neither), and the held rows are counted after every copy.
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
from envoy_dissector.analysis.engine.events import NoEvents
from envoy_dissector.analysis.engine.streaming import StreamingAnalysis
from envoy_dissector.analysis.findings import record_gaps
from envoy_dissector.analysis.gap_counts import GapCounts
from envoy_dissector.analysis.outputs.report import render
from envoy_dissector.parser.kinds import EventKind
from envoy_dissector.parser.pipeline import Diagnostics, parse

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
#: The health checker's bursts (worker by worker) and ext_authz calls' (internal requests, window by window).
CASES = ["istio-thread/health-check/envoy.log.gz", "istio-thread/ext-authz/envoy.log.gz"]
COPIES = 10
HELD_GAPS = 100
SPILL_BUDGET = 4096
#: A burst row holds two 8-byte times at least: held bursts fit the spill's budget in this many rows.
MOST_HELD_BURSTS = SPILL_BUDGET // 16
UNBOUNDED = 10**12


@dataclass
class _Followed:
    capture: Capture
    #: ``StreamingAnalysis.held_rows()`` after each copy
    held: list[dict[str, int]]


def _follow(copies: list[pl.DataFrame], diagnostics: Diagnostics, *, held_gaps: int, spill_budget: int,
            **bounds: int) -> _Followed:
    engine = StreamingAnalysis(background=False, held_gaps=held_gaps, spill_budget=spill_budget, **bounds)
    held = []
    for copy in copies:
        engine.add(copy)
        engine.settle()
        held.append(engine.held_rows())
    done = engine.finish()
    capture = Capture(requests=done.requests, phases=done.phases, loop=done.loop,
                      diagnostics_info=diagnostics,
                      notes=done.notes, stitching=done.stitching, queueing=done.queueing, facts=engine.facts,
                      event_source=NoEvents(("a replayed follow keeps no events",)))
    return _Followed(capture, held)


def _said(capture: Capture) -> dict[str, Any]:
    return {"findings": [asdict(f) for f in capture.findings()],
            "summary": json.dumps(capture.summary(), sort_keys=True, default=str), "report": render(capture)}


@pytest.mark.parametrize("log", CASES)
def test_a_long_follow_holds_bounded_gaps_and_bursts_and_says_what_the_whole_input_says(log: str) -> None:
    parsed = parse(FIXTURES / log)
    events = parsed.events
    copy = replayer(events)
    copies = [copy(k) for k in range(COPIES)]
    bounded = _follow(copies, parsed.diagnostics, held_gaps=HELD_GAPS, spill_budget=SPILL_BUDGET)
    whole = _follow(copies, parsed.diagnostics, held_gaps=UNBOUNDED, spill_budget=UNBOUNDED)

    gaps = bounded.capture.facts.gaps
    assert gaps == GapCounts.of(record_gaps(pl.concat(copies)))  # every gap of the input, counted
    once = record_gaps(events).len()
    assert gaps.len() >= COPIES * once - COPIES  # the input grew tenfold (a copy's first gap may span two copies)
    assert max(h["gaps"] for h in bounded.held) <= HELD_GAPS + gaps.frame.height < gaps.len() // 5
    assert whole.held[-1]["gaps"] == gaps.len()  # (held as they came, the gaps grow with the input)

    bursts = bounded.capture.internal_work()
    assert bursts.height >= COPIES * 100
    assert max(h["bursts"] for h in bounded.held) <= MOST_HELD_BURSTS < bursts.height // 4
    assert whole.held[-1]["bursts"] >= bursts.height * (COPIES - 1) // COPIES
    assert bursts.equals(whole.capture.internal_work())

    assert bounded.capture.requests.height == whole.capture.requests.height
    said = _said(bounded.capture)
    assert said == _said(whole.capture)
    assert {"observer-effect"} <= {f["id"] for f in said["findings"]}


#: A sidecar's mTLS upstream connection (one ended handshake a copy), replayed as a mesh follow's new connections.
TLS_CASE = "real/026-gce-workload-mtls-v1.33-trace-tls-upstream-complete.log"
TLS_COPIES = 40
FACT_PARTS = 2
MAX_CARRIED = 4
TLS_SPILL_BUDGET = 512
#: A handshake row holds a connection id and two times (8 bytes each) at least.
MOST_HELD_HANDSHAKES = TLS_SPILL_BUDGET // 24


def test_a_long_mtls_follow_spills_its_ended_handshakes_and_holds_a_bounded_set_of_connections() -> None:
    parsed = parse(FIXTURES / TLS_CASE)
    copy = replayer(parsed.events)
    copies = [copy(k) for k in range(TLS_COPIES)]
    per_copy = parsed.events["conn_id"].drop_nulls().n_unique()
    bounded = _follow(copies, parsed.diagnostics, held_gaps=HELD_GAPS, spill_budget=TLS_SPILL_BUDGET,
                      fact_parts=FACT_PARTS, max_carried=MAX_CARRIED)
    whole = _follow(copies, parsed.diagnostics, held_gaps=UNBOUNDED, spill_budget=UNBOUNDED,
                    fact_parts=UNBOUNDED, max_carried=UNBOUNDED)

    shakes = bounded.capture.facts.handshake_counts()
    assert sum(n for by_direction in shakes.values() for n in by_direction.values()) == TLS_COPIES
    assert shakes == whole.capture.facts.handshake_counts()
    held = [h["connections"] for h in bounded.held]
    assert max(held) <= MAX_CARRIED + (FACT_PARTS + 1) * per_copy < TLS_COPIES * per_copy // 4
    assert whole.held[-1]["connections"] >= TLS_COPIES * per_copy  # (unbounded: a row per connection ever seen)
    assert max(h["handshakes"] for h in bounded.held) <= MOST_HELD_HANDSHAKES < TLS_COPIES
    assert _said(bounded.capture) == _said(whole.capture)


def test_the_threads_remembered_for_lines_without_one_stay_within_twice_the_carried_connections() -> None:
    from envoy_dissector.analysis.engine.streaming import _Origin

    carried, schema = 8, {"conn_id": pl.Int64, "thread": pl.Int64}
    state = _Origin(threaded=True)
    for k in range(50):  # ten new connections a chunk, and a line of the first without its thread
        conns = list(range(k * 10, k * 10 + 10))
        part = pl.DataFrame({"conn_id": [*conns, conns[0]], "thread": [k % 3] * 10 + [None]}, schema=schema)
        assert StreamingAnalysis._routed(state, part, carried)["worker__"][-1] == k % 3
        assert len(state.conn_threads) <= 2 * carried
    # a recent connection's line alone in its chunk, without a thread: its connection's thread is remembered
    alone = pl.DataFrame({"conn_id": [495], "thread": [None]}, schema=schema)
    assert StreamingAnalysis._routed(state, alone, carried)["worker__"][0] == 49 % 3


RESTARTS = 6


def test_a_follow_across_restarts_keeps_the_context_lines_of_the_running_envoy_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each restart (an `initializing epoch`) starts a run of its own (``ORIGIN#n``) whose windows read its lifecycle
    lines; once the next run starts they are released, so a follow across many restarts holds one run's (the
    engine that keeps them holds every run's), and the capture is the one that engine gives."""
    from test_streaming import _restarted

    log = tmp_path / "restarted.log"
    log.write_text(_restarted(RESTARTS))
    parsed = parse(log)
    boot = (pl.col("kind") == EventKind.SERVER_LIFECYCLE_NOISE) & pl.col("message").str.starts_with(
        "initializing epoch")
    starts = parsed.events.with_row_index("row").filter(boot)["row"].to_list()
    assert len(starts) == RESTARTS and starts[0] == 0
    ends = [*starts[1:], parsed.events.height]
    runs = [parsed.events.slice(a, b - a) for a, b in zip(starts, ends, strict=True)]  # a part per run
    released = _follow(runs, parsed.diagnostics, held_gaps=HELD_GAPS, spill_budget=UNBOUNDED)
    monkeypatch.setattr(StreamingAnalysis, "_release_run", staticmethod(lambda state: None))
    kept = _follow(runs, parsed.diagnostics, held_gaps=HELD_GAPS, spill_budget=UNBOUNDED)

    context = [h["context"] for h in released.held]
    assert context[0] > 0 and max(context) == context[0]  # one run's lines, whichever run is running
    assert kept.held[-1]["context"] >= RESTARTS * context[0]  # (kept, every run's)
    assert released.capture.requests["origin"].n_unique() == RESTARTS
    assert released.capture.requests.equals(kept.capture.requests)
    assert _said(released.capture) == _said(kept.capture)
