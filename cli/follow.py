"""Follow mode: ``analyze --follow FILE|-`` (and ``watch``): a live log analysed as it grows.

A pump thread (``tail.py``) feeds the input into a pipe; a thread of its own parses the pipe and runs the
streaming analysis (``StreamingAnalysis``) over it, whose finished requests go to the rolling view's window
(``analysis/outputs/live.py``) and to the appended ``-o`` files (``live_files.py``); the main thread redraws the
view every ``--refresh`` seconds. Ctrl-C (or SIGTERM) stops the pumps: the pipe ends, the analysis finishes
what it has read, and the final report and ``-o`` files are written as ``analyze`` writes them. docs/follow.md.
"""
from __future__ import annotations

import argparse
import json
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import polars as pl

from envoy_dissector.analysis.capture import Capture
from envoy_dissector.analysis.engine.events import NoEvents
from envoy_dissector.analysis.engine.stream_capture import PARSE_WORKERS
from envoy_dissector.analysis.engine.streaming import StreamingAnalysis
from envoy_dissector.analysis.outputs.export import kind_of, write
from envoy_dissector.analysis.outputs.live import LiveWindow, render_line, render_screen
from envoy_dissector.analysis.outputs.report import render
from envoy_dissector.analysis.outputs.terminal import report_width, terminal_safe
from envoy_dissector.analysis.schema import ANALYSED_COLUMNS
from envoy_dissector.cli.argtypes import positive_number
from envoy_dissector.cli.live_files import LiveFiles
from envoy_dissector.cli.parse import redaction_of
from envoy_dissector.cli.tail import FileFollower, LivePipe, Pump, follow_file, follow_stdin
from envoy_dissector.kube.capture import signals_handled
from envoy_dissector.parser import shape_cache
from envoy_dissector.parser.errors import InputError, UsageError
from envoy_dissector.parser.pipeline import Chunk, iter_parse
from envoy_dissector.parser.redact import RedactOption
from envoy_dissector.parser.sources import Source, shown_name

#: Seconds between two refreshes of the view (``--refresh``).
REFRESH_S = 2.0
#: The streaming analysis steps a worker at every chunk it has lines in (a chunk is what came before the stream
#: paused for 0.2 s, at most ~1 s of it: ``parser/streams.py``), instead of once per 400,000 rows, so requests are
#: emitted soon after they end.
LIVE_WINDOW_EVENTS = 1
#: The largest ``--slow-ms`` (a day).
MAX_SLOW_MS = 86_400_000
#: Bytes the parser takes at most at once from the live stream: a block is handed on once this much has come, the
#: stream paused for 0.2 s, or a second has passed since its first byte (``parser/streams.py``). Smaller blocks
#: come sooner at busy rates but cost the parser more per byte: 256 KiB reads a backlog at the speed of 16 MiB
#: blocks (1.5 MB/s, a 22 MB lab log; 128 KiB: 1.0, 64 KiB: 0.65).
LIVE_BLOCK_BYTES = 256 * 1024
#: Rows handed to the streaming analysis at once, at most, when the log comes faster than it is analysed.
BATCH_ROWS = 200_000
#: Parsed chunks waiting for the analysis at most (the parser waits beyond: memory stays bounded).
QUEUED_CHUNKS = 16
#: The view's note on a log without thread ids (``LiveAnalysis.note``): its requests are shown as they finish, but
#: its workers are lanes inferred from the whole run, at the end (docs/follow.md).
UNTHREADED_NOTE = "no thread ids in this log: worker lanes are inferred at Ctrl-C (docs/follow.md)"
#: Options of ``analyze`` that select requests; the follow view shows every request.
_FILTERS = ("since", "until", "authority", "path", "status")
#: Why a followed capture has no events: the log it read goes on growing, so reading it again gives more.
FOLLOWED_EVENTS = ("a followed log's events are not kept (it goes on growing): analyse the file once it is "
                   "written to have them")


def _never(_first_us: int, _latest_us: int) -> bool:
    """``stop_reading`` that never stops: given so that the parser hands each chunk on as soon as it is parsed
    rather than once the next blocks are in flight (``parser/pipeline.py``, ``collect``)."""
    return False


