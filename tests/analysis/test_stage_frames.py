"""Each stage's output frame has its declared schema (analysis/schema.py, parser/schema.py) on every fixture."""
from __future__ import annotations

import json

import polars as pl
import pytest
from truth import FIXTURES, Truth, capture_of, discover, fixture_ids

from envoy_dissector.analysis import Capture, dissect
from envoy_dissector.analysis.engine.pipeline import split_restarts
from envoy_dissector.analysis.engine.streaming import analyse
from envoy_dissector.analysis.schema import (
    COSTED_REQUEST_SCHEMA,
    DOWNSTREAM_TLS_SCHEMA,
    LINK_SCHEMA,
    LOOP_SCHEMA,
    PHASED_REQUEST_SCHEMA,
    PHASES_SCHEMA,
    QUEUED_REQUEST_SCHEMA,
    QUEUEING_SCHEMA,
    REQUEST_FRAME_SCHEMA,
    REQUEST_LINES_SCHEMA,
    REQUEST_SCHEMA,
    WORKER_SCHEMA,
)
from envoy_dissector.analysis.stages.cost import with_sidecar_added
from envoy_dissector.analysis.stages.loop import infer_threads, loop_queue, slices
from envoy_dissector.analysis.stages.phases import attribute_phases
from envoy_dissector.analysis.stages.requests import build_requests, connection_links
from envoy_dissector.analysis.stages.stitch import stitch
from envoy_dissector.analysis.stages.tls import downstream_waits
from envoy_dissector.parser.schema import EVENT_SCHEMA
from tests.builders import analysed

TRUTHS = discover()


def _schema(frame: pl.DataFrame) -> dict[str, pl.DataType]:
    return dict(frame.schema)


def _assert_stage_frames(cap: Capture) -> None:
    """Run every stage on the capture's events as ``analyse`` does; each output has exactly its declared
    columns (no scratch column leaks out), in order and type; so has every frame of the capture."""
    events, _ = split_restarts(cap.events.filter(pl.col("ts_us").is_not_null()))
    assert _schema(events) == EVENT_SCHEMA
    links = connection_links(events)
    assert _schema(links) == LINK_SCHEMA
    inferred, _ = infer_threads(events.with_columns(thread=pl.lit(None, pl.Int64)), links)
    assert _schema(inferred) == EVENT_SCHEMA
    lines = build_requests(events)
    assert _schema(lines) == REQUEST_LINES_SCHEMA
    if lines.height:  # (``analyse`` stops here when there is no request: the same frames, empty)
        phased, phases = attribute_phases(lines, events)
        assert _schema(phased) == PHASED_REQUEST_SCHEMA
        assert _schema(phases) == PHASES_SCHEMA
        waited, handshake_rows = downstream_waits(phased, events)
        assert _schema(waited) == {**PHASED_REQUEST_SCHEMA, **DOWNSTREAM_TLS_SCHEMA}
        assert handshake_rows.columns == list(PHASES_SCHEMA)  # cast to it where they join the phases frame
        loop = slices(events)
        assert _schema(loop) == LOOP_SCHEMA
        queued, queueing = loop_queue(waited, loop)
        assert _schema(queued) == QUEUED_REQUEST_SCHEMA
        assert _schema(queueing) == QUEUEING_SCHEMA
        costed = with_sidecar_added(queued, queueing)
        assert _schema(costed) == COSTED_REQUEST_SCHEMA
        stitched, _ = stitch(costed)
        assert _schema(stitched) == REQUEST_FRAME_SCHEMA
    # What a capture holds: the same declared frames, the contract first.
    assert _schema(cap.events) == EVENT_SCHEMA
    assert _schema(cap.requests) == REQUEST_FRAME_SCHEMA
    assert cap.requests.columns[:len(REQUEST_SCHEMA)] == list(REQUEST_SCHEMA)
    assert _schema(cap.phases) == PHASES_SCHEMA
    assert _schema(cap.loop) == LOOP_SCHEMA
    assert _schema(cap.queueing) == QUEUEING_SCHEMA
    assert _schema(cap.workers()) == WORKER_SCHEMA


@pytest.mark.parametrize("t", TRUTHS, ids=fixture_ids(TRUTHS))
def test_every_stage_returns_its_declared_frame(t: Truth) -> None:
    _assert_stage_frames(capture_of(t.log, t.log_format))


#: Fixture logs without Envoy's truth files (debug/info level, kubectl, the seed, real excerpts Envoy users
#: posted): odd and cut captures exercise the empty and partial paths of every stage.
_TRUTH_LOGS = {t.log.resolve() for t in TRUTHS}
_REAL = json.loads((FIXTURES / "real" / "manifest.json").read_text(encoding="utf-8"))["excerpts"]
OTHER_LOGS = sorted(
    [str(p.relative_to(FIXTURES)) for p in FIXTURES.glob("**/*.log*")
     if p.is_file() and p.resolve() not in _TRUTH_LOGS and p.parent.name != "real"]
    + [f"real/{e['file']}" for e in _REAL if e["accepted"]])


@pytest.mark.parametrize("rel", OTHER_LOGS)
def test_every_stage_returns_its_declared_frame_on_other_captures(rel: str) -> None:
    _assert_stage_frames(analysed(FIXTURES / rel))  # (shared with test_numbers, which reads the same captures)


QUEUED = [t for t in TRUTHS if t.rel.endswith("/lua-cpu")]


@pytest.mark.parametrize("t", QUEUED, ids=fixture_ids(QUEUED))
def test_queueing_is_the_loop_queue_rows(t: Truth) -> None:
    """The phases frame's ``loop_queue`` rows are the structured queueing windows rendered for display."""
    cap = capture_of(t.log, t.log_format)
    rows = cap.phases.filter(pl.col("phase") == "loop_queue").select("request_uid", "start_us", "end_us", "dur_us")
    windows = cap.queueing.select("request_uid", "start_us", "end_us", "dur_us")
    assert windows.height > 0
    assert rows.sort(pl.all()).equals(windows.sort(pl.all()))
    assert cap.queueing["conn_ids"].list.len().sum() > 0  # the workers served other connections meanwhile


def test_a_capture_without_requests_has_the_same_declared_frames() -> None:
    cap = dissect("fixtures/info-level/istio-thread/keepalive/envoy.log")
    assert cap.requests.height == 0
    assert _schema(cap.requests) == REQUEST_FRAME_SCHEMA
    assert _schema(cap.phases) == PHASES_SCHEMA
    assert _schema(cap.loop) == LOOP_SCHEMA
    assert _schema(cap.queueing) == QUEUEING_SCHEMA
    assert _schema(analyse(cap.events.head(0)).requests) == REQUEST_FRAME_SCHEMA


@pytest.mark.parametrize("t", [t for t in TRUTHS if not t.has_thread_ids][:2],
                         ids=lambda t: t.rel)
def test_links_give_the_threads_a_full_build_gave(t: Truth) -> None:
    """``build_requests`` runs once: inferring threads from the cheap links equals inferring them from
    fully built requests."""
    events, _ = split_restarts(capture_of(t.log, t.log_format).events.with_columns(thread=pl.lit(None, pl.Int64)))
    from_links, _ = infer_threads(events, connection_links(events))
    from_requests, _ = infer_threads(events, build_requests(events))
    assert from_links.equals(from_requests)
