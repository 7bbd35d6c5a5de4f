"""A capture reads its summary from ``CaptureFacts``, gathered as the engine reads its input: the facts must say
what its events frame (read again on demand) says, read with the events-based functions."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from envoy_dissector.analysis import dissect
from envoy_dissector.analysis.engine.reread import request_records
from envoy_dissector.analysis.findings import health_checks, record_gaps
from envoy_dissector.analysis.gap_counts import GapCounts
from envoy_dissector.analysis.quality import assess, capture_span
from envoy_dissector.analysis.stages.internal import work_bursts
from envoy_dissector.analysis.stages.loop import worker_threads
from envoy_dissector.analysis.stages.tls import counts

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
LOGS = ["istio-thread/health-check/envoy.log.gz", "istio-thread/ext-authz/envoy.log.gz",
        "istio/keepalive/envoy.log.gz", "envoy/workers/envoy.log.gz", "debug-level/istio-thread/keepalive/envoy.log.gz",
        "kubectl/multi-pod/interleaved.log.gz"]


@pytest.fixture(scope="module", params=LOGS)
def cap(request):
    return dissect(str(FIXTURES / request.param))


def test_the_facts_say_what_the_events_say(cap):
    events, requests = cap.events, cap.requests
    assert cap.quality() == assess(cap.records, events, requests)
    assert cap.span() == capture_span(cap.records, requests)
    for origin in cap.origins():
        mine = pl.col("origin") == origin["origin"]
        expected = capture_span(cap.records.filter(mine), requests.filter(mine))
        assert {k: origin[k] for k in expected} == expected
    assert cap.summary()["tls_handshakes"] == counts(events)
    assert cap.facts.gaps == GapCounts.of(record_gaps(events))
    assert cap.facts.health_checks == health_checks(events)
    threads = cap.facts.worker_threads(requests).sort("origin", "thread")
    assert threads.rows() == worker_threads(events, requests).sort("origin", "thread").rows()
    bursts = work_bursts(requests.with_columns(conn_id=pl.col("downstream_conn_id")), events)
    assert cap.internal_work().equals(bursts.select(cap.internal_work().columns))


def test_a_request_s_lines_read_again_are_the_events_ones(cap):
    complete = cap.requests.filter("complete")
    assert complete.height
    row = complete.row(complete.height // 2, named=True)
    assert cap.request_lines(row["request_uid"]).equals(request_records(cap.events, row))