class LiveAnalysis(threading.Thread):
    """Parses ``source`` (a stream) and runs the streaming analysis over it until the stream ends; then
    ``capture`` holds the final analysis (or ``error`` what went wrong)."""

    def __init__(self, source: Source, *, format: str, log_format: str | None, redact: RedactOption,
                 on_finished: Callable[[pl.DataFrame, pl.DataFrame], None]) -> None:
        super().__init__(name="envoy-dissect-follow", daemon=True)
        self.source = source
        self.parse = iter_parse(source, format=format, log_format=log_format, redact=redact, shapes=shape_cache,
                                workers=PARSE_WORKERS, columns=ANALYSED_COLUMNS, stop_reading=_never,
                                block_bytes=LIVE_BLOCK_BYTES, flush_idle=True)
        self.streaming = StreamingAnalysis(window_events=LIVE_WINDOW_EVENTS, on_finished=on_finished)
        self.capture: Capture | None = None
        self.error: BaseException | None = None
        #: set when ``run`` has ended (waited on instead of ``join``: a ``join`` interrupted by Ctrl-C may return
        #: early the next time, the thread still running)
        self.done = threading.Event()

    @property
    def lines_read(self) -> int:
        return self.parse.diagnostics.lines_read

    @property
    def note(self) -> str | None:
        """What the rolling view cannot show of this log (``None``: nothing)."""
        if self.streaming.unthreaded_origins():
            return UNTHREADED_NOTE
        return None

    def run(self) -> None:
        chunks: queue.Queue[Chunk | BaseException | None] = queue.Queue(maxsize=QUEUED_CHUNKS)
        reader = threading.Thread(target=self._read, args=(chunks,), name="envoy-dissect-follow-parse", daemon=True)
        try:
            reader.start()
            got = self._analyse(chunks)
            if not got:
                raise InputError("nothing parseable: no log record was read before the follow ended",
                                 path=self.source.name)
            result = self.streaming.finish()
            self.capture = Capture(requests=result.requests, phases=result.phases, loop=result.loop,
                                   diagnostics_info=self.parse.diagnostics, notes=result.notes,
                                   name=self.source.name, stitching=result.stitching, queueing=result.queueing,
                                   facts=self.streaming.facts, event_source=NoEvents(FOLLOWED_EVENTS))
        except BaseException as exc:  # raised again in the main thread
            self.error = exc
        finally:
            self.streaming.close()
            self.done.set()

    def _read(self, chunks: queue.Queue[Chunk | BaseException | None]) -> None:
        """The parser's chunks into ``chunks`` (then ``None``, or the error that ended the parse)."""
        try:
            for chunk in self.parse:
                chunks.put(chunk)
            chunks.put(None)
        except BaseException as exc:
            chunks.put(exc)

    def _analyse(self, chunks: queue.Queue[Chunk | BaseException | None]) -> int:
        """Hand the chunks to the streaming analysis as they come, each with whatever other chunks are already
        waiting (up to ``BATCH_ROWS`` rows). Each ``add`` steps every worker it has lines for, and a step costs a
        tenth of a second or more whatever its size: a log read faster than it is analysed (a backlog) goes in
        big batches, a live one chunk by chunk as soon as it is parsed. When the log went quiet after the batch
        (its last chunk ``settled``), the analysis emits every request that has ended (``settle``) instead of
        waiting for the next lines. Returns the rows analysed."""
        total = 0
        while True:
            item: object = chunks.get()
            batch: list[pl.DataFrame] = []
            rows = 0
            settled = False
            while isinstance(item, Chunk):
                batch.append(item.events)
                rows += item.events.height
                settled = item.settled
                if rows >= BATCH_ROWS:
                    item = _MORE
                    break
                try:
                    item = chunks.get_nowait()
                except queue.Empty:
                    item = _MORE
            if batch:
                self.streaming.add(pl.concat(batch, how="vertical_relaxed") if len(batch) > 1 else batch[0])
                total += rows
                if settled:
                    self.streaming.settle()
            if isinstance(item, BaseException):
                raise item
            if item is None:
                return total


#: (``LiveAnalysis._analyse``: the batch is complete, more chunks may follow)
_MORE = object()



class Screen:
    """Where the view goes: redrawn in place on a terminal, else plain lines appended."""

    def __init__(self, stream: TextIO, width: int, *, quiet: bool = False) -> None:
        self.stream = stream
        self.width = width
        self.quiet = quiet
        self.tty = _isatty(stream)
        self._last_total = -1
        self._noted = False

    def show(self, window: LiveWindow, *, source: str, lines_read: int, note: str | None = None) -> None:
        if self.quiet:
            return
        snap = window.snapshot()
        if self.tty:
            raw = getattr(self.stream, "inner", None) or self.stream  # (the escape sequences go around SafeStdout)
            raw.write("\x1b[H\x1b[2J" + terminal_safe(render_screen(snap, source=source, lines_read=lines_read,
                                                                   width=self.width, note=note)) + "\n")
            raw.flush()
            return
        if note and not self._noted:
            self._noted = True
            print(note, file=self.stream)
        if snap.requests_total == self._last_total and not snap.new_findings:
            return  # nothing new: no line
        self._last_total = snap.requests_total
        for line in render_line(snap, width=self.width):
            print(line, file=self.stream)
        self.stream.flush()

    def clear(self) -> None:
        if self.tty and not self.quiet:
            raw = getattr(self.stream, "inner", None) or self.stream
            raw.write("\x1b[H\x1b[2J")
            raw.flush()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


@contextmanager
def _stop_requests() -> Iterator[threading.Event]:
    """Ctrl-C (SIGINT) or SIGTERM sets the yielded event instead of raising wherever the main thread happens to
    be (inside a lock's wait, a write to the terminal, polars); the follow's own loop turns it into the end of
    the follow. A second one raises ``KeyboardInterrupt``: the final analysis is cut short (exit 130)."""
    requested = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        if requested.is_set():
            raise KeyboardInterrupt
        requested.set()

    with signals_handled(on_signal):
        yield requested


