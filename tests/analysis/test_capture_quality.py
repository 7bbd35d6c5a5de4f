"""Capture quality first, cut-off excerpts, and logs without request lines.

Excerpts are real lab captures cut or filtered the way users paste them (tests/analysis/excerpts.py);
which request is cut, and its x-request-id, come from the full capture and Envoy's access log.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from excerpts import at_levels, cut, excerpt_truth, record_spans
from truth import FIXTURES, Truth, matched, truth

from envoy_dissector.analysis import dissect
from envoy_dissector.cli.main import main

ROOT = FIXTURES.parent
INFO_LOG = FIXTURES / "info-level/istio-thread/keepalive/envoy.log"
DEBUG_DIR = FIXTURES / "debug-level/istio-thread/keepalive"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envoy_dissector.cli.main", *args], capture_output=True,
                          cwd=ROOT, timeout=120, text=True)


def _lines_of(t: Truth, kind: str) -> pl.DataFrame:
    """Records of ``kind`` on client streams of the full capture, with the stream's x-request-id."""
    r = t.requests().filter(pl.col("complete")).select("stream_id", "x_request_id", conn_id="downstream_conn_id")
    return record_spans(t).filter(pl.col("kind") == kind).join(r, on=["conn_id", "stream_id"]).sort("line_no")


# --- cut-off excerpts -----------------------------------------------------------------------------------

@pytest.mark.parametrize("lowest", ["trace", "debug"])
@pytest.mark.parametrize("first_kind", ["request_headers_complete", "route_match", "encoding_headers"])
def test_excerpt_starting_inside_a_request_gives_a_cut_client_request(lowest: str, first_kind: str,
                                                                      tmp_path: Path) -> None:
    t = truth("istio-thread/keepalive")
    mark = _lines_of(t, first_kind).row(10, named=True)
    ex = excerpt_truth(t, cut(t, mark["line_no"], lowest=lowest), tmp_path / "ex")
    r = ex.capture().requests
    first = r.filter((pl.col("downstream_conn_id") == mark["conn_id"]) & (pl.col("stream_id") == mark["stream_id"]))
    assert first.height == 1
    row = first.row(0, named=True)
    assert not row["internal"] and not row["complete"] and row["outcome"] == "cut by the capture"
    assert row["missing_boundaries"]  # says what is missing
    # The requests after it are whole again, and complete requests agree with Envoy on their total.
    later = matched(ex).filter(pl.col("request_uid").is_not_null() & pl.col("complete"))
    assert later.height >= t.access().height - 12
    assert (later["total_us"] >= later["ds_rx_beg_to_ds_tx_end_us"] - 50).all()


@pytest.mark.parametrize("lowest", ["trace", "debug"])
@pytest.mark.parametrize("last_kind", ["request_headers_complete", "pool_ready", "encoding_headers"])
def test_excerpt_ending_inside_a_request_gives_a_cut_client_request(lowest: str, last_kind: str,
                                                                    tmp_path: Path) -> None:
    t = truth("istio-thread/keepalive")
    mark = _lines_of(t, last_kind).row(30, named=True)
    ex = excerpt_truth(t, cut(t, 1, mark["line_no"], lowest=lowest), tmp_path / "ex")
    r = ex.capture().requests
    row = r.filter((pl.col("downstream_conn_id") == mark["conn_id"])
                   & (pl.col("stream_id") == mark["stream_id"])).row(0, named=True)
    assert row["x_request_id"] == mark["x_request_id"] or (
        last_kind == "request_headers_complete" and lowest == "debug")
    assert not row["internal"] and not row["complete"] and row["outcome"] == "cut by the capture"


@pytest.mark.parametrize("rel", ["istio-thread/keepalive", "istio-thread/http2", "istio-thread/workers"])
def test_no_cut_ever_turns_a_client_request_internal(rel: str, tmp_path: Path) -> None:
    """Cut at every 97th record, from the start and to the end: every client stream stays a client request,
    and whatever is called complete is really whole (its total covers Envoy's own duration)."""
    t = truth(rel)
    starts = record_spans(t)["line_no"].to_list()[150::97]
    client_ids = set(t.access()["x_request_id"].to_list())
    for i, line in enumerate(starts[:6]):
        for name, text in (("head", cut(t, line)), ("tail", cut(t, 1, line))):
            ex = excerpt_truth(t, text, tmp_path / f"{name}{i}")
            r = ex.capture().requests
            wrong = r.filter(pl.col("internal") & pl.col("x_request_id").is_in(list(client_ids)))
            assert wrong.height == 0, (name, line, wrong.select("request_uid", "x_request_id"))
            done = matched(ex).filter(pl.col("request_uid").is_not_null() & pl.col("complete"))
            assert (done["total_us"] >= done["ds_rx_beg_to_ds_tx_end_us"] - 50).all(), (name, line)


