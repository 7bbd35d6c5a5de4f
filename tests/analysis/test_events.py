"""A capture's events frame is not kept while its input is read: it is read again on first use
(analysis/engine/events.py), as the engine read it — the same frame ``dissect(keep_events=True)`` keeps."""
from __future__ import annotations

import dataclasses
import gzip
from pathlib import Path

import polars as pl
import pytest

from envoy_dissector.analysis import dissect
from envoy_dissector.analysis.engine.events import EventsNotKept, NoEvents
from envoy_dissector.parser.schema import EVENT_SCHEMA, RECORD_COLUMNS

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


@pytest.mark.parametrize("rel", ["istio-thread/workers/envoy.log.gz", "istio/workers/envoy.log.gz",
                                 "kubectl/multi-pod/sequential.log.gz",
                                 "real/021-istio-1.13-old-tabs-trace-wasm-tls-cut-start.log"])
def test_events_read_again_are_the_ones_kept_while_reading(rel: str) -> None:
    again, kept = dissect(str(FIXTURES / rel)), dissect(str(FIXTURES / rel), keep_events=True)
    assert kept.holds_events and not again.holds_events
    events = again.events
    assert again.holds_events and events.height == kept.diagnostics_dict()["records"]
    assert dict(events.schema) == dict(EVENT_SCHEMA)
    assert events.equals(kept.events)
    assert again.records.equals(events.select(RECORD_COLUMNS))
    assert again.requests.equals(kept.requests)


def test_the_events_are_as_the_engine_read_them() -> None:
    """Restart runs are their own origins, and a format without thread ids has its inferred lanes as threads:
    the events agree with the requests built from them."""
    text = gzip.decompress((FIXTURES / "istio-thread" / "keepalive" / "envoy.log.gz").read_bytes()).decode()
    assert text.startswith("2026-11-22T")
    restarted = dissect(text + text.replace("2026-11-22T", "2026-11-23T"))  # (the same proxy a day later)
    assert set(restarted.events["origin"]) == set(restarted.requests["origin"]) == {"<text>", "<text>#2"}
    threadless = dissect(str(FIXTURES / "istio" / "workers" / "envoy.log.gz"))
    lanes = threadless.events.filter(pl.col("conn_id").is_not_null())["thread"]
    assert lanes.null_count() == 0 and (lanes < 0).all()  # (inferred lanes are negative)
    served = threadless.requests.filter(~pl.col("internal"))["thread"]
    assert set(served.drop_nulls()) <= set(lanes)


def test_without_events_asking_for_them_says_why() -> None:
    cap = dissect(str(FIXTURES / "istio-thread" / "keepalive" / "envoy.log.gz"))
    gone = dataclasses.replace(cap, event_source=NoEvents("no events here: read the file"), line_index=None)
    assert not gone.holds_events
    with pytest.raises(EventsNotKept, match="no events here"):
        gone.events  # noqa: B018
    with pytest.raises(EventsNotKept, match="no events here"):
        gone.request_lines(0)
    assert gone.summary() == cap.summary()  # (the summary reads facts, not events)
