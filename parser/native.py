"""What the compiled extension does for the parser (``native/``, Rust, built by ``pip install`` where cargo is found;
``extension.py`` says whether it is here and on).

``scan_text`` splits a text block into records in one pass over its bytes: the lines, each record's prefix
(by the format's start regex), continuation lines folded into the message, the format's suffix cut off, and
the lines that belong to no record. ``envelope.split_text_native`` turns that into the same envelope as
``split_text`` (the polars path), which stays the reference: tests compare the two on every fixture, and
a block the scan does not take exactly as the line splitter does (carriage returns, invalid UTF-8, lines
over the length limit) gets None and goes the polars way. ``record_classes`` groups records into
``classify``'s classes, and ``distinct.distinct`` numbers a column's distinct values, each in one pass over
the columns' Arrow buffers (``classify._class_rows`` and the categorical cast are their references).
``ENVOY_DISSECTOR_NATIVE=0`` turns all of it off.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from envoy_dissector.parser import limits
from envoy_dissector.parser.envelope import CONTINUATION, MESSAGE_CONTINUES
from envoy_dissector.parser.extension import available, enabled, module
from envoy_dissector.parser.extension import frame as _frame
from envoy_dissector.parser.layouts import HEADER_RECORD_LINE
from envoy_dissector.parser.logformat import JsonFormat, TextFormat

__all__ = [
    "RecordClasses",
    "TextScan",
    "available",
    "count_newlines",
    "enabled",
    "handles",
    "last_start",
    "line_count",
    "record_classes",
    "scan_text",
]

#: Regex parts whose match depends on text after the prefix: the prefix's groups are read from the prefix
#: alone on this path, so a format holding one takes the polars path.
_LOOKS_PAST = ("$", r"\b", r"\B", r"\z")


def handles(fmt: TextFormat | JsonFormat) -> bool:
    """The scan applies to this format: a text format whose record start is anchored at the line's start."""
    return (isinstance(fmt, TextFormat) and fmt.start_plain.startswith("^")
            and not any(part in fmt.prefix for part in _LOOKS_PAST))


@dataclass(frozen=True)
class TextScan:
    #: per record: ``line_no``, ``n_lines``, ``message`` (folded, suffix cut off), ``prefix`` (the first line up
    #: to the message) and, when the format has a suffix, ``suffix``
    records: pl.DataFrame
    #: per line that belongs to no record: ``line_no``, ``raw``
    malformed: pl.DataFrame


def scan_text(parts: Sequence[tuple[bytes, int]], first_line_no: int, fmt: TextFormat) -> TextScan | None:
    """The records of ``parts`` (the bytes before each ``stop`` of ``(bytes, stop)``: whole lines in order, the
    first numbered ``first_line_no``); None: use the polars path for this block."""
    found = module().scan_text(list(parts), first_line_no, fmt.start_plain, fmt.prefix_can_be_empty,
                              fmt.suffix_plain, CONTINUATION, MESSAGE_CONTINUES, limits.max_line_bytes())
    if found is None:
        return None
    records = _frame(found, ("line_no", "n_lines", "message", "prefix", "suffix"))
    malformed = _frame(found, ("bad_line_no", "bad_raw")).rename({"bad_line_no": "line_no", "bad_raw": "raw"})
    return TextScan(records, malformed)


def last_start(data: bytes, fmt: TextFormat) -> int | None:
    """Byte offset of the last line of ``data`` that starts a record (as ``pipeline._last_start`` decides it)."""
    found: int | None = module().last_start(data, fmt.start, HEADER_RECORD_LINE, limits.max_line_bytes())
    return found



def count_newlines(data: bytes, stop: int | None = None) -> int:
    """``data[:stop].count(b"\\n")``: by memchr when the extension was built (several times faster)."""
    stop = len(data) if stop is None else stop
    if not available():
        return data.count(b"\n", 0, stop)
    found: int = module().count_newlines(data, stop)
    return found


def line_count(data: bytes) -> int:
    """Lines in a block as ``pipeline._lines_frame`` makes them (a final newline ends the last line)."""
    return count_newlines(data) + (not data.endswith(b"\n")) if data else 0


@dataclass(frozen=True)
class RecordClasses:
    #: per record: ``class`` (u32: classes numbered in order of first appearance), ``conn`` (i64) and ``stream``
    #: (u64): the ids of its id prefix, null without one (or too large for the type)
    records: pl.DataFrame
    #: per class: ``first`` (its first record), ``prefix_len`` (bytes of its id prefix, 0 without) and ``form``
    #: (the prefix's form: see ``native/src/classes.rs``)
    classes: pl.DataFrame


def record_classes(loggers: pl.Series, first_lines: pl.Series) -> RecordClasses:
    """``classify_distinct``'s record classes, (logger, id-prefix form, rest of the first line), in one pass
    (``classify._class_rows`` is the polars reference)."""
    found = module().record_classes(loggers.__arrow_c_stream__(), first_lines.__arrow_c_stream__())
    return RecordClasses(_frame(found, ("class", "conn", "stream")), _frame(found, ("first", "prefix_len", "form")))
