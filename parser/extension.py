"""The one seam between the parser and its compiled parts (``native/``, Rust, built by ``pip install`` where cargo is
found): whether the extension is here and on, and every compiled step with the choice of its Python path.

A caller asks this module and takes what it answers; nothing else looks at ``ENVOY_DISSECTOR_NATIVE`` or at the
extension. Each step either answers for both paths (``distinct``, ``count_newlines``) or answers None where the
caller's polars path must do the work (``scan_text``: the envelope, ``split_text``; ``record_classes``:
``classify._class_rows``). The polars paths stay the references: tests compare the two on every fixture, and
``ENVOY_DISSECTOR_NATIVE=0`` turns every compiled step off (``count_newlines`` keeps memchr where it is built: a
count is a count).

* ``scan_text`` splits a text block into records in one pass over its bytes: the lines, each record's prefix (by the
  format's start regex), continuation lines folded into the message, the format's suffix cut off, and the lines
  that belong to no record (``envelope.split_text_native`` reads the typed fields from it). A block the scan does
  not take exactly as the line splitter does (carriage returns, invalid UTF-8, lines over the length limit) gets
  None and goes the polars way; ``last_start`` and ``count_newlines`` cut blocks into whole records for it.
* ``header_values`` reads the values of named headers out of header dumps (``headers.header_values``).
* ``redaction_candidates`` finds the messages a redaction rule may change (``redact._candidates``).
* ``record_classes`` groups records into ``classify``'s classes, and ``distinct`` numbers a column's distinct values,
  each in one pass over the columns' Arrow buffers.
* ``loop_slices`` cuts one worker's lines into the event loop's slices (``analysis/stages/loop.py``),
  ``record_gaps`` pairs its socket events with the ready lines after them (``analysis/gap_counts.py``), and
  ``served_connections`` lists the connections a worker served during each queueing window (``loop._served_during``).
* ``asof_positions`` and ``join_positions`` give the rows an as-of lookup or a join of small frames pairs
  (``engine/asof.py``, ``engine/frames.joined``); larger frames go to polars.

This module imports only the parser's leaf modules, so that any stage may ask it.
"""
from __future__ import annotations

import functools
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from envoy_dissector.parser import limits
from envoy_dissector.parser.logformat import JsonFormat, TextFormat

if TYPE_CHECKING:  # polars, numpy and the modules that use them are imported where a step runs: `--version`
    import polars as pl  # asks ``status`` and must not pay their import (0.15 CPU-s)

    from envoy_dissector.parser.distinct import Distinct

_native: ModuleType | None
_why_missing = ""
try:
    from envoy_dissector.parser import _native  # type: ignore[attr-defined,no-redef]
except ImportError as exc:  # built without cargo: the polars paths do all the work
    _native = None
    _why_missing = str(exc)
_warned = False


def available() -> bool:
    """The extension was built and imports."""
    return _native is not None


def _turned_off() -> bool:
    return os.environ.get("ENVOY_DISSECTOR_NATIVE", "1") in ("0", "false", "no")


def enabled() -> bool:
    """Built, and not turned off (``ENVOY_DISSECTOR_NATIVE=0``). Asked where a step chooses its path, so the
    first run without the build says once, on stderr, that the slower path is taken (``warn_once``)."""
    if _native is None and not _turned_off():
        warn_once()
    return available() and not _turned_off()


def status() -> str:
    """``on``, or ``off (why)``: the line ``envoy-dissect --version`` prints after ``compiled parser:``."""
    if _native is None:
        return (f"off (not built: {_why_missing or 'no extension module'}; `pip install` builds it where cargo "
                "is found, or install a wheel that carries it)")
    if _turned_off():
        return "off (ENVOY_DISSECTOR_NATIVE=0)"
    return "on"


def warn_once() -> None:
    """One line on stderr, the first time in a process: the extension is missing, parsing takes the polars path."""
    global _warned
    if not _warned:
        _warned = True
        print(f"envoy-dissector: warning: compiled parser {status()}: parsing takes the polars path "
              "(same results, about 35 % more CPU)", file=sys.stderr)