def test_excerpt_cut_inside_a_header_dump_is_read(tmp_path: Path) -> None:
    """A paste that starts in the middle of a multi-line header dump: the stray lines are counted, not fatal."""
    t = truth("istio-thread/keepalive")
    mark = _lines_of(t, "request_headers_complete").row(5, named=True)
    lines = (cut(t, 1)).split("\n")
    text = "\n".join(lines[mark["line_no"] + 1:]) + "\n"  # from the 2nd header line of the dump
    cap = dissect(text)
    d = cap.diagnostics_dict()
    assert d["lines_read"] == d["lines_in_records"] + d["lines_malformed"]
    row = cap.requests.filter(pl.col("stream_id") == mark["stream_id"])
    assert row.height == 1 and not row["internal"][0] and not row["complete"][0]


def test_partial_requests_are_shown_when_none_is_complete(tmp_path: Path) -> None:
    """One request cut at both ends: the report lists it with the phases known and the boundaries missing."""
    t = truth("istio-thread/keepalive")
    hdr = _lines_of(t, "request_headers_complete").row(20, named=True)
    up = _lines_of(t, "upstream_headers_complete").filter(pl.col("x_request_id") == hdr["x_request_id"])
    log = tmp_path / "partial.log"
    log.write_text(cut(t, hdr["line_no"], int(up["line_no"][0])))
    summary = tmp_path / "s.json"
    proc = run_cli("analyze", str(log), "--quiet", "-o", str(summary))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "partial requests" in out and hdr["x_request_id"] not in out  # listed by uid
    assert "known: " in out and "filter_chain" in out and "missing: b0 downstream read" in out
    s = json.loads(summary.read_text())
    assert s["diagnostics"]["requests_complete"] == 0
    partial = [p for p in s["partial_requests"] if p["request_uid"].endswith(f"S{hdr['stream_id']}")]
    assert len(partial) == 1
    p = partial[0]
    assert p["outcome"] == "cut by the capture"
    assert {"filter_chain", "router", "upstream_send"} <= set(p["known_phases_us"])
    assert "header_parse" not in p["known_phases_us"]  # its start lies before the excerpt
    assert any(m.startswith("b9") for m in p["missing_boundaries"])
    assert "no complete request" in " ".join(s["capture_quality"]["statements"])


# --- logs without request lines: exit 8 -------------------------------------------------------------------

def test_info_level_log_exits_8_saying_how_to_raise_the_level() -> None:
    proc = run_cli("analyze", str(INFO_LOG))
    assert proc.returncode == 8
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "info level" in err and "istioctl proxy-config log POD --level trace" in err
    assert "/logging?level=trace" in err and str(INFO_LOG) in err


def test_trace_capture_filtered_to_info_exits_8(tmp_path: Path) -> None:
    t = truth("istio-json/keepalive")
    log = tmp_path / "info.log"
    log.write_text(at_levels(t, "info"))
    proc = run_cli("analyze", str(log))
    assert proc.returncode == 8 and "istioctl proxy-config log" in proc.stderr


