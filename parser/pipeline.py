"""The parser pipeline: sources -> lines -> records -> events, chunk by chunk, with diagnostics.

``parse()`` returns whole frames; ``iter_parse()`` returns a ``ParseRun`` whose chunks stream
multi-gigabyte captures through bounded memory and which owns the run's diagnostics. The parser
does no I/O besides reading its sources: the store of the grammar's verdicts per shape is the
caller's (``shapes=``; the CLI and the dashboard pass the on-disk ``shape_cache``).
"""
from __future__ import annotations

import os
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import polars as pl

from envoy_dissector.parser import extension, limits
from envoy_dissector.parser.classify import Classifier, ShapeRule, classify
from envoy_dissector.parser.constant import sole_string
from envoy_dissector.parser.detect import Found, detect, malformed_hints
from envoy_dissector.parser.envelope import Envelope, single_origin, split_envelope, split_text_native
from envoy_dissector.parser.errors import InputError
from envoy_dissector.parser.foreign import UNRECOGNISED, holds_foreign, json_lines_foreign, kinds_of, set_aside
from envoy_dissector.parser.formats import Detection, custom_detection, detect_format, detection_by_id
from envoy_dissector.parser.grammar import preload as preload_grammar
from envoy_dissector.parser.headers import header_columns
from envoy_dissector.parser.layouts import HEADER_RECORD_LINE
from envoy_dissector.parser.logformat import JsonFormat, TextFormat
from envoy_dissector.parser.redact import RedactOption, redact_text
from envoy_dissector.parser.repair import read_damaged
from envoy_dissector.parser.sanity import Sanity
from envoy_dissector.parser.schema import EVENT_SCHEMA, RECORD_COLUMNS
from envoy_dissector.parser.sources import Block, Source, expand, read_blocks, text_source
from envoy_dissector.parser.wrappers import AnyWrapper, unwrap

Progress = Callable[[int], None]  # called with bytes consumed since the last call
StopReading = Callable[[int, int], bool]  # (first, latest record time seen, epoch µs) -> stop reading the source
#: a chunk's events and malformed lines, the lines the worker cut to the length limit, and the damaged lines it
#: read tolerantly (``repair.py``)
_Result = tuple[tuple[pl.DataFrame, pl.DataFrame], int, int]
MALFORMED_EXAMPLES = 5
MALFORMED_SAMPLE = 200
#: Chunks in flight. Two more than the cores: polars ops release the GIL, and the block reader and the
#: Python between polars calls leave gaps the extra threads fill (2 cores: 3 -> 4 workers was +10 %).
#: Each holds a block's frames (~180 MB at 16 MiB), so the cap keeps peak RSS near 1 GB on any machine.
WORKERS = min(4, (os.cpu_count() or 1) + 2)


@dataclass
class Diagnostics:
    """How every input line was accounted for. ``lines_read == lines_in_records + lines_malformed``; the lines in
    no record are counted again by kind in ``lines_aside_by_kind`` (foreign kinds of ``foreign.py``,
    ``unrecognised``, ``oversize``, ``unread``), whose counts add up to ``lines_malformed``."""

    format: str = ""
    format_label: str = ""
    log_format: str = ""
    wrappers: list[str] = field(default_factory=list)
    lines_read: int = 0
    lines_in_records: int = 0
    lines_malformed: int = 0
    #: lines in no record by kind: other programs' lines, a paste's, or unrecognised (sum: lines_malformed)
    lines_aside_by_kind: Counter[str] = field(default_factory=Counter)
    #: damaged lines (a tab or a leading `[` lost) read tolerantly as records (counted in lines_in_records)
    lines_repaired: int = 0
    records: int = 0
    records_unknown: int = 0
    events_by_kind: Counter[str] = field(default_factory=Counter)
    by_origin: dict[str, dict[str, int]] = field(default_factory=dict)
    #: the format detected in each input (multi-file runs may mix formats)
    format_by_source: dict[str, str] = field(default_factory=dict)
    malformed_examples: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    shapes: int = 0
    grammar_calls: int = 0
    #: records the fast path handed to the grammar one by one (values unlike their shape's representative)
    fallback_lines: int = 0
    #: raw text of the first malformed lines (for hints; not part of the summary)
    malformed_sample: list[str] = field(default_factory=list, repr=False)
    sanity: Sanity = field(default_factory=Sanity, repr=False)
    #: lines longer than limits.max_line_bytes(), replaced by a marker (counted malformed)
    lines_oversize: int = 0

    def warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": self.format, "format_label": self.format_label, "log_format": self.log_format,
            "wrappers": list(self.wrappers), "lines_read": self.lines_read,
            "lines_in_records": self.lines_in_records, "lines_malformed": self.lines_malformed,
            "lines_aside_by_kind": dict(sorted(self.lines_aside_by_kind.items())),
            "lines_repaired": self.lines_repaired,
            "records": self.records, "records_unknown": self.records_unknown,
            "events_by_kind": dict(sorted(self.events_by_kind.items())),
            # (sorted, and each origin's counts too: origins and their malformed lines are met in an order that
            # depends on the blocks and on polars' group order)
            "by_origin": {origin: dict(sorted(counts.items())) for origin, counts in sorted(self.by_origin.items())},
            "format_by_source": dict(self.format_by_source),
            "malformed_examples": list(self.malformed_examples), "warnings": list(self.warnings),
            "lines_oversize": self.lines_oversize, "shapes": self.shapes, "grammar_calls": self.grammar_calls,
            "fallback_lines": self.fallback_lines,
        }


