"""Runs the engine over a capture's input (``stream``): the parser's chunks, read ahead on a thread of their own,
into ``StreamingAnalysis``, source after source. ``capture.dissect`` makes its result a ``Capture``."""
from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import polars as pl

from envoy_dissector.analysis.engine.facts import CaptureFacts
from envoy_dissector.analysis.engine.pipeline import Analysis, analysed_events
from envoy_dissector.analysis.engine.spill import MEMORY_BUDGET
from envoy_dissector.analysis.engine.streaming import (
    GRACE_US,
    IDLE_US,
    MAX_OPEN_REQUESTS,
    WINDOW_EVENTS,
    Emit,
    StreamingAnalysis,
)
from envoy_dissector.analysis.schema import ANALYSED_COLUMNS
from envoy_dissector.parser.errors import InputError
from envoy_dissector.parser.pipeline import WORKERS, Diagnostics, ShapeStore, iter_parse
from envoy_dissector.parser.redact import RedactOption
from envoy_dissector.parser.schema import EVENT_SCHEMA

T = TypeVar("T")


#: Chunks parsed ahead on a thread of their own while the analysis works on the previous ones (0: the parser is
#: iterated by the analysis' thread; its parse workers still work ahead on the blocks in flight). One chunk ahead
#: held 70-100 MiB more at the peak for no gain in wall or CPU on this 2-core machine: the 1 GB corpus 1093-1162
#: against 994-1064 MiB, 8.03 against 7.98 s, 13.22 against 12.92 CPU-s (bench/README.md, 2026-11-28 late).
PREFETCH = 0
#: Parser threads (each holds a block's events in flight): two use both cores of a 2-core machine as well as four
#: (50.9 vs 51.1 MB/s on 1 GB) and hold 110 MB less (bench/README.md, 2026-11-26).
PARSE_WORKERS = min(2, WORKERS)
_DONE = object()


def prefetched(chunks: Iterable[T], depth: int) -> Iterator[T]:
    """``chunks``, iterated by a background thread at most ``depth`` items ahead (its errors are raised here)."""
    box: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in chunks:
                while not stop.is_set():
                    try:
                        box.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            box.put(_DONE)
        except BaseException as exc:  # handed to the consumer, raised there
            box.put(exc)

    thread = threading.Thread(target=produce, name="envoy-dissect-parse", daemon=True)
    thread.start()
    try:
        while True:
            item = box.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()


def regular_files(source: Any) -> bool:
    """Whether every input is a regular file: only then is reading handed to a background thread (a read from
    stdin or a FIFO may block for ever, and Ctrl-C must reach it in the main thread)."""
    items = source if isinstance(source, (list, tuple)) else [source]
    for item in items:
        path = getattr(item, "path", item)
        if not isinstance(path, (str, Path)) or "\n" in str(path) or not os.path.isfile(path):
            return False
    return True


@dataclass(frozen=True)
class Streamed:
    """What one run of the engine over a capture's input gives (``capture.dissect`` makes it a ``Capture``)."""

    analysis: Analysis
    facts: CaptureFacts
    diagnostics: Diagnostics
    #: the events as the analysis read them, when they were kept (``keep_events``)
    kept: pl.DataFrame | None


def stream(src: Any, *, format: str = "auto", log_format: str | None = None, redact: RedactOption = True,
           progress: Callable[[int], None] | None = None, shapes: ShapeStore | None = None,
           stop_reading: Callable[[int, int], bool] | None = None, on_finished: Emit | None = None,
           grace_us: int = GRACE_US, idle_us: int = IDLE_US, window_events: int = WINDOW_EVENTS,
           max_open: int = MAX_OPEN_REQUESTS, first_window_events: int | None = None,
           block_bytes: int | None = None, prefetch: int = PREFETCH,
           spill_budget: int = MEMORY_BUDGET, parse_workers: int = PARSE_WORKERS, background_steps: bool = True,
           keep_events: bool = False, read_ahead: bool = True, uids_on_access: bool = False) -> Streamed:
    """Parse ``src`` (as ``capture._as_source`` gives it) and analyse it worker by worker
    (``streaming.StreamingAnalysis``); the arguments are ``capture.dissect``'s. ``read_ahead``: the input may be
    read on a thread of its own (regular files only: a read from stdin or a FIFO may block for ever, and Ctrl-C
    must reach it in the main thread); ``uids_on_access``: ``StreamingAnalysis``'s."""
    run = iter_parse(src, format=format, log_format=log_format, redact=redact, shapes=shapes,
                     progress=progress, stop_reading=stop_reading, block_bytes=block_bytes, workers=parse_workers,
                     columns=None if keep_events else ANALYSED_COLUMNS)
    streaming = StreamingAnalysis(grace_us=grace_us, idle_us=idle_us, window_events=window_events, max_open=max_open,
                                  first_window_events=first_window_events, on_finished=on_finished,
                                  spill_budget=spill_budget, background=background_steps,
                                  uids_on_access=uids_on_access)
    kept: list[pl.DataFrame] = []
    source_name: str | None = None
    try:
        for chunk in (prefetched(run, prefetch) if read_ahead and prefetch > 0 else run):
            if source_name is not None and chunk.source != source_name:
                streaming.end_source()  # (sources are read one after another: the previous one is over)
            source_name = chunk.source
            streaming.add(chunk.events)
            if keep_events:
                kept.append(chunk.events)
        if source_name is None:
            raise InputError("nothing parseable: no log record found")
        result = streaming.finish()
    finally:
        streaming.close()  # (a failed read or Ctrl-C: the window steps still queued are dropped)
    events = analysed_events(pl.concat(kept).cast(EVENT_SCHEMA)) if keep_events else None  # type: ignore[arg-type]
    return Streamed(result, streaming.facts, run.diagnostics, events)
