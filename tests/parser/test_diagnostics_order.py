"""The diagnostics' per-origin counts come out in one order: origins are met in an order that depends on where
blocks end and on polars' group order within a chunk (``_account``), so the summary sorts them."""
from __future__ import annotations

import json

import polars as pl

from envoy_dissector.parser.pipeline import Diagnostics, _account, _count_malformed


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


def test_an_origins_counts_are_in_one_order_whether_a_malformed_line_or_a_record_came_first() -> None:
    malformed = pl.DataFrame({"line_no": [1], "origin": ["pod-a"], "raw": ["not a log line"], "kind": ["other"]})
    malformed_first, record_first = Diagnostics(), Diagnostics()
    _count_malformed(malformed, malformed_first)
    _account(_chunk(["pod-a"]), malformed_first)
    _account(_chunk(["pod-a"]), record_first)
    _count_malformed(malformed, record_first)
    assert list(malformed_first.by_origin["pod-a"]) != list(record_first.by_origin["pod-a"])
    assert json.dumps(malformed_first.as_dict()["by_origin"]) == json.dumps(record_first.as_dict()["by_origin"])


def test_a_chunk_of_one_origin_is_counted_as_the_group_by_counts_it() -> None:
    """``_kind_counts`` counts a chunk of one origin by its kinds' codes (numpy), others by a ``group_by``."""
    from envoy_dissector.parser.pipeline import _kind_counts
    from envoy_dissector.parser.schema import EVENT_SCHEMA

    kinds = ["unknown", "new_stream", "unknown", "socket_event", "new_stream", "unknown"]
    for origins in (["pod-a"] * 6, ["pod-a", "pod-b"] * 3):
        chunk = pl.DataFrame({"origin": origins, "kind": kinds, "n_lines": [1, 3, 1, 1, 2, 7]}).cast(
            {"kind": EVENT_SCHEMA["kind"]})
        expected = chunk.group_by("origin", "kind").agg(n=pl.len(), lines=pl.col("n_lines").sum())
        assert sorted(_kind_counts(chunk)) == sorted(
            (origin, str(kind), n, lines) for origin, kind, n, lines in expected.iter_rows())
