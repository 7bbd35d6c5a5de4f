"""Envelope stage: physical lines -> one row per log record (multi-line records folded).

Pure functions over polars frames. Input ``lines``: ``line_no, raw, origin,
wrapper_ts_us``. Output: records (envelope fields + the whole ``message``) and
the line numbers that belong to no record (malformed).
"""
from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from envoy_dissector.parser.logformat import JsonFormat, TextFormat
from envoy_dissector.parser.redact import redact_frame
from envoy_dissector.parser.schema import RECORD_COLUMNS

# A physical line that may continue the record above it: a header-dump line,
# a blank line, or Istio's `\tthread=N` trailer.
CONTINUATION = r"^(?:'[^']*', '.*'|\s*|\t?thread=\d+)$"
_LEVEL_SHORT = {"T": "trace", "D": "debug", "I": "info", "W": "warning", "E": "error", "C": "critical", "O": "off"}


@dataclass(frozen=True)
class Envelope:
    records: pl.DataFrame  # RECORD columns except the grammar's conn_id/stream_id, plus `first_line`
    malformed: pl.DataFrame  # line_no, origin, raw


def _timestamp(fields: frozenset[str]) -> pl.Expr:
    """Epoch microseconds from the date/time groups; null when the format has no date."""
    if not {"Y", "mo", "d", "H", "Mi", "S"} <= fields:
        return pl.lit(None, dtype=pl.Int64)
    base = pl.datetime(
        pl.col("Y").cast(pl.Int32, strict=False), pl.col("mo").cast(pl.Int32, strict=False),
        pl.col("d").cast(pl.Int32, strict=False), pl.col("H").cast(pl.Int32, strict=False),
        pl.col("Mi").cast(pl.Int32, strict=False), pl.col("S").cast(pl.Int32, strict=False),
        time_unit="us",
    ).dt.epoch("us")
    frac = pl.lit(0, dtype=pl.Int64)
    if "frac_us" in fields:
        frac = pl.col("frac_us").cast(pl.Int64, strict=False)
    elif "frac_ms" in fields:
        frac = pl.col("frac_ms").cast(pl.Int64, strict=False) * 1000
    elif "frac_ns" in fields:
        frac = pl.col("frac_ns").cast(pl.Int64, strict=False) // 1000
    if "tz" in fields:  # %z: local time + offset -> UTC
        tz = pl.col("tz").str.replace(":", "", literal=True)
        offset_s = (tz.str.slice(1, 2).cast(pl.Int64, strict=False) * 3600
                    + tz.str.slice(3, 2).cast(pl.Int64, strict=False) * 60).fill_null(0)
        sign = pl.when(tz.str.starts_with("-")).then(-1).otherwise(1)
        return base + frac - sign * offset_s * 1_000_000
    return base + frac


def _finish(df: pl.DataFrame, fields: frozenset[str], escaping: str, redact: bool) -> pl.DataFrame:
    """Typed envelope columns from the regex groups."""
    def col(name: str, dtype: pl.DataType = pl.String()) -> pl.Expr:
        return pl.col(name).cast(dtype, strict=False) if name in fields else pl.lit(None, dtype=dtype)

    message = pl.col("message")
    if escaping == "json":
        message = (pl.lit('"') + message + pl.lit('"')).str.json_decode(pl.String)
    elif escaping == "newlines":
        message = message.str.replace_all(r"\n", "\n", literal=True)
    message = message.str.strip_chars_end("\n")
    level = col("level")
    if "level_short" in fields:
        level = pl.col("level_short").replace_strict(_LEVEL_SHORT, default=None)
    level = level.str.replace("^warn$", "warning")
    source = pl.lit(None, dtype=pl.String)
    if "source_file" in fields:
        source = pl.col("source_file") + pl.lit(":") + pl.col("source_line").fill_null("")
    df = df.with_columns(message=message)
    if redact:
        df = redact_frame(df)
    return df.with_columns(
        ts_us=pl.coalesce(_timestamp(fields), pl.col("wrapper_ts_us")),
        thread=col("thread", pl.Int64()),
        level=level,
        logger=col("logger"),
        source=source,
    )


def _select(df: pl.DataFrame) -> pl.DataFrame:
    cols = [c for c in RECORD_COLUMNS if c not in ("conn_id", "stream_id")]
    return df.with_columns(first_line=pl.col("message").str.split("\n").list.first()).select(*cols, "first_line")


