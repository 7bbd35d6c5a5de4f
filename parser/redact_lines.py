"""Raw log lines redacted one for one, for copies of a log kept on disk (a dashboard upload, a gzip input's
decompressed copy): every line keeps its place and its format, so the copy parses as the original does.

The rules are those of :mod:`~envoy_dissector.parser.redact` (``redact_strings``: header dumps, codec header
lines, query and fragment parameters), applied where they apply in a raw line:

* a line holding a JSON object (after any wrapper prefix: ``kubectl logs --prefix``, timestamps) has each of
  its string values redacted, and the value of a key that names a secret (``"x_api_key":"..."``) replaced
  whole; the line is written again as JSON only when something changed, so quotes and escapes stay valid;
* any other line is redacted field by field (Istio's text format separates its fields with tabs, so a codec
  line's value never swallows the ``thread=`` after it), a header-dump line after a wrapper prefix as if
  the prefix were not there.

A line is never split or joined: the copy has the original's line numbers.

>>> redact_lines(["'x-api-key', 'abc123'", '{"msg":"GET /a?token=s3cret HTTP/1.1","level":"debug"}'])
["'x-api-key', '[redacted]'", '{"msg":"GET /a?token=[redacted] HTTP/1.1","level":"debug"}']
"""
from __future__ import annotations

import json
import os
import re
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import lru_cache
from typing import Any, BinaryIO

import polars as pl

from envoy_dissector.parser.redact import (
    REDACTED,
    Redaction,
    RedactOption,
    is_sensitive,
    may_need_redaction,
    policy,
    redact_frame,
    redact_strings,
)

#: A header-dump pair (``'name', 'value'``) starting at a quote.
_DUMP_PAIR = re.compile(r"'[^'\n]*'\s*,\s*'")
#: What a string must hold for any rule of ``redact_strings`` to touch it (a superset of its own quick test):
#: a text line without any is left as it is, unsplit.
_MAYBE = re.compile(r"[?;#%]|completed header|' ?,")
#: What marks a line of a block that may need redaction: the above, or a JSON object (its keys may name secrets).
_CANDIDATE = re.compile(rb"[?;#%{]|completed header|' ?,")
#: The same as literals, each found by a fast substring search (a block holding none is kept as it is).
_MARKS = (b"?", b";", b"#", b"%", b"{", b"completed header", b"'")
#: Whole lines buffered before they are redacted together (one pass of the frame rules per batch; 4 MiB: a 300 MB
#: trace log at 190-200 MB/s, 120-190 at 1 MiB)
BATCH_BYTES = 1 << 22
#: Threads that redact batches side by side (at most two: the analysis that reads the copy runs beside them).
REDACT_THREADS = min(2, os.cpu_count() or 1)


def redact_lines(lines: list[str], option: RedactOption = True) -> list[str]:
    """``lines`` (without their line breaks) redacted one for one (see the module doc)."""
    rules = policy(option)
    if rules is None or not lines:
        return list(lines)
    texts: list[str] = []
    builders: list[Callable[[list[str]], str]] = []
    for line in lines:
        builders.append(_json_line(line, texts, rules) or _text_line(line, texts))
    done = redact_strings(texts, rules)
    return [build(done) for build in builders]


def _text_line(line: str, texts: list[str]) -> Callable[[list[str]], str]:
    if not _MAYBE.search(line):
        return lambda _done: line
    spans: list[tuple[int, int]] = []  # per tab field: the slots of its pieces in ``texts``
    for field in line.split("\t"):
        quote = field.find("'")
        pieces = [field[:quote], field[quote:]] if quote > 0 and _DUMP_PAIR.match(field, quote) else [field]
        spans.append((len(texts), len(texts) + len(pieces)))
        texts.extend(pieces)
    return lambda done: "\t".join("".join(done[a:b]) for a, b in spans)