def test_debug_log_without_traffic_is_analysed_and_says_so(tmp_path: Path) -> None:
    """Debug level could show requests, there were none (TCP only, or idle): a report, not an error."""
    t = Truth(DEBUG_DIR, next(DEBUG_DIR.glob("envoy.log*")), json.loads((DEBUG_DIR / "meta.json").read_text()))
    first_stream = record_spans(t).filter(pl.col("kind") == "new_connection")["line_no"].min()
    log = tmp_path / "startup.log"
    log.write_text(cut(t, 1, int(first_stream) - 1))  # type: ignore[arg-type]
    summary = tmp_path / "s.json"
    proc = run_cli("analyze", str(log), "-o", str(summary), "-o", str(tmp_path / "r.csv"), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert "debug level but no HTTP request in the capture" in proc.stdout
    s = json.loads(summary.read_text())
    assert s["capture"]["requests"] == 0 and s["capture_quality"]["level"] == "debug"


# --- what the capture allows ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("rel", "level", "tick", "threads", "sockets"), [
    ("istio-thread/keepalive", "trace", 1, True, True),
    ("envoy/keepalive", "trace", 1000, True, True),
    ("istio/keepalive", "trace", 1, False, True),
    ("istio-json-old/keepalive", "trace", 1, False, True),
])
def test_quality_is_detected(rel: str, level: str, tick: int, threads: bool, sockets: bool) -> None:
    q = truth(rel).capture().quality()
    assert (q.level, q.timestamp_tick_us, q.thread_ids, q.socket_lines) == (level, tick, threads, sockets)
    said = " ".join(q.statements)
    assert ("no thread ids" in said) is not threads
    assert ("ms timestamps" in said) is (tick == 1000)


@pytest.mark.parametrize("fmt", ["istio-thread", "envoy", "istio"])
def test_debug_level_quality_says_what_cannot_be_measured(fmt: str) -> None:
    d = FIXTURES / "debug-level" / fmt / "keepalive"
    log = next(d.glob("envoy.log*"))
    q = dissect(str(log)).quality()
    assert q.level == "debug" and not q.socket_lines
    assert {"downstream_read", "downstream_write", "response_parse"} <= set(q.unmeasured_phases)
    said = " ".join(q.statements)
    assert "debug level: no socket lines" in said and "event-loop queueing cannot be measured" in said


def test_report_and_summary_start_with_quality(tmp_path: Path) -> None:
    log = next((FIXTURES / "debug-level/envoy/keepalive").glob("envoy.log*"))
    summary = tmp_path / "s.json"
    assert main(["analyze", str(log), "--quiet", "-o", str(summary)]) == 0
    s = json.loads(summary.read_text())
    q = s["capture_quality"]
    assert q["level"] == "debug" and q["timestamp_resolution"] == "ms" and q["thread_ids"] is True
    assert list(s)[:3] == ["format", "wrappers", "capture_quality"]
    proc = run_cli("analyze", str(log), "--quiet")
    head = proc.stdout.split("\n\n")[1]
    assert head.startswith("capture quality: debug (no socket lines) · ms timestamps · thread ids")
    # ms figures for a ms capture: the table's one unit (in its header) is ms, no µs anywhere in it
    lines = proc.stdout.splitlines()
    header = next(line for line in lines if line.startswith("phase "))
    assert header.split()[1:] == ["(ms)", "p50", "p90", "p99", "max"]
    table = [line for line in lines if line.startswith(("header_parse", "total", "upstream_wait"))]
    assert table and all("µs" not in line for line in table)


def test_ms_capture_has_no_sub_ms_findings() -> None:
    us = {f.id for f in truth("envoy-us/keepalive").capture().findings()}
    ms = {f.id for f in truth("envoy/keepalive").capture().findings()}
    assert "observer-effect" in us  # the same scenario at µs has it ...
    assert "observer-effect" not in ms  # ... at ms it would rest on differences below the tick
    assert not any(i.startswith(("proxy-time", "slow-upstream", "saturated-worker")) for i in ms)


def test_span_comes_from_all_records_and_rate_from_the_traffic() -> None:
    t = truth("istio-thread/retries-503")  # 10 requests: no rate
    cap = t.capture()
    s = cap.summary()["capture"]
    assert s["rps"] is None
    assert s["start_us"] == cap.records["ts_us"].min() and s["end_us"] == cap.records["ts_us"].max()
    assert "rps" not in cap_report(cap)
    many = truth("istio-thread/keepalive").capture().summary()["capture"]
    assert many["requests"] == 50 and many["rps"] == pytest.approx(50 / many["traffic_s"])
    assert many["traffic_s"] < many["duration_s"]  # start-up and shutdown lines are not traffic


def cap_report(cap: object) -> str:
    from envoy_dissector.analysis.outputs.report import render

    return render(cap)  # type: ignore[arg-type]
