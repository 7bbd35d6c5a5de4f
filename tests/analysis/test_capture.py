"""The Capture model from ``dissect()``: contract columns, summary, accounting, lookups and caveats."""
from __future__ import annotations

import gzip
import json

import polars as pl
import pytest
from truth import Truth, discover, fixture_ids, truth

from envoy_dissector.analysis import CONTRACT_COLUMNS, Capture, dissect
from envoy_dissector.analysis.schema import PHASES_SCHEMA, REQUEST_SCHEMA
from envoy_dissector.analysis.stats import percentiles

ALL = discover()
SINGLE = [t for t in ALL if t.origin_prefix is None]


def _physical_lines(t: Truth) -> int:
    opener = gzip.open if t.log.suffix == ".gz" else open
    with opener(t.log, "rb") as fh:  # type: ignore[operator]
        return sum(1 for _ in fh)


@pytest.mark.parametrize("t", SINGLE, ids=fixture_ids(SINGLE))
def test_capture_contract_and_accounting(t: Truth) -> None:
    cap = t.capture()
    assert isinstance(cap, Capture)
    assert tuple(cap.requests.columns[:len(CONTRACT_COLUMNS)]) == CONTRACT_COLUMNS
    assert dict(cap.contract_requests.schema) == REQUEST_SCHEMA
    assert dict(cap.phases.schema) == PHASES_SCHEMA
    d = cap.diagnostics_dict()
    assert d["lines_read"] == d["lines_in_records"] + d["lines_malformed"]
    assert d["lines_read"] == _physical_lines(t)  # every physical line of the file accounted for
    assert sum(d["events_by_kind"].values()) == d["records"] == cap.records.height
    client = cap.requests.filter(~pl.col("internal"))
    assert d["requests"] == client.height and d["requests_complete"] == int(client["complete"].sum())
    assert d["requests"] >= t.access().height
    lab_name = t.meta["log_format"]["name"]  # the lab's names; the format ids of the output contract:
    assert cap.format == {"envoy-us": "envoy", "istio-json-old": "istio-json"}.get(lab_name, lab_name)


@pytest.mark.parametrize("rel", ["istio-thread/workers", "old-format/converted/keepalive", "envoy/workers"])
def test_summary_is_json_with_the_documented_keys(rel: str) -> None:
    cap = truth(rel).capture()
    s = json.loads(json.dumps(cap.summary()))
    assert {"format", "wrappers", "diagnostics", "phases", "workers", "findings"} <= set(s)
    assert {"lines_read", "lines_in_records", "lines_malformed", "records", "records_unknown", "events_by_kind",
            "requests", "requests_complete", "warnings"} <= set(s["diagnostics"])
    for phase in ("downstream_read", "header_parse", "filter_chain", "router", "upstream_wait", "encode",
                  "downstream_write", "total", "loop_queue"):
        assert set(s["phases"][phase]) == {"p50", "p90", "p99", "max"}
        v = s["phases"][phase]
        assert v["p50"] <= v["p90"] <= v["p99"] <= v["max"]
    for w in s["workers"]:
        assert 0 <= w["utilisation"] <= 1 and w["requests"] >= 0
    assert all(f["severity"] in {"info", "warning", "critical"} for f in s["findings"])


def test_percentiles_leave_out_incomplete_and_internal_requests() -> None:
    cap = truth("istio-thread/workers").capture()
    r = cap.requests
    counted = r.filter(pl.col("complete") & ~pl.col("internal"))
    assert percentiles(r)["total"]["max"] == counted["total_us"].max()
    # Doping the excluded rows changes nothing.
    doped = r.with_columns(total_us=pl.when(pl.col("complete") & ~pl.col("internal")).then(pl.col("total_us"))
                           .otherwise(10**12))
    assert percentiles(doped)["total"] == percentiles(r)["total"]


def test_request_lookup_and_its_lines() -> None:
    t = truth("istio-thread/keepalive")
    cap = t.capture()
    xid = t.access()["x_request_id"][3]
    row = cap.request(xid)
    assert row["x_request_id"] == xid
    assert cap.request(row["request_uid"])["request_uid"] == row["request_uid"]
    with pytest.raises(KeyError):
        cap.request("no-such-request")
    lines = cap.request_lines(row)
    assert lines.filter(pl.col("stream_id") == row["stream_id"]).height == row["log_lines"]
    assert set(lines["conn_id"].drop_nulls().to_list()) <= {row["downstream_conn_id"], row["upstream_conn_id"]}
    assert lines["ts_us"].min() <= row["ds_rx_beg_us"] and lines["ts_us"].max() >= row["ds_tx_end_us"]
    phases = cap.request_phases(row)
    assert set(phases["request_uid"].to_list()) == {row["request_uid"]}


@pytest.mark.parametrize("rel", ["old-format/converted/keepalive", "old-format/converted/workers",
                                 "istio/workers", "istio-json-old/workers"])
def test_no_thread_ids_say_how_workers_were_inferred(rel: str) -> None:
    t = truth(rel)
    assert not t.has_thread_ids
    warnings = " ".join(t.capture().diagnostics_dict()["warnings"])
    assert "no thread ids" in warnings
    assert "inferred" in warnings and "confidence" in warnings
    # Inferred lanes are marked (negative) so nobody mistakes them for real thread ids.
    threads = t.capture().requests.filter(~pl.col("internal"))["thread"]
    assert threads.null_count() == 0 and (threads < 0).all()


@pytest.mark.parametrize("rel", ["istio-thread/workers", "custom/workers", "istio-json/workers", "envoy-us/workers"])
def test_thread_ids_bring_no_inference_caveat(rel: str) -> None:
    warnings = " ".join(truth(rel).capture().diagnostics_dict()["warnings"])
    assert "inferred" not in warnings and "millisecond" not in warnings


def test_dissect_accepts_log_text_and_names_it() -> None:
    t = truth("istio-thread/keepalive")
    with gzip.open(t.log, "rt") as fh:
        text = fh.read()
    cap = dissect(text, name="pasted")
    assert cap.name == "pasted"
    assert cap.requests.filter(~pl.col("internal")).height == t.access().height
    assert "pasted" in cap._repr_html_()
