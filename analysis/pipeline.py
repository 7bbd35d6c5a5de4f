"""The analysis pipeline: events -> requests, phases, loop. Pure functions over frames, no I/O."""
from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from envoy_dissector.analysis.loop import infer_threads, loop_queue, slices
from envoy_dissector.analysis.phases import attribute_phases
from envoy_dissector.analysis.requests import build_requests
from envoy_dissector.analysis.schema import CONTRACT_COLUMNS, PHASES_SCHEMA, REQUEST_SCHEMA


@dataclass(frozen=True)
class Analysis:
    events: pl.DataFrame  # with inferred threads filled in when the format has none
    requests: pl.DataFrame  # contract columns first, then working columns (boundaries, links, ...)
    phases: pl.DataFrame
    loop: pl.DataFrame
    notes: tuple[str, ...]


def analyse(events: pl.DataFrame) -> Analysis:
    """Rebuild requests, attribute phases and model the event loop."""
    notes: list[str] = []
    requests = build_requests(events)
    if requests.height == 0:
        empty = pl.DataFrame(schema=REQUEST_SCHEMA)
        return Analysis(events, empty, pl.DataFrame(schema=PHASES_SCHEMA), slices(events.head(0)), ())
    events, note = infer_threads(events, requests)
    if note:
        notes.append(note)
        requests = build_requests(events)
    requests, phases = attribute_phases(requests, events)
    loop = slices(events)
    requests, queue_rows = loop_queue(requests, loop, events)
    phases = pl.concat([phases, queue_rows]).sort("request_uid", "start_us")
    extra = [c for c in requests.columns if c not in CONTRACT_COLUMNS]
    requests = requests.select(*[pl.col(c).cast(t) for c, t in REQUEST_SCHEMA.items()], *extra)
    requests = requests.sort("origin", "ds_rx_beg_us", "life_start_us", nulls_last=True)
    incomplete = requests.filter(~pl.col("complete") & ~pl.col("internal")).height
    if incomplete:
        notes.append(f"{incomplete} request(s) cut by the capture's start or end are marked complete=false "
                     "and left out of statistics")
    return Analysis(events, requests, phases, loop, tuple(notes))
