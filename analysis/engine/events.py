"""A capture's events frame on demand (``Capture.events``, ``Capture.records``).

The analysis streams its input worker by worker and keeps no events (``streaming.py``). A capture's events are
read again when asked for: its input parsed once more and put as the analysis reads them (``analysed_events``:
each restart run its own origin, inferred lanes as threads where the format logs none), then held. Input that
cannot be read twice (stdin, a pipe) has its events only if they were kept while it was read
(``dissect(keep_events=True)``); else asking for them raises ``EventsNotKept``, with that advice.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import polars as pl

from envoy_dissector.analysis.engine.pipeline import analysed_events
from envoy_dissector.parser.errors import InputError
from envoy_dissector.parser.pipeline import ShapeStore, iter_parse
from envoy_dissector.parser.redact import RedactOption
from envoy_dissector.parser.schema import EVENT_SCHEMA
from envoy_dissector.parser.sources import Source, expand


class EventsNotKept(ValueError):
    """The capture's input cannot be read again and its events were not kept while it was read."""


class CaptureEvents(Protocol):
    """Where a capture's events frame comes from."""

    @property
    def held(self) -> bool:
        """Whether the frame is in memory now (asking for it costs nothing)."""
        ...

    def frame(self) -> pl.DataFrame:
        """The events (``EVENT_SCHEMA``) as the analysis read them; raises ``EventsNotKept`` when unavailable."""
        ...


@dataclass(frozen=True)
class HeldEvents:
    """Events kept in memory while the input was read."""

    events: pl.DataFrame = field(repr=False)

    @property
    def held(self) -> bool:
        return True

    def frame(self) -> pl.DataFrame:
        return self.events


@dataclass(frozen=True)
class NoEvents:
    """Events that cannot be had: ``why`` says so, and what to do instead."""

    why: str

    @property
    def held(self) -> bool:
        return False

    def frame(self) -> pl.DataFrame:
        raise EventsNotKept(self.why)


@dataclass
class ReadAgain:
    """Events read again from the capture's input on first use (then held)."""

    source: Any
    format: str = "auto"
    log_format: str | None = None
    redact: RedactOption = True
    shapes: ShapeStore | None = None
    stop_reading: Callable[[int, int], bool] | None = None
    _events: pl.DataFrame | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def held(self) -> bool:
        return self._events is not None

    def frame(self) -> pl.DataFrame:
        with self._lock:  # (a dashboard's callbacks may ask at once: one read)
            if self._events is None:
                run = iter_parse(self.source, format=self.format, log_format=self.log_format, redact=self.redact,
                                 shapes=self.shapes, stop_reading=self.stop_reading)
                chunks = [c.events for c in run]
                if not chunks:
                    raise InputError("nothing parseable: no log record found")
                events = pl.concat(chunks) if len(chunks) > 1 else chunks[0]
                self._events = analysed_events(events.cast(EVENT_SCHEMA))  # type: ignore[arg-type]
            return self._events


def readable_twice(source: Any) -> bool:
    """Whether ``source`` (as ``dissect`` passes it to the parser) can be read again: log text, or regular files
    only (not stdin or a pipe)."""
    sources: list[Source] = []
    try:
        for item in source if isinstance(source, list) else [source]:
            sources += [item] if isinstance(item, Source) else expand(item)
    except InputError:
        return False
    return all(s.text is not None or (s.path is not None and s.path.is_file()) for s in sources)


def events_of(source: Any, *, kept: pl.DataFrame | None, format: str, log_format: str | None,
              redact: RedactOption, shapes: ShapeStore | None,
              stop_reading: Callable[[int, int], bool] | None) -> CaptureEvents:
    """Where the events of a capture read from ``source`` come from: the frame ``kept`` while reading, else the
    input read again, else none (stdin, a pipe)."""
    if kept is not None:
        return HeldEvents(kept)
    if readable_twice(source):
        return ReadAgain(source, format=format, log_format=log_format, redact=redact, shapes=shapes,
                         stop_reading=stop_reading)
    return NoEvents("this capture was read from stdin or a pipe, which cannot be read again, and its events were "
                    "not kept: analyse it with dissect(..., keep_events=True) (or from a file) to have them")
