"""views and callbacks' helpers: what each view shows, computed without a browser."""
from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import plotly.io as pio
import polars as pl
import pytest

from envoy_dissector.analysis import dissect
from envoy_dissector.analysis.findings import Finding, imbalance
from envoy_dissector.analysis.schema import Phase
from envoy_dissector.dashboard import views
from envoy_dissector.dashboard.callbacks import session_view, slowest_request
from envoy_dissector.dashboard.datasets import Job, Registry


@pytest.fixture(scope="module")
def reg_and_ds():
    reg = Registry()
    lua = reg.add(dissect("fixtures/istio-thread/lua-cpu/envoy.log.gz", name="lua"), name="lua", owner=None)
    base = reg.add(dissect("fixtures/istio-thread/lua-cpu-baseline/envoy.log.gz"), name="base", owner="tok")
    return reg, lua, base


def text_of(component) -> str:
    return json.dumps(component.to_plotly_json(), ensure_ascii=False, default=lambda o: o.to_plotly_json()
                      if hasattr(o, "to_plotly_json") else str(o))


def test_overview_numbers_findings_and_figures(reg_and_ds):
    _, lua, _ = reg_and_ds
    out = text_of(views.facts(lua))
    assert '"40"' in out and "istio-thread" in out
    table = text_of(views.percentile_table(lua.summary()))
    for phase in ("downstream_read", "filter_chain", "upstream_wait", "total", "loop_queue"):
        assert phase in table
    findings = text_of(views.findings_list(lua.capture.findings()))
    assert "saturated" in findings and "Fix: " in findings
    parts = views.overview(lua)
    assert any(getattr(p, "id", None) == "phase-share" for p in parts)


def test_competing_connections_and_waterfall(reg_and_ds):
    _, lua, _ = reg_and_ds
    uid = slowest_request(lua)
    row = lua.request(uid)  # (read back from the dataset's detail on disk: the held frame is narrow)
    whole = dissect("fixtures/istio-thread/lua-cpu/envoy.log.gz", name="lua")
    assert whole.requests["internal"].any()  # (the grid shows them after the client requests; held in capture order)
    for u in whole.requests["request_uid"]:
        assert lua.request(u) == whole.request(u)
        assert lua.request_phases(lua.request(u)).equals(whole.request_phases(u))
    waits = views.competing_connections(lua.request_queueing(row))
    assert waits and all(isinstance(c, int) for w in waits for c in w["conns"])
    # the structured connections are the ones the phases frame's loop_queue rows show as text
    shown = lua.request_phases(row).filter(pl.col("phase") == Phase.LOOP_QUEUE).sort("start_us")["detail"]
    assert [f"{w['where']}: " + " + ".join(f"C{c}" for c in w["conns"]) for w in waits if w["conns"]] == [
        d for d in shown.to_list() if "no other connection" not in d]
    assert any(w["conns"] for w in waits)
    assert row["downstream_conn_id"] not in {c for w in waits for c in w["conns"]}
    start, end, thread = views.wait_window(lua, uid, 0, 1000)
    assert (start, end) == (waits[0]["start_us"] - 1000, waits[0]["end_us"] + 1000) and thread == row["thread"]
    start, _, _ = views.wait_window(lua, uid, 99, 0)
    assert start == row["life_start_us"]
    fig, side = views.waterfall_view(lua, uid)
    labels = " ".join(str(y) for t in fig.data for y in (t.y or []))
    assert "envoy.filters.http.lua" in labels and "upstream_wait" in labels
    facts = text_of(side[0])
    assert "upstream connection" in facts and ("NEW connection" in facts or "reused" in facts)
    assert f'"{row["outcome"]}"' in facts
    lines = text_of(views.log_lines(lua, uid))
    assert "new stream" in lines


def test_log_lines_are_read_again_from_the_file_or_the_text():
    path = "fixtures/istio-thread/lua-cpu/envoy.log.gz"
    reg = Registry()
    streamed = reg.add(dissect(path), name="s", owner=None)
    uid = slowest_request(streamed)
    shown = text_of(views.log_lines(streamed, uid))
    assert "new stream" in shown and shown == text_of(views.log_lines(reg.add(dissect(path), name="w", owner=None),
                                                                      uid))
    from_text = reg.add(dissect(gzip.decompress(Path(path).read_bytes()).decode()), name="t", owner=None)
    assert text_of(views.log_lines(from_text, slowest_request(from_text))) == shown


def test_request_facts_show_a_local_replys_details():
    cap = dissect("fixtures/istio-thread/retries-503/envoy.log.gz")
    row = cap.requests.filter(~pl.col("internal")).row(0, named=True)
    facts = text_of(views.request_facts(row))
    assert "local reply: upstream_reset_before_response_started" in facts


