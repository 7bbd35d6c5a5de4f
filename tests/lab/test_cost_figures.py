"""The cost figures (analysis/stages/cost.py, docs/cost.md) on the lab's real captures: their definitions hold
row by row, they add up, and every output carries them (summary, report, compare)."""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from envoy_dissector.analysis import dissect
from envoy_dissector.analysis.findings import observer_cost_of
from envoy_dissector.analysis.gap_counts import COLD, COOLING, WARM, GapCounts
from envoy_dissector.analysis.outputs.comparison import compare, render_comparison
from envoy_dissector.analysis.outputs.report import render
from envoy_dissector.analysis.stages.cost import (
    LIGHT_LOAD,
    MIN_FOUND_RUNNING,
    WRITE_OUT_RECORD_US,
    corrected_slices,
    owned_slices,
    request_cpu,
    unseen_record_us,
    without_wake_up,
    woken_requests,
)
from envoy_dissector.analysis.stats import counted
from envoy_dissector.cli.main import main

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
LUA = FIXTURES / "istio-thread/lua-cpu/envoy.log.gz"
WORKERS = FIXTURES / "istio-thread/workers/envoy.log.gz"
MULTI_POD = FIXTURES / "kubectl/multi-pod/interleaved.log.gz"
DEBUG = FIXTURES / "debug-level/istio-thread/keepalive/envoy.log.gz"


@pytest.fixture(scope="module")
def lua():  # type: ignore[no-untyped-def]
    return dissect(str(LUA))


@pytest.fixture(scope="module")
def workers():  # type: ignore[no-untyped-def]
    return dissect(str(WORKERS))


def test_sidecar_added_is_the_time_in_the_proxy_not_waiting_for_the_upstream(lua) -> None:  # type: ignore[no-untyped-def]
    """lua-cpu: 8 connections queue on one worker, so the upstream-wait queueing given back is not zero."""
    r = counted(lua.requests)
    back = (lua.queueing.filter(pl.col("where") == "upstream wait").group_by("request_uid")
            .agg(back=pl.col("dur_us").sum()))
    r = r.join(back, on="request_uid", how="left").with_columns(pl.col("back").fill_null(0))
    assert r["back"].sum() > 0
    for row in r.iter_rows(named=True):
        wait = row["upstream_wait_us"] or 0
        expected = row["total_us"] + (row["queue_before_read_us"] or 0) - wait + min(row["back"], wait)
        assert row["sidecar_added_us"] == expected, row["request_uid"]
        assert row["sidecar_added_us"] <= row["total_us"] + (row["queue_before_read_us"] or 0)


def test_cpu_per_request_adds_up_to_the_workers_busy_time(workers) -> None:  # type: ignore[no-untyped-def]
    """Own slices plus an equal share of the unowned ones, the time off the CPU apart: nothing counted twice,
    nothing lost."""
    cost = workers.cost()[0]
    per = request_cpu(workers.requests, workers.loop, cost.record_costs)
    busy = workers.workers().filter(pl.col("requests") > 0)["busy_us"].sum()
    assert per.height == counted(workers.requests).height
    assert (per["cpu_us"] + per["stall_us"]).sum() == pytest.approx(busy, rel=1e-9)
    assert (per["stall_us"] >= 0).all() and (per["saturated_cpu_us"] <= per["cpu_us"] + 1e-9).all()
    assert (per["own_cpu_us"] <= per["cpu_us"]).all()
    assert cost.cpu_ms_per_1000_requests == pytest.approx(per["cpu_us"].mean())


def test_a_slice_stretched_off_the_cpu_counts_as_its_shapes_median() -> None:
    """Twelve identical events take 40 µs; one took 900 (the worker descheduled inside it): it counts 40."""
    rows = [{"origin": "o", "thread": 1, "conn_id": 7, "start_us": i * 1_000, "end_us": i * 1_000 + 40,
             "kind": "read", "lines": 9, "busy_us": 40} for i in range(12)]
    rows.append({**rows[0], "start_us": 20_000, "end_us": 20_900, "busy_us": 900})
    slices = corrected_slices(pl.DataFrame(rows))
    assert slices["cpu_us"].to_list() == [40.0] * 13
    assert slices["stall_us"].sum() == 860


def test_a_capture_whose_events_stalled_says_how_much_busy_time_was_left_out() -> None:
    """tracing-zipkin: three-record write events of 4-8 ms (a 229-byte write): most busy time was not CPU."""
    cost = dissect(str(FIXTURES / "istio-thread/tracing-zipkin/envoy.log.gz")).cost()[0]
    note = next(n for n in cost.notes if "did not run" in n)
    assert int(note.split("%")[0]) >= 50
    assert not any("did not run" in n for n in dissect(str(LUA)).cost()[0].notes)


