"""Failed upstream connects (analysis/stages/failures.py): linked to the connection that failed, measured as
upstream_connect / tls_handshake, and ``failure_reason`` equal to what Envoy's own access log says."""
from __future__ import annotations

import polars as pl
import pytest
from truth import FIXTURES, Truth, discover

from envoy_dissector.analysis import dissect
from envoy_dissector.analysis.stages.failures import response_flags
from envoy_dissector.parser.kinds import EventKind

#: Lab captures of retries to a closed port (Envoy 1.40 as it logs; legacy-1.19 is converted text whose
#: details differ from the access log's by construction).
REFUSED = ("istio-thread/retries-503", "istio/retries-503", "debug-level/istio-thread/retries-503")
TLS_SAN = FIXTURES / "real" / "058-istio-1.25-thread-tags-debug-tls-verify-failed-retries-503.log"


def truth(rel: str) -> Truth:
    """A lab capture of any level (debug-level ones too)."""
    return next(t for t in discover(("trace", "debug")) if t.rel == rel)


def _flags_and_details(value: str | None) -> tuple[frozenset[str], str]:
    flags, _, details = (value or "").partition(" ")
    return frozenset(flags.split(",")), details


@pytest.mark.parametrize("rel", REFUSED)
def test_failure_reason_is_envoys_flags_and_details(rel: str) -> None:
    """Envoy's access log (%RESPONSE_FLAGS%, %RESPONSE_CODE_DETAILS%) is the truth for every request."""
    t = truth(rel)
    j = t.access().join(t.requests(), on="x_request_id", how="inner")
    assert j.height == t.access().height
    for row in j.iter_rows(named=True):
        flags, details = _flags_and_details(row["failure_reason"])
        assert flags == frozenset(row["response_flags"].split(",")), row["x_request_id"]
        assert details == row["response_code_details"], row["x_request_id"]


@pytest.mark.parametrize("rel", REFUSED)
def test_refused_connect_is_linked_to_its_connection_and_measured(rel: str) -> None:
    """The failed connection is the one whose `client disconnected` closes the last attempt; its connect runs
    from `connection in progress` to the `delayed connect error` (read here from the events themselves), and
    upstream_conn_id stays null as Envoy's %UPSTREAM_CONNECTION_ID% (0: none established)."""
    t = truth(rel)
    cap = t.capture()
    r = t.requests()
    assert r["upstream_conn_id"].null_count() == r.height
    assert r["failed_upstream_conn_id"].null_count() == 0
    ev = cap.events.filter(pl.col("conn_id").is_in(r["failed_upstream_conn_id"].implode()))
    started = ev.filter(pl.col("kind") == EventKind.CONNECTION_IN_PROGRESS).group_by("conn_id").agg(
        beg=pl.col("ts_us").min())
    refused = ev.filter((pl.col("kind") == EventKind.CONNECT_ERROR) & pl.col("reason").str.contains("refused")
                        ).group_by("conn_id").agg(end=pl.col("ts_us").min())
    want = started.join(refused, on="conn_id").rename({"conn_id": "failed_upstream_conn_id"})
    got = r.join(want, on="failed_upstream_conn_id", how="left")
    assert got["end"].null_count() == 0  # every failed connection was refused
    assert (got["upstream_connect_us"] == got["end"] - got["beg"]).all()
    assert got["tls_handshake_us"].null_count() == got.height  # plain TCP: no handshake


def test_tls_san_failure_on_a_real_excerpt() -> None:
    """058 (istio/istio issue, Istio 1.25): three attempts fail `verify cert failed: SAN matcher`, then a 503.
    Hand-computed from the excerpt's last attempt on C449: `connection in progress` 47.014191, `connected`
    47.014216, the TLS error 47.016058."""
    cap = dissect(str(TLS_SAN))
    r = cap.requests.filter(~pl.col("internal"))
    assert r.height == 1
    row = r.row(0, named=True)
    assert row["failed_upstream_conn_id"] == 449 and row["link"] == "failed-connect"
    assert row["upstream_conn_id"] is None
    assert row["upstream_connect_us"] == 25
    assert row["tls_handshake_us"] == 1842
    # The details as the excerpt's local-reply line prints them, whole.
    line = next(x for x in TLS_SAN.read_text().splitlines() if "Sending local reply with details" in x)
    details = line.split("with details ", 1)[1].split("\t")[0]
    assert row["failure_reason"] == f"UF,URX {details}"
    assert details.endswith("CERTIFICATE_VERIFY_FAILED:TLS_error_end}")
    found = {f.id: f for f in cap.findings()}
    assert found["upstream-tls-verify"].severity == "critical"
    assert "C449" in found["upstream-tls-verify"].evidence
    assert "subject alt names" in found["upstream-tls-verify"].fix


def test_refused_connects_get_their_own_finding_not_the_tls_one() -> None:
    ids = {f.id for f in truth("istio-thread/retries-503").capture().findings()}
    assert "upstream-connect-refused" in ids and "upstream-tls-verify" not in ids
    assert not any(i.startswith("upstream-connect") for i in
                   {f.id for f in truth("istio-thread/keepalive").capture().findings()})


@pytest.mark.parametrize(("name", "reason"), [
    ("033-istio-1.17-thread-debug-504-grep-notes-out-of-order.log", "UT response_timeout"),
    ("029-consul-17016-compose-cut-service-name-504-local-reply.log", "UT upstream_response_timeout"),
])
def test_timeouts_on_real_excerpts(name: str, reason: str) -> None:
    r = dissect(str(FIXTURES / "real" / name)).requests.filter(pl.col("status") == 504)
    assert r.height >= 1
    assert set(r["failure_reason"].to_list()) == {reason}


def test_a_request_that_did_not_fail_has_no_reason() -> None:
    r = truth("istio-thread/keepalive").requests()
    assert r["failure_reason"].null_count() == r.height


@pytest.mark.parametrize(("details", "retried", "flags"), [
    ("upstream_reset_before_response_started{connection_failure,TLS_error:_268435581}", False, "UF"),
    ("upstream_reset_before_response_started{connection_termination}", True, "UC,URX"),
    ("route_not_found", False, "NR"),
    ("no_healthy_upstream", False, "UH"),
    ("via_upstream", False, ""),
])
def test_response_flags_from_details(details: str, retried: bool, flags: str) -> None:
    got = pl.select(response_flags(pl.lit(details), pl.lit(retried))).item()
    assert got == flags