def _module() -> ModuleType:
    assert _native is not None, "the compiled extension was not built"
    return _native


class _Column:
    """A column the extension made, as the Arrow PyCapsule interface hands it to polars."""

    def __init__(self, pair: tuple[Any, Any]) -> None:
        self._pair = pair

    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple[Any, Any]:
        return self._pair


def _series(columns: dict[str, tuple[Any, Any]], name: str) -> pl.Series:
    """The extension's column ``name`` as a Series."""
    import polars as pl

    return pl.Series(_Column(columns[name])).alias(name)


def _frame(columns: dict[str, tuple[Any, Any]], names: Sequence[str]) -> pl.DataFrame:
    """The extension's columns ``names`` (those it gave) as a frame."""
    import polars as pl

    return pl.DataFrame([_series(columns, name) for name in names if name in columns])


# --- lines and blocks ---------------------------------------------------------------------------------------------

def count_newlines(data: bytes, stop: int | None = None) -> int:
    """``data[:stop].count(b"\\n")``: by memchr when the extension was built (several times faster)."""
    stop = len(data) if stop is None else stop
    if not available():
        return data.count(b"\n", 0, stop)
    found: int = _module().count_newlines(data, stop)
    return found


def line_count(data: bytes) -> int:
    """Lines in a block as ``pipeline._lines_frame`` makes them (a final newline ends the last line)."""
    return count_newlines(data) + (not data.endswith(b"\n")) if data else 0


# --- the envelope of a text block ---------------------------------------------------------------------------------

#: Regex parts whose match depends on text after the prefix: the prefix's groups are read from the prefix
#: alone on this path, so a format holding one takes the polars path.
_LOOKS_PAST = ("$", r"\b", r"\B", r"\z")


def scans(fmt: TextFormat | JsonFormat) -> bool:
    """The compiled scan takes this format's blocks (``scan_text``, ``last_start``): it is on, and the format is a
    text format whose record start is anchored at the line's start."""
    return (isinstance(fmt, TextFormat) and fmt.start_plain.startswith("^")
            and not any(part in fmt.prefix for part in _LOOKS_PAST) and enabled())


@dataclass(frozen=True)
class TextScan:
    #: per record: ``line_no``, ``n_lines``, ``message`` (folded, suffix cut off), ``prefix`` (the first line up
    #: to the message) and, when the format has a suffix, ``suffix``
    records: pl.DataFrame
    #: per line that belongs to no record: ``line_no``, ``raw``
    malformed: pl.DataFrame


def scan_text(parts: Sequence[tuple[bytes, int]], first_line_no: int, fmt: TextFormat) -> TextScan | None:
    """The records of ``parts`` (the bytes before each ``stop`` of ``(bytes, stop)``: whole lines in order, the
    first numbered ``first_line_no``); None: the polars path takes this block (``envelope.split_text``)."""
    if not scans(fmt):
        return None
    from envoy_dissector.parser.layouts import CONTINUATION, MESSAGE_CONTINUES

    found = _module().scan_text(list(parts), first_line_no, fmt.start_plain, fmt.prefix_can_be_empty,
                                fmt.suffix_plain, CONTINUATION, MESSAGE_CONTINUES, limits.max_line_bytes())
    if found is None:
        return None
    records = _frame(found, ("line_no", "n_lines", "message", "prefix", "suffix"))
    malformed = _frame(found, ("bad_line_no", "bad_raw")).rename({"bad_line_no": "line_no", "bad_raw": "raw"})
    return TextScan(records, malformed)


def last_start(data: bytes, fmt: TextFormat) -> int | None:
    """Byte offset of the last line of ``data`` that starts a record (as ``pipeline._last_start`` decides it), for
    a format the scan takes (``scans``)."""
    from envoy_dissector.parser.layouts import HEADER_RECORD_LINE

    found: int | None = _module().last_start(data, fmt.start, HEADER_RECORD_LINE, limits.max_line_bytes())
    return found