def test_the_saturation_finding_states_the_share_on_the_cpu_by_the_costs_rule(lua) -> None:  # type: ignore[no-untyped-def]
    """tracing-zipkin's worker was busy 90 % of the window by wall time, most of it events stretched while it did
    not run: the finding says how much it ran (the CPU figure's rule), not only the wall-clock busy share; the
    lua-cpu capture's worker computed through its busy time and its finding says busy only."""
    cap = dissect(str(FIXTURES / "istio-thread/tracing-zipkin/envoy.log.gz"))
    cost = cap.cost()[0]
    ((thread, ran),) = cost.on_cpu.items()
    per = request_cpu(cap.requests, cap.loop, cost.record_costs)
    window = cap.workers().filter(pl.col("thread") == thread)["window_us"].item()
    assert ran == pytest.approx(per.filter(pl.col("thread") == thread)["cpu_us"].sum() / window, rel=1e-9)
    assert ran < 0.5 * cost.utilisation[thread]
    finding = next(f for f in cap.findings() if f.id == f"saturated-worker-{thread}")
    assert (f"busy {cost.utilisation[thread]:.0%} of the traffic window over 2 connections, but on the CPU only "
            f"{ran:.0%}") in finding.evidence
    assert "did not run" in finding.fix
    lua_cost = lua.cost()[0]
    quiet = next(f for f in lua.findings() if f.id.startswith("saturated-worker-"))
    assert "on the CPU only" not in quiet.evidence and "did not run" not in quiet.fix
    assert all(lua_cost.on_cpu[t] >= 0.9 * u for t, u in lua_cost.utilisation.items())


def test_a_rare_shape_is_judged_by_its_event_kinds_median() -> None:
    """A shape seen once is its own median: it is judged against the slices of its event kind instead."""
    rows = [{"origin": "o", "thread": 1, "conn_id": 7, "start_us": i * 1_000, "end_us": i * 1_000 + 60,
             "kind": "read", "lines": 9, "busy_us": 60} for i in range(6)]
    rows.append({**rows[0], "start_us": 50_000, "end_us": 300_000, "lines": 44, "busy_us": 250_000})
    slices = corrected_slices(pl.DataFrame(rows))
    assert slices["cpu_us"].to_list() == [60.0] * 7


def test_a_slice_that_woke_the_worker_costs_its_shapes_warm_median_at_saturation() -> None:
    """Cold slices (after an idle gap) take 80 µs, the same event on a running worker 50: saturated, 50."""
    rows = []
    for i in range(12):  # a 30-µs slice of another shape wakes the worker, the `read` follows at once
        rows.append({"origin": "o", "thread": 1, "conn_id": 7, "start_us": i * 1_000, "end_us": i * 1_000 + 30,
                     "kind": "write", "lines": 3, "busy_us": 30})
        rows.append({"origin": "o", "thread": 1, "conn_id": 8, "start_us": i * 1_000 + 32,
                     "end_us": i * 1_000 + 82, "kind": "read", "lines": 9, "busy_us": 50})
        rows.append({"origin": "o", "thread": 1, "conn_id": 8, "start_us": i * 1_000 + 500,
                     "end_us": i * 1_000 + 580, "kind": "read", "lines": 9, "busy_us": 80})
    slices = corrected_slices(pl.DataFrame(rows)).sort("start_us")
    read = slices.filter(pl.col("lines") == 9)
    assert read["saturated_us"].to_list() == [50.0] * 24
    assert read["cpu_us"].sum() == 12 * (50 + 80)
    assert slices.filter(pl.col("lines") == 3)["saturated_us"].to_list() == [30.0] * 12  # never warm: as it is


def test_the_first_request_of_a_busy_period_is_the_one_that_woke_the_worker() -> None:
    """Each period: request a's read wakes the worker (cold), its write and b's two slices follow within 50 µs of
    the previous slice's end (warm); b began in a's period, so only a woke it. Two workers keep their own periods."""
    rows = []
    for thread in (1, 2):
        for i in range(3):
            t0 = i * 10_000
            for uid, start, idle in ((f"a{thread}{i}", t0, COLD), (f"a{thread}{i}", t0 + 40, WARM),
                                     (f"b{thread}{i}", t0 + 80, WARM), (f"b{thread}{i}", t0 + 120, WARM)):
                rows.append({"origin": "o", "thread": thread, "start_us": start, "idle": idle, "request_uid": uid})
    rows.append({"origin": "o", "thread": 1, "start_us": 5_000, "idle": COLD, "request_uid": None})  # nobody's
    woke = dict(woken_requests(pl.DataFrame(rows)).iter_rows())
    assert woke == {f"{r}{t}{i}": r == "a" for r in "ab" for t in (1, 2) for i in range(3)}