class ShapeStore(Protocol):
    """Where the grammar's verdicts per message shape live between runs. The module ``shape_cache`` is one
    (a file under ~/.cache); without a store, each run starts from an empty table and keeps it in memory."""

    def load(self) -> dict[str, ShapeRule]: ...

    def save(self, rules: dict[str, ShapeRule]) -> None: ...


class ParseRun:
    """One parse: iterate it (once) for its chunks, in input order; ``diagnostics`` belongs to the run and is
    complete once every chunk has been consumed."""

    def __init__(self, chunks: Callable[[Diagnostics], Iterator[Chunk]]) -> None:
        self.diagnostics = Diagnostics()
        self._chunks = chunks(self.diagnostics)

    def __iter__(self) -> Iterator[Chunk]:
        return self._chunks


@dataclass(frozen=True)
class Chunk:
    """Events of one slice of one source (records are ``events.select_seq(RECORD_COLUMNS)``)."""

    origin: str
    events: pl.DataFrame
    #: the input it was read from (inputs are read one after another: a new name means the last one ended)
    source: str = ""
    #: the source went quiet after this chunk and nothing read is held back (``iter_parse(flush_idle=True)``)
    settled: bool = False


_UNUSED_BYTE = b"\x1f"  # the CSV reader's separator: a block holding it is split the slow way


def _lines_frame(block: Block, first_line_no: int = 1) -> pl.DataFrame:
    """One row per physical line (a final newline ends the last line; one trailing ``\\r`` is dropped).

    polars' CSV reader with a separator absent from the block splits lines natively (several times
    faster than ``str.split``, and it decodes UTF-8 as Python's ``errors="replace"`` does); it yields
    null for an empty line and strips a ``\\r`` before ``\\n`` or the end.
    """
    data = block.data
    if _UNUSED_BYTE not in data and data:
        raw = pl.read_csv(data, has_header=False, separator=_UNUSED_BYTE.decode(), quote_char=None,
                          new_columns=["raw"], schema={"raw": pl.String()}, comment_prefix=None,
                          encoding="utf8-lossy")["raw"].fill_null("")
    else:
        text = block.text
        body = text.removesuffix("\n")
        raw = pl.Series("raw", [body]).str.split("\n").explode().str.strip_suffix("\r")
    df = raw.alias("raw").to_frame()
    return df.with_row_index("line_no", offset=first_line_no).with_columns_seq(pl.col("line_no").cast(pl.Int64))


#: Lines of a source's first block that format detection reads.
DETECT_SAMPLE_LINES = 2000


def _detect_in_blocks(block: Block, blocks: Iterator[Block], first_line_no: int, source: Source, format: str,
                      log_format: str | None) -> tuple[Found | InputError, Block]:
    """Wrappers and format from the first block's first lines (only the sample's lines are split: the scan, if the
    format takes it, splits the block itself). A first block too small to hold the whole sample that no format
    reads is joined with the next ones until it does (a sidecar's log may start with hundreds of pilot-agent lines
    before Envoy's first). Returns the detection, or the error when no format reads the sample, and the block as
    far as it was read."""
    while True:
        head = _head_block(block, DETECT_SAMPLE_LINES)
        sample = _bound_lines(_lines_frame(head, first_line_no), len(head.data))[0]["raw"].to_list()
        try:
            return _detect(sample, source, format, log_format), block
        except InputError as exc:
            short = head is block and block.data.endswith(b"\n")
            more = next(blocks, None) if short else None
            if more is None:
                return exc, block
            block = Block(block.origin, block.data + more.data, more.bytes_read, block.oversize + more.oversize)


