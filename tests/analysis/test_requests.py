"""Requests rebuilt from trace logs against Envoy's own access log (the truth in every fixture).

Every expectation comes from files Envoy or the lab wrote (access.jsonl, meta.json), never from
what the analysis computed: matching by ``x-request-id``, the milestones' offsets from DS_RX_BEG
(``%COMMON_DURATION(DS_RX_BEG:X:us)%``), connection ids, status, attempts and protocol.
"""
from __future__ import annotations

import polars as pl
import pytest
from truth import CHECKED_MILESTONES, FIXTURES, Truth, agreement, discover, fixture_ids, matched, truth, within

from envoy_dissector.analysis.engine.asof import asof

ALL = discover()
MICRO = [t for t in ALL if t.microseconds]
MILLI = [t for t in ALL if not t.microseconds]


def _found_share(t: Truth) -> tuple[int, int]:
    j = matched(t)
    return j.filter(pl.col("request_uid").is_not_null()).height, j.height


def test_fixtures_cover_every_format_and_scenario() -> None:
    formats = {t.meta["log_format"]["name"] for t in ALL}
    assert {"envoy", "istio", "istio-thread", "istio-json", "custom"} <= formats
    scenarios = {t.meta["scenario"] for t in ALL}
    assert {"keepalive", "workers", "lua-cpu", "lua-cpu-baseline", "upstream-delay", "retries-503",
            "new-upstream-conn", "http2", "fault-delay", "large-body"} <= scenarios
    assert MILLI and all(t.rel.startswith("envoy/") for t in MILLI)
    assert any(not t.has_thread_ids for t in ALL)


@pytest.mark.parametrize("t", ALL, ids=fixture_ids(ALL))
def test_requests_found_by_x_request_id(t: Truth) -> None:
    """≥ 99 % of Envoy's access-log requests are found (≥ 95 % when the format has no thread ids)."""
    found, total = _found_share(t)
    assert total > 0
    need = 0.99 if t.has_thread_ids else 0.95
    assert found >= need * total, f"{t.rel}: {found}/{total} access-log requests found by x-request-id"


@pytest.mark.parametrize("t", ALL, ids=fixture_ids(ALL))
def test_each_access_log_request_matches_one_client_request(t: Truth) -> None:
    r = t.requests()
    ids = r.filter(pl.col("x_request_id").is_not_null())["x_request_id"]
    assert ids.n_unique() == ids.len(), "two client requests carry the same x-request-id"
    # Only the requests Envoy logged are client requests: nothing invented on top.
    access_ids = set(t.access()["x_request_id"].to_list())
    extra = r.filter(pl.col("complete") & ~pl.col("x_request_id").is_in(list(access_ids)))
    assert extra.height == 0, extra.select("request_uid", "x_request_id", "path")


@pytest.mark.parametrize("t", MICRO, ids=fixture_ids(MICRO))
@pytest.mark.parametrize("milestone", CHECKED_MILESTONES)
def test_milestones_agree_with_envoy(t: Truth, milestone: str) -> None:
    """``X_us − ds_rx_beg_us`` agrees with ``%COMMON_DURATION(DS_RX_BEG:X:us)%`` within max(50 µs, 5 %)."""
    ok, n, bad = agreement(t, milestone)
    if n == 0:
        key = f"ds_rx_beg_to_{milestone}_us"
        assert milestone != "ds_tx_end", "Envoy reports DS_TX_END for every request"
        assert t.access()[key].null_count() == t.access().height  # Envoy reported none (e.g. never sent)
        return
    assert ok >= 0.95 * n, f"{t.rel} {milestone}: {ok}/{n} within tolerance; worst:\n{bad}"


@pytest.mark.parametrize("t", MICRO, ids=fixture_ids(MICRO))
def test_every_matched_request_is_complete(t: Truth) -> None:
    """A request Envoy finished (it wrote the access log) was seen from its first read to its last write."""
    j = matched(t).filter(pl.col("request_uid").is_not_null())
    assert j.filter(~pl.col("complete")).height <= 0.01 * j.height


@pytest.mark.parametrize("t", MILLI, ids=fixture_ids(MILLI))
def test_millisecond_fixture_matches_and_warns(t: Truth) -> None:
    """Envoy's default layout has ms timestamps: only matching is asserted, and the user is told."""
    found, total = _found_share(t)
    assert found >= 0.99 * total
    warnings = " ".join(t.capture().diagnostics_dict()["warnings"]).lower()
    assert "millisecond" in warnings and "coarse" in warnings


