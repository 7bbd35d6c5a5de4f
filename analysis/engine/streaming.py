"""Streaming analysis: parsed chunks in, finished requests out, without the whole events frame ever existing.

Envoy workers share no connections: a downstream connection, its streams and the upstream pool connections
they use live on one worker thread, and one thread's lines are in time order. So events are split by
``(origin, thread)`` and each worker keeps a *window* of its recent events:

* when the window has grown by ``window_events`` rows (a worker's first window sooner, by a share of a window
  that differs between workers, so that workers fed at the same rate do not all step in the same chunk), the
  requests and phases stages run on
  ``carried + window`` (``carry.py``: the latest/first dropped event per connection and kind that as-of
  lookups and per-connection aggregates can still reach), exactly as they would run on the worker's whole log;
* a request is **finished** when nothing later can change it: every line it is built from is at least
  ``grace_us`` older than the worker's newest line, and every forward lookup (the next write on its
  connection, the upstream's `response complete`, …) has found its line or run past its tolerance;
  finished requests (and their phase rows) are emitted once;
* the window is then cut before the earliest unfinished request (keeping ``MARGIN_ROWS`` lines before it), and
  the dropped events update the carry; a worker keeps at most ``max_open`` unfinished requests (the others,
  oldest first, are emitted as cut) and its carry the past of at most ``max_carried`` connections, so input
  that never finishes a request cannot pin memory without bound; a source's workers are finished when the
  next source begins (``end_source``);
* workers advance independently, so the interleaving of workers in the file (a chunk ends at a different
  moment on each) does not matter; the loop model's slices are cut per worker as they close
  (``loop_stream.py``), and so are the health checker's bursts (``internal.HealthCheckBursts``: they belong to
  no request);
* the steps run on threads of their own (``background``) while ``add`` takes the next chunks in: a step of
  0.1-0.6 s no longer stops the intake, so the parser's queue keeps draining. A step gets the worker's new lines
  and the origin's capture-level lines as they were when it was given, so it computes what it would have
  computed in line. A step is two parts: its work on the worker's own state (window, carry, loop slices, …)
  and what it adds to the shared output (finished requests, phase rows, loop slices, gaps, bursts); where and
  when each part runs — after the worker's previous step, beside other workers' steps, outputs added in the
  order the steps were given, so the output is the same as in line, batch for batch — is ``engine/steps.py``'s
  (``Steps``), not this module's. Within a step, the new lines' event-loop slices, record gaps and
  health-check bursts (state the stages do not touch) are made beside the requests and phases stages
  (``Steps.beside``).

Capture-wide facts stay small and are declared here: record gaps as a count per gap value (``gap_counts.py``:
a follow of hours holds a row per distinct gap, not one per socket event), restart runs per origin (a counter),
the lifecycle lines that name the main thread (admin requests) and one socket line per origin (capture level) are
added to every window; internal work bursts wait in the spill with the finished requests; TLS connection facts
are merged (``tls.merge_facts``); event-loop queueing, which takes minima over a whole origin, and stitching run
at the end on the requests frame (``pipeline.conclude``). An origin without thread ids is windowed as one worker
(its lines are in time order as a whole, and the stages look its lines up by origin): its requests are emitted as they
finish, without a thread; its worker lanes, which depend on the whole capture, are inferred at the end from the few
columns of its lines that the spill keeps (``lanes.py``).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from envoy_dissector.analysis.engine.carry import MAX_CARRIED_CONNECTIONS, carried
from envoy_dissector.analysis.engine.facts import STARTED_SCHEMA, CaptureFacts
from envoy_dissector.analysis.engine.frames import pick
from envoy_dissector.analysis.engine.lanes import LANE_SCHEMA, lane_lines, requests_on_lanes, with_lanes
from envoy_dissector.analysis.engine.loop_stream import WorkerSlices
from envoy_dissector.analysis.engine.order import in_order
from envoy_dissector.analysis.engine.pipeline import Analysis, conclude, restart_note, stage
from envoy_dissector.analysis.engine.spill import MEMORY_BUDGET, Spill
from envoy_dissector.analysis.engine.steps import Apply, Steps
from envoy_dissector.analysis.findings import health_checks, record_gaps
from envoy_dissector.analysis.gap_counts import HELD_GAPS, GapTally, back_to_back
from envoy_dissector.analysis.schema import (
    ANALYSED_COLUMNS,
    LINK_SCHEMA,
    LOOP_SCHEMA,
    PHASED_REQUEST_SCHEMA,
    PHASES_SCHEMA,
    REQUEST_FRAME_SCHEMA,
)
from envoy_dissector.analysis.stages.internal import (
    BURSTS_SCHEMA,
    STREAMS_SCHEMA,
    HealthCheckBursts,
    internal_streams,
    own_work,
    work_bursts,
)
from envoy_dissector.analysis.stages.loop import slices, worker_threads
from envoy_dissector.analysis.stages.phases import attribute_phases
from envoy_dissector.analysis.stages.requests import SOCKET_KINDS, build_requests
from envoy_dissector.analysis.stages.tls import (
    HANDSHAKE_SCHEMA,
    connection_facts,
    handshakes,
    handshakes_of,
    merge_facts,
)
from envoy_dissector.parser.kinds import EventKind
from envoy_dissector.parser.schema import EVENT_SCHEMA

#: The columns of a worker's window: the events' columns the analysis reads.
_WINDOW_SCHEMA = {c: EVENT_SCHEMA[c] for c in ANALYSED_COLUMNS}
#: A request is finished once its worker has logged this long past its last line (log time).
GRACE_US = 2_000
#: A request whose response has not ended is given up (emitted as it is: cut) after this long without a line.
IDLE_US = 5_000_000
#: Rows a worker's window grows by between two runs of the stages.
WINDOW_EVENTS = 400_000
#: Requests whose response has not ended a worker holds at most: beyond, at a window step, the ones whose last
#: line is oldest are given up (emitted as they are: cut by the capture), so that streams that never finish
#: (a flood of one-line `new stream` records) cannot pin the window without bound (docs/scale.md).
MAX_OPEN_REQUESTS = 20_000
#: Lines kept before the earliest unfinished request (a tracing flush looks at the line before its first).
MARGIN_ROWS = 256
#: Log time an origin without thread ids keeps in its window before its newest line at least: its workers' lines
#: interleave out of time order (by up to 4.4 ms in fixtures/istio/workers), and a line that comes after the cut
#: must still find the lines of its time in the window.
THREADLESS_KEEP_US = 100_000
#: Workers finished in one batch at most (each adds a row to the batch's join; see ``_finish_step``).
MAX_ENDED_WORKERS = 64
#: Forward as-of lookups of the requests and phases stages: (from column, found column or None, tolerance µs).
#: The found column is the requests stage's column that holds the lookup's result (or a milestone it feeds).
FORWARD_LOOKUPS: tuple[tuple[str, str | None, int], ...] = (
    ("ds_tx_end_us", "life_end_ts", 10_000_000),
    ("pool_ready_ts", None, 2_000),  # link_upstream: `Attached upstream connection`, the next write on the thread
    ("us_tx_start_ts", "us_written_ts", 10_000_000),
    ("us_tx_start_ts", "us_tx_beg_us", 1_000_000),  # the upstream codec's next line, `writing N bytes`
    ("us_resp_router_ts", "us_rx_end_us", 60_000_000),  # the upstream's `response complete`
)
_EARLIEST = ("first_ts", "read_start_ts", "parse_start_ts", "new_stream_ts", "life_start_us")
#: Lifecycle lines kept per origin (the main thread is the one that logged most of them).
MAX_LIFECYCLE_ROWS = 10_000

Emit = Callable[[pl.DataFrame, pl.DataFrame], None]
#: An origin's capture-level lines a window step adds: lifecycle lines, first socket line, first line on C0.
_Context = tuple[list[pl.DataFrame], pl.DataFrame | None, pl.DataFrame | None]
#: A worker handed to a step: its new lines and its origin's context (``_take``, ``_context_of``).
_Given = tuple["_Worker", list[pl.DataFrame], _Context]
#: A window step's input: the window, its first and newest time, the window with its context lines.
_Window = tuple[pl.DataFrame, int, int, pl.DataFrame]
#: What a worker's new lines add besides its window: loop slices, record gaps (None: no new lines), bursts, and
#: of a worker without thread ids its lines' lane columns (``lanes.lane_lines``; None for a threaded worker).
_Side = tuple[pl.DataFrame, "pl.Series | None", pl.DataFrame, "pl.DataFrame | None"]
#: What ``StreamingAnalysis`` keeps of finished work until ``finish`` (``bursts``: the internal work bursts, which
#: the event-loop view draws one by one, so they are rows like the loop slices, not a summary; ``lanes`` and
#: ``links``: the lines and finished requests' links of origins without thread ids, whose lanes are inferred at the
#: end, ``lanes.py``).
FINISHED_SCHEMAS = {"requests": PHASED_REQUEST_SCHEMA, "phases": PHASES_SCHEMA, "loop": LOOP_SCHEMA,
                    "bursts": BURSTS_SCHEMA, "handshakes": HANDSHAKE_SCHEMA, "lanes": LANE_SCHEMA,
                    "links": LINK_SCHEMA}
_LANE_OF_SCHEMA = {"origin": pl.String(), "conn_id": pl.Int64(), "lane": pl.Int64()}
#: Connection-facts parts held before they are merged and bounded (``_add_facts``).
FACT_PARTS = 64


#: The capture-level lines an origin's chunk may hold (``_note_origin_facts``) and a worker's start line's kind.
_LIFECYCLE = (pl.col("kind") == EventKind.SERVER_LIFECYCLE_NOISE) & (pl.col("thread") >= 0)
_ON_CONN0 = pl.col("conn_id") == 0
_SOCKET = pl.col("kind").is_in(SOCKET_KINDS)
_WORKER_LINE = (pl.col("kind") == EventKind.WORKER_NOISE) & pl.col("thread").is_not_null()


@dataclass(frozen=True)
class _Holds:
    """Which of those lines a chunk holds: asked in one query (a filter each cost 50-90 µs a chunk)."""

    lifecycle: bool
    conn0: bool
    socket: bool
    worker_line: bool

    @staticmethod
    def of(events: pl.DataFrame) -> _Holds:
        return _Holds(*events.select_seq(_LIFECYCLE.any().alias("lifecycle"), _ON_CONN0.any().alias("conn0"),
                                         _SOCKET.any().alias("socket"), _WORKER_LINE.any().alias("worker")).row(0))


@dataclass
class _Worker:
    origin: str
    #: None: the one worker of an origin without thread ids (its lanes are inferred at the end)
    thread: int | None
    pending: list[pl.DataFrame] = field(default_factory=list)
    pending_rows: int = 0
    #: `new stream` lines among the pending rows (a step's stages cost per request: see ``_add_worker_lines``)
    pending_streams: int = 0
    #: pending rows at which the worker's next window runs
    window_due: int = 0
    window: pl.DataFrame | None = None
    carry: pl.DataFrame | None = None
    #: request_uid -> last line time of requests already emitted whose lines may still be inside the window
    emitted: dict[str, int] = field(default_factory=dict)
    slices: WorkerSlices = field(default_factory=WorkerSlices)
    #: the worker's last two lines so far (the gap after a `socket event` may span two parts)
    last_line: pl.DataFrame | None = None
    #: the health checker's bursts on this thread (they belong to no request)
    health_checks: HealthCheckBursts = field(init=False)

    def __post_init__(self) -> None:
        # (a worker without thread ids finds no bursts on its lines: they are found at the end, on its lanes)
        self.health_checks = HealthCheckBursts(self.origin, -1 if self.thread is None else self.thread)


def _stagger(k: int) -> float:
    """The share of a window by which the ``k``-th worker's first window comes early: spread over [0, 1) by the
    golden ratio (0, 0.62, 0.24, 0.85, …), so the window steps of workers fed alike fall in different chunks
    (together, two 0.3 s steps stalled the parser for 0.6 s: its queue holds a few chunks)."""
    return (k * 0.6180339887) % 1.0


def _materialized(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with every column a Series of its own.

    polars holds a constant column (one origin, a run's ``ORIGIN#n``, an all-null field) as one value; when a
    worker's parts are concatenated such a column becomes one chunk while the others keep one per part, and
    every later select, filter or sort of the window copies the whole window to align them (70 ms for 400 k
    rows, again at each step). Columns taken as Series keep their chunks aligned.
    """
    return pl.DataFrame(frame.get_columns())