# --- classes and distinct values ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class RecordClasses:
    #: per record: ``class`` (u32: classes numbered in order of first appearance), ``conn`` (i64) and ``stream``
    #: (u64): the ids of its id prefix, null without one (or too large for the type)
    records: pl.DataFrame
    #: per class: ``first`` (its first record), ``prefix_len`` (bytes of its id prefix, 0 without) and ``form``
    #: (the prefix's form: see ``native/src/classes.rs``)
    classes: pl.DataFrame


def record_classes(loggers: pl.Series, first_lines: pl.Series) -> RecordClasses | None:
    """``classify_distinct``'s record classes, (logger, id-prefix form, rest of the first line), in one compiled
    pass; None: the polars path takes them (``classify._class_rows``, the reference)."""
    import polars as pl

    if not enabled() or loggers.dtype != pl.String or first_lines.dtype != pl.String:
        return None
    found = _module().record_classes(loggers.__arrow_c_stream__(), first_lines.__arrow_c_stream__())
    return RecordClasses(_frame(found, ("class", "conn", "stream")), _frame(found, ("first", "prefix_len", "form")))


def distinct(values: pl.Series, *, from_byte: int = 0, head_chars: int | None = None) -> Distinct:
    """Group rows by value (text, or bytes that are valid UTF-8); nulls form one group of their own (the last).
    ``from_byte``: by each value's bytes from that offset on; ``head_chars``: by each text's first characters
    (``str.slice(0, head_chars)``): the same groups as ``distinct`` of the sliced column, without making it.

    One compiled hashing pass where the extension is on, else a categorical cast (``distinct_by_categories``):
    the same groups, numbered alike."""
    import polars as pl

    from envoy_dissector.parser.distinct import Distinct, distinct_by_categories

    if from_byte and head_chars is not None:
        raise ValueError("from_byte or head_chars, not both")
    if enabled() and values.dtype in (pl.String, pl.Binary) and (head_chars is None or values.dtype == pl.String):
        found = _module().distinct(values.__arrow_c_stream__(), from_byte, head_chars)
        return Distinct(_series(found, "first"), _series(found, "index"))
    if from_byte:
        values = values.cast(pl.Binary).bin.slice(from_byte)
    if head_chars is not None:
        values = values.str.slice(0, head_chars)
    return distinct_by_categories(values)


# --- header dumps -------------------------------------------------------------------------------------------------

def header_values(messages: pl.Series, names: Sequence[str]) -> pl.DataFrame | None:
    """Per message, the value of its first dump line ``'NAME', 'VALUE'`` of each of ``names`` (names without a
    quote; a column each, named by the name, null: none), in one compiled pass; None: the polars path reads them
    (``headers.header_values_by_polars``, the reference)."""
    import polars as pl

    if not enabled() or messages.dtype != pl.String:
        return None
    found = _module().header_values(messages.__arrow_c_stream__(), list(names))
    return _frame(found, names)


# --- redaction ----------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=8)
def _redaction_candidates(marks: str, words: tuple[str, ...], token: str) -> Any:
    return _module().RedactionCandidates(marks, list(words), token)


def redaction_candidates(messages: pl.Series, multiline: pl.Series | None, *, marks: str, words: Sequence[str],
                         token: str) -> pl.Series | None:
    """The rows (u32, in order) of ``messages`` a redaction rule may change, as ``redact._candidates_by_polars``
    finds them, in one compiled pass: a message that may hold a dump (a newline, on a row ``multiline`` marks; None:
    every row) or matches ``marks``, and holds one of ``words`` (ASCII case folded), matches ``token`` or holds a
    character beyond ASCII. None: the polars path finds them (the reference)."""
    import polars as pl

    if not enabled() or messages.dtype != pl.String or (multiline is not None and multiline.dtype != pl.Boolean):
        return None
    found = _redaction_candidates(marks, tuple(words), token).rows(
        messages.__arrow_c_stream__(), None if multiline is None else multiline.__arrow_c_stream__())
    return pl.Series(_Column(found))


