"""Each stage's output frame has its declared schema (analysis/schema.py, parser/schema.py) on every fixture."""
from __future__ import annotations

import polars as pl
import pytest
from truth import Truth, capture_of, discover, fixture_ids

from envoy_dissector.analysis.loop import infer_threads
from envoy_dissector.analysis.pipeline import split_restarts
from envoy_dissector.analysis.requests import build_requests, connection_links
from envoy_dissector.analysis.schema import LINK_SCHEMA, LOOP_SCHEMA, PHASES_SCHEMA, REQUEST_SCHEMA
from envoy_dissector.parser.schema import EVENT_SCHEMA

TRUTHS = discover()


def _schema(frame: pl.DataFrame) -> dict[str, pl.DataType]:
    return dict(frame.schema)


@pytest.mark.parametrize("t", TRUTHS, ids=fixture_ids(TRUTHS))
def test_every_stage_returns_its_declared_frame(t: Truth) -> None:
    cap = capture_of(t.log, t.log_format)
    assert _schema(cap.events) == EVENT_SCHEMA
    assert _schema(cap.phases) == PHASES_SCHEMA
    assert _schema(cap.loop) == LOOP_SCHEMA
    assert _schema(cap.requests.select(list(REQUEST_SCHEMA))) == REQUEST_SCHEMA
    assert cap.requests.columns[:len(REQUEST_SCHEMA)] == list(REQUEST_SCHEMA)  # the contract comes first
    events, _ = split_restarts(cap.events)
    assert _schema(events) == EVENT_SCHEMA
    links = connection_links(events)
    assert _schema(links) == LINK_SCHEMA
    inferred, _ = infer_threads(events.with_columns(thread=pl.lit(None, pl.Int64)), links)
    assert _schema(inferred) == EVENT_SCHEMA


@pytest.mark.parametrize("t", [t for t in TRUTHS if not t.has_thread_ids][:2],
                         ids=lambda t: t.rel)
def test_links_give_the_threads_a_full_build_gave(t: Truth) -> None:
    """``build_requests`` runs once: inferring threads from the cheap links equals inferring them from
    fully built requests."""
    events, _ = split_restarts(capture_of(t.log, t.log_format).events.with_columns(thread=pl.lit(None, pl.Int64)))
    from_links, _ = infer_threads(events, connection_links(events))
    from_requests, _ = infer_threads(events, build_requests(events))
    assert from_links.equals(from_requests)
