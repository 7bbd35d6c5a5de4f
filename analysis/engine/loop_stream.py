"""The loop model's slices, one worker at a time, from its lines in consecutive parts.

``loop.slices`` cuts a worker's lines (in time order) into slices; a slice's start depends only on the line
before it and on whether the worker has dispatched a ``socket event`` yet. So a worker's part is cut with
the still-open last slice carried over, preceded by the line before it (standing in for the history: as a
``socket event`` if one was seen); the slice of that stand-in line and the open slice are not emitted.
"""
from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from envoy_dissector.analysis.engine.order import in_order
from envoy_dissector.analysis.schema import LOOP_SCHEMA
from envoy_dissector.analysis.stages.loop import _thread_slices
from envoy_dissector.parser.kinds import EventKind

LINE_COLUMNS = ("origin", "thread", "ts_us", "line_no", "kind", "conn_id", "events")


@dataclass
class WorkerSlices:
    """One worker's carried state: the open slice's lines, the line before them, and whether a socket event
    came before."""

    open_lines: pl.DataFrame | None = None
    before: pl.DataFrame | None = None
    seen_event: bool = False

    def step(self, lines: pl.DataFrame, final: bool = False) -> pl.DataFrame:
        """Slices completed by ``lines`` (this worker's next lines); ``final``: the open one too."""
        lines = lines.select(LINE_COLUMNS)
        parts = [p for p in (self.open_lines, lines) if p is not None and p.height]
        if not parts:
            return pl.DataFrame(schema=LOOP_SCHEMA)
        body = in_order(pl.concat(parts), "ts_us", "line_no")
        head = self.before
        if head is not None and self.seen_event:
            head = head.with_columns(kind=pl.lit(EventKind.SOCKET_EVENT.value).cast(body.schema["kind"]))
        frame = pl.concat([head, body]) if head is not None else body
        out = _thread_slices(frame)
        if head is not None:
            out = out.filter(pl.col("first_row") > 0)
        if not final and out.height:
            last_start = int(out["first_row"][-1])
            out = out.head(out.height - 1)
            done = frame.head(last_start)
            self.seen_event = self.seen_event or bool((done["kind"] == EventKind.SOCKET_EVENT).any())
            self.before = frame.slice(last_start - 1, 1) if last_start > 0 else None
            self.open_lines = frame.slice(last_start)
        elif not final:
            self.open_lines = body
        return out.select(list(LOOP_SCHEMA)).cast(LOOP_SCHEMA)  # type: ignore[arg-type]
