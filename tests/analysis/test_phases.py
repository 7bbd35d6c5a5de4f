"""Phase attribution: phases partition each request's life, and injected costs land in the right phase.

Expected values come from the fixtures' truth (meta.json settings, Envoy's access log) and from the
engineer's hand reconstruction of seed 000 (fixtures/old-format/seed000/expected.json).
"""
from __future__ import annotations

import json
from itertools import pairwise

import polars as pl
import pytest
from truth import FIXTURES, Truth, capture_of, discover, fixture_ids, matched, truth

from envoy_dissector.analysis.schema import PARTITION_PHASES, PHASE_COLUMNS, PHASE_SPANS, Phase
from envoy_dissector.analysis.stages.phases import BOUNDARIES

ALL = discover()
SEED_DIR = FIXTURES / "old-format" / "seed000"
SEED = json.loads((SEED_DIR / "expected.json").read_text())


def _complete(t: Truth) -> pl.DataFrame:
    return t.capture().requests.filter(pl.col("complete"))


@pytest.mark.parametrize("t", ALL, ids=fixture_ids(ALL))
def test_phase_columns_sum_exactly_to_total(t: Truth) -> None:
    r = _complete(t)
    assert r.height > 0
    summed = r.select(pl.sum_horizontal(PHASE_COLUMNS).alias("sum"), "total_us", "life_start_us", "life_end_us",
                      *PHASE_COLUMNS)
    assert (summed["sum"] == summed["total_us"]).all()
    assert (summed["total_us"] == summed["life_end_us"] - summed["life_start_us"]).all()
    for c in PHASE_COLUMNS:
        if c == "tls_handshake_us":  # the contract: null where the request waited for no handshake
            continue
        # null exactly where the phase could not be measured (its boundary's line is not in the capture)
        unmeasured = r["unmeasured_phases"].fill_null("").str.contains(c.removesuffix("_us"))
        assert (summed[c].is_null() == unmeasured).all(), c
        assert (summed[c].drop_nulls() >= 0).all(), c
    waited = r.filter(pl.col("tls_handshake_us").is_not_null())
    assert (waited["tls_handshake_us"] >= 0).all()
    assert r.filter(pl.col("tls_handshake_us").is_null() != pl.col("us_hs_end_us").is_null()).height == 0


@pytest.mark.parametrize("t", ALL, ids=fixture_ids(ALL))
def test_phase_rows_tile_the_life_of_each_request(t: Truth) -> None:
    """``phases`` rows with part_of_total: contiguous from life start to life end, summing to total_us."""
    cap = t.capture()
    r = cap.requests.filter(pl.col("complete")).select("request_uid", "total_us", "life_start_us", "life_end_us",
                                                       *PHASE_COLUMNS)
    rows = cap.phases.filter(pl.col("part_of_total")).join(r.select("request_uid"), on="request_uid", how="semi")
    assert (rows["dur_us"] == rows["end_us"] - rows["start_us"]).all()
    assert (rows["dur_us"] > 0).all()
    per = rows.sort("request_uid", "start_us").group_by("request_uid", maintain_order=True).agg(
        total=pl.col("dur_us").sum(), first=pl.col("start_us").first(), last=pl.col("end_us").last(),
        gaps=(pl.col("start_us") - pl.col("end_us").shift(1)).drop_nulls().abs().sum())
    j = r.join(per, on="request_uid", how="left").with_columns(pl.col("total").fill_null(0))
    assert (j["total"] == j["total_us"]).all()
    nonzero = j.filter(pl.col("total_us") > 0)
    assert (nonzero["first"] == nonzero["life_start_us"]).all()
    assert (nonzero["last"] == nonzero["life_end_us"]).all()
    assert (nonzero["gaps"] == 0).all()
    # Per phase, the rows add up to the request's column.
    by_phase = rows.group_by("request_uid", "phase").agg(d=pl.col("dur_us").sum())
    for c in PHASE_COLUMNS:
        got = r.select("request_uid", c).join(by_phase.filter(pl.col("phase") == c.removesuffix("_us")),
                                               on="request_uid", how="left").with_columns(pl.col("d").fill_null(0))
        assert (got["d"] == got[c]).all(), c


@pytest.mark.parametrize("t", [t for t in ALL if t.microseconds], ids=fixture_ids([t for t in ALL if t.microseconds]))
def test_total_covers_envoys_own_duration(t: Truth) -> None:
    """Our life runs from the read before DS_RX_BEG to the write after DS_TX_END: never shorter than Envoy's."""
    j = matched(t).filter(pl.col("request_uid").is_not_null() & pl.col("complete"))
    short = j.filter(pl.col("total_us") < pl.col("ds_rx_beg_to_ds_tx_end_us") - 50)
    assert short.height <= 0.05 * j.height, short.select("x_request_id", "total_us", "ds_rx_beg_to_ds_tx_end_us")