@pytest.mark.parametrize("t", ALL, ids=fixture_ids(ALL))
def test_links_equal_envoys_connection_ids(t: Truth) -> None:
    """downstream_conn_id == %CONNECTION_ID%; upstream_conn_id == %UPSTREAM_CONNECTION_ID% where Envoy set one.

    Envoy prints 0 for UPSTREAM_CONNECTION_ID when no upstream connection was ever established
    (then UPSTREAM_LOCAL_ADDRESS is empty): those requests must have no upstream link.
    """
    j = matched(t).filter(pl.col("request_uid").is_not_null())
    down = j.filter(pl.col("downstream_conn_id") != pl.col("connection_id"))
    assert down.height == 0, down.select("x_request_id", "downstream_conn_id", "connection_id")
    connected = pl.col("upstream_local_address").is_not_null()
    up = j.filter(connected & (pl.col("upstream_conn_id").is_null()
                               | (pl.col("upstream_conn_id") != pl.col("upstream_connection_id"))))
    assert up.height == 0, up.select("x_request_id", "upstream_conn_id", "upstream_connection_id")
    never = j.filter(~connected & pl.col("upstream_conn_id").is_not_null())
    assert never.height == 0, never.select("x_request_id", "upstream_conn_id")


@pytest.mark.parametrize("t", ALL, ids=fixture_ids(ALL))
def test_status_attempts_and_protocol_equal_envoys(t: Truth) -> None:
    j = matched(t).filter(pl.col("request_uid").is_not_null())
    for ours, envoy in (("status_ours", "status"), ("upstream_attempts", "attempts"), ("protocol_ours", "protocol")):
        bad = j.filter(pl.col(ours) != pl.col(envoy))
        assert bad.height == 0, (ours, bad.select("x_request_id", ours, envoy))


@pytest.mark.parametrize("t", MICRO, ids=fixture_ids(MICRO))
def test_new_upstream_connection_exactly_when_envoy_reports_connect(t: Truth) -> None:
    """``us_cx_beg_us`` is set exactly for the requests Envoy reports US_CX_BEG for."""
    j = matched(t).filter(pl.col("request_uid").is_not_null())
    bad = j.filter(pl.col("ds_rx_beg_to_us_cx_beg_us").is_not_null() != pl.col("us_cx_beg_us").is_not_null())
    assert bad.height == 0, bad.select("x_request_id", "ds_rx_beg_to_us_cx_beg_us", "us_cx_beg_us")


def test_retries_503() -> None:
    t = truth("istio-thread/retries-503")
    assert t.meta["settings"]["envoy"]["retries_to_closed_port"]
    r = t.requests()
    assert r.height == t.access().height
    attempts = t.meta["settings"]["envoy"]["num_retries"] + 1
    assert attempts == 3
    assert r["upstream_attempts"].to_list() == [attempts] * r.height
    assert set(r["status"].to_list()) == {503}


def test_new_upstream_conn_every_request_connects() -> None:
    t = truth("istio-thread/new-upstream-conn")
    assert t.meta["settings"]["envoy"]["max_requests_per_connection"] == 1
    r = t.requests()
    assert r.height == t.access().height
    assert r["us_cx_beg_us"].null_count() == 0 and r["us_cx_end_us"].null_count() == 0
    assert (r["upstream_connect_us"] > 0).all()
    assert (r["us_cx_end_us"] >= r["us_cx_beg_us"]).all()
    assert r["upstream_conn_id"].n_unique() == r.height  # one upstream connection per request
    for milestone in ("us_cx_beg", "us_cx_end"):
        ok, n, bad = agreement(t, milestone)
        assert n == r.height and ok >= 0.95 * n, (milestone, bad)


@pytest.mark.parametrize("rel", ["istio-thread/keepalive", "istio-thread/upstream-delay", "custom/keepalive"])
def test_keepalive_reuses_the_upstream_connection(rel: str) -> None:
    t = truth(rel)
    r = t.requests().sort("ds_rx_beg_us")
    assert r.height == t.access().height
    assert r["upstream_conn_id"].n_unique() == 1
    first, rest = r.head(1), r.slice(1)
    assert first["us_cx_beg_us"].null_count() == 0 and first["upstream_connect_us"][0] > 0
    assert rest["us_cx_beg_us"].null_count() == rest.height
    assert rest["us_cx_end_us"].null_count() == rest.height
    assert (rest["upstream_connect_us"] == 0).all()


def test_http2_multiplexed_streams_each_matched() -> None:
    t = truth("istio-thread/http2")
    assert t.meta["settings"]["load"]["http2"] and t.meta["settings"]["load"]["streams"] > 1
    a = t.access()
    assert set(a["protocol"].to_list()) == {"HTTP/2"}
    # Envoy's view: on one downstream connection several requests were in flight at once.
    spans = a.with_columns(s=(pl.col("start_time").cast(pl.Float64) * 1e6).cast(pl.Int64)).with_columns(
        e=pl.col("s") + pl.col("ds_rx_beg_to_ds_tx_end_us")).sort("connection_id", "s")
    overlapping = spans.filter(pl.col("s") < pl.col("e").shift(1).over("connection_id"))
    assert overlapping.height >= a.height // 4
    j = matched(t)
    assert j["request_uid"].null_count() == 0
    assert j["request_uid"].n_unique() == a.height
    assert set(j["protocol_ours"].to_list()) == {"HTTP/2"}
    # Each stream is its own request on the shared connection.
    per_conn = j.group_by("connection_id").agg(streams=pl.col("stream_id").n_unique(), n=pl.len())
    assert (per_conn["streams"] == per_conn["n"]).all()
    # ... and the overlap Envoy saw is in our timelines too.
    ours = j.sort("downstream_conn_id", "ds_rx_beg_us").filter(
        pl.col("ds_rx_beg_us") < pl.col("ds_tx_end_us").shift(1).over("downstream_conn_id"))
    assert ours.height >= overlapping.height * 0.9