def _json_line(line: str, texts: list[str], rules: Redaction) -> Callable[[list[str]], str] | None:
    start = line.find("{")
    if start < 0 or not line.rstrip().endswith("}"):
        return None
    try:
        record = json.loads(line[start:])
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    slots: list[tuple[Any, Any, int]] = []  # (container, key, slot in texts)
    named = False
    stack: list[Any] = [record]
    while stack:  # (no recursion: a record nested deeply must not end in a RecursionError)
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            if isinstance(value, (dict, list)):
                stack.append(value)
            elif isinstance(key, str) and value not in (None, True, False, REDACTED, "") \
                    and _secret_key(key, rules):
                node[key], named = REDACTED, True
            elif isinstance(value, str):
                slots.append((node, key, len(texts)))
                texts.append(value)

    def build(done: list[str]) -> str:
        changed = named
        for container, key, slot in slots:
            if done[slot] != container[key]:
                container[key], changed = done[slot], True
        if not changed:
            return line
        return line[:start] + json.dumps(record, ensure_ascii=False, separators=_separators(line[start:]))
    return build


@lru_cache(maxsize=4096)
def _secret_key(key: str, rules: Redaction) -> bool:
    """Whether a JSON key names a secret (as a header name would)."""
    return is_sensitive(key, rules)


def _separators(text: str) -> tuple[str, str]:
    """The separators the line was written with (compact or Python's default spacing)."""
    return (", ", ": ") if re.match(r'\{\s*"(?:[^"\\]|\\.)*"\s*:\s', text) else (",", ":")


def redact_block(data: bytes, option: RedactOption = True) -> bytes:
    """Lines separated by ``\\n`` redacted one for one (:func:`redact_lines`' rules); lines no rule can touch are
    kept byte for byte (a log of plain lines costs little more than reading it). A line that is redacted is read
    as UTF-8, an invalid byte in it becoming U+FFFD as the parser reads it.

    The text lines are redacted together in polars (:func:`_redacted_text_lines`: 5x the speed of the line by
    line :func:`redact_block_reference` on a trace log, where a quarter of the lines hold a mark); a line holding
    a ``{`` (a JSON record, or text that may read as one) goes through :func:`redact_lines` itself."""
    rules = policy(option)
    if rules is None or not any(mark in data for mark in _MARKS):
        return data
    lines = pl.Series("line", [data.decode("utf-8", errors="replace")], dtype=pl.String).str.split("\n").explode()
    frame = pl.DataFrame([lines]).with_row_index("row")
    marked = frame.filter(pl.col("line").str.contains(_CANDIDATE_TEXT))
    if marked.height == 0:
        return data
    braced = pl.col("line").str.contains("{", literal=True)
    json_like = marked.filter(braced)
    # (a text line whose whole holds no sensitive word, long token or non-ASCII character has no field any rule
    # changes: most codec header lines of a trace log, which the field by field pass would split for nothing)
    plain = marked.filter(~braced & pl.col("line").str.contains(_MAYBE.pattern)
                          & may_need_redaction(pl.col("line"), rules))
    changed: dict[int, str] = {}
    if plain.height:
        redone = plain.with_columns_seq(done=_redacted_text_lines(plain["line"], rules)).filter(
            pl.col("done") != pl.col("line"))
        changed.update(zip(redone["row"].to_list(), redone["done"].to_list(), strict=True))
    if json_like.height:
        before = json_like["line"].to_list()
        for row, line, done in zip(json_like["row"].to_list(), before, redact_lines(before, rules), strict=True):
            if done != line:
                changed[row] = done
    if not changed:
        return data
    pieces = data.split(b"\n")
    for row, text in changed.items():
        pieces[row] = text.encode("utf-8")
    return b"\n".join(pieces)


#: ``_CANDIDATE`` on decoded text (the marks are ASCII: decoding neither makes nor hides one).
_CANDIDATE_TEXT = _CANDIDATE.pattern.decode()
#: A tab field's text before its first quote, and from that quote a header-dump pair (``_DUMP_PAIR``).
_BEFORE_DUMP = r"^([^']+)('[^'\n]*'\s*,\s*'.*)$"