# --- a worker's event-loop slices and record gaps ---------------------------------------------------------------------

#: A kind's part in ``loop_slices``' and ``record_gaps``' rules (``native/src/slices.rs``), a bit each.
SOCKET_EVENT_BIT, TIMER_RESUME_BIT, WAKE_BIT, READY_BIT = 1, 2, 4, 8


def _compiled_lines(ts_us: pl.Series, kinds: pl.Series) -> bool:
    """Whether the compiled passes over a worker's lines take these columns: on, times in i64 µs and kinds an Enum,
    neither with a null (the polars path does the rest)."""
    import polars as pl

    return (enabled() and ts_us.dtype == pl.Int64 and isinstance(kinds.dtype, pl.Enum) and not ts_us.null_count()
            and not kinds.null_count())


def _bits_per_code(kinds: pl.Series, bits: Mapping[str, int]) -> list[int]:
    """Per code of the ``kinds`` Enum, the bits ``bits`` gives its category (0 for the others)."""
    return list(_bits_of(tuple(kinds.dtype.categories.to_list()), tuple(bits.items())))  # type: ignore[attr-defined]


@functools.lru_cache(maxsize=8)
def _bits_of(categories: tuple[str, ...], bits: tuple[tuple[str, int], ...]) -> tuple[int, ...]:
    by_name = dict(bits)
    return tuple(by_name.get(name, 0) for name in categories)


def loop_slices(ts_us: pl.Series, kinds: pl.Series, conn_ids: pl.Series, kind_bits: Mapping[str, int], idle_gap_us: int,
                unattributed_idle_us: int) -> pl.DataFrame | None:
    """Per slice of one worker's lines (in time order), as ``loop._thread_slices`` cuts them: ``first_row``,
    ``last_row`` (u32), ``opens`` (its first line opened it; null: unknown) and ``timer`` (a timer did), in one
    compiled pass. ``kind_bits``: a kind's bits by its name (``SOCKET_EVENT_BIT`` …; others none). None: the
    polars path cuts them (``loop._thread_slices_by_polars``, the reference): off, or a time or kind is null."""
    if not _compiled_lines(ts_us, kinds):
        return None
    found = _module().loop_slices(ts_us.__arrow_c_stream__(), kinds.to_physical().__arrow_c_stream__(),
                                  conn_ids.__arrow_c_stream__(), _bits_per_code(kinds, kind_bits), idle_gap_us,
                                  unattributed_idle_us)
    return _frame(found, ("first_row", "last_row", "opens", "timer"))


def served_connections(first: pl.Series, last: pl.Series, downstream: pl.Series, upstream: pl.Series,
                       conns: pl.Series) -> pl.Series | None:
    """Per queueing window, the other connections its worker served in its range of slices ``first``..``last`` (rows
    of ``conns``, the worker's slices' connections in time order), each once in the order served (``List(Int64)``),
    as ``loop._served_by_polars`` lists them, in one compiled pass; None: the polars path lists them (the
    reference): off, or a column is not Int64."""
    import polars as pl

    if not enabled() or any(c.dtype != pl.Int64 for c in (first, last, downstream, upstream, conns)):
        return None
    found = _module().served_connections(*(c.__arrow_c_stream__() for c in (first, last, downstream, upstream,
                                                                            conns)))
    return pl.Series(_Column(found))


# --- as-of lookups ---------------------------------------------------------------------------------------------------

#: Integer types whose values an ``i64`` holds in order (a time compared by the lookup)
_ORDERED_INTEGERS = ("Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32")
#: The most keys the compiled lookups and joins match on (``keys::MAX_KEYS``)
MAX_KEYS = 4