def check_follow_args(args: argparse.Namespace) -> None:
    if len(args.captures) != 1:
        raise UsageError("--follow takes one FILE (or - for stdin)")
    given = [f"--{name}" for name in _FILTERS if getattr(args, name, None)]
    if given:
        raise UsageError(f"{', '.join(given)}: not with --follow (the view shows every request)")
    if getattr(args, "keep_events", False):
        raise UsageError("--keep-events: not with --follow (a followed log is analysed as it is read)")
    for out in args.output:
        kind_of(out)


def run_follow(args: argparse.Namespace) -> int:
    """``analyze --follow FILE|-``."""
    check_follow_args(args)
    target = args.captures[0]
    if target == "-":
        pipe = LivePipe("<stdin>")
        pumps = [Pump("envoy-dissect-stdin", follow_stdin(pipe))]
    else:
        path = Path(target)
        if path.is_dir():
            raise InputError("is a directory; follow one log file", path=shown_name(target))
        pipe = LivePipe(shown_name(target))
        follower = FileFollower(path, from_end=args.from_end)
        pumps = [Pump("envoy-dissect-tail", follow_file(follower, pipe))]
    return follow(pipe, pumps, args)


def follow(pipe: LivePipe, pumps: Sequence[Pump], args: argparse.Namespace,
           wait: Callable[[Callable[[float], None]], None] | None = None) -> int:
    """Follow ``pipe`` (fed by ``pumps``) until its input ends or Ctrl-C; print the final report.

    ``wait(tick)``: the caller's own waiting loop (``watch`` raises the log level around it), which calls
    ``tick(seconds)`` to let the view refresh and must end by raising ``KeyboardInterrupt``; by default the
    view refreshes until the input ends or Ctrl-C.
    """
    window = LiveWindow(slow_us=args.slow_ms * 1000 if args.slow_ms is not None else None)
    files = LiveFiles(args.output)

    def on_finished(requests: pl.DataFrame, phases: pl.DataFrame) -> None:
        window.add(requests, phases)
        files.add(requests)

    engine = LiveAnalysis(pipe.source, format=args.format, log_format=args.log_format, redact=redaction_of(args),
                          on_finished=on_finished)
    screen = Screen(sys.stdout, report_width(sys.stdout), quiet=args.quiet)
    engine.start()
    for pump in pumps:
        pump.start()

    due = [time.monotonic() + args.refresh]
    with _stop_requests() as stop:

        def tick(seconds: float) -> None:
            until = time.monotonic() + seconds
            while not stop.is_set() and not engine.done.is_set() and time.monotonic() < until:
                engine.done.wait(min(0.1, max(until - time.monotonic(), 0.0)))
            if stop.is_set():
                raise KeyboardInterrupt  # (here, where it is expected: ``wait`` restores levels on it)
            if time.monotonic() >= due[0]:
                due[0] = time.monotonic() + args.refresh
                screen.show(window, source=pipe.name, lines_read=engine.lines_read, note=engine.note)
            for pump in pumps:
                if pump.error is not None:
                    raise pump.error
            if engine.done.is_set():
                raise _InputEnded

        try:
            try:
                if wait is not None:
                    wait(tick)
                else:
                    while True:
                        tick(args.refresh)
            except (KeyboardInterrupt, _InputEnded):
                pass
        finally:
            for pump in pumps:
                pump.stop()
            pipe.close_writer()
            while not engine.done.wait(0.2):  # (a second Ctrl-C here cuts the final analysis short: exit 130)
                pass
            files.close()
            pipe.close()
    for pump in pumps:
        if pump.error is not None:
            raise pump.error
    if engine.error is not None:
        raise engine.error
    assert engine.capture is not None
    return final_report(engine.capture, args, screen)


class _InputEnded(Exception):
    """The followed input ended by itself (stdin closed): the follow is over."""


def final_report(capture: Capture, args: argparse.Namespace, screen: Screen) -> int:
    """The ``-o`` files written whole and the report, as ``analyze`` writes them."""
    for out in args.output:
        write(capture, out, columns=getattr(args, "columns", "contract"))
        if not args.quiet:
            print(f"wrote {out}", file=sys.stderr)
    screen.clear()
    if args.json:
        json.dump(capture.summary(), sys.stdout, indent=2, default=str)
        print()
    else:
        print(render(capture, top=args.top, width=report_width(sys.stdout)))
    return 0


def add_follow_arguments(p: argparse.ArgumentParser) -> None:
    """Options of the live view (``analyze --follow`` and ``watch``)."""
    p.add_argument("--refresh", type=positive_number(at_most=3600), default=REFRESH_S, metavar="SECONDS",
                   help=f"seconds between two refreshes of the live view (default {REFRESH_S:g})")
    p.add_argument("--slow-ms", type=positive_number(at_most=MAX_SLOW_MS), metavar="MS",
                   help="list requests at least this slow in the live view (default: the window's p99)")
