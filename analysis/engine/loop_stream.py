"""The loop model's slices, one worker at a time, from its lines in consecutive parts.

``loop.slices`` cuts a worker's lines (in time order) into slices; a slice's start depends only on the line
before it and on whether the worker has dispatched a ``socket event`` yet. So a worker's part is cut with
the still-open last slice carried over, preceded by the line before it (standing in for the history: as a
``socket event`` if one was seen); the slice of that stand-in line and the open slice are not emitted.

An open slice of more than ``OPEN_LINES_HELD`` lines (a worker that dispatches no ``socket event`` and never
idles: a flood of one-line requests) is held as its summary row and its last line: a later line's slice depends on
that line only, and the summary's end and line count grow as lines join it (``_continued``). Lines are placed
after it then: a line that comes in a later part with an earlier time than the held line is not sorted into it,
as it is not sorted into a slice already emitted.
"""
from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from envoy_dissector.analysis.engine.order import in_order
from envoy_dissector.analysis.schema import LOOP_SCHEMA
from envoy_dissector.analysis.stages.loop import _thread_slices
from envoy_dissector.parser.kinds import EventKind

LINE_COLUMNS = ("origin", "thread", "ts_us", "line_no", "kind", "conn_id", "events")
#: Lines of the open slice held at most; beyond, its summary row and last line are (``open_slice``).
OPEN_LINES_HELD = 50_000


@dataclass
class WorkerSlices:
    """One worker's carried state: the open slice's lines, the line before them, and whether a socket event
    came before."""

    open_lines: pl.DataFrame | None = None
    before: pl.DataFrame | None = None
    seen_event: bool = False
    #: the open slice's summary (``_thread_slices``' row) once it outgrew ``OPEN_LINES_HELD``; ``before`` is then
    #: its last line and ``open_lines`` is None
    open_slice: pl.DataFrame | None = None
    #: open slice lines held at most (``OPEN_LINES_HELD``)
    held: int = OPEN_LINES_HELD

    def step(self, lines: pl.DataFrame, final: bool = False) -> pl.DataFrame:
        """Slices completed by ``lines`` (this worker's next lines); ``final``: the open one too."""
        lines = lines.select_seq(LINE_COLUMNS)
        summarised = self.open_slice is not None
        parts = [p for p in (self.open_lines, lines) if p is not None and p.height]
        if not parts and not (summarised and final):
            return pl.DataFrame(schema=LOOP_SCHEMA)
        body = in_order(pl.concat(parts), "ts_us", "line_no") if parts else lines
        head = self.before
        if head is not None and self.seen_event:
            head = head.with_columns_seq(kind=pl.lit(EventKind.SOCKET_EVENT.value).cast(body.schema["kind"]))
        # (held as a summary, the open slice's last line leads twice: the first stands in for the lines before it,
        # so that the second's gap and slice are those of a line inside the slice)
        frame = pl.concat([head, head, body] if summarised else [head, body]) if head is not None else body
        out = _thread_slices(frame)
        if summarised:
            out = self._continued(out)
            frame = frame.slice(1)
            if out.height == 1 and not final:  # (the open slice goes on: its summary grew)
                self.open_slice, self.before = out, frame.tail(1)
                return pl.DataFrame(schema=LOOP_SCHEMA)
            self.open_slice = None
        elif head is not None:
            out = out.filter(pl.col("first_row") > 0)
        if not final and out.height:
            last_start = int(out["first_row"][-1])
            done = frame.head(last_start)
            self.seen_event = self.seen_event or bool((done["kind"] == EventKind.SOCKET_EVENT).any())
            if frame.height - last_start > self.held:
                self.open_slice, self.before, self.open_lines = out.tail(1), frame.tail(1), None
                self.seen_event = self.seen_event or bool(frame["kind"][last_start] == EventKind.SOCKET_EVENT)
            else:
                self.before = frame.slice(last_start - 1, 1) if last_start > 0 else None
                self.open_lines = frame.slice(last_start)
            out = out.head(out.height - 1)
        elif not final:
            self.open_lines = body
        if final:  # (the worker is over: its open slice was emitted)
            self.open_lines = self.before = self.open_slice = None
        return out.select_seq(list(LOOP_SCHEMA)).cast(LOOP_SCHEMA)  # type: ignore[arg-type]

    def _continued(self, out: pl.DataFrame) -> pl.DataFrame:
        """``out`` (slices of the held last line and the next lines) with its first slice, the one the held line
        is in, replaced by the open slice's summary grown by the lines that joined it."""
        assert self.open_slice is not None
        joined = out.filter((pl.col("first_row") <= 1) & (pl.col("last_row") >= 1))  # (the second lead's slice)
        grown = self.open_slice.with_columns_seq(
            end_us=joined["end_us"], first_row=pl.lit(0, dtype=out.schema["first_row"]),
            lines=(pl.col("lines") + joined["last_row"] - 1).cast(out.schema["lines"]))
        # (first rows from here on count from the second lead, as ``step`` cuts the frame)
        rest = out.filter(pl.col("first_row") > 1).with_columns_seq(pl.col("first_row") - 1)
        return pl.concat([grown, rest])
