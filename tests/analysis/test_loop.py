"""Event-loop model: busy slices, loop queueing against independently measured queueing, thread inference."""
from __future__ import annotations

import json

import polars as pl
import pytest
from truth import FIXTURES, Truth, capture_of, discover, fixture_ids, truth

from envoy_dissector.analysis import dissect
from envoy_dissector.analysis.engine.pipeline import analysed_events
from envoy_dissector.analysis.engine.streaming import analyse
from envoy_dissector.analysis.stages.loop import BEFORE_READ, UNATTRIBUTED_IDLE_US, WAIT_POINTS
from envoy_dissector.analysis.stages.requests import _main_threads

ALL = discover()
THREADED = [t for t in ALL if t.has_thread_ids and t.origin_prefix is None]
SEED_DIR = FIXTURES / "old-format" / "seed000"


def _with_truth(t: Truth) -> pl.DataFrame:
    return (t.access().join(t.client().select("x_request_id", "latency_us"), on="x_request_id")
            .join(t.upstream().select("x_request_id", "service_us"), on="x_request_id"))


def _outside(frame: pl.DataFrame) -> pl.Series:
    """Client latency minus Envoy's own DS_RX_BEG→DS_TX_END: time the request spent outside Envoy's stream."""
    return frame["latency_us"] - frame["ds_rx_beg_to_ds_tx_end_us"]


def independent_queue(t: Truth, baseline: Truth) -> pl.DataFrame:
    """Per request: (client − Envoy DS_RX_BEG:DS_TX_END − the baseline's median of that) + (US_TX_END:US_RX_BEG −
    the upstream's own service time). Uses no trace log at all."""
    base = float(_outside(_with_truth(baseline)).median())  # type: ignore[arg-type]
    f = _with_truth(t)
    inside = f["ds_rx_beg_to_us_rx_beg_us"] - f["ds_rx_beg_to_us_tx_end_us"] - f["service_us"]
    return f.select("x_request_id").with_columns(queue_us=(_outside(f) - base) + inside)


def test_lua_cpu_loop_queue_matches_independent_measure() -> None:
    t, base = truth("istio-thread/lua-cpu"), truth("istio-thread/lua-cpu-baseline")
    assert t.meta["baseline"] == base.meta["scenario"] == "lua-cpu-baseline"
    indep = independent_queue(t, base)
    assert indep.height == t.access().height
    expected = float(indep["queue_us"].mean())  # type: ignore[arg-type]
    ours = indep.join(t.requests(), on="x_request_id")
    assert ours.height == indep.height
    # The independent measure sees all the waiting: before the first read (outside total) and inside.
    got = float((ours["loop_queue_us"] + ours["queue_before_read_us"]).mean())  # type: ignore[arg-type]
    assert expected > 5_000  # the scenario did queue (8 connections × 1 ms of Lua on one worker)
    assert abs(got - expected) <= 0.25 * expected, f"loop_queue mean {got:.0f} µs vs independent {expected:.0f} µs"


def test_lua_cpu_baseline_has_little_queueing() -> None:
    """One connection at a time: the same Lua burn does not make requests wait for the loop."""
    lua = float(truth("istio-thread/lua-cpu").requests()["loop_queue_us"].mean())  # type: ignore[arg-type]
    base = float(truth("istio-thread/lua-cpu-baseline").requests()["loop_queue_us"].mean())  # type: ignore[arg-type]
    assert base <= 0.1 * lua


def test_loop_queue_parts_add_up() -> None:
    """The queueing windows (one per wait point that waited) add up to each request's two estimates."""
    t = truth("istio-thread/lua-cpu")
    r = t.requests()
    windows = t.capture().queueing
    assert set(windows["where"].unique()) <= {w[0] for w in WAIT_POINTS}
    assert (windows["dur_us"] > 0).all() and (windows["dur_us"] == windows["end_us"] - windows["start_us"]).all()
    assert windows.select("request_uid", "where").is_unique().all()  # one window per wait point and request
    per_request = windows.group_by("request_uid").agg(
        before=pl.col("dur_us").filter(pl.col("where") == BEFORE_READ).sum(),
        inside=pl.col("dur_us").filter(pl.col("where") != BEFORE_READ).sum())
    r = r.join(per_request, on="request_uid", how="left").with_columns(pl.col("before", "inside").fill_null(0))
    assert (r["queue_before_read_us"] == r["before"]).all()
    # Inside the life the parts add up to loop_queue_us unless that would exceed total_us (then it is clipped).
    assert r.select((pl.min_horizontal("inside", "total_us") == pl.col("loop_queue_us")).all()).item()
    assert (r["loop_queue_us"] >= 0).all() and (r["queue_before_read_us"] >= 0).all()
    assert r["queue_before_read_us"].sum() > 0 and r["loop_queue_us"].sum() > 0