def _head_block(block: Block, lines: int) -> Block:
    """The block's first ``lines`` lines (all of it when it holds no more)."""
    at = -1
    for _ in range(lines):
        at = block.data.find(b"\n", at + 1)
        if at < 0:
            return block
    return Block(block.origin, block.data[:at + 1], block.bytes_read, block.oversize)


def _bound_lines(lines: pl.DataFrame, size: int) -> tuple[pl.DataFrame, int]:
    """Lines longer than the limit become a marker line, and how many did (the reader already did so for
    lines longer than what it holds: ``Block.oversize``); both are counted in a warning. See limits.py."""
    limit = limits.max_line_bytes()
    if limit and size > limit:
        long = lines.select_seq(pl.col("raw").str.len_bytes() > limit).to_series()
        if long.any():
            rows = long.arg_true()
            sizes = lines["raw"].gather(rows).str.len_bytes().to_list()
            marks = pl.Series([limits.oversize_marker(n, limit).decode() for n in sizes], dtype=pl.String)
            return lines.with_columns_seq(lines["raw"].scatter(rows, marks)), len(sizes)
    return lines, 0


@dataclass
class _TimeSeen:
    first: int | None = None
    last: int | None = None

    def add(self, events: pl.DataFrame) -> None:
        low, high = events.select_seq(low=pl.col("ts_us").min(), high=pl.col("ts_us").max()).row(0)
        if low is not None:
            self.first = low if self.first is None else min(self.first, low)
            self.last = high if self.last is None else max(self.last, high)


@dataclass
class _SourceState:
    detection: Detection
    wrappers: tuple[AnyWrapper, ...]
    carry: pl.DataFrame | None = None
    #: blocks go to the compiled scan (``extension.scan_text``) as bytes; the last record's lines are held as bytes
    native: bool = False
    carry_bytes: bytes = b""
    carry_line_no: int = 0


def _choose_format(sample: list[str], source: Source, format: str, log_format: str | None) -> Detection:
    if log_format:
        return custom_detection(log_format, sample)
    if format and format != "auto":
        if format == "custom":
            raise InputError("--format custom needs --log-format STRING")
        detection_by_id(format)  # validates the id
        return detect_format(sample, source=source.name, only=format)
    return detect_format(sample, source=source.name)


def _detect(sample: list[str], source: Source, format: str, log_format: str | None) -> Found:
    """Wrappers and the envelope format under them, decided together (``parser/detect.py``).

    A log format may itself start with an RFC 3339 time and a space (``%Y-%m-%dT%T.%fZ %l ...``),
    which looks like ``kubectl logs --timestamps``: the wrapper is kept only if the format then
    matches more lines than without it.
    """
    return detect(sample, lambda lines: _choose_format(lines, source, format, log_format), source=source.name)


def _count_malformed(malformed: pl.DataFrame, diag: Diagnostics, lines: int | None = None,
                     redact: RedactOption = True, kind: str | None = None) -> None:
    """Count malformed lines (``lines``: how many, when ``malformed`` holds one example for a whole file, of
    ``kind``); each by kind too (its ``kind`` column, else ``foreign.kinds_of`` its text)."""
    if malformed.height == 0:
        return
    diag.lines_malformed += malformed.height if lines is None else lines
    if lines is not None:
        diag.lines_aside_by_kind[kind or UNRECOGNISED] += lines
    else:
        kinds = malformed["kind"] if "kind" in malformed.columns else kinds_of(malformed["raw"])
        for name, n in kinds.value_counts().iter_rows():
            diag.lines_aside_by_kind[str(name)] += n
        malformed = malformed.select_seq("line_no", "origin", "raw")
    counts = malformed.group_by("origin").len().iter_rows() if lines is None else [(malformed["origin"][0], lines)]
    for origin, n in counts:
        diag.by_origin.setdefault(origin, {}).setdefault("lines_malformed", 0)
        diag.by_origin[origin]["lines_malformed"] += n
    room = MALFORMED_EXAMPLES - len(diag.malformed_examples)
    for line_no, origin, raw in malformed.head(max(room, 0)).iter_rows():
        diag.malformed_examples.append(f"{origin}:{line_no}: {(redact_text(raw, redact) if redact else raw)[:160]}")
    room = MALFORMED_SAMPLE - len(diag.malformed_sample)
    if room > 0 and lines is None:  # a skipped file has its own warning
        diag.malformed_sample.extend(malformed["raw"].head(room).to_list())