def _per_thread(lines: pl.DataFrame) -> dict[tuple[Any, ...], pl.DataFrame]:
    """``partition_by("thread")`` of lines that all have a thread: a chunk of one worker as it is, of two (the
    usual sidecar) by a filter each (``frames.pick``: 4.3-5.4 CPU-ms a 16 MiB chunk, against 5-7 for two
    ``DataFrame.filter`` and 10 for the partition)."""
    threads = lines["thread"].unique(maintain_order=True)
    if threads.len() == 1:
        return {(threads[0],): lines}
    if threads.len() > 2:
        return lines.partition_by("thread", as_dict=True, maintain_order=True)
    first = lines["thread"] == threads[0]  # (no null: the other rows are the other thread's)
    return {(threads[0],): pick(lines, first), (threads[1],): pick(lines, ~first)}


@dataclass
class _Output:
    """What a step adds to the shared state (``StreamingAnalysis._apply``, in step order)."""

    #: each worker's new loop slices, record gaps and health-check bursts (``_lines_side``)
    sides: list[_Side | None] = field(default_factory=list)
    #: finished requests and their phase rows, per batch
    finished: list[tuple[pl.DataFrame, pl.DataFrame]] = field(default_factory=list)
    #: the internal requests' work bursts
    bursts: list[pl.DataFrame] = field(default_factory=list)