def _redacted_text_lines(lines: pl.Series, rules: Redaction) -> pl.Series:
    """:func:`_text_line`, the redaction of its pieces and their joining, on every line of ``lines`` at once: each
    tab field is a piece, or two when a header-dump pair follows some text (split before the pair's quote); the
    pieces are redacted as :func:`redact_strings` redacts them and joined back in their order."""
    fields = pl.DataFrame([lines]).with_row_index("row").select_seq(
        "row", field=pl.col("line").str.split("\t")).explode("field")
    split = fields.select_seq(
        "row", head=pl.col("field").str.extract(_BEFORE_DUMP, 1), dump=pl.col("field").str.extract(_BEFORE_DUMP, 2),
        field="field")
    pieces = pl.concat([split.select_seq(message=pl.coalesce("head", "field")),
                        split.select_seq(message=pl.col("dump").fill_null(""))])
    done = redact_frame(pieces, policy_option=rules)["message"]
    n = split.height
    joined = split.select_seq("row", field=done.slice(0, n) + done.slice(n, n))
    return joined.group_by("row", maintain_order=True).agg(pl.col("field").str.join("\t"))["field"].alias("done")


def redact_block_reference(data: bytes, option: RedactOption = True) -> bytes:
    """What :func:`redact_block` gives, line by line in Python (:func:`redact_lines` on each line that holds a
    mark): the reference its tests compare it with."""
    if policy(option) is None or not any(mark in data for mark in _MARKS):
        return data
    spans: list[tuple[int, int]] = []
    pos = 0
    while (m := _CANDIDATE.search(data, pos)) is not None:
        end = data.find(b"\n", m.start())
        end = len(data) if end < 0 else end
        spans.append((data.rfind(b"\n", 0, m.start()) + 1, end))
        pos = end + 1
    lines = [data[a:b].decode("utf-8", errors="replace") for a, b in spans]
    out, pos = [], 0
    for (a, b), line, done in zip(spans, lines, redact_lines(lines, option), strict=True):
        out += [data[pos:a], data[a:b] if done == line else done.encode("utf-8")]
        pos = b
    out.append(data[pos:])
    return b"".join(out)


class RedactingWriter:
    """Text bytes in, redacted whole lines out to ``out`` (the last line, without its line break, at
    :meth:`close`); see :func:`redact_block`. Batches are redacted on ``threads`` threads and written in order
    (polars' passes run outside the GIL: a 300 MB trace log at 530-620 MB/s on two cores against 290-400 on one); at
    most ``threads + 1`` batches are in flight. Use it as a context manager, or call :meth:`close` (on success)
    or :meth:`discard` (on failure: nothing more is written and the threads end)."""

    def __init__(self, out: BinaryIO, option: RedactOption = True, batch_bytes: int = BATCH_BYTES,
                 threads: int = REDACT_THREADS) -> None:
        self.out, self.option, self.batch_bytes = out, option, batch_bytes
        self._buffer = bytearray()
        self._threads = max(1, threads)
        self._pool = (ThreadPoolExecutor(self._threads, thread_name_prefix="envoy-dissect-redact")
                      if self._threads > 1 and policy(option) is not None else None)
        self._pending: deque[Future[bytes]] = deque()

    def __enter__(self) -> RedactingWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is None:
            self.close()
        else:
            self.discard()

    def write(self, data: bytes) -> None:
        self._buffer += data
        if len(self._buffer) >= self.batch_bytes:
            cut = self._buffer.rfind(b"\n") + 1
            if cut:
                self._flush(bytes(self._buffer[:cut]))
                del self._buffer[:cut]

    def close(self) -> None:
        """Write what is left (a last line without a line break stays without one)."""
        try:
            if self._buffer:
                self._flush(bytes(self._buffer))
                self._buffer.clear()
            while self._pending:
                self.out.write(self._pending.popleft().result())
        finally:
            self.discard()

    def use_one_thread(self) -> None:
        """Redact the next batches on the writing thread alone (an analysis reading the copy as it is written needs
        the other core: on two cores its first results come ~1 s sooner for a 300 MB upload, the copy no later)."""
        while self._pending:
            self.out.write(self._pending.popleft().result())
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._threads = 1

    def discard(self) -> None:
        """Stop: batches not yet written are dropped and the threads end."""
        for pending in self._pending:
            pending.cancel()
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _flush(self, data: bytes) -> None:
        if self._pool is None:
            self.out.write(redact_block(data, self.option))
            return
        self._pending.append(self._pool.submit(redact_block, data, self.option))
        while len(self._pending) > self._threads:
            self.out.write(self._pending.popleft().result())


__all__ = ["BATCH_BYTES", "RedactingWriter", "redact_block", "redact_block_reference", "redact_lines"]