def _account(events: pl.DataFrame, diag: Diagnostics) -> None:
    diag.records += events.height
    diag.lines_in_records += int(events["n_lines"].sum() or 0)
    per_origin: dict[Any, list[int]] = {}
    for origin, kind, n, lines in _kind_counts(events):
        diag.events_by_kind[str(kind)] += n
        counts = per_origin.setdefault(origin, [0, 0, 0])
        counts[0] += n
        counts[1] += n if kind == "unknown" else 0
        counts[2] += lines
    diag.records_unknown = diag.events_by_kind.get("unknown", 0)
    for origin, (n, unknown, lines) in per_origin.items():
        slot = diag.by_origin.setdefault(origin, {})
        slot["records"] = slot.get("records", 0) + n
        slot["records_unknown"] = slot.get("records_unknown", 0) + unknown
        slot["lines_in_records"] = slot.get("lines_in_records", 0) + lines


def _kind_counts(events: pl.DataFrame) -> list[tuple[Any, Any, int, int]]:
    """(origin, kind, records, lines) per origin and kind of a chunk's events.

    A chunk of one origin (most) is counted by its kinds' codes in numpy on this thread: a ``group_by`` hands
    the work to polars' pool and waits for it behind the window steps' queries (0.6 s of the intake's wall on
    1 GB for 0.04 CPU-s of work, bench/README.md 2026-11-29, twenty-second session).
    """
    kinds, origin = events["kind"], sole_string(events["origin"])
    if origin is None or not isinstance(kinds.dtype, pl.Enum) or kinds.null_count() or events["n_lines"].null_count():
        # (one group_by for the kinds and the origins: a chunk's fixed cost, ~0.2 ms a group_by on a small block)
        return list(events.group_by("origin", "kind").agg(n=pl.len(), lines=pl.col("n_lines").sum()).iter_rows())
    import numpy as np

    names = kinds.dtype.categories.to_list()
    codes = kinds.to_physical().to_numpy()
    n = np.bincount(codes, minlength=len(names))
    lines = np.bincount(codes, weights=events["n_lines"].to_numpy(), minlength=len(names))
    return [(origin, names[code], int(n[code]), int(lines[code])) for code in np.flatnonzero(n)]


