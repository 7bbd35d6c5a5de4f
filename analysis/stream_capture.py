"""``dissect_stream``: ``dissect`` through the streaming analysis (bounded memory, no events frame kept)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from envoy_dissector.analysis.capture import Capture, _as_source
from envoy_dissector.analysis.streaming import GRACE_US, IDLE_US, WINDOW_EVENTS, Emit, StreamingAnalysis
from envoy_dissector.parser.errors import InputError
from envoy_dissector.parser.pipeline import ShapeStore, iter_parse
from envoy_dissector.parser.redact import RedactOption
from envoy_dissector.parser.schema import EVENT_SCHEMA, RECORD_COLUMNS


def dissect_stream(source: Any, *, format: str = "auto", log_format: str | None = None, redact: RedactOption = True,
                   progress: Callable[[int], None] | None = None, name: str | None = None,
                   shapes: ShapeStore | None = None, stop_reading: Callable[[int, int], bool] | None = None,
                   on_finished: Emit | None = None, grace_us: int = GRACE_US, idle_us: int = IDLE_US,
                   window_events: int = WINDOW_EVENTS, block_bytes: int | None = None) -> Capture:
    """Like ``dissect``, with the analysis streamed worker by worker (``analysis/streaming.py``).

    The capture has the same requests, phases, loop, diagnostics and summary; its ``events``/``records`` are
    empty (``facts`` holds what the summary reads from them), so ``request_lines`` is not available.
    ``on_finished(requests, phases)`` sees each batch of finished requests as it is emitted.

    >>> cap = dissect_stream("fixtures/istio-thread/keepalive/envoy.log.gz")
    >>> cap.requests.filter("complete").height > 0
    True
    """
    run = iter_parse(_as_source(source), format=format, log_format=log_format, redact=redact, shapes=shapes,
                     progress=progress, stop_reading=stop_reading, block_bytes=block_bytes)
    streaming = StreamingAnalysis(grace_us=grace_us, idle_us=idle_us, window_events=window_events,
                                  on_finished=on_finished)
    seen = False
    for chunk in run:
        seen = True
        streaming.add(chunk.events.cast(EVENT_SCHEMA))  # type: ignore[arg-type]
    if not seen:
        raise InputError("nothing parseable: no log record found")
    result = streaming.finish()
    label = name or (str(source) if isinstance(source, (str, Path)) and "\n" not in str(source) else "capture")
    return Capture(records=result.events.select(RECORD_COLUMNS), events=result.events, requests=result.requests,
                   phases=result.phases, loop=result.loop, diagnostics_info=run.diagnostics, notes=result.notes,
                   name=label, stitching=result.stitching, facts=streaming.facts)
