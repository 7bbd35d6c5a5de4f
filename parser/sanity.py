"""Checks that turn silently useless input into a warning: ids too large to hold, time going backwards.

Both leave the records as they are (nothing is dropped); they explain why a capture yields few or no
requests. Counts accumulate chunk by chunk in ``Sanity`` and become warnings at the end.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from envoy_dissector.parser.constant import sole_string

#: within one worker thread (or one origin without thread ids), a step back in time larger than this (µs),
#: or small steps back on more than 1 % of the records, is not how Envoy writes its log
BACKWARD_STEP_US = 1_000
#: the same where lines carry no thread id (workers' lines interleave, a few ms apart)
UNTHREADED_STEP_US = 1_000_000
#: the id prefix with an id of 19+ digits: beyond Int64/UInt64, read as null
_HUGE_ID = r'^(?:\[C[0-9]{19,}\]|\[C[0-9]+\]\[S[0-9]{20,}\]|\[Tags: \\?"ConnectionId\\?":\\?"[0-9]{19,}' \
           r'|\[Tags: \\?"ConnectionId\\?":\\?"[0-9]+\\?",\\?"StreamId\\?":\\?"[0-9]{20,})'


@dataclass
class Sanity:
    huge_ids: int = 0
    records: int = 0
    backward_steps: int = 0  # any step back
    big_backward_steps: int = 0  # steps back by more than BACKWARD_STEP_US
    largest_backward_us: int = 0
    no_time: int = 0
    _last_ts: dict[str, int] = field(default_factory=dict)

    def check(self, events: pl.DataFrame) -> None:
        """Count this chunk's oddities (chunks must come in input order)."""
        if events.height == 0:
            return
        self.records += events.height
        suspect = events.select_seq(pl.col("conn_id").is_null() & pl.col("message").str.starts_with("[")).to_series()
        if suspect.any():  # (the id regex on those messages only)
            suspects = events["message"].filter(suspect).to_frame()
            self.huge_ids += int(suspects.select_seq(pl.col("message").str.contains(_HUGE_ID).sum()).item())
        untimed = int(events["ts_us"].null_count())
        self.no_time += untimed
        for origin, thread, first, last, back, big_threaded, big_unthreaded, least in _per_thread(events, untimed):
            key = f"{origin}\0{thread}"
            limit = BACKWARD_STEP_US if thread is not None else UNTHREADED_STEP_US
            big = big_threaded if thread is not None else big_unthreaded
            lowest = least if back else None
            prev = self._last_ts.get(key)
            if prev is not None and first < prev:  # the step from the previous chunk's last line
                back, big = back + 1, big + (first - prev < -limit)
                lowest = first - prev if lowest is None else min(lowest, first - prev)
            if lowest is not None:
                if thread is not None:  # without thread ids, workers interleave: only big steps count
                    self.backward_steps += back
                self.big_backward_steps += big
                self.largest_backward_us = max(self.largest_backward_us, -lowest)
            self._last_ts[key] = last

    def warnings(self) -> list[str]:
        out = []
        if self.huge_ids:
            out.append(f"{self.huge_ids} record(s) carry a connection or stream id too large for 64 bits: "
                       "they are kept without ids and cannot be tied to a request")
        if self.big_backward_steps or self.backward_steps > max(10, self.records // 100):
            steps = max(self.backward_steps, self.big_backward_steps)
            out.append(f"time goes backwards {steps} time(s) in the capture (by up to "
                       f"{self.largest_backward_us / 1000:.3f} ms): the lines are not in time order (files merged "
                       "or sorted?); durations across those steps are wrong")
        if self.no_time:
            out.append(f"{self.no_time} record(s) have no usable time (an impossible date such as February 30, "
                       "or none in the format): they are kept but cannot be placed on the timeline")
        return out


#: (origin, thread, first time, last time, steps back, steps back beyond ``BACKWARD_STEP_US``, beyond
#: ``UNTHREADED_STEP_US``, the lowest step) of a worker's timed lines in a chunk
ThreadSteps = tuple[Any, Any, int, int, int, int, int, int | None]


def _per_thread(events: pl.DataFrame, untimed: int) -> list[ThreadSteps]:
    """Each worker thread's (or, without thread ids, the origin's) steps in time within a chunk: lines of different
    workers interleave with small steps back (~1 ms).

    A chunk of one origin (most) is cut by thread in numpy on this thread: a ``group_by`` hands the work to polars'
    pool and waits for it behind the window steps' queries (0.6 s of the intake's wall on 1 GB for 0.08 CPU-s of
    work, bench/README.md 2026-11-29, twenty-second session).
    """
    timed = events.select_seq("origin", "thread", "ts_us")
    if untimed:  # (most chunks: every line timed, and no filter is needed)
        timed = timed.filter(pl.col("ts_us").is_not_null())
    sole = sole_string(timed["origin"])
    if sole is None:
        step = pl.col("ts_us").diff()
        return list(timed.group_by("origin", "thread", maintain_order=True).agg(
            first=pl.col("ts_us").first(), last=pl.col("ts_us").last(), back=(step < 0).sum(),
            big_threaded=(step < -BACKWARD_STEP_US).sum(), big_unthreaded=(step < -UNTHREADED_STEP_US).sum(),
            least=step.min()).iter_rows())
    import numpy as np

    ts = timed["ts_us"].to_numpy()
    thread = timed["thread"]
    nulls = thread.null_count()
    # (a null thread is a worker of its own, numbered below every real id)
    none_code = int(thread.min()) - 1 if 0 < nulls < thread.len() else 0  # type: ignore[arg-type]
    codes = (thread.fill_null(none_code) if nulls else thread).to_numpy()
    out: list[ThreadSteps] = []
    rest = np.arange(codes.size)
    while rest.size:  # (a thread at a time, in order of first appearance as the group_by keeps them: a chunk has few)
        code = codes[rest[0]]
        mine = codes[rest] == code
        lines, rest = ts[rest[mine]], rest[~mine]
        steps = np.diff(lines)
        out.append((sole, None if nulls and code == none_code else int(code), int(lines[0]), int(lines[-1]),
                    int((steps < 0).sum()), int((steps < -BACKWARD_STEP_US).sum()),
                    int((steps < -UNTHREADED_STEP_US).sum()), int(steps.min()) if steps.size else None))
    return out
