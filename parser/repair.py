"""A tolerant second reading of lines no record start matched: one damaged line must not lose a milestone.

A paste or a terminal sometimes damages a single line: a tab of Istio's layout lost or turned into spaces,
the leading ``[`` of Envoy's layout cut off. Such a line, read as it is, belongs to no record, and the
request whose first milestone it carries starts late. Each repair below is tried on the lines the envelope
left over (both paths of ``envelope.py`` leave the same ones), and a line becomes a record only when a repair
makes it a record start of the capture's own format; the count is reported in the diagnostics.
"""
from __future__ import annotations

import polars as pl

from envoy_dissector.parser.envelope import Envelope, split_text
from envoy_dissector.parser.logformat import TextFormat
from envoy_dissector.parser.redact import RedactOption

_ISO = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]+Z"
_LEVEL = r"trace|debug|info|warning|warn|error|critical"
_SCOPE = r"envoy [a-z0-9_.]+"
#: (regex, replacement), each one candidate repair, tried in this order
REPAIRS: tuple[tuple[str, str], ...] = (
    # Istio 1.17+ (`TS\tlevel\tenvoy logger caller:N\tmessage`): any tab lost or turned into spaces
    (rf"^({_ISO})[ \t]*({_LEVEL})[ \t]*({_SCOPE} [^\s:]+:[0-9]+)[ \t]*", "${1}\t${2}\t${3}\t"),
    # a caller column before the scope (Istio 1.6-1.8)
    (rf"^({_ISO})[ \t]*({_LEVEL})[ \t]*([^\s:]+:[0-9]+)[ \t]*({_SCOPE})[ \t]*", "${1}\t${2}\t${3}\t${4}\t"),
    # Istio 1.6-1.16 (`TS\tlevel\tenvoy logger\tmessage`)
    (rf"^({_ISO})[ \t]*({_LEVEL})[ \t]*({_SCOPE})[ \t]*", "${1}\t${2}\t${3}\t"),
    # Envoy's layout with its leading `[` cut off
    (r"^([0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]+\]\[)", "[${1}"),
)
#: a line worth trying: it begins with a date (a bracket before it or not)
_DATED = r"^\[?[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:"


def repair_lines(malformed: pl.DataFrame, fmt: TextFormat) -> pl.DataFrame:
    """The malformed lines (``line_no, origin, raw``) that a repair turns into record starts, repaired."""
    if malformed.height == 0:
        return malformed
    dated = malformed.filter(pl.col("raw").str.contains(_DATED))
    if dated.height == 0:
        return dated
    raw = pl.col("raw")
    fixed: pl.Expr = pl.lit(None, dtype=pl.String)
    for regex, replacement in reversed(REPAIRS):
        candidate = raw.str.replace(regex, replacement)
        fixed = pl.when(candidate.str.contains(fmt.start) & (candidate != raw)).then(candidate).otherwise(fixed)
    return dated.with_columns_seq(raw=fixed).filter(pl.col("raw").is_not_null())


def read_damaged(env: Envelope, fmt: TextFormat, redact: RedactOption = True) -> tuple[Envelope, int]:
    """``env`` with its damaged lines read as one-line records, and how many were."""
    repaired = repair_lines(env.malformed, fmt)
    if repaired.height == 0:
        return env, 0
    lines = repaired.select_seq("line_no", "raw", "origin", wrapper_ts_us=pl.lit(None, dtype=pl.Int64))
    found = split_text(lines, fmt, redact=redact).records
    taken = found["line_no"]
    records = pl.concat([env.records, found.select_seq(env.records.columns)], how="vertical_relaxed").sort(
        "line_no", maintain_order=True)
    malformed = env.malformed.filter(~pl.col("line_no").is_in(taken.implode()))
    return Envelope(records, malformed), taken.len()
