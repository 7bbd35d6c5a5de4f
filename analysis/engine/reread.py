"""A request's log lines read again from its input file (``Capture.request_lines`` asks its ``LineReader``), so
that no capture keeps its records in memory to show them.

When a capture's input is one regular file, ``LineIndex``
remembers where every ``STEP_BYTES`` of (decompressed) text begins and at which line, built on first use by
one pass over the file (a gzip input is decompressed once into a private temporary file, so later reads can
seek; with redaction on, that copy is written through ``redact_lines``, line for line, and holds no secret).
A request's lines are then parsed again from shortly before its first line until the log has moved
``AFTER_US`` past the end of its life, reading at most ``MAX_BYTES`` of text (a request alive for minutes
in a busy log shows the lines of its first ``MAX_BYTES``). Other input (log text, several files) gives a
request's lines from the capture's ``events`` (``request_records``).

>>> from envoy_dissector.analysis import dissect
>>> cap = dissect("fixtures/istio-thread/keepalive/envoy.log.gz")
>>> uid = cap.requests.filter("complete")["request_uid"][0]
>>> cap.request_lines(uid).height > 0
True
"""
from __future__ import annotations

import bisect
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import polars as pl

from envoy_dissector.parser import limits
from envoy_dissector.parser.classify import ShapeRule
from envoy_dissector.parser.kinds import EventKind
from envoy_dissector.parser.pipeline import iter_parse
from envoy_dissector.parser.redact import RedactOption, policy
from envoy_dissector.parser.redact_lines import RedactingWriter
from envoy_dissector.parser.schema import EVENT_SCHEMA, RECORD_COLUMNS
from envoy_dissector.parser.sources import Source, open_binary, text_source

#: Text between two index entries.
STEP_BYTES = 1 << 20
#: Lines read before a request's first line (its connection's lines just before the stream began).
LINES_BEFORE = 400
#: How far past the end of the request's life the log is read (workers' lines interleave out of order a little).
AFTER_US = 50_000
#: The most text read for one request (a request alive for minutes in a busy log shows its first lines only).
MAX_BYTES = 64 << 20
#: Text read at a time while the index is built.
_PIECE = 4 << 20
#: Text read at a time for one request (the reading stops at the first piece that ends past its life).
READ_PIECE = 4 << 20


class LineReader(Protocol):
    """Where a capture's request lines come from (``Capture.line_index``)."""

    @property
    def path(self) -> Path | None:
        """The file read again (``None``: the lines are held in memory)."""
        ...

    def lines(self, row: dict[str, Any]) -> pl.DataFrame:
        """The records of the request ``row`` (a requests-frame row), as ``Capture.request_lines`` gives them."""
        ...

    def close(self) -> None:
        """Give back what reading again holds (a temporary copy of the file)."""
        ...


class _Shapes:
    """The grammar's verdicts per message shape, kept for the capture's later stretches (a ``ShapeStore`` in
    memory: each stretch would otherwise run the grammar again on every shape it holds)."""

    def __init__(self) -> None:
        self._rules: dict[str, ShapeRule] = {}
        self._lock = threading.Lock()

    def load(self) -> dict[str, ShapeRule]:
        with self._lock:
            return dict(self._rules)

    def save(self, rules: dict[str, ShapeRule]) -> None:
        with self._lock:
            self._rules.update(rules)


