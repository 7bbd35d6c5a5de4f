"""``iter_parse(columns=...)``: a caller that reads some event columns gets those (and the few the parser's own
accounting reads), with the same values as a full parse, and the same diagnostics."""
from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from envoy_dissector.parser.pipeline import ParseRun, iter_parse
from envoy_dissector.parser.schema import EVENT_COLUMNS

WANTED = ("line_no", "ts_us", "thread", "conn_id", "stream_id", "kind", "bytes", "cluster", "x_request_id")


def _all(run: ParseRun) -> pl.DataFrame:
    return pl.concat([c.events for c in run])


@pytest.mark.parametrize("rel", ["istio-thread/keepalive/envoy.log.gz", "istio-json/keepalive/envoy.log.gz",
                                 "old-format/seed000/envoy.log", "envoy/workers/envoy.log.gz"])
@pytest.mark.parametrize("fast", [True, False])
def test_only_the_columns_asked_for_with_the_values_of_a_full_parse(rel, fast, fixture_by_rel):
    fx = fixture_by_rel(rel)
    full_run = iter_parse(fx.path, log_format=fx.log_format, fast=fast)
    full = _all(full_run)
    some_run = iter_parse(fx.path, log_format=fx.log_format, fast=fast, columns=WANTED)
    some = _all(some_run)
    assert set(WANTED) <= set(some.columns) < set(EVENT_COLUMNS)
    assert set(some.columns) - set(WANTED) <= {"origin", "n_lines", "message"}  # what the parser's accounting reads
    assert_frame_equal(some, full.select(some.columns))
    assert some_run.diagnostics.as_dict() == full_run.diagnostics.as_dict()
