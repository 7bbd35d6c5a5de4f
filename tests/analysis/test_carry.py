"""The carry (analysis/engine/carry.py) keeps, of the events a window drops, the latest event of each looked-up kind
per key and the first of each per-connection kind: checked against the rules applied row by row in Python, on a
real capture's events of one origin and of two origins that share connection ids."""
from __future__ import annotations

import polars as pl
import pytest
from truth import FIXTURES

from envoy_dissector.analysis.engine.carry import FIRST_OF, LAST_OF, carried
from envoy_dissector.analysis.schema import ANALYSED_COLUMNS
from envoy_dissector.parser.kinds import EventKind
from envoy_dissector.parser.pipeline import iter_parse


def _events() -> pl.DataFrame:
    log = FIXTURES / "istio-thread" / "workers" / "envoy.log.gz"
    return pl.concat([c.events for c in iter_parse(str(log))]).select(ANALYSED_COLUMNS)


def _by_rule(dropped: pl.DataFrame) -> list[int]:
    """The rows each rule keeps, found one row at a time: per key, the last (``LAST_OF``) or first (``FIRST_OF``)
    row whose condition holds and whose key has no null; a rule keyed by the connection keeps nothing of a
    connection whose ``closing socket`` line is among the rows."""
    kept: set[int] = set()
    closed = {(o, c) for o, c, k in dropped.select("origin", "conn_id", "kind").iter_rows()
              if k == EventKind.CLOSING_SOCKET}
    connections = list(dropped.select("origin", "conn_id").iter_rows())
    for rules, last in ((LAST_OF, True), (FIRST_OF, False)):
        for condition, key in rules:
            holds = dropped.with_columns(ok__=condition.fill_null(False))["ok__"].to_list()  # (a literal: each row)
            chosen: dict[tuple[object, ...], int] = {}
            for row, (ok, values) in enumerate(zip(holds, dropped.select(key).iter_rows(), strict=True)):
                if "conn_id" in key and connections[row] in closed:
                    continue
                if ok and None not in values and (last or values not in chosen):
                    chosen[values] = row
            kept.update(chosen.values())
    return sorted(kept)


@pytest.mark.parametrize("origins", [1, 2], ids=["one-origin", "two-origins"])
def test_the_carry_keeps_what_each_rule_keeps_row_by_row(origins: int) -> None:
    events = _events()
    # (a second origin with the same connection ids, its lines between the first's: keys must keep them apart)
    dropped = events if origins == 1 else pl.concat(
        [events, events.with_columns(origin=pl.lit("second"))]).sort("ts_us", maintain_order=True)
    expected = dropped[_by_rule(dropped)]
    kept = carried(dropped)
    assert 0 < kept.height < dropped.height
    assert kept.equals(expected)


def test_a_closed_connection_leaves_the_carry_and_an_open_one_stays() -> None:
    """Of the workers capture's first half, the connections that closed keep no row of their own (a thread's latest
    pool line may still name one); those still open at the half keep their first line."""
    events = _events()
    dropped = events.head(events.height // 2)
    kinds = dropped.group_by("origin", "conn_id").agg(closed=(pl.col("kind") == EventKind.CLOSING_SOCKET).any())
    closed = kinds.filter(pl.col("closed") & pl.col("conn_id").is_not_null())
    still_open = kinds.filter(~pl.col("closed") & pl.col("conn_id").is_not_null())
    assert closed.height > 0 and still_open.height > 0
    kept = carried(dropped)
    pool = kept["kind"].is_in([k.value for k in (EventKind.POOL_CREATING_STREAM, EventKind.POOL_ATTACHING_TO_NEXT_STREAM,
                                                  EventKind.POOL_USING_EXISTING)])
    assert kept.filter(~pool).join(closed, on=["origin", "conn_id"]).height == 0
    assert still_open.join(kept, on=["origin", "conn_id"], how="anti").height == 0