@pytest.mark.parametrize("t", ALL, ids=fixture_ids(ALL))
def test_queueing_never_exceeds_what_it_is_part_of(t: Truth) -> None:
    """loop_queue_us is a share of the phases (≤ total_us); queue_before_read_us lies before life_start_us."""
    cap = t.capture()
    r = t.requests().filter(pl.col("complete"))
    assert (r["loop_queue_us"] <= r["total_us"]).all()
    assert (r["loop_queue_us"] >= 0).all() and (r["queue_before_read_us"] >= 0).all()
    windows = cap.phases.filter(pl.col("phase") == "loop_queue").join(
        r.select("request_uid", "life_start_us", "life_end_us"), on="request_uid")
    before = pl.col("detail").str.starts_with("before read")
    assert windows.filter(before & (pl.col("end_us") > pl.col("life_start_us"))).height == 0
    inside = windows.filter(~before)
    assert inside.filter((pl.col("start_us") < pl.col("life_start_us"))
                         | (pl.col("end_us") > pl.col("life_end_us"))).height == 0


def test_loop_queue_rows_name_other_connections() -> None:
    cap = truth("istio-thread/lua-cpu").capture()
    rows = cap.phases.filter(pl.col("phase") == "loop_queue")
    assert rows.height > 0 and not rows["part_of_total"].any()
    req = cap.requests.select("request_uid", "downstream_conn_id", "upstream_conn_id")
    j = rows.join(req, on="request_uid")
    for detail, down, up in j.select("detail", "downstream_conn_id", "upstream_conn_id").iter_rows():
        where, _, conns = detail.partition(": ")
        assert where in {w[0] for w in WAIT_POINTS}
        named = {int(c.strip()[1:]) for c in conns.split("+") if c.strip().startswith("C")}
        assert down not in named and up not in named


# --- seed 000: the engineer's event-loop delay ----------------------------------------------------

def test_seed_event_loop_delay_and_connections_served() -> None:
    expected = json.loads((SEED_DIR / "expected.json").read_text())
    hand = expected["hand_numbers_us"]
    cap = capture_of(SEED_DIR / "envoy.log")
    req = expected["request"]
    row = cap.requests.filter((pl.col("downstream_conn_id") == req["downstream_conn_id"])
                              & (pl.col("stream_id").cast(pl.String) == req["stream_id"])).row(0, named=True)
    delay = hand["event_loop_delay"]["value"]  # 1439 µs
    assert abs(row["loop_queue_us"] - delay) <= 0.15 * delay
    rows = cap.request_phases(row).filter(pl.col("phase") == "loop_queue")
    waits = rows.filter(pl.col("detail").str.starts_with("upstream wait"))
    assert waits.height == 1
    listed = [int(c.strip()[1:]) for c in waits["detail"][0].split(": ", 1)[1].split("+")]
    # C0 is the Zipkin tracer's async stream: it has no socket events of its own to be seen serving.
    served = [c for c in hand["connections_served_during_delay"] if c != 0]
    assert listed == list(dict.fromkeys(served)), listed


# --- slices ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("t", THREADED, ids=fixture_ids(THREADED))
def test_slices_never_overlap_on_a_thread(t: Truth) -> None:
    loop = t.capture().loop.sort("origin", "thread", "start_us")
    assert (loop["end_us"] >= loop["start_us"]).all()
    overlap = loop.filter(pl.col("start_us") < pl.col("end_us").shift(1).over("origin", "thread"))
    assert overlap.height == 0
    events = t.capture().events.filter((pl.col("kind") == "socket_event") & pl.col("thread").is_not_null())
    assert loop.filter(pl.col("kind").is_in(["read", "write", "read+write", "closed", "read+closed",
                                              "write+closed", "read+write+closed"])).height == events.height