def _split_carry(lines: pl.DataFrame, fmt: TextFormat | JsonFormat,
                 max_hold: int = 10_000) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Hold back each origin's last record: its continuation lines may be in the next block.

    One origin: the tail from its last record start. Several (interleaved pods): normally a
    whole tail is held, from the latest position at or before the earliest of those last
    records at which no record of any origin straddles the cut. Records then come out whole
    and in input order whatever the block size. If that tail would exceed ``max_hold`` lines
    (an origin that went quiet long ago), only each origin's last record is held: memory stays
    bounded, and that record is emitted after later lines of other origins.
    """
    if isinstance(fmt, JsonFormat) or lines.height == 0:
        return lines, lines.head(0)
    if single_origin(lines):
        cut = _last_start(lines, fmt)
        return (lines, lines.head(0)) if cut is None else (lines.head(cut), lines.slice(cut))
    columns = lines.columns
    starts = lines.with_columns_seq(is_start__=pl.col("raw").str.contains(fmt.start)).with_row_index("pos__")
    starts = starts.with_columns_seq(rid=pl.col("is_start__").cast(pl.Int64).cum_sum().over("origin"))
    starts = starts.with_columns_seq(last=pl.col("rid") == pl.col("rid").max().over("origin"))
    held = starts.filter(pl.col("last") & (pl.col("rid") > 0) & pl.col("is_start__"))
    if held.height == 0:
        return lines, lines.head(0)
    first_held = int(held["pos__"].min())  # type: ignore[arg-type]
    # where each line's record starts; a cut at c is clean when no line at or after c starts before c
    begin = pl.when(pl.col("rid") > 0).then(pl.col("pos__").first().over("origin", "rid")).otherwise(pl.col("pos__"))
    clean = starts.select_seq(pos=pl.col("pos__"), ok=begin.reverse().cum_min().reverse() == pl.col("pos__"))
    cut = int(clean.filter(pl.col("ok") & (pl.col("pos") <= first_held))["pos"].max())  # type: ignore[arg-type]
    if starts.height - cut <= max_hold:
        return lines.head(cut), lines.slice(cut)
    last = pl.col("last") & (pl.col("rid") > 0)
    return starts.filter(~last).select_seq(columns), starts.filter(last).select_seq(columns)


def _last_start(lines: pl.DataFrame, fmt: TextFormat, window: int = 4096) -> int | None:
    """Position of the last record start, looking at a growing tail only (None: no start at all)."""
    n = lines.height
    while True:
        lo = max(0, n - window)
        tail = lines["raw"].slice(lo)
        # a one-header-per-record dump (Envoy <= 1.8) stays in the chunk of the record it folds into
        found = (tail.str.contains(fmt.start) & ~tail.str.contains(HEADER_RECORD_LINE)).arg_true()
        if found.len():
            return lo + int(found[-1])
        if lo == 0:
            return None
        window *= 4


def iter_parse(inputs: str | Path | Sequence[str | Path] | Source | Sequence[Source], *, format: str = "auto",
               log_format: str | None = None, redact: RedactOption = True, fast: bool | None = None,
               shapes: ShapeStore | None = None, progress: Progress | None = None,
               block_bytes: int | None = None, workers: int = WORKERS,
               stop_reading: StopReading | None = None, columns: Sequence[str] | None = None,
               flush_idle: bool = False) -> ParseRun:
    """Stream events chunk by chunk, in input order; the returned run's ``diagnostics`` fill as it goes.

    Blocks are split into lines and cut at record boundaries in order; the heavy
    work (envelope, grammar, fields) runs on ``workers`` threads (polars releases the GIL).
    ``shapes`` keeps the grammar's verdicts per shape between runs (default: this run only).
    ``stop_reading(first_ts_us, latest_ts_us)`` (e.g. past ``--until``) ends the reading of a source
    early: an endless stream stops. ``columns``: the event columns the caller reads (default: all of
    ``EVENT_COLUMNS``); the others are not computed where that saves work (the streaming analysis reads 28).
    ``flush_idle`` (follow mode): when a live stream goes quiet, its held last record and the blocks in flight
    are handed on at once, the last chunk ``settled``; a record whose continuation lines come after the pause
    is then cut (its late lines counted malformed).
    """
    keep = None if columns is None else frozenset(columns)
    return ParseRun(lambda diag: _chunks(inputs, diag, format=format, log_format=log_format, redact=redact,
                                         fast=fast, shapes=shapes, progress=progress, block_bytes=block_bytes,
                                         workers=workers, stop_reading=stop_reading, columns=keep,
                                         flush_idle=flush_idle))


def _chunks(inputs: str | Path | Sequence[str | Path] | Source | Sequence[Source], diag: Diagnostics, *,
            format: str, log_format: str | None, redact: RedactOption, fast: bool | None,
            shapes: ShapeStore | None, progress: Progress | None, block_bytes: int | None, workers: int,
            stop_reading: StopReading | None = None, columns: frozenset[str] | None = None,
            flush_idle: bool = False) -> Iterator[Chunk]:
    sources = _as_sources(inputs)
    preload_grammar()
    classifier = Classifier(rules=shapes.load() if shapes is not None else {})
    formats_seen: Counter[str] = Counter()
    pending: deque[Future[_Result]] = deque()
    pending_sources: deque[str] = deque()  # (each pending block's input, for its chunks)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        seen = _TimeSeen()

        def collect() -> Iterator[Chunk]:
            # (the oldest block is handed on as soon as it is parsed, not only when the next one would be one too many
            # in flight: the analysis starts on the first chunk while the reader is still submitting blocks; 200 MB
            # 2.11-2.18 -> 1.94-1.96 s)
            while len(pending) > max(1, workers) or (pending and pending[0].done()):
                for chunk in _finish_chunk(pending.popleft().result(), diag, redact, pending_sources.popleft()):
                    seen.add(chunk.events)
                    yield chunk
                if not pending:
                    break

        def submit(lines: pl.DataFrame, state: _SourceState) -> Iterator[Chunk]:
            pending_sources.append(source.name)
            pending.append(pool.submit(_events_for, lines, state.detection.compiled, classifier, redact, fast,
                                       columns))
            yield from collect()

        def submit_bytes(parts: list[tuple[bytes, int]], first_line_no: int, origin: str,
                         state: _SourceState) -> Iterator[Chunk]:
            fmt = state.detection.compiled
            assert isinstance(fmt, TextFormat)
            pending_sources.append(source.name)
            pending.append(pool.submit(_events_for_bytes, parts, first_line_no, origin, fmt, classifier, redact,
                                       fast, columns))
            yield from collect()

        def native_block(block: Block, line_no: int, state: _SourceState) -> Iterator[Chunk]:
            """Submit the block's lines up to its last record start (with the lines held from the block
            before); hold the rest, as ``_split_carry`` does for one origin."""
            fmt = state.detection.compiled
            assert isinstance(fmt, TextFormat)
            data = block.data
            cut = extension.last_start(data, fmt)
            first = state.carry_line_no if state.carry_bytes else line_no
            if cut is None:  # no record starts here: the lines continue the held record (if any)
                if state.carry_bytes:
                    state.carry_bytes += data
                    return
                cut = len(data)
            parts = [(part, stop) for part, stop in ((state.carry_bytes, len(state.carry_bytes)), (data, cut)) if stop]
            state.carry_bytes, state.carry_line_no = data[cut:], line_no + extension.count_newlines(data, cut)
            if parts:  # (nothing before the block's first line when it is the last record's start)
                yield from submit_bytes(parts, first, block.origin, state)

        def settle(state: _SourceState) -> Iterator[Chunk]:
            """The source went quiet (``flush_idle``): the held record and every block in flight, handed on now."""
            out: list[Chunk] = []
            if state.carry is not None and state.carry.height:
                out += submit(state.carry, state)
                state.carry = None
            if state.carry_bytes:
                out += submit_bytes([(state.carry_bytes, len(state.carry_bytes))], state.carry_line_no,
                                    source.name, state)
                state.carry_bytes = b""
            while pending:
                out += _finish_chunk(pending.popleft().result(), diag, redact, pending_sources.popleft())
            for chunk in out:
                seen.add(chunk.events)
            if out:
                out[-1] = replace(out[-1], settled=True)
            yield from out

        skipped: list[InputError] = []
        for source in sources:
            state: _SourceState | None = None
            last_bytes = 0
            next_line_no = 1
            kwargs = {"block_bytes": block_bytes} if block_bytes else {}
            blocks = read_blocks(source, **kwargs)
            try:
                for block in blocks:
                    if progress is not None:
                        progress(block.bytes_read - last_bytes)
                        last_bytes = block.bytes_read
                    if state is None:
                        if b"\r\n" in block.data[:1 << 20]:
                            _note_wrapper(diag, "crlf")
                        found, block = _detect_in_blocks(block, blocks, next_line_no, source, format, log_format)
                        if isinstance(found, InputError):  # the block was read: its lines count (as malformed, below)
                            lines, oversize = _bound_lines(_lines_frame(block, next_line_no), len(block.data))
                            next_line_no += lines.height
                            diag.lines_read += lines.height
                            diag.lines_oversize += block.oversize + oversize
                            raise found
                        state = _SourceState(found.detection, found.wrappers)
                        state.native = not found.wrappers and extension.scans(found.detection.compiled)
                        _note_detection(diag, found.detection, found.wrapper_ids)
                        formats_seen[found.detection.format_id] += 1
                        diag.format_by_source[source.name] = found.detection.format_id
                    diag.lines_oversize += block.oversize
                    if state.native:
                        count = extension.line_count(block.data)
                        diag.lines_read += count
                        yield from native_block(block, next_line_no, state)
                        next_line_no += count
                    else:
                        lines, oversize = _bound_lines(_lines_frame(block, next_line_no), len(block.data))
                        diag.lines_oversize += oversize
                        next_line_no += lines.height
                        diag.lines_read += lines.height
                        lines = unwrap(lines, state.wrappers, source.name)
                        max_hold = max(lines.height, 10_000)
                        if state.carry is not None and state.carry.height:
                            lines = pl.concat([state.carry, lines], how="vertical_relaxed")
                        lines, state.carry = _split_carry(lines, state.detection.compiled, max_hold)
                        if lines.height:
                            yield from submit(lines, state)
                    if flush_idle and block.idle:
                        yield from settle(state)
                    if (stop_reading is not None and seen.first is not None and seen.last is not None
                            and stop_reading(seen.first, seen.last)):
                        diag.warn(f"{source.name}: stopped reading after line {next_line_no - 1}: past the time "
                                  "asked for (--until)")
                        break
            except InputError as exc:  # FormatError too
                if len(sources) == 1:
                    raise
                skipped.append(exc)
                if state is None:  # nothing of this file became records: its lines are malformed
                    unread = next_line_no - 1 + _count_remaining_lines(blocks, diag)
                    if unread:
                        example = pl.DataFrame({"line_no": [exc.line or 1], "origin": [source.name],
                                                "raw": [exc.found if exc.found is not None else "(not read)"]})
                        _count_malformed(example, diag, lines=unread, redact=redact, kind="unread")
                    diag.warn(f"skipped a file: {exc}")
                else:
                    diag.warn(f"stopped reading {source.name} at line {next_line_no}: {exc}")
            if state is not None and state.carry is not None and state.carry.height:
                yield from submit(state.carry, state)
            if state is not None and state.carry_bytes:
                yield from submit_bytes([(state.carry_bytes, len(state.carry_bytes))], state.carry_line_no,
                                        source.name, state)
        if skipped and len(skipped) == len(sources):
            raise skipped[0]
        while pending:
            yield from _finish_chunk(pending.popleft().result(), diag, redact, pending_sources.popleft())
    if shapes is not None and classifier.grammar_calls:
        shapes.save(classifier.rules)
    if diag.lines_oversize:
        diag.warn(f"{diag.lines_oversize} line(s) longer than {limits.max_line_bytes()} bytes were skipped "
                  "(counted as malformed; ENVOY_DISSECTOR_MAX_LINE_BYTES raises the limit)")
    for text in diag.sanity.warnings():
        diag.warn(text)
    diag.shapes = len(classifier.seen)
    diag.grammar_calls = classifier.grammar_calls
    diag.fallback_lines = classifier.fallback_lines
    if diag.lines_repaired:
        diag.warn(f"{diag.lines_repaired} damaged line(s) (a tab or a leading '[' lost) read as records")
    foreign = {k: n for k, n in diag.lines_aside_by_kind.items()
               if k not in (UNRECOGNISED, "blank", "oversize", "unread")}
    if foreign:
        diag.warn("lines of other programs or of the paste set aside: "
                  + ", ".join(f"{k} {n}" for k, n in sorted(foreign.items(), key=lambda kv: (-kv[1], kv[0]))))
    for hint in malformed_hints(diag.malformed_sample):
        diag.warn(f"{diag.lines_malformed} malformed lines; they look like {hint}")
    if formats_seen:
        diag.format = formats_seen.most_common(1)[0][0]


#: Columns the parser's own accounting reads from every chunk (``_finish_chunk``), whatever the caller keeps.
_ACCOUNTED = ("origin", "kind", "n_lines", "ts_us", "conn_id", "message")


def _events_for(lines: pl.DataFrame, fmt: TextFormat | JsonFormat, classifier: Classifier, redact: RedactOption,
                fast: bool | None, columns: frozenset[str] | None = None) -> _Result:
    env, repaired = _envelope(lines, fmt, redact)
    return _events_of(env, classifier, fast, columns), 0, repaired


def _envelope(lines: pl.DataFrame, fmt: TextFormat | JsonFormat, redact: RedactOption,
              env: Envelope | None = None) -> tuple[Envelope, int]:
    """The envelope of a chunk's lines (``env``: already made from them, by the compiled scan), its damaged lines
    read tolerantly. A chunk holding other programs' lines is read again with them set aside (``foreign.py``):
    decided per chunk, from what the chunk holds, so the answer is the same whatever the block size or path."""
    env = env if env is not None else split_envelope(lines, fmt, redact=redact)
    if holds_foreign(env.malformed["raw"], env.records) or (
            isinstance(fmt, JsonFormat) and json_lines_foreign(lines["raw"])):
        is_start = pl.col("raw").str.contains(fmt.start) if isinstance(fmt, TextFormat) else pl.lit(False)
        kept, foreign = set_aside(lines, is_start)
        env = split_envelope(kept, fmt, redact=redact)
        malformed = env.malformed.with_columns_seq(kind=kinds_of(env.malformed["raw"]))
        env = Envelope(env.records, pl.concat([malformed, foreign]).sort("line_no", maintain_order=True))
    return read_damaged(env, fmt, redact) if isinstance(fmt, TextFormat) else (env, 0)


def _events_for_bytes(parts: list[tuple[bytes, int]], first_line_no: int, origin: str, fmt: TextFormat,
                      classifier: Classifier, redact: RedactOption, fast: bool | None,
                      columns: frozenset[str] | None = None) -> _Result:
    """``_events_for`` on whole lines as bytes (``parts``: the bytes before each stop), by the compiled scan;
    a block it does not take goes the polars way. Returns the lines it cut to the length limit too."""
    scan = extension.scan_text(parts, first_line_no, fmt)
    if scan is not None:
        env = split_text_native(scan, origin, fmt, redact=redact)
        if not holds_foreign(env.malformed["raw"], env.records):
            env, repaired = read_damaged(env, fmt, redact)
            return _events_of(env, classifier, fast, columns), 0, repaired
    data = b"".join(memoryview(part)[:stop] for part, stop in parts)
    lines, oversize = _bound_lines(_lines_frame(Block(origin, data, len(data)), first_line_no), len(data))
    env, repaired = _envelope(unwrap(lines, (), origin), fmt, redact)
    return _events_of(env, classifier, fast, columns), oversize, repaired


def _events_of(env: Envelope, classifier: Classifier, fast: bool | None,
               columns: frozenset[str] | None) -> tuple[pl.DataFrame, pl.DataFrame]:
    records = env.records
    found = classify(records, fast=fast, classifier=classifier, fields=columns)
    events = pl.concat([records.drop("first_line"), found], how="horizontal")
    events = header_columns(events)
    schema = EVENT_SCHEMA if columns is None else {
        c: t for c, t in EVENT_SCHEMA.items() if c in columns or c in _ACCOUNTED}
    return events.select_seq(list(schema)).cast(schema), env.malformed  # type: ignore[arg-type]


def _finish_chunk(result: _Result, diag: Diagnostics,
                  redact: RedactOption, source: str = "") -> Iterator[Chunk]:
    (events, malformed), oversize, repaired = result
    diag.lines_oversize += oversize
    diag.lines_repaired += repaired
    _count_malformed(malformed, diag, redact=redact)
    _account(events, diag)
    diag.sanity.check(events)
    if events.height:
        yield Chunk(events["origin"][0], events, source)


def _count_remaining_lines(blocks: Iterator[Block], diag: Diagnostics) -> int:
    """Lines left in a skipped file (counted as read), without parsing them; 0 if it cannot be read."""
    n = 0
    try:
        for block in blocks:
            n += extension.line_count(block.data)
    except InputError:
        pass
    diag.lines_read += n
    return n


def _note_wrapper(diag: Diagnostics, wrapper_id: str) -> None:
    if wrapper_id not in diag.wrappers:
        diag.wrappers.append(wrapper_id)


def _note_detection(diag: Diagnostics, detection: Detection, wrappers: list[str]) -> None:
    diag.format = diag.format or detection.format_id
    diag.format_label = diag.format_label or detection.label
    diag.log_format = diag.log_format or detection.pattern
    for w in wrappers:
        _note_wrapper(diag, w)
    if "%e" in detection.pattern and "%f" not in detection.pattern:
        diag.warn("timestamps have millisecond resolution (%e): microsecond attribution is coarse; "
                  "use %f in --log-format for µs")
    if "%t" not in detection.pattern:
        diag.warn("no thread ids in this format: worker membership is inferred from connection ids")


def _as_sources(inputs: Any) -> list[Source]:
    if isinstance(inputs, Source):
        return [inputs]
    if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(i, Source) for i in inputs):
        return list(inputs)
    return expand(inputs)


@dataclass(frozen=True)
class Parsed:
    records: pl.DataFrame
    events: pl.DataFrame
    diagnostics: Diagnostics


def parse(inputs: Any, **kwargs: Any) -> Parsed:
    """Parse whole captures into ``records`` and ``events`` frames plus ``diagnostics``.

    >>> from envoy_dissector.parser.sources import text_source
    >>> line = "2024-01-01T00:00:00.000001Z\\ttrace\\tenvoy connection\\t[C1] read returns: 5"
    >>> parse(text_source(line)).events.select_seq("kind", "conn_id", "bytes").row(0)
    ('read_returns', 1, 5)
    """
    run = iter_parse(inputs, **kwargs)
    chunks = [c.events for c in run]
    events = pl.concat(chunks) if chunks else pl.DataFrame(schema=EVENT_SCHEMA)
    return Parsed(events.select_seq(RECORD_COLUMNS), events, run.diagnostics)


def parse_text(text: str, **kwargs: Any) -> Parsed:
    return parse(text_source(text), **kwargs)
