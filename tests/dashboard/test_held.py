"""The dashboard's held capture (dashboard/held.py) answers a notebook's questions as the whole capture does: its
repr, one request's whole row (by uid, x-request-id or position), its phase rows and queueing windows."""
from __future__ import annotations

from pathlib import Path

from envoy_dissector.analysis import dissect
from envoy_dissector.dashboard.held import hold


def test_a_held_capture_reads_one_request_whole_from_its_detail(tmp_path: Path) -> None:
    whole = dissect("fixtures/istio-thread/keepalive/envoy.log.gz")
    held = hold(whole, tmp_path / "detail").capture
    assert len(held.requests.columns) < len(whole.requests.columns) and held.phases.height == 0
    assert repr(held) == repr(whole)
    for at in (0, whole.requests.height - 1):
        row = whole.request(at)
        assert held.request(at) == row
        assert held.request(row["request_uid"]) == row
        if row["x_request_id"] is not None:
            assert held.request(row["x_request_id"]) == row
        assert held.request_phases(row["request_uid"]).equals(whole.request_phases(row["request_uid"]))
        assert held.request_queueing(row["request_uid"]).equals(whole.request_queueing(row["request_uid"]))
    assert whole.phases.height > 0 and any(whole.request_queueing(i).height for i in range(whole.requests.height))