@pytest.mark.parametrize("t", THREADED, ids=fixture_ids(THREADED))
def test_no_slice_outlasts_the_requests_it_served(t: Truth) -> None:
    """A slice is contiguous work: none of a client connection lasts longer than the longest request of that
    connection (the last socket event before shutdown used to run on to the capture's end), and no thread —
    the main thread included — has a slice longer than the longest client request or ``UNATTRIBUTED_IDLE_US``
    (a health checker's slice spans its check's wait for the host)."""
    cap = t.capture()
    clients = cap.requests.filter(~pl.col("internal") & pl.col("complete"))
    if clients.height == 0:
        pytest.skip("no complete client request")
    longest = clients.group_by("origin", conn_id="downstream_conn_id").agg(
        longest=(pl.col("total_us") + pl.col("queue_before_read_us").fill_null(0)).max())
    served = cap.loop.join(longest, on=["origin", "conn_id"]).with_columns(dur=pl.col("end_us") - pl.col("start_us"))
    assert served.height > 0
    tick = cap.quality().timestamp_tick_us  # a ms-tick capture's times are ±1 tick
    assert served.filter(pl.col("dur") > pl.col("longest") + tick).height == 0, served.sort("dur").tail(3)
    ceiling = max(int(clients["total_us"].max()), UNATTRIBUTED_IDLE_US) + tick  # type: ignore[arg-type]
    every = cap.loop.with_columns(dur=pl.col("end_us") - pl.col("start_us"))
    assert every.filter(pl.col("dur") > ceiling).height == 0, every.sort("dur").tail(3)


@pytest.mark.parametrize("rel, idle_setting", [("istio-thread/fault-delay", ("envoy", "fault_delay_ms"))])
def test_timer_waits_are_idle_not_busy(rel: str, idle_setting: tuple[str, str]) -> None:
    """A fault delay parks the request on a timer: the worker is idle meanwhile, so utilisation drops.

    One sequential client connection and n requests each delayed d: at least n·d of the traffic window
    is idle, whatever the log says.
    """
    t = truth(rel)
    d_us = t.meta["settings"][idle_setting[0]][idle_setting[1]] * 1000
    cap = t.capture()
    r = t.requests()
    window = r["life_end_us"].max() - r["life_start_us"].min()
    bound = 1 - r.height * d_us / window
    workers = cap.workers()
    assert workers.height == 1
    assert workers["utilisation"][0] <= bound, (workers, bound)
    assert "timer" in cap.loop["kind"].to_list()
    assert not any(f.id.startswith("saturated-worker") for f in cap.findings())


def test_retry_backoff_is_idle_not_busy() -> None:
    """Retries to a closed port wait out Envoy's back-off on a timer: the worker is mostly idle."""
    t = truth("istio-thread/retries-503")
    cap = t.capture()
    r = t.requests()
    a = t.access()
    # Envoy's own durations: each request lasted DS_RX_BEG→DS_TX_END, nearly all of it back-off.
    assert a["ds_rx_beg_to_ds_tx_end_us"].median() > 10_000
    assert cap.workers()["utilisation"][0] < 0.5
    assert r["loop_queue_us"].max() < 1_000


# --- thread inference ----------------------------------------------------------------------------

@pytest.mark.parametrize("rel", ["istio-thread/workers", "custom/workers", "envoy-us/workers", "istio-json/workers"])
def test_inferred_lanes_match_real_workers(rel: str) -> None:
    """Strip thread ids from a capture that has them; every inferred lane must be one real worker."""
    cap = truth(rel).capture()
    main = _main_threads(cap.events)["main_thread"].to_list()
    stripped = cap.events.with_columns(true_thread=pl.col("thread"), thread=pl.lit(None, dtype=pl.Int64))
    result = analyse(stripped)
    assert any("inferred" in n for n in result.notes)
    lines = analysed_events(stripped).filter(pl.col("conn_id").is_not_null() & pl.col("true_thread").is_not_null()
                                 & ~pl.col("true_thread").is_in(main))
    conns = lines.group_by("origin", "conn_id").agg(lane=pl.col("thread").first(),
                                                     lanes=pl.col("thread").n_unique(),
                                                     true=pl.col("true_thread").first())
    assert (conns["lanes"] == 1).all()
    assert (conns["lane"] < 0).all()  # inferred lanes are marked negative
    purity = conns.group_by("lane").agg(pl.col("true").n_unique())
    assert (purity["true"] == 1).all(), conns.sort("lane")
    # Client requests: as many lanes carry them as real workers did.
    r = result.requests.filter(~pl.col("internal"))
    real = cap.requests.filter(~pl.col("internal"))
    assert r["thread"].n_unique() == real["thread"].n_unique()
    assert r.height == real.height


# --- the competitors listing: linear implementation vs the obvious quadratic one ---------------------