def test_a_request_that_woke_its_worker_pays_no_wake_up_cost_at_saturation() -> None:
    """The wake-up cost is the woken requests' mean saturated CPU over the others' (here 500 − 150 µs), taken off each
    woken request, its own spread kept; with fewer than MIN_FOUND_RUNNING others it is not measured."""
    def per(found: int) -> pl.DataFrame:
        woken = [400.0, 500.0, 600.0] * 10
        return pl.DataFrame({"origin": "o", "woke_worker": [True] * len(woken) + [False] * found + [None],
                             "saturated_cpu_us": woken + [150.0] * found + [90.0]})
    out = without_wake_up(per(MIN_FOUND_RUNNING))
    assert out["saturated_cpu_us"].to_list() == [50.0, 150.0, 250.0] * 10 + [150.0] * MIN_FOUND_RUNNING + [90.0]
    few = per(MIN_FOUND_RUNNING - 1)
    assert without_wake_up(few).equals(few)


def test_a_lightly_loaded_capture_says_its_ceiling_is_a_floor(lua) -> None:  # type: ignore[no-untyped-def]
    """retries-503's worker was busy ~5 % of its traffic window (under LIGHT_LOAD): its cost notes say the ceiling is
    most often low; lua-cpu's, busy ~99 %, do not."""
    light = dissect(str(FIXTURES / "istio-thread/retries-503/envoy.log.gz")).cost()[0]
    assert max(light.utilisation.values()) < LIGHT_LOAD and light.ceiling is not None
    assert any("the ceiling is less certain and most often low" in note for note in light.notes), light.notes
    busy = lua.cost()[0]
    assert max(busy.utilisation.values()) >= LIGHT_LOAD
    assert not any("most often low" in note for note in busy.notes), busy.notes


def test_the_pod_ceiling_is_where_the_busiest_worker_saturates(workers) -> None:  # type: ignore[no-untyped-def]
    cost = workers.cost()[0]
    ceiling = cost.ceiling
    assert ceiling is not None and len(ceiling.workers) == 2
    per = request_cpu(workers.requests, workers.loop, cost.record_costs)
    n = per.group_by("thread").len()
    share = {t: k / per.height for t, k in n.iter_rows()}
    assert ceiling.pod == pytest.approx(min(ceiling.workers[t] / share[t] for t in ceiling.workers))
    assert ceiling.pod <= sum(ceiling.workers.values()) + 1e-6
    assert ceiling.low < ceiling.pod < ceiling.high
    assert ceiling.concurrency[2] == pytest.approx(ceiling.pod)  # the capture's own worker count
    assert ceiling.concurrency[4] == pytest.approx(2 * ceiling.concurrency[2])


def test_the_observer_estimate_is_records_times_their_cost(lua) -> None:  # type: ignore[no-untyped-def]
    """Each request's own records at their idle class's cost (a slice's first after idle: cooling or cold), plus
    their write-out on the log's flush thread (its own records and its share of those nobody owns) and the logging
    share of its queueing; the capture's per-record cost is the mean over its own records, the worker's part."""
    cost = lua.cost()[0]
    costs = cost.record_costs
    assert costs is not None and costs.warm < costs.cold and costs.unseen == unseen_record_us(costs.warm, costs.cold)
    assert costs.write_out == WRITE_OUT_RECORD_US
    per = request_cpu(lua.requests, lua.loop, costs).with_columns(
        own=costs.observer(pl.col("own_lines"), pl.col("own_cooling"), pl.col("own_cold")))
    assert (per["own_cold"] + per["own_cooling"] > 0).any()
    # (the write-out: its own records and its share of the worker's records no request owns)
    assert (per["written_lines"] >= per["own_lines"]).all()
    assert (per["observer_us"] >= per["own"] + costs.write_out * per["written_lines"] - 1e-9).all()
    assert cost.record_cost_us == pytest.approx(per["own"].sum() / per["own_lines"].sum())
    assert cost.sidecar_added_without_observer_us["p50"] < cost.sidecar_added_us["p50"]  # type: ignore[operator]


