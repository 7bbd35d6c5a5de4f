"""Findings name what the lab injected (and nothing it did not), with evidence users can check."""
from __future__ import annotations

import gzip
import re

import polars as pl
import pytest
from truth import FIXTURES, Truth, capture_of, discover, fixture_ids, truth

from envoy_dissector.analysis.findings import SEVERITY_ORDER, Finding

ALL = discover()

WARNING_OR_WORSE = frozenset({"warning", "critical"})
#: What each lab scenario (meta.json "scenario") must show above info: finding id prefix -> allowed severities;
#: and the ids that may show above info besides. Everything else stays info. Same table: docs/findings.md.
EXPECTED: dict[str, tuple[dict[str, frozenset[str]], tuple[str, ...]]] = {
    "keepalive": ({}, ()),
    "large-body": ({}, ()),
    "upstream-delay": ({"slow-upstream": frozenset({"info"})}, ()),
    # The Lua filter ("slow-filter-envoy.filters.http.lua"; before Envoy 1.23 filters are logged by address,
    # so "slow-filter-filter#1"): the only filter above the threshold.
    "lua-cpu-baseline": ({"slow-filter-": frozenset({"warning"})}, ()),
    "lua-cpu": ({"saturated-worker-": frozenset({"critical"}), "slow-filter-": frozenset({"warning"})}, ()),
    "fault-delay": ({"paused-filter-envoy.filters.http.fault": frozenset({"warning"})}, ()),
    "retries-503": ({"retries": frozenset({"warning"}), "server-errors": frozenset({"critical"}),
                     "upstream-connect-refused": frozenset({"critical"})}, ()),
    "new-upstream-conn": ({"upstream-connection-churn": frozenset({"warning"})}, ()),
    # Closed-loop load with no think time: requests really queue on the workers (most wait ≥ 1 ms).
    "http2": ({"saturated-worker-": WARNING_OR_WORSE}, ()),
    # How the kernel spread 16 connections over 2 workers varies by run: imbalance may or may not show.
    "workers": ({"saturated-worker-": WARNING_OR_WORSE}, ("worker-imbalance",)),
    "tracing-off": ({}, ()),
    # The flushes' worker time makes the other connection's requests wait (about half of them ≥ 1 ms).
    "tracing-zipkin": ({"tracing-flush": frozenset({"info"})}, ("saturated-worker-",)),
    # 500 µs of Wasm CPU per request on 2 connections: every request pays it, about half also wait for it.
    # 1 ms authorization server: every request is held ~1.3 ms by the ext_authz filter (its own call); the calls'
    # worker time delays the other connection's requests a little (info).
    "ext-authz": ({"paused-filter-envoy.filters.http.ext_authz": frozenset({"warning"}),
                   "ext-authz-calls": frozenset({"info"})}, ()),
    # Envoy runs active health checks on its main thread: they cost thread time, never a worker's (info).
    "health-check": ({"health-checks": frozenset({"info"})}, ()),
    "wasm-stats": ({"wasm-share": frozenset({"warning"}), "slow-filter-istio.stats": frozenset({"warning"})},
                   ("saturated-worker-", "slow-filter-wasm")),
}


def _ids(t: Truth) -> list[str]:
    return [f.id for f in t.capture().findings()]


def _worker_threads_from_raw_log(t: Truth) -> set[int]:
    """Threads that logged `new stream` for a connection in Envoy's access log, read straight from the log text."""
    conns = set(t.access()["connection_id"].to_list())
    opener = gzip.open if t.log.suffix == ".gz" else open
    pattern = re.compile(r'"ConnectionId":"(\d+)"\] new stream\tthread=(\d+)')
    with opener(t.log, "rt") as fh:  # type: ignore[operator]
        return {int(m.group(2)) for m in map(pattern.search, fh) if m and int(m.group(1)) in conns}


@pytest.mark.parametrize("t", ALL, ids=fixture_ids(ALL))
def test_findings_are_well_formed_and_ordered(t: Truth) -> None:
    found = t.capture().findings()
    assert [SEVERITY_ORDER[f.severity] for f in found] == sorted(SEVERITY_ORDER[f.severity] for f in found)
    assert len({f.id for f in found}) == len(found)
    for f in found:
        assert isinstance(f, Finding) and f.title and f.evidence
        assert set(f.as_dict()) == {"id", "severity", "title", "evidence", "fix"}


def test_every_scenario_has_an_expected_findings_entry() -> None:
    assert {t.meta["scenario"] for t in ALL} == set(EXPECTED)


@pytest.mark.parametrize("t", ALL, ids=fixture_ids(ALL))
def test_expected_findings_per_scenario(t: Truth) -> None:
    """Each scenario shows what the lab injected, at a severity that follows the harm, and nothing else
    above info (a quiet capture has no warning at all)."""
    required, allowed = EXPECTED[t.meta["scenario"]]
    if not t.microseconds:  # ms timestamps: queueing below the tick is not evidence (analysis/quality.py)
        required = {p: s for p, s in required.items() if not p.startswith("saturated-worker")}
        allowed = (*allowed, "saturated-worker-")
    found = [f for f in t.capture().findings() if not f.id.startswith("note-")]
    for prefix, severities in required.items():
        hits = [f for f in found if f.id.startswith(prefix)]
        assert hits, f"{t.rel}: expected {prefix}*, got {[(f.id, f.severity) for f in found]}"
        assert {f.severity for f in hits} <= severities, [(f.id, f.severity) for f in hits]
    loud = [f for f in found if f.severity != "info"]
    unexpected = [f.id for f in loud if not any(f.id.startswith(p) for p in (*required, *allowed))]
    assert not unexpected, f"{t.rel}: unexpected findings above info: {unexpected}"