def test_shares_inside_phases_are_not_counted_twice() -> None:
    """wasm_us / tracing_us are shares of the phases: per phase, their rows fit inside the phase's time;
    internal_us (rows that may overlap: a request's own call and other work during it) fits inside total_us."""
    for t in ALL:
        r = _complete(t)
        assert (r["wasm_us"] <= r["total_us"]).all()
        assert (r["tracing_us"] <= r["total_us"]).all()
        assert (r["internal_us"] <= r["total_us"]).all()
        rows = t.capture().phases.filter(~pl.col("part_of_total")
                                         & pl.col("detail").str.contains(r"^(wasm|tracing flush) "))
        per = rows.group_by("request_uid", "phase").agg(share=pl.col("dur_us").sum())
        for phase, group in per.group_by("phase"):
            column = f"{phase[0]}_us"
            j = group.join(r.select("request_uid", column), on="request_uid", how="inner")
            assert (j["share"] <= j[column]).all(), (t.rel, column)


def test_upstream_delay_is_upstream_wait() -> None:
    t = truth("istio-thread/upstream-delay")
    delay_us = t.meta["settings"]["upstream"]["delay_ms"] * 1000
    assert delay_us > 0
    r = t.requests().filter(pl.col("complete"))
    assert r.height == t.access().height
    assert r["upstream_wait_us"].median() >= delay_us
    # ... and nowhere else: the proxy's own phases stay small next to it.
    assert (r["total_us"] - r["upstream_wait_us"]).median() < delay_us / 2


def test_fault_delay_is_held_by_the_fault_filter() -> None:
    t = truth("istio-thread/fault-delay")
    delay_us = t.meta["settings"]["envoy"]["fault_delay_ms"] * 1000
    assert delay_us > 0
    cap = t.capture()
    uids = t.requests().filter(pl.col("complete")).select("request_uid")
    assert uids.height == t.access().height
    rows = cap.phases.join(uids, on="request_uid", how="semi").filter(~pl.col("part_of_total"))
    paused = rows.filter(pl.col("detail") == "envoy.filters.http.fault (paused)")
    assert paused.height == uids.height
    assert paused["dur_us"].min() >= delay_us * 0.95
    lookup = rows.filter(pl.col("detail") == "router (route lookup)")
    assert lookup["dur_us"].median() < 200  # the wait is not the router's
    r = t.requests()
    assert r["filter_chain_us"].median() >= delay_us


def test_lua_cpu_is_the_lua_filter() -> None:
    t = truth("istio-thread/lua-cpu")
    burn_us = t.meta["settings"]["envoy"]["lua_cpu_ms"] * 1000
    rows = t.capture().phases.filter(~pl.col("part_of_total") & (pl.col("phase") == "filter_chain")
                                     & (pl.col("detail") == "envoy.filters.http.lua"))
    assert rows.height >= t.access().height
    assert burn_us * 0.9 <= rows["dur_us"].median() <= burn_us * 1.5


# --- seed 000: the engineer's hand breakdown of C1232 ---------------------------------------------

@pytest.fixture(scope="module")
def seed() -> tuple[dict, pl.DataFrame]:
    cap = capture_of(SEED_DIR / "envoy.log")
    req = SEED["request"]
    r = cap.requests.filter((pl.col("downstream_conn_id") == req["downstream_conn_id"])
                            & (pl.col("stream_id").cast(pl.String) == req["stream_id"]))
    assert r.height == 1
    row = r.row(0, named=True)
    return row, cap.request_phases(row)


def test_seed_request_identity(seed: tuple[dict, pl.DataFrame]) -> None:
    row, _ = seed
    req = SEED["request"]
    assert row["complete"] and not row["internal"]
    assert row["x_request_id"] == req["x_request_id"]
    assert row["upstream_conn_id"] == req["upstream_conn_id"]
    assert row["status"] == req["status"]
    assert row["path"] == req["path"]


def test_seed_breakdown(seed: tuple[dict, pl.DataFrame]) -> None:
    row, phases = seed
    hand = SEED["hand_numbers_us"]
    suffix = SEED["milestones_us_suffix"]
    t0 = row["life_start_us"]
    assert t0 % 1_000_000 == suffix["socket_event_read"]  # life starts at the socket event that read it
    assert 5 <= row["downstream_read_us"] <= 20  # engineer: ≈10 µs read
    assert 25 <= row["header_parse_us"] <= 45  # engineer: 30~40 µs HTTP parse
    router = phases.filter((pl.col("phase") == "router") & pl.col("detail").str.ends_with("(decodeHeaders)"))
    assert router.height == 1
    assert abs(router["dur_us"][0] - hand["router_filter"]["value"]) <= 5  # ≈48 µs router filter
    # receive → forward: from the read to the router handing the request on (engineer: 0.15 ms)
    forward = router["end_us"][0] - t0
    assert abs(forward - hand["receive_to_forward"]["value"]) <= 25
    assert row["total_us"] == hand["total"]["value"]  # 4702 µs
    assert row["upstream_wait_us"] == hand["upstream_wait_in_log"]["value"]  # 856829 − 855278


def test_phase_spans_chain_the_boundaries_and_cover_the_partition() -> None:
    """The one phase->boundary table: b0..b9 in a chain, every partition phase once (connect and the
    upstream TLS handshake are carved out of router's span)."""
    assert [(a, b) for _, a, b in PHASE_SPANS] == list(pairwise(BOUNDARIES))
    spanned = [p for p, _, _ in PHASE_SPANS]
    assert sorted(spanned + [Phase.UPSTREAM_CONNECT, Phase.TLS_HANDSHAKE]) == sorted(PARTITION_PHASES)
