"""``dissect_stream``: ``dissect`` through the streaming analysis (bounded memory, no events frame kept)."""
from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from envoy_dissector.analysis.capture import Capture, _as_source, _label
from envoy_dissector.analysis.engine.reread import index_for
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
from envoy_dissector.parser.pipeline import WORKERS, ShapeStore, iter_parse
from envoy_dissector.parser.redact import RedactOption
from envoy_dissector.parser.schema import RECORD_COLUMNS

T = TypeVar("T")


#: Chunks parsed ahead while the analysis works on the previous ones (the parser's reading and line splitting
#: run in the thread that iterates it: without this they would wait for every window's stages).
PREFETCH = 1
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


def _regular_files(source: Any) -> bool:
    """Whether every input is a regular file: only then is reading handed to a background thread (a read from
    stdin or a FIFO may block for ever, and Ctrl-C must reach it in the main thread)."""
    items = source if isinstance(source, (list, tuple)) else [source]
    for item in items:
        path = getattr(item, "path", item)
        if not isinstance(path, (str, Path)) or "\n" in str(path) or not os.path.isfile(path):
            return False
    return True


def dissect_stream(source: Any, *, format: str = "auto", log_format: str | None = None, redact: RedactOption = True,
                   progress: Callable[[int], None] | None = None, name: str | None = None,
                   shapes: ShapeStore | None = None, stop_reading: Callable[[int, int], bool] | None = None,
                   on_finished: Emit | None = None, grace_us: int = GRACE_US, idle_us: int = IDLE_US,
                   window_events: int = WINDOW_EVENTS, max_open: int = MAX_OPEN_REQUESTS,
                   block_bytes: int | None = None, prefetch: int = PREFETCH, spill_budget: int = MEMORY_BUDGET,
                   parse_workers: int = PARSE_WORKERS, background_steps: bool = True) -> Capture:
    """Like ``dissect``, with the analysis streamed worker by worker (``analysis/engine/streaming.py``).

    The capture has the same requests, phases, loop, diagnostics and summary; its ``events``/``records`` are
    empty (``facts`` holds what the summary reads from them); ``request_lines`` reads a request's lines again
    from the input file (one regular file only: not stdin or several files).
    ``on_finished(requests, phases)`` sees each batch of finished requests as it is emitted. Finished output
    beyond ``spill_budget`` bytes waits for the end in parquet parts in a temporary directory (``spill.py``).
    ``max_open``: requests whose response has not ended a worker holds at most; beyond, the oldest are emitted
    as cut (``streaming.MAX_OPEN_REQUESTS``). Sources are analysed one after another: a file's workers are
    finished when the next file begins.
    ``background_steps``: the analysis' window steps run on a thread of their own while the next chunks are taken
    in (the same result as in line).

    >>> cap = dissect_stream("fixtures/istio-thread/keepalive/envoy.log.gz")
    >>> cap.requests.filter("complete").height > 0
    True
    """
    src = _as_source(source)
    run = iter_parse(src, format=format, log_format=log_format, redact=redact, shapes=shapes,
                     progress=progress, stop_reading=stop_reading, block_bytes=block_bytes, workers=parse_workers,
                     columns=ANALYSED_COLUMNS)
    streaming = StreamingAnalysis(grace_us=grace_us, idle_us=idle_us, window_events=window_events, max_open=max_open,
                                  on_finished=on_finished, spill_budget=spill_budget, background=background_steps)
    source_name: str | None = None
    ahead = prefetch > 0 and _regular_files(source)
    try:
        for chunk in (prefetched(run, prefetch) if ahead else run):
            if source_name is not None and chunk.source != source_name:
                streaming.end_source()  # (sources are read one after another: the previous one is over)
            source_name = chunk.source
            streaming.add(chunk.events)
        if source_name is None:
            raise InputError("nothing parseable: no log record found")
        result = streaming.finish()
    finally:
        streaming.close()  # (a failed read or Ctrl-C: the window steps still queued are dropped)
    label = _label(source, name)
    return Capture(records=result.events.select(RECORD_COLUMNS), events=result.events, requests=result.requests,
                   phases=result.phases, loop=result.loop, diagnostics_info=run.diagnostics, notes=result.notes,
                   name=label, stitching=result.stitching, queueing=result.queueing,
                   facts=streaming.facts, line_index=index_for(src, format=format,
                                                               log_format=log_format, redact=redact))