def test_event_loop_window_from_zoom(reg_and_ds):
    _, lua, _ = reg_and_ds
    zero, start, end = views.loop_window(lua.capture, None, None)
    assert zero == start < end
    assert views.window_from_relayout({"autosize": True}, zero) is None
    assert views.window_from_relayout({"xaxis.autorange": True}, zero) == (None, None)
    # (the axis is in ms since the capture's start)
    assert views.window_from_relayout({"xaxis.range[0]": 0.1005, "xaxis.range[1]": 2}, zero) == (zero + 100,
                                                                                                 zero + 2000)
    busy = lua.capture.loop.filter(pl.col("conn_id").is_not_null()).row(50, named=True)
    fig = views.event_loop_figure(lua.capture, thread=None, start_us=zero + 10_000, end_us=busy["end_us"] + 1000,
                                  highlight=[busy["conn_id"]])
    assert list(fig.layout.xaxis.range) == [10.0, (busy["end_us"] + 1000 - zero) / 1000]
    assert any("highlighted" in (t.name or "") for t in fig.data)
    assert views.thread_options(lua.capture)


def test_findings_repeated_per_origin_are_shown_once():
    f = Finding("saturated-worker-1", "critical", "Worker 1 is saturated", "e", "more CPU")
    i = Finding("proxy-time", "info", "t", "e2", "")
    groups = views.group_findings([i, f, dataclasses.replace(f, evidence="other origin"), f])
    assert groups == [(f, 3), (i, 1)]
    out = text_of(views.findings_list([i, f, f, f]))
    assert out.count("Worker 1 is saturated") == 1 and "2 more like it" in out


def test_workers_and_imbalance():
    w = pl.DataFrame({"origin": ["o", "o"], "thread": [1, 2], "utilisation": [0.9, 0.2], "busy_us": [9, 2],
                      "requests": [90, 10], "connections": [9, 1], "waited": [80, 0], "wait_p50_us": [4000, 0]})
    text = views.imbalance_text(w)
    assert "2 workers" in text and "9.0×" in text and "exact_balance" in text and "waited longer" in text
    # The same spread without extra waiting is said without alarm, by the same rule as the findings.
    calm = views.imbalance_text(w.with_columns(waited=pl.lit(0), wait_p50_us=pl.lit(0)))
    assert "without measurable harm" in calm
    assert [f.severity for f in imbalance(w)] == ["warning"]
    assert [f.severity for f in imbalance(w.with_columns(waited=pl.lit(0), wait_p50_us=pl.lit(0)))] == ["info"]


def test_compare(reg_and_ds):
    _, lua, base = reg_and_ds
    table, fig = views.compare_view(base, lua)
    out = text_of(table)
    assert "loop_queue" in out and "Δ p50" in out
    assert len(fig.data) == 4
    pio.to_json(fig)


def test_session_view_lists_own_and_shared(reg_and_ds):
    reg, lua, base = reg_and_ds
    v = session_view(reg, "tok", None)
    assert [o["value"] for o in v["options"]] == [base.id, lua.id]
    assert v["value"] == base.id and not v["pending"]
    other = session_view(reg, "someone-else", base.id)  # cannot pick another session's dataset
    assert [o["value"] for o in other["options"]] == [lua.id] and other["value"] == lua.id


@pytest.mark.parametrize("fixture", sorted(p.parent.name for p in __import__("pathlib").Path(
    "fixtures/istio-thread").glob("*/envoy.log.gz")))
def test_every_fixture_has_an_overview_and_a_waterfall(fixture):
    """Also captures with fewer than 20 client requests, whose rate is null."""
    reg = Registry()
    ds = reg.add(dissect(f"fixtures/istio-thread/{fixture}/envoy.log.gz"), name=fixture, owner=None)
    text = text_of(views.overview(ds)[1])
    assert "overview-rps" in text
    if ds.summary()["capture"]["rps"] is None:
        assert "< 20 requests" in text
    uid = slowest_request(ds)
    if uid is not None:
        views.waterfall_view(ds.capture, uid)


def test_overview_says_what_a_debug_capture_allows():
    """A debug-level capture (real Envoy at -l debug, 50 requests) and one with under 20 requests."""
    reg = Registry()
    ds = reg.add(dissect("fixtures/debug-level/envoy/keepalive/envoy.log.gz"), name="debug", owner=None)
    parts = views.overview(ds)
    panel = next(p for p in parts if getattr(p, "id", None) == "overview-quality")
    text = text_of(panel)
    assert "debug level" in text and "ms timestamps" in text and "downstream_read" in text
    few = reg.add(dissect("fixtures/istio-thread/retries-503/envoy.log.gz"), name="few", owner=None)
    assert "< 20 requests" in text_of(views.facts(few))  # no rate for a handful of requests


@pytest.mark.parametrize("total, read", [(300_000_000, "120 of ~300 MB read"), (None, "120 MB read")])
def test_a_running_analysis_head_says_what_was_read_without_a_stale_percentage(total, read):
    # (a job may not know its size: a gzip file too short for its trailer to say)
    job = Job(id="j", owner=None, name="big.log", path=Path("big.log"), total_bytes=total, state="running",
              stage="parsing", done_bytes=120_000_000)
    text = text_of(views.provisional_overview(job)[0]) + text_of(views.provisional_overview(job)[1])
    assert "big.log (analysing…)" in text and "%" not in text
    assert read in text and "~0 MB" not in text
