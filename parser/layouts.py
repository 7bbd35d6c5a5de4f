"""Older Envoy/Istio layouts read into today's record shape (on records, after the envelope is split).

* **Location inside the message.** Envoy up to 1.15 wrote the source location as part of the message:
  ``external/envoy/source/common/http/conn_manager_impl.cc:186] [C1] new stream`` (≤1.10, after
  ``[ts][tid][lvl][logger] ``) and Istio 1.6-1.8 ``[external/envoy/source/...cc:N] [C1] ...``. The
  location moves to ``source`` and the message starts with its ``[C..]`` prefix again.
* **One header per record.** Envoy up to ~1.8 logged a header map as one record per header,
  ``[C1][S2]   ':authority':'x'``, after the record that announced the dump. Those records fold into
  the closest earlier record of the same origin and ``[C..][S..]`` ids, rewritten as today's dump lines
  (``':authority', 'x'``), so header columns and redaction read them as any dump.
"""
from __future__ import annotations

import polars as pl

#: A physical line that may continue the record above it: a header-dump line,
#: a blank line, or Istio's `\tthread=N` trailer (the envelope, the detectors and the compiled scan read both).
CONTINUATION = r"^(?:'[^']*', '.*'|\s*|\t?thread=\d+)$"
#: A physical line that is neither a record start nor a CONTINUATION still continues the record above
#: it when it reads like the rest of a multi-line message (config dumps, ``policy { ... }``, dynamic
#: metadata): indented, a closing brace, ``key: value`` / ``key {``, a line ending in an opening brace, or a
#: lone ``.`` (the end of QUIC's ``encodeHeaders (end_stream=..) <dump>.``). Anything else (a paste's ``...``,
#: another program's output) is malformed.
MESSAGE_CONTINUES = (r"^(?:[ \t]+[^\s]|[}\])][,;]?[ \t]*$|[A-Za-z_][A-Za-z0-9_.-]*(?::[ \t]|:$| \{[ \t]*$)|.*\{[ \t]*$"
                     r"|\.[ \t]*$)")
#: ``file.cc:123] `` or ``[file.cc:123] `` at the start of a message (only when the layout has no ``%g``).
LOCATION = r"^\[?(?P<file>(?:[A-Za-z0-9_.+-]+/)*[A-Za-z0-9_.+-]+\.(?:cc|h|cpp|hpp|c)):(?P<line>[0-9]+)\] "
_LOCATION_PLAIN = r"^\[?(?:[A-Za-z0-9_.+-]+/)*[A-Za-z0-9_.+-]+\.(?:cc|h|cpp|hpp|c):[0-9]+\] "
_HEADER_RECORD = r"^(\[C[0-9]+\](?:\[S[0-9]+\])?) {2,}'([^']*)':'(.*)'$"
_IDS = r"^(\[C[0-9]+\](?:\[S[0-9]+\])?)"
#: the same, found on a raw line (envelope prefix still on): the record-boundary cut keeps these with their dump
HEADER_RECORD_LINE = r"\[C[0-9]+\](?:\[S[0-9]+\])? {2,}'[^']*':'.*'$"


def location_in_message(df: pl.DataFrame) -> pl.DataFrame:
    """Move a leading source location out of ``message`` into ``loc__source`` (null where there is none)."""
    message = df["message"]
    rows = message.str.contains(_LOCATION_PLAIN).arg_true()
    if rows.len() == 0:
        return df
    hit = message.gather(rows)
    parts = hit.str.extract_groups(LOCATION)
    source = parts.struct.field("file") + ":" + parts.struct.field("line")
    loc = pl.Series("loc__source", [None] * df.height, dtype=pl.String).scatter(rows, source)
    return df.with_columns_seq(message.scatter(rows, hit.str.replace(_LOCATION_PLAIN, "")), loc)


def fold_header_records(df: pl.DataFrame) -> pl.DataFrame:
    """Fold one-header-per-record dumps into the record they belong to (see the module doc)."""
    message = df["message"]
    if not message.str.contains("':'", literal=True).any():
        return df
    rows = message.str.contains(_HEADER_RECORD)
    if not rows.any():
        return df
    marked = df.select_seq("origin", "message", "n_lines").with_columns_seq(
        is_hdr__=rows, ids__=pl.col("message").str.extract(_IDS, 1)).with_row_index("pos__")
    marked = marked.with_columns_seq(pl.col("pos__").cast(pl.Int64))
    marked = marked.with_columns_seq(target__=pl.when(~pl.col("is_hdr__")).then(pl.col("pos__")).otherwise(None)
                                     .forward_fill().over("origin", "ids__"))
    hdr = marked.filter(pl.col("is_hdr__") & pl.col("target__").is_not_null())
    if hdr.height == 0:
        return df
    dump_line = pl.lit("'") + pl.col("message").str.replace(_HEADER_RECORD, "${2}', '${3}") + pl.lit("'")
    joined = hdr.group_by("target__", maintain_order=True).agg(
        text=dump_line.str.join("\n"), extra=pl.col("n_lines").sum())
    targets = joined["target__"]
    folded = message.gather(targets) + "\n" + joined["text"]
    n_lines = df["n_lines"].cast(pl.Int64)
    df = df.with_columns_seq(message.scatter(targets, folded),
                             n_lines.scatter(targets, n_lines.gather(targets) + joined["extra"]))
    keep = pl.Series(values=[True] * df.height).scatter(hdr["pos__"], False)
    return df.filter(keep)