def test_seed000_reconstruction_findings() -> None:
    """One complete request (the engineer's) among cut ones: too few to call a worker saturated, so nothing
    above info; the proxy-time finding names its event-loop queueing (≈1.44 ms by hand)."""
    cap = capture_of(FIXTURES / "old-format" / "seed000" / "envoy.log")
    found = cap.findings()
    assert [f.id for f in found if f.severity != "info"] == []
    proxy = next(f for f in found if f.id == "proxy-time")
    queue = re.search(r"event-loop queueing ([\d,]+) µs", proxy.evidence)
    assert queue and abs(int(queue.group(1).replace(",", "")) - 1439) <= 0.15 * 1439, proxy.evidence


@pytest.mark.parametrize("rel", ["istio-thread/keepalive", "istio-thread/lua-cpu-baseline", "envoy/keepalive",
                                 "istio-thread/large-body"])
def test_a_busy_single_connection_is_not_saturation(rel: str) -> None:
    """One client connection keeps its worker busy (trace logging costs CPU) yet no request waits for it:
    busy share alone never raises saturation."""
    t = truth(rel)
    assert t.meta["settings"]["load"]["connections"] == 1
    workers = t.capture().workers()
    assert float(workers["utilisation"].max()) >= 0.7  # type: ignore[arg-type]
    assert int(workers["waited"].sum()) == 0
    assert not any(f.id.startswith("saturated-worker") for f in t.capture().findings())


def test_lua_cpu_names_the_saturated_worker() -> None:
    t = truth("istio-thread/lua-cpu")
    assert t.meta["settings"]["envoy"]["concurrency"] == 1
    (worker,) = _worker_threads_from_raw_log(t)
    critical = [f for f in t.capture().findings() if f.severity == "critical"]
    assert [f.id for f in critical] == [f"saturated-worker-{worker}"]
    assert str(worker) in critical[0].title and str(worker) in critical[0].evidence
    assert "concurrency" in critical[0].fix.lower() or "cpu" in critical[0].fix.lower()
    # The Lua script's own CPU is named too.
    assert "slow-filter-envoy.filters.http.lua" in _ids(t)


def test_upstream_delay_is_a_slow_upstream() -> None:
    t = truth("istio-thread/upstream-delay")
    ids = _ids(t)
    assert "slow-upstream" in ids
    assert "proxy-time" not in ids
    assert not any(i.startswith("saturated-worker") for i in ids)
    f = next(f for f in t.capture().findings() if f.id == "slow-upstream")
    assert "upstream_wait" in f.evidence


@pytest.mark.parametrize("rel", ["istio-thread/fault-delay", "istio-thread/retries-503"])
def test_timer_waits_do_not_look_like_saturation(rel: str) -> None:
    assert not any(i.startswith("saturated-worker") for i in _ids(truth(rel)))


def test_fault_delay_names_the_pausing_filter() -> None:
    t = truth("istio-thread/fault-delay")
    f = next(f for f in t.capture().findings() if f.id == "paused-filter-envoy.filters.http.fault")
    assert f.severity == "warning"
    assert "worker was free" in f.evidence
    assert not any(i.startswith("slow-filter-envoy.filters.http.fault") for i in _ids(t))


def test_retries_are_reported_with_their_attempts() -> None:
    t = truth("istio-thread/retries-503")
    found = {f.id: f for f in t.capture().findings()}
    assert "retries" in found and "server-errors" in found
    attempts = int(t.access()["attempts"].max())  # type: ignore[arg-type]
    assert f"max {attempts} attempts" in found["retries"].evidence
    assert "503" in found["server-errors"].evidence


def test_connection_churn_only_where_connections_are_not_reused() -> None:
    assert "upstream-connection-churn" in _ids(truth("istio-thread/new-upstream-conn"))
    for rel in ("istio-thread/keepalive", "istio-thread/upstream-delay", "istio-thread/fault-delay"):
        assert "upstream-connection-churn" not in _ids(truth(rel)), rel


def test_no_thread_ids_note_is_a_finding() -> None:
    t = truth("old-format/converted/workers")
    notes = [f for f in t.capture().findings() if f.id.startswith("note-")]
    text = " ".join(f.evidence for f in notes)
    assert "inferred" in text and "confidence" in text


def test_millisecond_timestamps_note_is_a_finding() -> None:
    notes = [f for f in truth("envoy/keepalive").capture().findings() if f.id.startswith("note-")]
    assert any("millisecond" in f.evidence for f in notes)
    assert not [f for f in truth("envoy-us/keepalive").capture().findings()
                if f.id.startswith("note-") and "millisecond" in f.evidence]


def test_worker_table_counts_the_requests_envoy_logged() -> None:
    for rel in ("istio-thread/workers", "istio-thread/lua-cpu"):
        t = truth(rel)
        workers = t.capture().workers()
        assert int(workers["requests"].sum()) == t.access().height
        threads = _worker_threads_from_raw_log(t)
        assert set(workers.filter(pl.col("requests") > 0)["thread"].to_list()) == threads
        assert workers["utilisation"].is_between(0, 1).all()
