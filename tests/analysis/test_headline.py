"""The headline rate: requests per second over the traffic window, not over the log's span."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from truth import Truth, discover, fixture_ids

from envoy_dissector.analysis import dissect
from envoy_dissector.analysis.quality import MIN_REQUESTS_FOR_RPS

LAB = [t for t in discover(("trace", "debug")) if t.origin_prefix is None]


def driven_rate(t: Truth) -> tuple[int, float]:
    """Requests the lab's client sent and the rate it drove them at, from its own record (client.jsonl): its
    first request's send → its last response. meta.json's ``client_rps`` divides by the load's wall time,
    which also holds the client's start-up and connection set-up (3.5× lower than the traffic rate on http2)."""
    rows = [json.loads(line) for line in (t.dir / "client.jsonl").read_text().splitlines() if line.strip()]
    first = min(r["start_ts_us"] for r in rows)
    last = max(r["start_ts_us"] + (r["latency_us"] or 0) for r in rows)
    assert len(rows) == t.meta["counts"]["client_requests"]
    return len(rows), len(rows) / ((last - first) / 1e6)


@pytest.mark.parametrize("t", LAB, ids=fixture_ids(LAB))
def test_headline_rps_is_the_driven_rate(t: Truth) -> None:
    sent, rate = driven_rate(t)
    span = t.capture().span()
    if sent < MIN_REQUESTS_FOR_RPS:
        assert span["rps"] is None  # no rate from a handful of requests
        return
    assert span["rps"] == pytest.approx(rate, rel=0.10), (span, rate)
    assert span["traffic_s"] < span["duration_s"]  # the log also holds Envoy's start-up and shutdown


def test_two_runs_days_apart_are_two_runs(tmp_path: Path) -> None:
    """One file holding two runs (Envoy restarted days later): two origins, and the rate counts only their
    traffic windows, not the days between."""
    a, b = (Path("fixtures/istio-thread") / name / "envoy.log.gz" for name in ("lua-cpu", "tracing-zipkin"))
    both = tmp_path / "two-runs.log"
    both.write_bytes(gzip.decompress(a.read_bytes()) + gzip.decompress(b.read_bytes()))
    cap = dissect(str(both))
    runs = cap.origins()
    assert len(runs) == 2
    span = cap.span()
    assert span["duration_s"] > 86_400  # the log's span, reported apart
    assert span["traffic_s"] == pytest.approx(sum(r["traffic_s"] for r in runs))
    assert span["rps"] == pytest.approx(span["requests"] / span["traffic_s"])
    assert all(r["rps"] > 100 for r in runs)
