"""Wasm VM calls on a layout without thread ids (Istio <= 1.16 text): charged to the request by line order."""
from __future__ import annotations

import polars as pl
from truth import FIXTURES

from envoy_dissector.analysis import dissect


def test_vm_calls_without_thread_ids_are_charged_to_their_request() -> None:
    """Real excerpt 021 (Istio 1.13 text, no thread ids, cut before its `new stream`): context 13's calls lie
    between C44's stream lines. By hand, each `[host->vm]` to its `[host<-vm] … return`: context_create
    .094754→.094783 (29), request_headers .094786→.094790 (4), response_headers .124708→.124718 (10),
    response_body .124769→.124797 (28) and .124980→.124998 (18), log .125092→.125099 (7), done
    .125201→.125205 (4), delete .125207→.125210 (3): 103 µs."""
    cap = dissect(str(FIXTURES / "real" / "021-istio-1.13-old-tabs-trace-wasm-tls-cut-start.log"))
    r = cap.requests.filter(~pl.col("internal"))
    assert r.height == 1 and r["thread"][0] < 0  # an inferred lane: the log has no thread ids
    assert r["wasm_us"].to_list() == [103]
    rows = cap.request_phases(r["request_uid"][0]).filter(pl.col("detail").str.starts_with("wasm "))
    assert rows.height == 8 and rows["dur_us"].sum() == 103