def test_a_slice_is_classed_by_the_workers_idle_before_it() -> None:
    """The first slice (nothing before it) is cold, one 2 µs after another warm, 418-420 µs after cooling, 2 ms
    after cold: the classes the record costs are kept by (gap_counts.idle_class)."""
    rows = [{"origin": "o", "thread": 1, "conn_id": 7, "start_us": start, "end_us": start + 30, "kind": "read",
             "lines": 3, "busy_us": 30} for start in (0, 32, 480, 2_600)]
    assert corrected_slices(pl.DataFrame(rows)).sort("start_us")["idle"].to_list() == [COLD, WARM, COOLING, COLD]


def test_summary_json_has_the_cost_entry_per_origin(tmp_path: Path) -> None:
    one, several = tmp_path / "one.json", tmp_path / "several.json"
    assert main(["analyze", "-q", str(WORKERS), "-o", str(one)]) == 0
    assert main(["analyze", "-q", str(MULTI_POD), "-o", str(several)]) == 0
    cost = json.loads(one.read_text())["cost"]
    assert set(cost["sidecar_added_us"]) == {"p50", "p90", "p99"}
    assert set(cost["sidecar_added_without_observer_us"]) == {"p50", "p90", "p99"}
    assert cost["cpu_ms_per_1000_requests"] > 0
    assert {"pod", "low", "high", "workers"} <= set(cost["ceiling_rps"])
    assert len(cost["ceiling_rps"]["workers"]) == 2
    by_origin = json.loads(several.read_text())["cost"]
    assert len(by_origin) == 2 and all("ceiling_rps" in entry for entry in by_origin.values())


def test_capture_summary_has_the_same_cost_as_summary_json(tmp_path: Path) -> None:
    out = tmp_path / "one.json"
    assert main(["analyze", "-q", str(WORKERS), "-o", str(out)]) == 0
    written = json.loads(out.read_text())["cost"]
    assert json.loads(json.dumps(dissect(str(WORKERS)).summary()["cost"])) == written
    several = dissect(str(MULTI_POD)).summary()
    assert set(several["cost"]) == {o["origin"] for o in several["capture"]["origins"]}


def test_the_observer_finding_and_the_report_say_one_per_record_cost(lua) -> None:  # type: ignore[no-untyped-def]
    """Both state the record costs by idle class (stages.cost.record_costs_from_gaps), not the mean gap. lua-cpu's
    worker never idled (8 connections on one worker): no record woke it, so neither states a cost for one."""
    finding = next(f for f in lua.findings() if f.id == "observer-effect")
    cost = lua.cost()[0]
    costs = cost.record_costs
    assert costs is not None and COLD not in costs.measured and WARM in costs.measured
    assert finding.title.endswith(f"about {costs.warm + costs.unseen:.1f} µs per log record")
    assert f"trace logging {cost.record_cost_us:.1f} µs per record\n" in render(lua)


def test_the_observer_finding_states_the_cost_of_a_record_that_wakes_the_worker(lua) -> None:  # type: ignore[no-untyped-def]
    """Gaps after > 1 ms idle of 12 µs, after other records of 1 µs: the finding states both."""
    keyed = pl.DataFrame({"gap": [1] * 40 + [12] * 6, "idle": [WARM] * 40 + [COLD] * 6},
                         schema={"gap": pl.Int64, "idle": pl.Int8}).select(pl.struct("gap", "idle").alias("g"))["g"]
    (finding,) = observer_cost_of(GapCounts.of(keyed), lua.requests)
    unseen = unseen_record_us(1, 12)
    warm, cold = 1 + unseen, 12 + unseen
    assert finding.title.endswith(f"about {warm:.1f} µs per log record, {cold:.1f} µs for one that wakes an idle "
                                  "worker")
    assert "(one wake-up)" in finding.evidence


def test_a_capture_without_socket_lines_measures_no_cpu_or_ceiling() -> None:
    cost = dissect(str(DEBUG)).cost()[0]
    assert cost.sidecar_added_us["p50"] is not None
    assert cost.cpu_ms_per_1000_requests is None and cost.ceiling is None
    assert cost.sidecar_added_without_observer_us["p50"] is None
    assert any("socket lines" in note for note in cost.notes)


def test_report_and_compare_show_the_cost(lua, workers) -> None:  # type: ignore[no-untyped-def]
    text = render(lua, width=80)
    section = text.split("what the sidecar costs")[1].split("\n\n")[0]
    assert "added latency" in section and "ceiling" in section and "per 1000 requests" in section
    assert max(len(line) for line in text.splitlines()) <= 80
    table = compare(lua, workers)
    assert {"sidecar_added", "cpu_per_request"} <= set(table["phase"])
    assert table["a_ceiling_rps"][0] == pytest.approx(lua.cost()[0].ceiling.pod)
    assert "ceiling (req/s)" in render_comparison(table, "lua", "workers", width=80)