def test_multi_pod_requests_stay_in_their_pod() -> None:
    pods = [t for t in ALL if t.origin_prefix is not None]
    assert len(pods) == 2
    for t in pods:
        j = matched(t)
        assert j["request_uid"].null_count() == 0
        assert j["origin"].str.starts_with(t.origin_prefix).all()


# --- asof: the lookup every milestone is built with ---------------------------------------------

def _left() -> pl.DataFrame:
    return pl.DataFrame({"k": [1, 1, 2, 2, 3], "t": [10, 25, 10, None, 7]})


def _right() -> pl.DataFrame:
    return pl.DataFrame({"k": [1, 1, 1, 2], "ts": [5, 20, 30, 12], "v": ["a", "b", "c", "d"]})


def test_asof_backward_and_forward_by_key_keep_row_order() -> None:
    back = asof(_left(), _right(), left_on="t", right_on="ts", by=["k"], strategy="backward", take={"v": "got"})
    assert back["got"].to_list() == ["a", "b", None, None, None]
    fwd = asof(_left(), _right(), left_on="t", right_on="ts", by=["k"], strategy="forward", take={"v": "got"})
    assert fwd["got"].to_list() == ["b", "c", "d", None, None]
    assert back["t"].to_list() == _left()["t"].to_list()  # order and nulls kept


def test_asof_tolerance_and_overwrite() -> None:
    got = asof(_left(), _right(), left_on="t", right_on="ts", by=["k"], strategy="backward",
               take={"v": "got"}, tolerance=4)
    assert got["got"].to_list() == [None] * 5  # the nearest rows are 5 away
    got = asof(_left(), _right(), left_on="t", right_on="ts", by=["k"], strategy="backward",
               take={"v": "got"}, tolerance=5)
    assert got["got"].to_list() == ["a", "b", None, None, None]
    again = asof(got, _right(), left_on="t", right_on="ts", by=["k"], strategy="forward", take={"v": "got"})
    assert again.columns == got.columns and again["got"].to_list() == ["b", "c", "d", None, None]


def test_asof_same_column_name_on_both_sides() -> None:
    left = pl.DataFrame({"k": [1], "ts": [15]})
    got = asof(left, _right(), left_on="ts", right_on="ts", by=["k"], strategy="forward", take={"ts": "next_ts"})
    assert got.row(0, named=True) == {"k": 1, "ts": 15, "next_ts": 20}


def test_within_tolerance_rule() -> None:
    f = pl.DataFrame({"ours": [100, 151, 1049, 1051, None], "envoy": [50, 100, 1000, 1000, 10]})
    got = f.select(within(pl.col("ours"), pl.col("envoy")))[:, 0].to_list()
    assert got == [True, False, True, False, None]


@pytest.mark.parametrize("rel", ["istio-thread/retries-503", "istio-thread/keepalive", "istio-thread/http2"])
def test_outcome_agrees_with_envoys_response_code_details(rel: str) -> None:
    t = truth(rel)
    both = t.access().join(t.requests(), on="x_request_id", how="inner")
    assert both.height == t.access().height
    for details, outcome in both.select("response_code_details", "outcome").iter_rows():
        if details == "via_upstream":
            assert outcome == "ok"
        else:  # a local reply: Envoy's details, word for word
            assert outcome == f"local reply: {details}"


def test_a_response_ended_by_trailers_is_ended_there() -> None:
    """`encoding trailers via codec` (gRPC over HTTP/2) ends the response: DS_TX_END is that line when no
    `Codec completed encoding stream.` follows. The real excerpt 020 (docker compose, gRPC with ext_authz) with
    its `Codec completed` line left out, as a capture whose Envoy does not log it."""
    from envoy_dissector.analysis import dissect
    from envoy_dissector.parser.sources import text_source

    path = FIXTURES / "real" / "020-compose-grpc-extauthz-debug-cut-start.log"
    lines = path.read_text().splitlines(keepends=True)
    trailers = next(i for i, line in enumerate(lines) if "encoding trailers via codec" in line)
    kept = "".join(line for line in lines if "Codec completed encoding stream" not in line)
    cap = dissect(text_source(kept, name="020-without-codec-completed"))
    r = cap.requests.filter(pl.col("stream_id") == 10104674368241947611)
    want = cap.events.filter(pl.col("line_no") == trailers + 1)["ts_us"].item()
    assert r["ds_tx_end_us"].to_list() == [want]