@dataclass
class LineIndex:
    """Where the lines of one input file are, for reading a stretch of them again."""

    path: Path
    name: str
    format: str = "auto"
    log_format: str | None = None
    redact: RedactOption = True
    _starts: list[int] = field(default_factory=list, repr=False)  # line number at each entry (1-based)
    _offsets: list[int] = field(default_factory=list, repr=False)  # byte offset of that line in ``_text``
    _text: Path | None = field(default=None, repr=False)
    _tmp: Path | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _cleanup: Any = field(default=None, repr=False)
    _detected: str | None = field(default=None, repr=False)  # the format the first stretch read was in
    _shapes: _Shapes = field(default_factory=lambda: _Shapes(), repr=False)

    def lines(self, row: dict[str, Any]) -> pl.DataFrame:
        """The records of the request ``row`` (a requests-frame row), as ``Capture.request_lines`` gives them."""
        events = self._events_around(int(row["first_line_no"] or 1), _end_of(row))
        if events.height and row["thread"] is not None and events["thread"].null_count() == events.height:
            # A log without thread ids: the whole capture placed the request's connections on an inferred lane
            # (``loop.infer_threads``), the request's ``thread``; a stretch of the log alone cannot. So its
            # connections' lines get that lane, and so do lines without a connection that follow one of them
            # (as there: the lane whose latest slice began before them).
            conns = [c for c in (row["downstream_conn_id"], row["upstream_conn_id"]) if c is not None]
            ours = pl.when(pl.col("conn_id").is_not_null()).then(pl.col("conn_id").is_in(conns)).forward_fill()
            events = events.sort("line_no").with_columns_seq(
                thread=pl.when(ours.fill_null(False)).then(pl.lit(row["thread"])).otherwise(pl.col("thread"))
                .cast(events.schema["thread"]))
        return request_records(events, row, same_origin=False)

    def close(self) -> None:
        """Remove the decompressed copy (also done when the index is garbage-collected)."""
        if self._cleanup is not None:
            self._cleanup()
        self._text = None
        self._starts, self._offsets = [], []

    # -- reading ----------------------------------------------------------------------------------------
    def _events_around(self, first_line: int, end_us: int | None) -> pl.DataFrame:
        """The events from ``LINES_BEFORE`` lines before ``first_line`` until the log has moved ``AFTER_US``
        past ``end_us``: a first piece of ``READ_PIECE`` parsed, and while its last records are not yet past
        the end, a stretch twice as long parsed again (at most ``MAX_BYTES``)."""
        text_path = self._ensure_index()
        wanted = max(1, first_line - LINES_BEFORE)
        at = max(0, bisect.bisect_right(self._starts, wanted) - 1)
        data = b""
        want = READ_PIECE if end_us is not None else _PIECE
        with text_path.open("rb") as fh:
            start_line, offset = _line_start(fh, self._starts[at], self._offsets[at], wanted)
            fh.seek(offset)
            while True:
                more = fh.read(want - len(data))
                if more and not more.endswith(b"\n"):
                    more += fh.readline()
                data += more
                events = self._parse(data, start_line)
                if (not more or end_us is None or len(data) >= MAX_BYTES
                        or _latest_ts(events) > end_us + AFTER_US):
                    return events
                want = min(MAX_BYTES, 2 * len(data))

    def _parse(self, data: bytes, start_line: int) -> pl.DataFrame:
        text = data.decode("utf-8", errors="replace")
        run = iter_parse(text_source(text, self.name), format=self.known_format, log_format=self.log_format,
                         redact=self.redact, shapes=self._shapes)
        frames = [c.events for c in run]
        if self._detected is None and self.log_format is None and run.diagnostics.format:
            self._detected = run.diagnostics.format
        if not frames:
            return pl.DataFrame()
        events = pl.concat(frames) if len(frames) > 1 else frames[0]
        return events.with_columns_seq(pl.col("line_no") + (start_line - 1))

    @property
    def known_format(self) -> str:
        """The format a stretch is parsed as: the one asked for, else the one detected in the first stretch read
        (detecting it again in every stretch costs more than parsing the stretch)."""
        return self._detected if self.format == "auto" and self._detected is not None else self.format

    def _ensure_index(self) -> Path:
        with self._lock:
            if self._text is None:
                self._build()
            assert self._text is not None
            return self._text

    def _build(self) -> None:
        fh, counter = open_binary(Source(self.name, path=self.path))
        text_path = self.path
        with ExitStack() as stack:
            stack.callback(fh.close)
            copy: BinaryIO | None = None
            inflated: Callable[[int], None] | None = None
            if counter is not None:  # gzip: decompressed once into a copy, with the first read's bomb limit
                stack.callback(counter.inner.close)  # (closing a gzip reader leaves the file under it open)
                self._tmp = Path(tempfile.mkdtemp(prefix="envoy-dissect-lines-"))
                self._cleanup = weakref.finalize(self, shutil.rmtree, self._tmp, True)
                text_path = self._tmp / "text.log"
                copy = stack.enter_context(text_path.open("wb"))
                ratio, gz = limits.max_gzip_ratio(), counter

                def inflated(size: int) -> None:
                    limits.check_inflation(self.name, size, gz.count, ratio)
            try:
                if copy is not None and policy(self.redact) is not None:
                    _redacted_copy(fh, copy, self.redact, inflated)
                    copy.close()
                    with text_path.open("rb") as text:  # (the copy's own offsets: redaction changes lengths)
                        self._starts, self._offsets = _entries(text, None)
                else:
                    self._starts, self._offsets = _entries(fh, copy, inflated)
            except BaseException:
                self.close()  # (the partial copy too)
                raise
        self._text = text_path


def _redacted_copy(src: BinaryIO, copy: BinaryIO, redact: RedactOption,
                   inflated: Callable[[int], None] | None) -> None:
    """``src`` written to ``copy`` line for line through the redaction rules (``inflated(bytes read so far)``
    may refuse to go on)."""
    read = 0
    with RedactingWriter(copy, redact) as writer:
        while data := src.read(_PIECE):
            read += len(data)
            if inflated is not None:
                inflated(read)
            writer.write(data)