def test_the_dashboards_overview_has_a_cost_card(lua) -> None:  # type: ignore[no-untyped-def]
    from envoy_dissector.dashboard.views import cost_card

    (card,) = cost_card(lua)
    value, label = card.children
    cost = lua.cost()[0]
    assert value.id == "overview-cost" and value.children.replace(",", "").split()[0]
    assert "without trace logging" in label.children and f"{cost.ceiling.pod:,.0f} rps" in label.children


def test_the_bench_client_and_upstream_are_bounded_and_fail_in_one_line(tmp_path: Path) -> None:
    from envoy_dissector.lab.bench_client import closed_loop, open_loop
    from envoy_dissector.lab.bench_upstream import LeanUpstream
    from envoy_dissector.lab.envoy import LabError, free_port

    with LeanUpstream(tmp_path) as upstream:
        closed = closed_loop(upstream.port, connections=3, requests=300, wall_s=10)
        assert closed.requests == 300 and min(closed.latencies_us) > 0
        paced = open_loop(upstream.port, rate=200, requests=50, wall_s=10)
        assert paced.requests == 50 and paced.wall_s >= 49 / 200
    with pytest.raises(LabError, match="could not connect"):
        closed_loop(free_port(), connections=1, requests=1, wall_s=1)


def test_envoys_cpu_time_is_read_per_thread_from_proc() -> None:
    import os
    import time

    from envoy_dissector.lab.bench import cpu_times

    before = cpu_times(os.getpid())
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    after = cpu_times(os.getpid())
    assert after.all_s - before.all_s >= 0.1  # (clock ticks: 10 ms each)
    assert before.workers_s == after.workers_s == 0  # no thread of pytest is called wrk:*
    if after.all_run_s is not None:  # schedstat (ns): the same busy loop, on a CPU
        assert before.all_run_s is not None and after.all_run_s - before.all_run_s >= 0.15
        assert before.workers_run_s == after.workers_run_s == 0


def test_a_steps_demand_and_capacity_come_from_the_workers_time_on_and_waiting_for_a_cpu() -> None:
    """2 s of load, 1,000 requests; the worker ran 0.5 s and waited 1.1 s for its core: it had work 80 % of the
    time (demand) and serves 2,000 requests per second of CPU (capacity), though it served 500/s."""
    from envoy_dissector.lab.bench import CpuTimes, worker_row
    from envoy_dissector.lab.bench_client import BenchLoad

    load = BenchLoad(latencies_us=[100] * 1_000, wall_s=2.0)
    row = worker_row(CpuTimes(1.0, 1.2, 3.0, 4.0, 3.5), CpuTimes(1.5, 1.8, 3.5, 5.1, 4.1), load)
    assert row["worker_demand"] == pytest.approx(0.8) and row["worker_capacity_rps"] == pytest.approx(2_000)
    assert row["worker_run_ms_per_1000"] == pytest.approx(500) and row["worker_utilisation"] == pytest.approx(0.25)
    no_sched = worker_row(CpuTimes(1.0, 1.2), CpuTimes(1.5, 1.8), load)
    assert no_sched["worker_demand"] is None and no_sched["worker_cpu_ms_per_1000"] == pytest.approx(500)


def test_lab_lists_the_bench_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "--list"]) == 0
    out = capsys.readouterr().out
    assert "bench-ladder" in out and "bench-ab" in out


def test_the_write_out_counts_a_requests_records_and_its_share_of_those_nobody_owns() -> None:
    """``written_lines``: a request's own records plus an equal share of its worker's records in slices no request
    owns (ext-authz: the authorization calls' slices), so over the requests they add up to every record of the
    workers that served them."""
    cap = dissect(str(FIXTURES / "istio-thread/ext-authz/envoy.log.gz"))
    costs = cap.cost()[0].record_costs
    per = request_cpu(cap.requests, cap.loop, costs)
    served = per.select("origin", "thread").unique()
    slices = owned_slices(cap.requests, cap.loop).join(served, on=["origin", "thread"])
    unowned = slices.filter(pl.col("request_uid").is_null())["lines"].sum()
    assert unowned > 0
    assert per["written_lines"].sum() == pytest.approx(per["own_lines"].sum() + unowned)
    assert costs is not None and per["observer_us"].sum() >= costs.write_out * per["written_lines"].sum()