def _naive_competitors(windows: pl.DataFrame, loop: pl.DataFrame) -> dict[tuple[str, str], str]:
    out = {}
    for uid, origin, thread, down, up, where, start, end in windows.select(
            "request_uid", "origin", "thread", "downstream_conn_id", "upstream_conn_id", "where", "start_us",
            "end_us").iter_rows():
        served = loop.filter((pl.col("origin") == origin) & (pl.col("thread") == thread)
                             & (pl.col("start_us") >= start) & (pl.col("start_us") < end)
                             & pl.col("conn_id").is_not_null() & (pl.col("conn_id") != down)
                             & (pl.col("conn_id") != (up if up is not None else -1))
                             ).sort("start_us", maintain_order=True)
        conns = list(dict.fromkeys(served["conn_id"].to_list()))
        out[(uid, where)] = f"{where}: " + (" + ".join(f"C{c}" for c in conns) if conns else
                                            "(no other connection logged)")
    return out


@pytest.mark.parametrize("explode_rows", [1_000_000, 7])
@pytest.mark.parametrize("seed", range(5))
def test_competitors_match_the_naive_listing(seed: int, explode_rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """(``explode_rows``: the slice rows listed at once; 7 makes many batches)"""
    import random

    from envoy_dissector.analysis.schema import QUEUEING_SCHEMA, conform
    from envoy_dissector.analysis.stages import loop as loop_module
    from envoy_dissector.analysis.stages.loop import _served_during, render_queueing

    monkeypatch.setattr(loop_module, "EXPLODE_ROWS", explode_rows)

    rnd = random.Random(seed)
    rows = []
    for origin in ("a", "b"):
        for thread in (1, 2):
            t = 0
            for _ in range(60):
                t += rnd.choice([0, 1, 5, 20])  # ties in start times on purpose
                rows.append((origin, thread, t, t + rnd.randint(0, 10), rnd.choice([None, 1, 2, 3, 4, 5, 6]),
                             "read", 1))
    loop = pl.DataFrame(rows, schema={"origin": pl.String, "thread": pl.Int64, "start_us": pl.Int64,
                                      "end_us": pl.Int64, "conn_id": pl.Int64, "kind": pl.String,
                                      "lines": pl.Int64}, orient="row")
    windows = pl.DataFrame([(f"r{i}", rnd.choice("ab"), rnd.choice([1, 2]), rnd.randint(1, 6),
                             rnd.choice([None, 2, 5]), rnd.choice(["before read", "upstream wait"]),
                             s := rnd.randint(0, 500), s + rnd.randint(1, 200)) for i in range(80)],
                           schema={"request_uid": pl.String, "origin": pl.String, "thread": pl.Int64,
                                   "downstream_conn_id": pl.Int64, "upstream_conn_id": pl.Int64,
                                   "where": pl.String, "start_us": pl.Int64, "end_us": pl.Int64}, orient="row")
    got = conform(windows.with_columns(dur_us=pl.col("end_us") - pl.col("start_us"),
                                       conn_ids=_served_during(windows, loop)), QUEUEING_SCHEMA)
    assert got.height == windows.height
    assert dict(got.schema) == QUEUEING_SCHEMA
    expected = _naive_competitors(windows, loop)
    shown = render_queueing(got)  # the phases frame's text, from the structured connections
    assert shown["detail"].to_list() == [f"{w}: " + (" + ".join(f"C{c}" for c in conns) if conns else
                                                      "(no other connection logged)")
                                         for w, conns in got.select("where", "conn_ids").iter_rows()]
    for uid, detail in shown.select("request_uid", "detail").iter_rows():
        where = detail.split(":", 1)[0]
        assert expected[(uid, where)] == detail


@pytest.mark.parametrize("seed", range(5))
def test_lane_packing_matches_naive_first_fit(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inferred lanes: the binary-search packing places every group where the all-pairs first fit does."""
    import random

    import numpy as np

    from envoy_dissector.analysis.stages.loop import _Lane

    monkeypatch.setattr(_Lane, "MERGE_AT", 4)  # exercise the buffer merges
    rnd = random.Random(seed)
    groups = []
    for _ in range(120):
        t = rnd.randint(0, 2_000)
        spans = []
        for _ in range(rnd.randint(1, 6)):
            s = t + rnd.choice([0, 0, 1, 3, 40])  # touching slices inside a group on purpose
            t = s + rnd.choice([0, 2, 10])
            spans.append((s, t))
        groups.append(spans)
    groups.sort(key=lambda g: g[0][0])
    naive: list[list[tuple[int, int]]] = []
    packed: list[_Lane] = []
    for spans in groups:
        want = next((i for i, lane in enumerate(naive)
                     if not any(s <= le and ls <= e for s, e in spans for ls, le in lane)), len(naive))
        if want == len(naive):
            naive.append([])
        naive[want].extend(spans)
        s = np.array([a for a, _ in spans], dtype=np.int64)
        e = np.array([b for _, b in spans], dtype=np.int64)
        got = next((i for i, lane in enumerate(packed) if not lane.overlaps(s, e)), len(packed))
        if got == len(packed):
            packed.append(_Lane())
        packed[got].add(s, e)
        assert got == want
    assert len(packed) == len(naive) > 1


def _loop_inputs(events: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The event-loop stage's inputs as the engine builds them: the requests after the downstream waits, and
    the busy slices."""
    from envoy_dissector.analysis.stages.loop import slices
    from envoy_dissector.analysis.stages.phases import attribute_phases
    from envoy_dissector.analysis.stages.requests import build_requests
    from envoy_dissector.analysis.stages.tls import downstream_waits

    waited, _ = downstream_waits(attribute_phases(build_requests(events), events)[0], events)
    return waited, slices(events)
@pytest.mark.parametrize("name", ["istio-thread/keepalive", "istio-thread/workers", "istio-thread/lua-cpu",
                                  "istio-thread/ext-authz"])
def test_constant_columns_left_out_of_the_model_give_what_the_general_path_gives(name: str,
                                                                                 monkeypatch) -> None:
    """``loop_queue`` keeps a column of one value on every row (one origin; a field never set) out of its sorts
    and windows and adds it back as that value: the same frames as when every column is read as it varies."""
    from envoy_dissector.analysis.engine.pipeline import split_restarts
    from envoy_dissector.analysis.stages import loop as loop_stage

    cap = dissect(FIXTURES / name / "envoy.log.gz", keep_events=True)
    events, _ = split_restarts(cap.events.filter(pl.col("ts_us").is_not_null()))
    waited, slices = _loop_inputs(events)
    reads = waited.select(loop_stage._LOOP_READS)
    assert loop_stage._constant_reads(reads, pl.col("origin")), "no constant column: the case is not exercised"
    fixed = loop_stage.loop_queue(waited, slices)
    monkeypatch.setattr(loop_stage, "_constant_reads", lambda requests, origin: {})
    general = loop_stage.loop_queue(waited, slices)
    assert fixed[0].equals(general[0]) and fixed[1].equals(general[1])
    assert fixed[1].height > 0
    # the rendered text too: a window that served no connection points at one shared text
    assert loop_stage.render_queueing(fixed[1]).equals(loop_stage.render_queueing(general[1]))


def test_constant_columns_beside_an_origin_that_varies(monkeypatch) -> None:
    """Two origins (origin varies) and a column of one value: the constant path still gives the general path's
    frames (a capture of two pods once put an empty literal among the constants)."""
    from envoy_dissector.analysis.engine.pipeline import split_restarts
    from envoy_dissector.analysis.stages import loop as loop_stage

    cap = dissect(FIXTURES / "istio-thread" / "workers" / "envoy.log.gz", keep_events=True)
    events, _ = split_restarts(cap.events.filter(pl.col("ts_us").is_not_null()))
    events = events.with_columns(origin=pl.when(pl.col("thread") % 2 == 0).then(pl.lit("pod-a"))
                                 .otherwise(pl.lit("pod-b")))
    waited, slices = _loop_inputs(events)
    waited = waited.with_columns(cluster=pl.lit("one-cluster"))
    fixed_reads = loop_stage._constant_reads(waited.select(loop_stage._LOOP_READS), pl.col("origin"))
    assert waited["origin"].n_unique() == 2 and "origin" not in fixed_reads and "cluster" in fixed_reads
    fixed = loop_stage.loop_queue(waited, slices)
    monkeypatch.setattr(loop_stage, "_constant_reads", lambda requests, origin: {})
    general = loop_stage.loop_queue(waited, slices)
    assert fixed[0].equals(general[0]) and fixed[1].equals(general[1])


@pytest.mark.parametrize("requests", [0, 1, 3, 7, 10, 12, 25])
def test_wait_point_blocks_cover_every_lookup_row_once_in_order(requests: int,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The event-loop model's blocks hold the wait points' lookup rows (wait point, then request) in order, each
    once, none over QUEUE_ROWS; without requests one block of empty pieces, one for each wait point."""
    from envoy_dissector.analysis.stages import loop

    monkeypatch.setattr(loop, "QUEUE_ROWS", 10)
    blocks = loop._blocks(requests, len(WAIT_POINTS))
    rows = [(point, at + k) for block in blocks for point, at, n in block for k in range(n)]
    assert rows == [(point, i) for point in range(len(WAIT_POINTS)) for i in range(requests)]
    assert all(sum(n for _p, _at, n in block) <= 10 for block in blocks)
    if requests == 0:
        assert blocks == [[(point, 0, 0) for point in range(len(WAIT_POINTS))]]
    else:
        assert all(n > 0 for block in blocks for _p, _at, n in block)