def split_text(lines: pl.DataFrame, fmt: TextFormat, *, redact: bool = True) -> Envelope:
    """Fold continuation lines into their record and split the envelope of a text format.

    ``lines`` may carry a precomputed ``is_start`` column.
    """
    if "is_start" not in lines.columns:
        lines = lines.with_columns(is_start=pl.col("raw").str.contains(fmt.start))
    lines = lines.with_columns(rid=pl.col("is_start").cast(pl.Int64).cum_sum().over("origin"))
    opener = (pl.when(pl.col("is_start")).then(pl.col("raw").str.ends_with(":"))
              .otherwise(None).forward_fill().over("origin"))
    lines = lines.with_columns(
        is_cont=~pl.col("is_start") & (pl.col("rid") > 0)
        & (pl.col("raw").str.contains(CONTINUATION) | opener.fill_null(False))
    )
    malformed = lines.filter(~pl.col("is_start") & ~pl.col("is_cont")).select("line_no", "origin", "raw")
    starts = lines.filter(pl.col("is_start"))
    # Envelope fields come from the short prefix only; the message is the rest of the line.
    parts = starts.select(pl.col("raw").str.extract_groups(fmt.prefix).alias("p")).unnest("p")
    starts = pl.concat([starts.select("line_no", "origin", "rid", "wrapper_ts_us", "raw"), parts], how="horizontal")
    starts = starts.with_columns(message=pl.col("raw").str.slice(pl.col("prefix__").str.len_chars()))
    conts = lines.filter(pl.col("is_cont"))
    if conts.height:
        joined = conts.group_by("origin", "rid", maintain_order=True).agg(
            cont=pl.col("raw").str.join("\n"), cont_lines=pl.len())
        starts = starts.join(joined, on=["origin", "rid"], how="left", maintain_order="left")
        starts = starts.with_columns(
            message=pl.when(pl.col("cont").is_null()).then(pl.col("message"))
            .otherwise(pl.col("message") + pl.lit("\n") + pl.col("cont")),
            n_lines=1 + pl.col("cont_lines").fill_null(0).cast(pl.Int64))
    else:
        starts = starts.with_columns(n_lines=pl.lit(1, dtype=pl.Int64))
    fields = fmt.fields
    if fmt.suffix is not None:
        tail = pl.col("message").str.extract_groups("(?P<suffix__>" + fmt.suffix + ")").alias("s")
        starts = starts.with_columns(tail).unnest("s").with_columns(
            message=pl.col("message").str.head(-pl.col("suffix__").str.len_chars().fill_null(0).cast(pl.Int64)))
    df = _finish(starts, fields, fmt.message_escaping, redact)
    return Envelope(_select(df).with_columns(n_lines=df["n_lines"]), malformed)


def split_json(lines: pl.DataFrame, fmt: JsonFormat, *, redact: bool = True) -> Envelope:
    """One JSON object per line; keys mapped through the format's sub-patterns."""
    raw = pl.col("raw")
    # A record is a JSON object carrying the message key; any other line is malformed, as in text formats.
    message_keys = [key for key, pattern in fmt.keys.items() if "(?P<message>" in pattern]
    has_message = pl.lit(True)
    for key in message_keys:
        has_message = has_message & raw.str.json_path_match(f"$['{key}']").is_not_null()
    is_obj = raw.str.starts_with("{") & raw.str.json_path_match("$").is_not_null() & has_message
    lines = lines.with_columns(is_start=is_obj)
    malformed = lines.filter(~pl.col("is_start")).select("line_no", "origin", "raw")
    df = lines.filter(pl.col("is_start"))
    exprs = []
    for key, pattern in fmt.keys.items():
        exprs.append(raw.str.json_path_match(f"$['{key}']").str.extract_groups(pattern).alias(f"__{key}"))
    df = df.with_columns(exprs)
    for key in fmt.keys:
        df = df.unnest(f"__{key}")
    # Envoy >= 1.27 bootstrap json_format puts the connection/stream tags beside the message.
    cid = raw.str.json_path_match("$.ConnectionId")
    sid = raw.str.json_path_match("$.StreamId")
    tag = (pl.when(sid.is_not_null()).then(pl.lit('[Tags: "ConnectionId":"') + cid + '","StreamId":"' + sid + '"] ')
           .when(cid.is_not_null()).then(pl.lit('[Tags: "ConnectionId":"') + cid + '"] ')
           .otherwise(pl.lit("")))
    df = df.with_columns(message=tag + pl.col("message"), n_lines=pl.lit(1, dtype=pl.Int64))
    df = _finish(df, fmt.fields, "none", redact)
    return Envelope(_select(df).with_columns(n_lines=pl.lit(1, dtype=pl.Int64)), malformed)


def split_envelope(lines: pl.DataFrame, fmt: TextFormat | JsonFormat, *, redact: bool = True) -> Envelope:
    if isinstance(fmt, JsonFormat):
        return split_json(lines, fmt, redact=redact)
    return split_text(lines, fmt, redact=redact)