def asof_positions(left_time: pl.Series, left_keys: Sequence[pl.Series], right_time: pl.Series,
                   right_keys: Sequence[pl.Series], *, forward: bool, tolerance: int | None) -> pl.Series | None:
    """Per left row, the position of its as-of match among the lookup's rows (``right_*``: none null, its times in
    order, rows of one time in the lookup's order): the last of the same keys at or before the time, or (``forward``)
    the first at or after it, within ``tolerance``; null where there is none or the row's time or a key is null.
    One compiled pass (``UInt32``); None: ``asof._asof_by_polars`` looks them up (the reference): off, or a time is
    not an integer type an ``i64`` holds in order, a key is not an integer or text type or differs in type
    between the sides, or the tolerance is negative."""
    import polars as pl

    if not enabled() or (tolerance is not None and tolerance < 0):
        return None
    if left_time.dtype != right_time.dtype or str(left_time.dtype) not in _ORDERED_INTEGERS:
        return None
    if not _keys_paired(left_keys, right_keys):
        return None
    found = _module().asof_positions(left_time.__arrow_c_stream__(), [k.__arrow_c_stream__() for k in left_keys],
                                     right_time.__arrow_c_stream__(), [k.__arrow_c_stream__() for k in right_keys],
                                     forward, tolerance)
    return pl.Series(_Column(found))


def _keys_paired(left_keys: Sequence[pl.Series], right_keys: Sequence[pl.Series]) -> bool:
    """Whether the compiled lookups and joins take these keys: as many on both sides, at most ``MAX_KEYS``,
    each an integer or text column of one type on both sides."""
    import polars as pl

    return len(left_keys) == len(right_keys) <= MAX_KEYS and all(
        mine.dtype == theirs.dtype and (mine.dtype.is_integer() or mine.dtype == pl.String)
        for mine, theirs in zip(left_keys, right_keys))


#: The joins the compiled pass makes
COMPILED_JOINS = ("inner", "left", "semi", "anti")


def join_positions(left_keys: Sequence[pl.Series], right_keys: Sequence[pl.Series],
                   how: str) -> tuple[pl.Series | None, pl.Series | None] | None:
    """Two frames' rows joined on their keys, as ``join(..., maintain_order="left")`` pairs them (a null key matches
    nothing): each output row's left row (None: every left row once, in order) and, for ``inner`` and ``left``,
    its right row (null: none matched; None for ``semi`` and ``anti``). One compiled pass (``UInt32`` positions);
    None: polars joins them (``frames.joined``, the reference): off, a join the pass does not make, no key, or keys
    the pass does not take (``_keys_paired``)."""

    if not enabled() or how not in COMPILED_JOINS or not left_keys or not _keys_paired(left_keys, right_keys):
        return None
    found = _module().join_positions([k.__arrow_c_stream__() for k in left_keys],
                                     [k.__arrow_c_stream__() for k in right_keys], how)
    rows = {name: _series(found, name) for name in ("left", "right") if name in found}
    return rows.get("left"), rows.get("right")


def record_gaps(ts_us: pl.Series, kinds: pl.Series, kind_bits: Mapping[str, int], carried: int,
                idle_class_us: tuple[int, int], classes: tuple[int, int, int]) -> pl.DataFrame | None:
    """Per ``socket event`` of one worker's lines (in time order; from row ``carried`` on) that a ready line
    (``READY_BIT``) follows: ``gap`` (µs to it, i64) and ``idle`` (i8: ``classes`` warm, cooling, cold by the µs
    since the line before, bounded by ``idle_class_us``; cold without one), in one compiled pass. None: the polars
    path pairs them (``gap_counts._back_to_back_by_polars``, the reference): off, or a time or kind is null."""
    if not _compiled_lines(ts_us, kinds):
        return None
    found = _module().record_gaps(ts_us.__arrow_c_stream__(), kinds.to_physical().__arrow_c_stream__(),
                                  _bits_per_code(kinds, kind_bits), carried, *idle_class_us,
                                  list(classes))
    return _frame(found, ("gap", "idle"))