def _entries(src: BinaryIO, copy: BinaryIO | None,
             inflated: Callable[[int], None] | None = None) -> tuple[list[int], list[int]]:
    """``(line numbers, byte offsets)`` of an entry every ``STEP_BYTES``, each at a line start (writing what
    is read to ``copy`` when given; ``inflated(bytes read so far)`` may refuse to go on)."""
    starts, offsets = [1], [0]
    line, offset, since = 1, 0, 0
    carry = b""
    while data := src.read(_PIECE):
        if inflated is not None:
            inflated(offset + len(carry) + len(data))
        if copy is not None:
            copy.write(data)
        data = carry + data
        cut = data.rfind(b"\n") + 1
        whole, carry = data[:cut], data[cut:]
        pos = 0
        while len(whole) - pos >= STEP_BYTES - since:
            nl = whole.find(b"\n", pos + STEP_BYTES - since - 1)
            line += whole.count(b"\n", pos, nl + 1)
            starts.append(line)
            offsets.append(offset + nl + 1)
            pos, since = nl + 1, 0
        line += whole.count(b"\n", pos)
        since += len(whole) - pos
        offset += len(whole)
    return starts, offsets


def _line_start(fh: BinaryIO, line: int, offset: int, wanted: int) -> tuple[int, int]:
    """``(line number, byte offset)`` of the line ``wanted``, counted on from ``line`` at ``offset`` (an index
    entry at or before it; the end of the text if it has fewer lines)."""
    fh.seek(offset)
    while line < wanted:
        data = fh.read(READ_PIECE)
        if not data:
            break
        count = data.count(b"\n")
        if line + count < wanted:
            line, offset = line + count, offset + len(data)
            continue
        pos = -1
        for _ in range(wanted - line):
            pos = data.index(b"\n", pos + 1)
        return wanted, offset + pos + 1
    return line, offset


#: Records at the end of a stretch whose timestamps say how far the log has moved (workers' lines interleave).
LAST_RECORDS = 64


def _latest_ts(events: pl.DataFrame) -> int:
    """The latest timestamp among the last ``LAST_RECORDS`` records of ``events`` (µs; -1 when none has one)."""
    if events.height == 0:
        return -1
    latest = events.tail(LAST_RECORDS)["ts_us"].max()
    return int(latest) if latest is not None else -1  # type: ignore[arg-type]


def _end_of(row: dict[str, Any]) -> int | None:
    ends = [row.get(c) for c in ("life_end_us", "last_ts")]
    known = [int(e) for e in ends if e is not None]
    return max(known) if known else None


#: Connection-less lines on the request's worker during its life that belong to it.
WORKER_KINDS = (EventKind.WASM_LOG, EventKind.LUA_LOG, EventKind.ATTACHED_UPSTREAM_CONNECTION,
                EventKind.POOL_CREATING_CONNECTION, EventKind.CEL_ERROR)


def request_records(events: pl.DataFrame, row: dict[str, Any], *, same_origin: bool = True) -> pl.DataFrame:
    """The records of ``events`` that belong to the request ``row``: its stream's lines, and its connections'
    lines (and its worker's connection-less filter lines) during its life."""
    if events.height == 0:
        return pl.DataFrame(schema={**{c: EVENT_SCHEMA[c] for c in RECORD_COLUMNS}, "kind": EVENT_SCHEMA["kind"]})
    t0, t1 = row["life_start_us"], row["life_end_us"]
    conns = [c for c in (row["downstream_conn_id"], row["upstream_conn_id"]) if c is not None]
    during = pl.col("ts_us").is_between(t0, t1) if t0 is not None and t1 is not None else pl.lit(True)
    stream = pl.col("stream_id") == row["stream_id"] if row["stream_id"] is not None else pl.lit(False)
    own = stream | (pl.col("conn_id").is_in(conns) & during)
    if row["thread"] is not None:
        own = own | ((pl.col("thread") == row["thread"]) & during & pl.col("conn_id").is_null()
                     & pl.col("stream_id").is_null() & pl.col("kind").is_in(list(WORKER_KINDS)))
    if same_origin:
        own = own & (pl.col("origin") == row["origin"])
    return events.filter(own.fill_null(False)).select_seq(*RECORD_COLUMNS, "kind").sort("ts_us", "line_no")


def index_for(source: Any, *, format: str, log_format: str | None, redact: RedactOption) -> LineIndex | None:
    """A ``LineIndex`` when ``source`` is one regular file (not stdin, a glob of several, or log text)."""
    if isinstance(source, Source):
        path, name = source.path, source.name
    elif isinstance(source, (str, Path)) and "\n" not in str(source):
        path, name = Path(source), str(source)
    else:
        return None
    if path is None or not path.is_file():
        return None
    return LineIndex(path=path, name=name, format=format, log_format=log_format, redact=redact)
