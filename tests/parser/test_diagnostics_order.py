"""The diagnostics' per-origin counts come out in one order: origins are met in an order that depends on where
blocks end and on polars' group order within a chunk (``_account``), so the summary sorts them."""
from __future__ import annotations

import json

import polars as pl

from envoy_dissector.parser.pipeline import Diagnostics, _account


def _chunk(origins: list[str]) -> pl.DataFrame:
    return pl.DataFrame({"origin": origins, "kind": ["unknown"] * len(origins), "n_lines": [1] * len(origins)})


def test_the_origins_counts_are_in_one_order_whatever_order_they_were_met_in() -> None:
    met_first, met_last = Diagnostics(), Diagnostics()
    _account(_chunk(["pod-a"]), met_first)
    _account(_chunk(["pod-b", "pod-b"]), met_first)
    _account(_chunk(["pod-b"]), met_last)
    _account(_chunk(["pod-a", "pod-b"]), met_last)
    assert (list(met_first.by_origin), list(met_last.by_origin)) == (["pod-a", "pod-b"], ["pod-b", "pod-a"])
    summaries = [d.as_dict()["by_origin"] for d in (met_first, met_last)]
    assert list(summaries[1]) == ["pod-a", "pod-b"]
    assert json.dumps(summaries[0]) == json.dumps(summaries[1])