@dataclass
class _Origin:
    threaded: bool
    boots: int = 0
    lifecycle: list[pl.DataFrame] = field(default_factory=list)
    lifecycle_rows: int = 0
    socket_line: pl.DataFrame | None = None
    #: the earliest line on connection 0 (Envoy's async client, used by every thread), as a plain line
    conn0_first: pl.DataFrame | None = None
    #: connection -> the worker thread that logged it (routes lines that lack a thread id); the connections noted
    #: last, up to twice the carried connections' bound (``_routed``)
    conn_threads: dict[int, int] = field(default_factory=dict)
    #: the run (``ORIGIN#n``) lines of this origin currently belong to
    current_run: str | None = None
    whole: list[pl.DataFrame] = field(default_factory=list)


@dataclass
class StreamingAnalysis:
    """Feed it parsed chunks (``add``) in input order, then ``finish``; ``on_finished(requests, phases)`` sees
    each batch of finished requests as it is emitted (before the capture-wide steps of ``conclude``)."""

    grace_us: int = GRACE_US
    idle_us: int = IDLE_US
    window_events: int = WINDOW_EVENTS
    #: the first window of a worker that begins before any request has finished, in rows, when smaller than its
    #: staggered share; until a request has finished, each next window is twice the last: the first requests are
    #: out sooner (the dashboard's provisional overview), at the cost of a few small steps (None: the staggered
    #: share alone)
    first_window_events: int | None = None
    #: open requests a worker holds at most (``MAX_OPEN_REQUESTS``)
    max_open: int = MAX_OPEN_REQUESTS
    #: connections whose past a worker's carry keeps at most (``carry.MAX_CARRIED_CONNECTIONS``)
    max_carried: int = MAX_CARRIED_CONNECTIONS
    on_finished: Emit | None = None
    #: window an origin without thread ids as one worker (False: hold its lines and analyse them whole at ``finish``,
    #: the reference the tests compare the windows with)
    window_threadless: bool = True
    _workers: dict[tuple[str, int | None], _Worker] = field(default_factory=dict)
    _origins: dict[str, _Origin] = field(default_factory=dict)
    #: where finished requests, their phase rows, closed loop slices and internal work bursts wait for ``finish``
    #: bytes of finished output held in memory before it is written to parquet parts (``spill.py``)
    spill_budget: int = MEMORY_BUDGET
    _done: Spill = field(init=False)
    _facts: list[pl.DataFrame] = field(default_factory=list)
    _facts_rows: int = 0
    #: connection-facts parts held before they are merged, their ended handshakes spilled and the rest bounded
    fact_parts: int = FACT_PARTS
    #: record gaps held as they came before they are folded into counts (``gap_counts.GapTally``)
    held_gaps: int = HELD_GAPS
    _gaps: GapTally = field(init=False)
    _started: list[pl.DataFrame] = field(default_factory=list)
    #: workers of ended runs (Envoy restarted) waiting to be finished together
    _ended: list[_Given] = field(default_factory=list)
    _ended_rows: int = 0
    #: a request has been finished (``first_window_events`` applies until then)
    _finished_any: bool = False
    timeless: int = 0
    #: parquet parts the finished output was spilled to (0: it stayed in memory)
    spilled_parts: int = 0
    #: seconds spent per step (bench/analyze_stream.py prints them)
    timings: dict[str, float] = field(default_factory=dict)
    #: capture-wide facts (complete after ``finish``)
    facts: CaptureFacts = field(default_factory=CaptureFacts)
    #: run the window steps on a thread of their own, in order, while ``add`` takes the next chunks in
    background: bool = True
    #: where the window steps run (``engine/steps.py``: threads, each worker's steps in turn, outputs in order)
    _steps: Steps = field(init=False)
    _timings_lock: threading.Lock = field(default_factory=threading.Lock)
    #: the run origins (``ORIGIN``, ``ORIGIN#2``, pods of a kubectl capture) the current source has added to
    _source_runs: set[str] = field(default_factory=set)
    #: requests given up unfinished because their worker held ``max_open`` open ones
    _given_up: int = 0
    #: leave the requests' uids to make where they are read (``Analysis.uids_made`` false, ``engine/uids.py``)
    #: unless ``conclude`` reads them itself
    uids_on_access: bool = False
    #: each connection's inferred lane in origins without thread ids (``origin, conn_id, lane``; set by ``finish``)
    _lanes: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=_LANE_OF_SCHEMA))
    #: those origins' lines on their lanes, from their inference until their internal work bursts are found
    _lane_events: pl.DataFrame | None = None

    def __post_init__(self) -> None:
        self._done = Spill(FINISHED_SCHEMAS, budget=self.spill_budget)
        self._steps = Steps(self.background)
        self._gaps = GapTally(self.held_gaps)

    def _step(self, work: Callable[[], Apply], workers: tuple[_Worker, ...] = ()) -> None:
        """Run a window step (``Steps.give``): ``work``, on the state of ``workers`` only, returns what the step
        adds to the shared output; what it reads of the intake's state is taken when it is given."""
        self._steps.give(work, [(w.origin, w.thread) for w in workers])

    def unthreaded_origins(self) -> list[str]:
        """The origins whose log has no thread ids: their requests are emitted without a thread, their worker lanes
        (threads, loop slices, event-loop queueing) are inferred at ``finish`` (docs/follow.md)."""
        return [name for name, state in list(self._origins.items()) if not state.threaded]

    def held_rows(self) -> dict[str, int]:
        """Rows held in memory now of the whole run's record gaps, internal work bursts, connection facts, ended TLS
        handshakes, the lane lines and links of origins without thread ids, of the workers' windows and carries, and
        of the origins' context lines: none of these grows with the input (gaps: a row per distinct gap beyond
        ``held_gaps``; bursts, handshakes, lane lines and links: up to the spill's budget; connections:
        ``max_carried`` and the parts of ``fact_parts``; windows: ``window_events`` and the open requests' lines;
        carries: ``max_carried``; context: the lifecycle lines of the runs still read, ``MAX_LIFECYCLE_ROWS`` each,
        and their connections' threads); and the lines of origins without thread ids held whole
        (``window_threadless=False``), which does."""
        workers, origins = list(self._workers.values()), list(self._origins.values())
        return {"gaps": self._gaps.rows_held(), "bursts": self._done.held_rows("bursts"),
                "connections": self._facts_rows, "handshakes": self._done.held_rows("handshakes"),
                "lanes": self._done.held_rows("lanes"), "links": self._done.held_rows("links"),
                "windows": sum(w.window.height for w in workers if w.window is not None)
                + sum(w.pending_rows for w in workers),
                "carries": sum(w.carry.height for w in workers if w.carry is not None),
                "context": sum(s.lifecycle_rows if s.lifecycle else 0 for s in origins) + sum(
                    len(s.conn_threads) for s in origins),
                # (only with ``window_threadless=False``: it grows with the input)
                "whole": sum(part.height for state in origins for part in state.whole)}

    def close(self) -> None:
        """Stop the step threads (steps not started are dropped); ``finish`` and ``stream_capture.stream`` call it."""
        self._steps.close()

    def add(self, events: pl.DataFrame) -> None:
        """The next chunk of events (``EVENT_SCHEMA``), in input order."""
        events = events.select_seq(ANALYSED_COLUMNS)
        with self._timed("facts"):
            self.facts.records.add(events)
            self.facts.health_checks += health_checks(events)
        # (most chunks have every line timed and one origin: no copy is made for them)
        timed = events.filter(pl.col("ts_us").is_not_null()) if events["ts_us"].null_count() else events
        self.timeless += events.height - timed.height
        if timed.height == 0:
            return
        origins = timed["origin"]
        if origins.null_count() == 0 and origins[0] == origins[-1] and (origins == origins[0]).all():
            self._add_origin(str(origins[0]), timed)
            return
        for (origin,), part in timed.partition_by("origin", as_dict=True, maintain_order=True).items():
            self._add_origin(str(origin), part)

    def _add_origin(self, origin: str, events: pl.DataFrame) -> None:
        base = self._origins.get(origin)
        if base is None:
            base = self._origins[origin] = _Origin(threaded=events["thread"].null_count() < events.height)
        for run_origin, part in self._restart_runs(origin, base, events):
            part = _materialized(part)
            if base.current_run not in (None, run_origin):
                self._end_run(base.current_run)
                self._release_run(self._origins[base.current_run])
            base.current_run = run_origin
            state = self._origins.setdefault(run_origin, _Origin(threaded=base.threaded))
            self._source_runs.add(run_origin)
            self.facts.records.add_span(run_origin, part)
            if not state.threaded and not self.window_threadless:
                state.whole.append(part)
                continue
            with self._timed("facts"):
                holds = _Holds.of(part)
                self._note_origin_facts(state, part, holds)
                self._add_facts(part)
            if holds.worker_line:
                started = part.select_seq("origin", "thread", "kind", "message").filter(_WORKER_LINE).filter(
                    pl.col("message").str.starts_with("worker entering dispatch loop"))
                if started.height:
                    self._started.append(started.select_seq("origin", "thread"))
            if not state.threaded:
                self._add_worker_lines(run_origin, None, part)
                continue
            if part["thread"].null_count() == 0:  # (most chunks: every line has its worker)
                workers = _per_thread(part)
            else:
                workers = {key: lines.drop("worker__") for key, lines in self._routed(
                    state, part, self.max_carried).partition_by(
                    "worker__", as_dict=True, maintain_order=True).items()}
            for (thread,), lines in workers.items():
                self._add_worker_lines(run_origin, thread, lines)

    def _end_run(self, run_origin: str) -> None:
        """Envoy restarted (or its source ended): the run's workers are over; they are finished
        (``_finish_later``), which frees their windows."""
        for key in [k for k in self._workers if k[0] == run_origin]:
            self._finish_later(self._workers.pop(key))

    @staticmethod
    def _release_run(state: _Origin) -> None:
        """A restarted run's capture-level lines, which only its windows read: its workers have been given theirs
        (``_end_run``) and no line comes to it any more, so a follow across many restarts does not keep each run's
        (up to ``MAX_LIFECYCLE_ROWS`` lifecycle lines). What the end reads of it (threaded, boots) stays."""
        state.lifecycle, state.socket_line, state.conn0_first, state.conn_threads = [], None, None, {}

    def end_source(self) -> None:
        """The source being read has ended (the next chunk comes from another file, or none does): the workers of
        every origin it added to are finished now, so that many inputs are processed one after another instead
        of held side by side until ``finish``. An origin met again in a later source starts new workers."""
        for run_origin in self._source_runs:
            self._end_run(run_origin)
        self._source_runs.clear()

    def settle(self) -> None:
        """A live source went quiet with nothing read held back (follow mode): every worker's window is stepped
        as if its log had gone on ``grace_us`` past its newest line, so the requests whose response has ended are
        emitted now instead of at the worker's next line. Requests still open (and forward lookups waiting)
        stay; nothing is cut, and the window is kept whole (the next real step cuts it)."""

        def step(worker: _Worker, parts: list[pl.DataFrame], context: _Context) -> Apply:
            side, window = self._window_of(worker, parts, context, final=False)
            out = _Output()
            try:
                if window is not None:  # (not cut: what was emitted stays remembered while its lines are kept)
                    frame, start, newest, events = window
                    self._stages(worker, (frame, start, newest + self.grace_us + 1, events), out, cut=False)
                    worker.window = frame
            finally:
                out.sides.append(side())
            return lambda: self._apply(out)

        for worker in list(self._workers.values()):
            given = (worker, self._take(worker), self._context_of(worker.origin))
            self._step(lambda given=given: step(*given), (worker,))  # type: ignore[misc]

    def _finish_later(self, worker: _Worker) -> None:
        """Finish a worker whose lines have all been read: one with a sizeable window now, alone; a small one
        with others once they hold a quarter window together (what waits stays small). Decided in the step's
        work, where the worker's window is (its previous steps are done); the small ones wait in the shared
        output, in step order."""
        given = (worker, self._take(worker), self._context_of(worker.origin))
        self._step(lambda: self._finish_or_wait(given), (worker,))

    def _finish_or_wait(self, given: _Given) -> Apply:
        worker, parts = given[0], given[1]
        size = sum(p.height for p in parts) + (worker.window.height if worker.window is not None else 0)
        if size >= self.window_events // 16:
            return self._finish_step([given])

        def wait() -> None:  # (the ended workers are shared: kept in step order)
            if self._ended_rows + size > self.window_events // 4 or len(self._ended) >= MAX_ENDED_WORKERS:
                self._finish_ended_step()
            self._ended.append(given)
            self._ended_rows += size
        return wait

    def _finish_ended_step(self) -> None:
        """Finish the ended workers waiting together: the whole step, work and output (while outputs are added,
        so after every step given before)."""
        ended, self._ended, self._ended_rows = self._ended, [], 0
        self._finish_step(ended)()

    def _restart_runs(self, origin: str, state: _Origin, events: pl.DataFrame) -> list[tuple[str, pl.DataFrame]]:
        """``split_restarts`` one chunk at a time: each `initializing epoch` starts the origin's next run."""
        lifecycle = events.select_seq(pl.col("kind") == EventKind.SERVER_LIFECYCLE_NOISE).to_series()
        if not lifecycle.any():  # no boot line here (most chunks): all lines belong to the current run
            if state.boots <= 1:
                return [(origin, events)]
            name = f"{origin}#{state.boots}"
            return [(name, events.with_columns_seq(origin=pl.lit(name)))]
        # (polars evaluates both sides of `&`: the message test runs only where the kind matched)
        boot = pl.when(pl.col("kind") == EventKind.SERVER_LIFECYCLE_NOISE).then(
            pl.col("message").str.starts_with("initializing epoch")).otherwise(False)
        run = events.select_seq((boot.cast(pl.Int64).cum_sum() + state.boots).alias("run"))["run"]
        state.boots = int(run[-1]) if run.len() else state.boots
        if int(run.max() or 0) <= 1:  # type: ignore[arg-type]
            return [(origin, events)]
        # (``run`` never decreases: each run's lines are one stretch of rows, taken as a slice, not copied)
        out, offset = [], 0
        for length, n in run.rle().struct.unnest().iter_rows():
            name = origin if n <= 1 else f"{origin}#{n}"
            out.append((name, events.slice(offset, length).with_columns_seq(origin=pl.lit(name))))
            offset += length
        return out

    @staticmethod
    def _routed(state: _Origin, events: pl.DataFrame, max_carried: int) -> pl.DataFrame:
        """``worker__``: the line's thread; for a line without one (a cut or foreign first line in a format with
        thread ids), the thread of its connection, else of the nearest line before (after) it. The connections'
        threads are remembered for the ``max_carried`` connections noted last (at most twice that are held)."""
        known = events.filter(pl.col("thread").is_not_null() & pl.col("conn_id").is_not_null()).select_seq(
            "conn_id", "thread").unique("conn_id", keep="first", maintain_order=True)
        for conn, thread in known.iter_rows():
            state.conn_threads.setdefault(conn, thread)
        if len(state.conn_threads) > 2 * max_carried:
            state.conn_threads = dict(list(state.conn_threads.items())[-max_carried:])
        by_conn = pl.col("conn_id").replace_strict(state.conn_threads, default=None, return_dtype=pl.Int64)
        return events.with_columns_seq(worker__=pl.coalesce(
            "thread", by_conn, pl.col("thread").forward_fill(), pl.col("thread").backward_fill(), pl.lit(-1)))

    def _note_origin_facts(self, state: _Origin, events: pl.DataFrame, holds: _Holds) -> None:
        """The capture-level lines every window of the origin sees (see the module doc); ``holds``: which kinds
        of them ``events`` has (most chunks none: no filter is run for those)."""
        if holds.lifecycle and state.lifecycle_rows < MAX_LIFECYCLE_ROWS:
            lifecycle = events.filter(_LIFECYCLE)
            state.lifecycle.append(lifecycle.head(MAX_LIFECYCLE_ROWS - state.lifecycle_rows))
            state.lifecycle_rows += state.lifecycle[-1].height
        conn0 = events.filter(_ON_CONN0) if holds.conn0 else None
        if conn0 is not None and (state.conn0_first is None or conn0["ts_us"].min() < state.conn0_first["ts_us"][0]):
            first = conn0.sort("ts_us", maintain_order=True).head(1)
            state.conn0_first = first.with_columns_seq(
                stream_id=pl.lit(None, dtype=pl.UInt64),
                                                       kind=pl.lit(EventKind.UNKNOWN.value).cast(first.schema["kind"]))
        if state.socket_line is None and holds.socket:
            state.socket_line = events.filter(_SOCKET).head(1)

    def _add_facts(self, events: pl.DataFrame) -> None:
        self._facts.append(connection_facts(events))
        self._facts_rows += self._facts[-1].height
        if len(self._facts) > self.fact_parts or self._facts_rows > 1_000_000:
            self._facts = [self._bounded_facts(merge_facts(self._facts))]
            self._facts_rows = self._facts[0].height

    def _bounded_facts(self, facts: pl.DataFrame) -> pl.DataFrame:
        """Merged connection facts, bounded: a TLS connection shown established has its handshake row spilled
        with the finished output (its facts are final: its first and connect lines come before the handshake
        ends), and of the others — plain connections and handshakes not yet ended — the ``max_carried`` seen first
        last are kept: a connection's handshake lines follow its first line within its handshake, so one that many
        others have come after without ending a handshake will not end one (a capture or a follow of millions of
        connections would otherwise keep a row for each)."""
        ended = pl.col("tls") & pl.col("established_us").is_not_null()
        if facts.select_seq(ended.any()).item():
            self._done.add("handshakes", handshakes_of(facts.filter(ended)))
            facts = facts.filter(~ended)
        if facts.height <= self.max_carried:
            return facts
        latest = facts.top_k(self.max_carried, by="first_us").select_seq("origin", "conn_id")
        return facts.join(latest, on=["origin", "conn_id"], how="semi")

    def _add_worker_lines(self, origin: str, thread: int | None, lines: pl.DataFrame) -> None:
        """``lines`` of one worker (``thread`` None: of an origin without thread ids)."""
        worker = self._workers.get((origin, thread))
        if worker is None:
            worker = self._workers[(origin, thread)] = _Worker(origin, thread)
            worker.window_due = self.window_events - int(self.window_events * _stagger(len(self._workers) - 1))
            if (first := self._first_window) is not None:
                worker.window_due = min(worker.window_due, first)
        worker.pending.append(lines)
        worker.pending_rows += lines.height
        # (a window of one-line requests holds a request per row: stepping every max_open new streams keeps a
        # step's stages, which cost per request, as small as a window of ordinary requests makes them)
        worker.pending_streams += int(lines.select_seq((pl.col("kind") == EventKind.NEW_STREAM).sum()).item())
        if worker.pending_rows >= worker.window_due or worker.pending_streams >= self.max_open:
            self._advance(worker)

    @property
    def _first_window(self) -> int | None:
        """``first_window_events`` while it applies (no request has finished yet), else None."""
        return None if self._finished_any else self.first_window_events

    def _take(self, worker: _Worker) -> list[pl.DataFrame]:
        """The worker's new lines, handed to its next step."""
        parts, worker.pending, worker.pending_rows = worker.pending, [], 0
        # (until a request has finished, a small first window grows twice over per step: a capture that starts
        # with a long run of start-up lines costs a few small steps, not one per first_window_events rows)
        worker.window_due = (min(self.window_events, 2 * worker.window_due) if self._first_window is not None
                             else self.window_events)
        worker.pending_streams = 0
        return parts

    def _context_of(self, origin: str) -> _Context:
        """The origin's capture-level lines as they are now (a step may run while the next chunks are added)."""
        state = self._origins[origin]
        return list(state.lifecycle), state.socket_line, state.conn0_first

    @staticmethod
    def _extras(worker: _Worker, first_line: int, context: _Context) -> list[pl.DataFrame]:
        """The origin's lifecycle lines not in the window, and its first socket line."""
        lifecycle, socket_line, conn0_first = context
        # (an origin without thread ids is one worker: each of its lines is in the window from ``first_line`` on)
        mine = (pl.col("line_no") < first_line) if worker.thread is None else (
            (pl.col("thread") != worker.thread) | (pl.col("line_no") < first_line))
        out = [f.filter(mine) for f in lifecycle]
        # (a line of this worker still in its window is not added again: stages would count it twice)
        out += [f.filter(mine) for f in (socket_line, conn0_first) if f is not None]
        return out

    def _advance(self, worker: _Worker) -> None:
        """Run the stages on the worker's window, emit what is finished, cut the window (a worker whose lines
        have all been read is finished by ``_finish_step`` instead)."""
        parts, context = self._take(worker), self._context_of(worker.origin)
        self._step(lambda: self._advance_step(worker, parts, context), (worker,))

    def _advance_step(self, worker: _Worker, parts: list[pl.DataFrame], context: _Context) -> Apply:
        side, step = self._window_of(worker, parts, context, final=False)
        out = _Output()
        try:
            if step is not None:
                self._stages(worker, step, out)
        finally:
            out.sides.append(side())
        return lambda: self._apply(out)

    def _stages(self, worker: _Worker, step: _Window, out: _Output, cut: bool = True) -> None:
        window, start, newest, events = step
        with self._timed("requests"):
            lines = build_requests(events)
        uids = pl.Series(list(worker.emitted), dtype=pl.String)
        candidates = lines.filter((pl.col("first_ts") >= start) & ~pl.col("request_uid").is_in(uids.implode()))
        # (an origin without thread ids: its newest line may be another worker's; a request's own connection is on
        # its worker, so the connection's newest line says when that worker has gone past it; a settle, cut=False,
        # goes past every connection)
        connections = window.group_by("origin", "conn_id").agg(conn_newest__=pl.col("ts_us").max()) if (
            worker.thread is None and cut) else None
        flagged = self._finished(candidates, newest, connections)
        flagged, given_up = self._bounded(flagged)
        if given_up:
            with self._timings_lock:  # (steps of several workers run at once)
                self._given_up += given_up
        unfinished = flagged.filter(~pl.col("done__"))
        finished = self._emit(lines, events, flagged.filter("done__").select_seq("request_uid"), out)
        for uid, last in finished.select_seq("request_uid", "last_ts").iter_rows():
            worker.emitted[uid] = last
        if cut:
            with self._timed("cut"):
                self._cut(worker, window, unfinished, newest)

    def _finish_step(self, given: list[_Given]) -> Apply:
        """The final advance of several workers whose lines have all been read (an ended run, or every worker
        at the end), their stages run once over all their windows: each stage call costs milliseconds whatever
        its size, and a log with many restarts or pods has many small workers."""
        sides: list[Callable[[], _Side | None]] = []
        steps: list[tuple[_Worker, _Window]] = []
        for w, parts, context in given:
            side, step = self._window_of(w, parts, context, final=True)
            sides.append(side)
            if step is not None:
                steps.append((w, step))
            w.window = w.carry = None
        out = _Output()
        try:
            if steps:
                self._final_stages(steps, out)
        finally:
            out.sides.extend(side() for side in sides)
        return lambda: self._apply(out)

    def _final_stages(self, steps: list[tuple[_Worker, _Window]], out: _Output) -> None:
        # a line given to several windows as context (an origin's lifecycle lines) is kept once
        events = steps[0][1][3] if len(steps) == 1 else pl.concat([step[3] for _, step in steps]).unique(
            ["origin", "line_no"], keep="last", maintain_order=True)
        starts = pl.DataFrame({"origin": [w.origin for w, _ in steps], "thread": [w.thread for w, _ in steps],
                               "start__": [step[1] for _, step in steps]})
        emitted = pl.Series([u for w, _ in steps for u in w.emitted], dtype=pl.String)
        with self._timed("requests"):
            lines = build_requests(events)
        # (an origin without thread ids is one worker, of thread None, and its lines have none)
        candidates = lines.join(starts.cast({"thread": lines.schema["thread"]}), on=["origin", "thread"],
                                how="left", nulls_equal=True).filter(
            (pl.col("start__").is_null() | (pl.col("first_ts") >= pl.col("start__")))
            & ~pl.col("request_uid").is_in(emitted.implode()))
        self._emit(lines, events, candidates.select_seq("request_uid"), out)
        for w, _ in steps:
            w.emitted.clear()

    def _window_of(self, worker: _Worker, parts: list[pl.DataFrame], context: _Context,
                   final: bool) -> tuple[Callable[[], _Side | None], _Window | None]:
        """Add the worker's new lines (``parts``) to its window: ``(window, first time, newest time, the window
        with its context)`` (``None`` without lines), and the new lines' event-loop slices, record gaps and
        health-check bursts (``_lines_side``: on a thread of their own while the stages run, if ``background``)."""
        new = pl.concat(parts) if parts else None
        side = self._side_of(worker, new, final)
        kept = [p for p in (worker.window, new) if p is not None and p.height]
        if not kept:
            return side, None
        window = pl.concat(kept) if len(kept) > 1 else kept[0]
        start, newest = int(window["ts_us"].min()), int(window["ts_us"].max())  # type: ignore[arg-type]
        first_line = int(window["line_no"].min())  # type: ignore[arg-type]
        extras = self._extras(worker, first_line, context)
        with_context = [f for f in (*extras, worker.carry) if f is not None and f.height]
        return side, (window, start, newest, (pl.concat([*with_context, window]) if with_context else window))

    def _side_of(self, worker: _Worker, new: pl.DataFrame | None, final: bool) -> Callable[[], _Side | None]:
        if new is None and not final:
            return lambda: None
        if new is None:
            done = self._lines_side(worker, new, final)
            return lambda: done
        return self._steps.beside(self._lines_side, worker, new, final)

    def _lines_side(self, worker: _Worker, new: pl.DataFrame | None, final: bool) -> _Side:
        """The worker's new lines through its loop slices, record gaps and health-check bursts: state of the
        worker's own that the requests and phases stages do not touch."""
        if new is None:
            empty = pl.DataFrame(schema=_WINDOW_SCHEMA)
            return worker.slices.step(empty, final=True), None, worker.health_checks.step(empty, final=True), None
        if worker.thread is None:  # (slices, gaps and bursts need the lanes, inferred at the end from these)
            with self._timed("loop"):
                return pl.DataFrame(schema=LOOP_SCHEMA), None, pl.DataFrame(schema=BURSTS_SCHEMA), lane_lines(new)
        with self._timed("loop"):
            threaded = new.filter(pl.col("thread").is_not_null()) if new["thread"].null_count() else new
            loop = worker.slices.step(threaded, final=final)
            gaps = self._record_gaps(worker, threaded)
        with self._timed("internal"):
            bursts = worker.health_checks.step(threaded, final=final)
        return loop, gaps, bursts, None

    def _apply(self, out: _Output) -> None:
        """A step's output, added to the shared state (in step order): its finished requests and phase rows
        (to the spill and ``on_finished``), each worker's loop slices, gaps and health-check bursts, then the
        internal requests' bursts."""
        for requests, phases in out.finished:
            self._finished_any = self._finished_any or requests.height > 0
            self._done.add("requests", requests)
            self._done.add("phases", phases)
            unthreaded = [o for o in requests["origin"].unique() if not self._origins[o].threaded]
            if unthreaded:  # (their streams' links place connections on lanes at the end: requests.connection_links)
                self._done.add("links", requests.filter(
                    pl.col("origin").is_in(unthreaded) & pl.col("stream_id").is_not_null()
                    & pl.col("downstream_conn_id").is_not_null()).select_seq(*LINK_SCHEMA))
            if self.on_finished is not None:
                self.on_finished(requests, phases)
        for got in out.sides:
            if got is None:
                continue
            loop, gaps, bursts, lanes = got
            self._done.add("loop", loop)
            if gaps is not None:
                self._gaps.add(gaps)
            self._done.add("bursts", bursts)
            if lanes is not None:
                self._done.add("lanes", lanes)
        for bursts in out.bursts:
            self._done.add("bursts", bursts)

    def _emit(self, lines: pl.DataFrame, events: pl.DataFrame, done_uids: pl.DataFrame,
              out: _Output) -> pl.DataFrame:
        """Phases of the requests ``done_uids`` names, put in ``out`` (``_apply`` adds them to the spill and
        hands them to ``on_finished``), with the internal requests' work bursts; returns the finished requests."""
        if not done_uids.height:
            return pl.DataFrame(schema={"request_uid": pl.String, "last_ts": pl.Int64})
        with self._timed("phases"):
            requests, phases = attribute_phases(lines, events)
            finished = requests.join(done_uids, on="request_uid", how="semi")
            if finished["internal"].any():  # Envoy's internal requests: their bursts, for the findings
                bursts = work_bursts(requests, events)
                out.bursts.append(bursts.join(done_uids.rename({"request_uid": "work_uid"}), on="work_uid",
                                              how="semi"))
        if finished.height:
            out.finished.append((finished, phases.join(finished.select_seq("request_uid"), on="request_uid",
                                                           how="semi")))
        return finished

    @contextmanager
    def _timed(self, step: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            with self._timings_lock:  # (steps of several workers run at once)
                self.timings[step] = self.timings.get(step, 0.0) + time.perf_counter() - t0

    @staticmethod
    def _record_gaps(worker: _Worker, new: pl.DataFrame) -> pl.Series:
        """``findings.record_gaps`` of the worker's next lines (the previous part's last line leads)."""
        lines = in_order(new.select_seq("ts_us", "line_no", "kind"), "ts_us", "line_no")
        carried = worker.last_line
        if carried is not None:
            lines = pl.concat([carried, lines])
        worker.last_line = lines.tail(2)  # (the line before the last gives the last one's idle class)
        return back_to_back(lines, carried=0 if carried is None else carried.height - 1)

    def _finished(self, requests: pl.DataFrame, newest: int, connections: pl.DataFrame | None = None) -> pl.DataFrame:
        """``requests`` with ``done__``: nothing later in the log can change the request any more.

        A request is done once its response has ended (an internal stream: its upstream answer, a reset or a
        local reply), its last line is ``grace_us`` old and its forward lookups are settled; or once it has
        been silent for ``idle_us``. With ``connections`` (``origin, conn_id, conn_newest__``: an origin without
        thread ids), the grace of a client request runs on the newest line of its downstream connection, not of the
        window. A tracing flush's extent decides what it charges the client requests in flight beside it, so those
        wait until the flushes that began before their end are done.
        """
        times = [c for c, t in requests.schema.items() if t == pl.Int64 and c.endswith(("_ts", "_us"))
                 and not c.endswith("_dur_us")]
        last = pl.max_horizontal(*times)
        settled = [pl.col(start).is_null() | (pl.col(start) + tolerance < newest)
                   | (pl.col(found).is_not_null() if found is not None and found in requests.columns else pl.lit(False))
                   for start, found, tolerance in FORWARD_LOOKUPS if start in requests.columns]
        internal_end = pl.col("internal") & (pl.col("us_rx_end_us").is_not_null()
                                             | pl.col("outcome").str.starts_with("local reply")
                                             | (pl.col("outcome") == "stream reset"))
        past = last + self.grace_us < newest
        if connections is not None:
            requests = requests.join(connections.rename({"conn_id": "downstream_conn_id"}),
                                     on=["origin", "downstream_conn_id"], how="left", maintain_order="left")
            # (Envoy's own streams share connection 0 on every worker: theirs is the window's newest line)
            past = past & (pl.col("internal") | (last + self.grace_us < pl.col("conn_newest__")))
        ended = (pl.col("response_end_ts").is_not_null() | internal_end) & past & pl.all_horizontal(settled)
        flagged = requests.with_columns_seq(done__=(ended | (last + self.idle_us < newest)).fill_null(False),
                                            last__=last)
        open_internal = flagged.filter(pl.col("internal") & ~pl.col("done__"))
        if open_internal.height:
            hold = int(open_internal["first_ts"].min())  # type: ignore[arg-type]
            flagged = flagged.with_columns_seq(
                done__=pl.col("done__") & (pl.col("internal") | (pl.col("last__") < hold)))
        return flagged.drop("last__", "conn_newest__", strict=False)

    def _bounded(self, flagged: pl.DataFrame) -> tuple[pl.DataFrame, int]:
        """``flagged`` with at most ``max_open`` requests left unfinished: the others, those whose last line is
        oldest, are done (emitted as they are, cut); and how many were given up so."""
        open_rows = flagged.height - int(flagged["done__"].sum())
        if open_rows <= self.max_open:
            return flagged, 0
        times = [c for c in _EARLIEST + ("last_ts",) if c in flagged.columns]
        recency = pl.when(~pl.col("done__")).then(pl.max_horizontal(*times))
        rank = recency.rank("ordinal", descending=True)
        return flagged.with_columns_seq(done__=pl.col("done__") | (rank > self.max_open).fill_null(False)), (
            open_rows - self.max_open)

    def _cut(self, worker: _Worker, window: pl.DataFrame, unfinished: pl.DataFrame, newest: int) -> None:
        keep_from = newest - (self.grace_us if worker.thread is not None else max(self.grace_us, THREADLESS_KEEP_US))
        if unfinished.height:
            earliest = unfinished.select_seq(pl.min_horizontal(*[c for c in _EARLIEST if c in unfinished.columns])
                                             .min()).item()
            if earliest is not None:
                keep_from = min(keep_from, int(earliest))
        at = int((window["ts_us"] >= keep_from).arg_true().head(1).to_list()[0]) if (
            window["ts_us"] >= keep_from).any() else window.height
        at = max(0, at - MARGIN_ROWS)
        if at == 0:
            worker.window = window
            return
        dropped = window.head(at)
        worker.window = window.slice(at)
        worker.carry = carried(pl.concat([worker.carry, dropped]) if worker.carry is not None else dropped,
                               max_connections=self.max_carried)
        first_kept = int(worker.window["ts_us"].min())  # type: ignore[arg-type]
        worker.emitted = {u: t for u, t in worker.emitted.items() if t is None or t >= first_kept}

    def _place_on_lanes(self) -> list[str]:
        """The lanes of origins without thread ids (``lanes.with_lanes``) from their lines and finished requests'
        links, and what is built on them, as for the whole file: loop slices, record gaps, workers started; returns
        the inference's note. Their lines are kept until the internal work bursts are found (``_lane_bursts``)."""
        with self._timed("lanes"):
            events, self._lanes, note = with_lanes(self._done.take("lanes"), self._done.take("links"))
            self._done.add("loop", slices(events))
            self._gaps.add(record_gaps(events))
            no_requests = pl.DataFrame(schema={"origin": pl.String(), "thread": pl.Int64(), "internal": pl.Boolean()})
            self._started.append(worker_threads(events, no_requests).select_seq("origin", "thread"))
            self._lane_events = events
        return [note] if note else []

    def _lane_bursts(self, requests: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The internal work bursts of origins without thread ids (``work_bursts`` on their lanes and their finished
        ``requests``, placed on lanes, as for the whole file) and each internal request's own work in them
        (``own_work``: a window without lanes found none)."""
        events, self._lane_events = self._lane_events, None
        if events is None:
            return pl.DataFrame(schema=BURSTS_SCHEMA), own_work(pl.DataFrame(schema=BURSTS_SCHEMA),
                                                                pl.DataFrame(schema=STREAMS_SCHEMA))
        origins = events.select_seq(pl.col("origin").unique()).to_series()
        mine = requests.filter(pl.col("origin").is_in(origins.implode()))
        mine = mine.with_columns_seq(conn_id=pl.col("downstream_conn_id")) if "conn_id" not in mine.columns else mine
        streams = internal_streams(mine, events)
        bursts = work_bursts(mine, events, streams)
        return bursts, own_work(bursts, streams)

    def _finished_requests(self) -> pl.DataFrame:
        """The finished requests, those of origins without thread ids on their lanes, with their internal requests'
        own work (their internal work bursts found meanwhile). Without lanes the uid is not read back: ``conclude``
        makes it from the columns it is made of once the requests are in order (~70 bytes a request less in its
        steps)."""
        if self._lane_events is None:
            return requests_on_lanes(self._done.take("requests", leave_out=("request_uid",)), self._lanes)
        requests = requests_on_lanes(self._done.take("requests"), self._lanes)
        bursts, own = self._lane_bursts(requests)
        self._done.add("bursts", bursts)
        work = ("internal_work_us", "flush_work_us")
        found = requests.select_seq("request_uid").join(own.select_seq("request_uid", *work), on="request_uid",
                                                        how="left",
                                                     maintain_order="left")
        return requests.with_columns_seq(pl.coalesce(found[c],
                                                     pl.col(c)).cast(requests.schema[c]).alias(c) for c in work)

    def finish(self) -> Analysis:
        """Finish every worker and run the capture-wide steps (the events are not kept: ``engine/events.py``)."""
        # (everything finished from here on is read back below: a part written now would be read back at once, ~0.4 s
        # on 1 GB for no lower peak)
        self._done.hold()
        try:
            for worker in list(self._workers.values()):  # small ones together (a log of many pods or restarts)
                self._finish_later(worker)
            self._step(lambda: self._finish_ended_step)
            self._steps.drain()
        finally:
            self.close()
        # (every worker is finished: what each still holds — its loop state, last line — is released before the
        # capture-wide steps, which need the memory)
        self._workers.clear()
        notes: list[str] = []
        if self._given_up:
            notes.append(f"{self._given_up} request(s) were given up unfinished (emitted as cut by the capture) "
                         f"because their worker held {self.max_open} requests whose response had not ended "
                         "(docs/scale.md)")
        restarts = sum(max(s.boots - 1, 0) for name, s in self._origins.items() if "#" not in name)
        if restarts:
            notes.append(restart_note(restarts))
        whole = [pl.concat(s.whole) for s in self._origins.values() if s.whole]
        shakes = [handshakes_of(merge_facts(self._facts))] if self._facts else []
        self._facts, self._facts_rows = [], 0
        if self._done.rows("handshakes"):
            shakes.insert(0, self._done.take("handshakes"))
        if self._done.rows("lanes"):
            notes.extend(self._place_on_lanes())
        if whole:
            staged = stage(pl.concat(whole), [])
            notes.extend(staged.notes)
            self._gaps.add(record_gaps(staged.events))
            self._started.append(worker_threads(staged.events, staged.requests.head(0)).select_seq("origin", "thread"))
            self._done.add("loop", staged.loop)
            shakes.append(handshakes(staged.events))
            if staged.requests.height:
                self._done.add("requests", staged.requests)
                self._done.add("phases", staged.phases)
        self.facts.gaps = self._gaps.counts()
        if self._started:
            self.facts.started = pl.concat(self._started).unique().cast(STARTED_SCHEMA)  # type: ignore[arg-type]
        self.facts.handshakes = pl.concat(shakes) if shakes else None
        if whole:
            whole_requests = staged.requests.with_columns_seq(conn_id=pl.col("downstream_conn_id")) if (
                "conn_id" not in staged.requests.columns) else staged.requests
            self._done.add("bursts", work_bursts(whole_requests, staged.events))
        self.spilled_parts = self._done.parts
        # (in a list, popped into ``conclude``: no reference is held here while it runs)
        held = [self._finished_requests()] if self._done.rows("requests") else []
        if self._lane_events is not None:  # (no request: the health checker's bursts on the lanes)
            self._done.add("bursts", self._lane_bursts(pl.DataFrame(schema=PHASED_REQUEST_SCHEMA))[0])
        self.facts.internal_work = self._done.take("bursts")
        loop_frame = self._done.take("loop").sort("origin", "thread", maintain_order=True)
        if not held:
            self._done.close()
            empty = pl.DataFrame(schema=REQUEST_FRAME_SCHEMA)
            return Analysis(empty, pl.DataFrame(schema=PHASES_SCHEMA), loop_frame.head(0), ())
        all_shakes = pl.concat(shakes) if shakes else handshakes_of(connection_facts(pl.DataFrame(schema=EVENT_SCHEMA)))
        with self._timed("conclude"):
            # (requests taken inside the call, not held here: conclude frees each input once it has the next
            # frame; the phase rows wait on disk meanwhile — conclude only appends to them — and join after)
            done = conclude(held.pop(), pl.DataFrame(schema=PHASES_SCHEMA), loop_frame, all_shakes, tuple(notes),
                            make_uids=not self.uids_on_access)
            phases = pl.concat([self._done.take("phases"), done.phases], rechunk=False)
        self._done.close()
        return Analysis(done.requests, phases, loop_frame, done.notes, done.stitching, done.queueing,
                        uids_made=done.uids_made)


def analyse(events: pl.DataFrame) -> Analysis:
    """The engine on a frame of events already in memory (``EVENT_SCHEMA``: a test's, a notebook's), fed at once
    with its steps in line; ``pipeline.analysed_events`` gives the events as it read them."""
    engine = StreamingAnalysis(background=False)
    engine.add(events)
    return engine.finish()
