"""Envelope stage: physical lines -> one row per log record (multi-line records folded).

Pure functions over polars frames. Input ``lines``: ``line_no, raw, origin,
wrapper_ts_us``. Output: records (envelope fields + the whole ``message``) and
the line numbers that belong to no record (malformed).
"""
from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import dataclass

import polars as pl

from envoy_dissector.parser.civil import epoch_us, epoch_us_of
from envoy_dissector.parser.distinct import Distinct
from envoy_dissector.parser.extension import TextScan, distinct
from envoy_dissector.parser.layouts import CONTINUATION as CONTINUATION  # (where the detectors read it)
from envoy_dissector.parser.layouts import MESSAGE_CONTINUES as MESSAGE_CONTINUES
from envoy_dissector.parser.layouts import fold_header_records, location_in_message
from envoy_dissector.parser.logformat import Head, JsonFormat, TextFormat, group_names
from envoy_dissector.parser.redact import RedactOption, redact_frame, rows_where
from envoy_dissector.parser.schema import RECORD_COLUMNS

_LEVEL_SHORT = {"T": "trace", "D": "debug", "I": "info", "W": "warning", "E": "error", "C": "critical", "O": "off"}


@dataclass(frozen=True)
class Envelope:
    records: pl.DataFrame  # RECORD columns except the grammar's conn_id/stream_id, plus `first_line`
    malformed: pl.DataFrame  # line_no, origin, raw


_DATE_TIME = ("Y", "mo", "d", "H", "Mi", "S")
_FRACTIONS = {"frac_us": 1, "frac_ms": 1000, "frac_ns": -1000}  # multiplier; negative: divide


def _whole_seconds(parts: Iterable[pl.Expr] | None = None) -> pl.Expr:
    """Epoch microseconds of the date and time groups (or ``parts``, in that order), to the second."""
    exprs = list(parts) if parts is not None else [pl.col(g) for g in _DATE_TIME]
    return epoch_us(*exprs)  # null for an impossible date (Feb 30, month 13): never raises


def _timestamp(fields: frozenset[str], columns: list[str]) -> pl.Expr:
    """Epoch microseconds from the date/time groups (or a precomputed ``seconds__``); null without a date."""
    if "seconds__" in columns:
        base = pl.col("seconds__")
    elif set(_DATE_TIME) <= fields:
        base = _whole_seconds()
    else:
        return pl.lit(None, dtype=pl.Int64)
    frac = pl.lit(0, dtype=pl.Int64)
    for name, scale in _FRACTIONS.items():
        if name in fields:
            value = pl.col(name).cast(pl.Int64, strict=False)
            frac = value * scale if scale > 0 else value // -scale
            break
    if "tz" in fields:  # %z: local time + offset -> UTC
        tz = pl.col("tz").str.replace(":", "", literal=True)
        offset_s = (tz.str.slice(1, 2).cast(pl.Int64, strict=False) * 3600
                    + tz.str.slice(3, 2).cast(pl.Int64, strict=False) * 60).fill_null(0)
        sign = pl.when(tz.str.starts_with("-")).then(-1).otherwise(1)
        return base + frac - sign * offset_s * 1_000_000
    return base + frac


def _outputs(groups: set[str] | frozenset[str]) -> dict[str, tuple[frozenset[str], pl.Expr]]:
    """Typed level/logger/source/thread: the regex groups each needs, and its expression over them."""
    out: dict[str, tuple[frozenset[str], pl.Expr]] = {}
    if "level_short" in groups:
        level = pl.col("level_short").replace_strict(_LEVEL_SHORT, default=None)
        out["level"] = frozenset({"level_short"}), level
    elif "level" in groups:
        level = pl.col("level")
        out["level"] = frozenset({"level"}), pl.when(level == "warn").then(pl.lit("warning")).otherwise(level)
    if "logger" in groups:
        out["logger"] = frozenset({"logger"}), pl.col("logger")
    if "source_file" in groups:
        line = pl.col("source_line").fill_null("") if "source_line" in groups else pl.lit("")
        needs = {"source_file", "source_line"} & set(groups)
        out["source"] = frozenset(needs), pl.col("source_file") + pl.lit(":") + line
    if "thread" in groups:
        out["thread"] = frozenset({"thread"}), pl.col("thread").cast(pl.Int64, strict=False)
    return out


_OUTPUT_TYPES: dict[str, pl.DataType] = {"level": pl.String(), "logger": pl.String(), "source": pl.String(),
                                         "thread": pl.Int64()}


def _typed_here(frame: pl.DataFrame, groups: set[str], fields: frozenset[str]) -> tuple[pl.DataFrame, set[str]]:
    """Compute on ``frame`` (one row per distinct text) the outputs whose groups it holds entirely.

    Returns the frame with those outputs (named ``out__NAME``) and the raw groups still needed per line.
    """
    done = {name: expr for name, (needs, expr) in _outputs(fields).items() if needs <= groups}
    frame = frame.with_columns_seq(expr.alias(f"out__{name}") for name, expr in done.items())
    used = set().union(*(needs for name, (needs, _) in _outputs(fields).items() if name in done)) if done else set()
    return frame, (groups - used) | (groups & _TIME_GROUPS)


_TIME_GROUPS = frozenset({"Y", "mo", "d", "H", "Mi", "S", "frac_us", "frac_ms", "frac_ns", "tz"})


def _message(message: pl.Expr, escaping: str) -> pl.Expr:
    if escaping == "json":
        return (pl.lit('"') + message + pl.lit('"')).str.json_decode(pl.String)
    if escaping == "newlines":
        return message.str.replace_all(r"\n", "\n", literal=True)
    return message


def _finish(df: pl.DataFrame, fields: frozenset[str], redact: RedactOption,
            multiline: pl.Expr | pl.Series | None = None) -> pl.DataFrame:
    """Typed envelope columns: ``out__*`` columns computed once per distinct text, the rest per line.

    ``multiline`` marks the messages that can hold a newline (all when not given).
    """
    df = _strip_trailing_newlines(df, multiline)
    if redact:
        df = redact_frame(df, multiline=multiline, policy_option=redact)
    exprs: dict[str, pl.Expr] = {}
    for name, (_needs, expr) in _outputs(fields).items():
        exprs[name] = pl.col(f"out__{name}") if f"out__{name}" in df.columns else expr
    typed = {name: exprs.get(name, pl.lit(None)).cast(dtype) for name, dtype in _OUTPUT_TYPES.items()}
    if "loc__source" in df.columns:  # the location an older layout wrote inside the message
        typed["source"] = pl.coalesce(typed["source"], pl.col("loc__source"))
    df = df.with_columns_seq(ts_us=pl.coalesce(_timestamp(fields, df.columns), pl.col("wrapper_ts_us")), **typed)
    return df


def _older_layouts(df: pl.DataFrame, fields: frozenset[str]) -> pl.DataFrame:
    """Location inside the message (layouts without ``%g``) and one-header-per-record dumps."""
    if "source_file" not in fields:
        df = location_in_message(df)
    return fold_header_records(df)


def _strip_trailing_newlines(df: pl.DataFrame, multiline: pl.Expr | pl.Series | None = None) -> pl.DataFrame:
    rows = rows_where(df, pl.col("message").str.ends_with("\n"), within=multiline)
    if rows.len() == 0:
        return df
    fixed = df["message"].gather(rows).str.strip_chars_end("\n")
    return df.with_columns_seq(df["message"].scatter(rows, fixed))


def _select(df: pl.DataFrame, multiline: pl.Expr | pl.Series | None = None) -> pl.DataFrame:
    cols = [c for c in RECORD_COLUMNS if c not in ("conn_id", "stream_id")]
    first_line = df["message"]
    rows = rows_where(df, pl.col("message").str.contains("\n", literal=True), within=multiline)
    if rows.len():
        # (the text before the first newline: a split, ~10x cheaper than the regex ``^([^\n]*)`` it equals)
        first_line = first_line.scatter(rows, first_line.gather(rows).str.split_exact("\n", 1).struct.field("field_0"))
    return df.select_seq(*cols).with_columns_seq(first_line=first_line)


def single_origin(lines: pl.DataFrame) -> bool:
    """All lines from one origin (a file, or one pod): per-origin windows are the whole frame."""
    origin = lines["origin"]
    return origin.len() == 0 or (origin.null_count() == 0 and bool((origin == origin[0]).all()))


def mark_starts(lines: pl.DataFrame, fmt: TextFormat) -> pl.DataFrame:
    """Adds ``is_start`` and ``body``: a record's first line without its envelope prefix (other lines as they are).

    One regex pass without captures: the prefix is removed where it matches, so a line is a
    start exactly when it got shorter (or, for formats whose prefix may be empty, when it matches).
    """
    lines = lines.with_columns_seq(body=pl.col("raw").str.replace(fmt.start_plain, ""))
    if fmt.prefix_can_be_empty:
        return lines.with_columns_seq(is_start=pl.col("raw").str.contains(fmt.start))
    return lines.with_columns_seq(is_start=pl.col("raw").str.len_bytes() != pl.col("body").str.len_bytes())


def _groups_of_distinct(found: Distinct, texts: pl.Series, regex: str) -> pl.DataFrame:
    """``regex``'s groups on one of ``texts`` per group of ``found`` (one row per group, in ``first`` order)."""
    reps = texts.gather(found.first).cast(pl.String).to_frame("t")
    return reps.select_seq(pl.col("t").str.extract_groups(regex)).unnest("t")


def _typed_once(found: Distinct, texts: pl.Series, regex: str, groups: set[str],
                fields: frozenset[str]) -> pl.DataFrame:
    """Envelope outputs from ``regex``'s ``groups``, typed once per group of ``found`` (texts alike in what the
    regex reads), one row per line."""
    return _spread_typed(found, _groups_of_distinct(found, texts, regex), groups, fields)


def _spread_typed(found: Distinct, reps: pl.DataFrame, groups: set[str], fields: frozenset[str]) -> pl.DataFrame:
    """``reps`` (one row of regex groups per distinct value) typed once (``_typed_here``), one row per line."""
    reps, per_line = _typed_here(reps, groups, fields)
    return found.spread(reps.select_seq(*sorted(per_line), *[c for c in reps.columns if c.startswith("out__")]))


def _seconds_once(texts: pl.Series, head: dict[str, tuple[int, int]], width: int) -> pl.Series | None:
    """Epoch µs to the second of each text whose fixed-width start holds the date and time (``head``: group ->
    offset, width), computed once per distinct second; None when the head does not hold them all before its
    sub-second digits."""
    if not set(_DATE_TIME) <= head.keys():
        return None
    end = min((head[f][0] for f in _FRACTIONS if f in head), default=width)  # the head before the fraction
    if not all(head[g][0] + head[g][1] <= end for g in _DATE_TIME):
        return None
    groups = distinct(texts, head_chars=end)
    heads = texts.gather(groups.first).str.slice(0, end)
    seconds = _few_seconds(heads, head) if heads.len() <= _FEW_SECONDS else None
    if seconds is None:
        seconds = heads.to_frame("s").select_seq(
            _whole_seconds(pl.col("s").str.slice(head[g][0], head[g][1]) for g in _DATE_TIME)).to_series()
    return seconds.gather(groups.index).alias("seconds__")


#: up to this many distinct seconds in a block are computed in Python (``_few_seconds``)
_FEW_SECONDS = 256


def _few_seconds(heads: pl.Series, head: dict[str, tuple[int, int]]) -> pl.Series | None:
    """``_whole_seconds`` of each of a few texts by ``civil.epoch_us_of``; None (the expression decides) unless
    every field of every text is ASCII digits, the only text whose integer cast is the same in both."""
    found: list[int | None] = []
    for text in heads.to_list():
        if text is None:
            found.append(None)
            continue
        fields = [text[offset:offset + width] for offset, width in (head[g] for g in _DATE_TIME)]
        if not all(f.isascii() and f.isdigit() for f in fields):
            return None
        found.append(epoch_us_of(*(int(f) for f in fields)))
    return pl.Series(found, dtype=pl.Int64)


def _prefix_fields(starts: pl.DataFrame, raw: pl.Series, plen: pl.Series | None, fmt: TextFormat) -> pl.DataFrame:
    """Envelope groups of start lines (``raw``, whose prefix is ``plen`` bytes; None: ``raw`` is the prefix
    alone): the fixed-width head by slicing, the rest once per distinct text.

    The head's regex consumes exactly its width, so the prefix regex's groups after the head
    are the same for every line with the same text there (level, logger, source, thread...:
    few distinct values): they are read from one line each. The date and time to the second
    are likewise computed once per distinct second.
    """
    head = {name: (offset, width) for name, offset, width in fmt.head}
    rest = {name for name in group_names(fmt.prefix) if name not in head and name != "prefix__"}
    seconds = _seconds_once(raw, head, fmt.head_width)
    if seconds is not None:
        starts = starts.with_columns_seq(seconds__=seconds)
        head = {name: where for name, where in head.items() if name not in _DATE_TIME}
    starts = starts.with_columns_seq(raw.str.slice(offset, width).alias(name) for name, (offset, width) in head.items())
    if not rest:
        return starts
    if plen is None:
        found = distinct(raw, from_byte=fmt.head_bytes)
    else:
        found = distinct(raw.cast(pl.Binary).bin.slice(fmt.head_bytes, plen - fmt.head_bytes))  # type: ignore[arg-type]
    return pl.concat([starts, _typed_once(found, raw, fmt.prefix, rest, fmt.fields)], how="horizontal")


def _strip_suffix(starts: pl.DataFrame, fmt: TextFormat) -> pl.DataFrame:
    """Cut the format's suffix (e.g. Istio's ``\\tthread=%t``) off the end of each record, reading its groups."""
    assert fmt.suffix is not None and fmt.suffix_plain is not None
    message = pl.col("m")
    # where the suffix begins (a byte offset; none: the message's end), then two slices of the bytes: a search
    # and two views instead of a replace that copies every message (24 -> 18 ms per 16 MiB block)
    at = pl.coalesce(message.str.find(fmt.suffix_plain), message.str.len_bytes())
    cut = starts["message"].to_frame("m").select_seq(m=message.cast(pl.Binary), at=at).select_seq(
        message=message.bin.slice(0, pl.col("at")).cast(pl.String), suffix=message.bin.slice(pl.col("at")))
    return _suffix_fields(starts.with_columns_seq(message=cut["message"]), cut["suffix"].cast(pl.String), fmt)


def _suffix_fields(starts: pl.DataFrame, suffix: pl.Series, fmt: TextFormat) -> pl.DataFrame:
    """The suffix's groups. Suffixes take few distinct values (one per thread): their groups are read once per
    distinct text, from the suffix alone (the end-anchored match starts where the suffix starts, so its groups
    are the same)."""
    assert fmt.suffix is not None
    groups = set(group_names(fmt.suffix))
    if not groups:
        return starts
    typed = _typed_once(distinct(suffix), suffix, "^(?:" + fmt.suffix + ")", groups, fmt.fields)
    return pl.concat([starts, typed], how="horizontal")


def _fold(starts: pl.DataFrame, conts: pl.DataFrame, one_origin: bool) -> pl.DataFrame:
    """Append continuation lines to their record's message (only the multi-line records are touched)."""
    joined = conts.group_by("origin", "rid", maintain_order=True).agg(
        cont=pl.col("raw").str.join("\n"), cont_lines=pl.len())
    if one_origin and starts.height and int(starts["rid"][0]) == 1:
        rows = (joined["rid"] - 1).cast(pl.Int64)  # one origin: the k-th start holds rid k
    else:
        rows = starts.select_seq("origin", "rid").with_row_index("row__").join(
            joined.select_seq("origin", "rid"), on=["origin", "rid"], how="inner", maintain_order="right")["row__"]
    message = starts["message"]
    folded = message.gather(rows) + "\n" + joined["cont"]
    n_lines = pl.repeat(1, starts.height, dtype=pl.Int64, eager=True).alias("n_lines")
    return starts.with_columns_seq(message.scatter(rows, folded),
                                   n_lines.scatter(rows, 1 + joined["cont_lines"].cast(pl.Int64)))


def split_text(lines: pl.DataFrame, fmt: TextFormat, *, redact: RedactOption = True) -> Envelope:
    """Fold continuation lines into their record and split the envelope of a text format."""
    lines = mark_starts(lines, fmt)
    one_origin = single_origin(lines)
    rid = pl.col("is_start").cast(pl.Int64).cum_sum()
    lines = lines.with_columns_seq(rid=rid if one_origin else rid.over("origin"))
    others = lines.filter(~pl.col("is_start")).with_columns_seq(is_cont=pl.col("raw").str.contains(CONTINUATION))
    if not others["is_cont"].all():  # other lines continue a record whose first line ends with ':'
        opener = pl.when(pl.col("is_start")).then(pl.col("raw").str.ends_with(":")).otherwise(None).forward_fill()
        opener = (opener if one_origin else opener.over("origin")).fill_null(False)
        others = others.with_columns_seq(is_cont=pl.col("is_cont") | lines.select_seq(opener).to_series().filter(
            ~lines["is_start"]) | pl.col("raw").str.contains(MESSAGE_CONTINUES))
    others = others.with_columns_seq(is_cont=pl.col("is_cont") & (pl.col("rid") > 0))
    malformed = others.filter(~pl.col("is_cont")).select_seq("line_no", "origin", "raw")
    starts = lines.filter(pl.col("is_start")).select_seq("line_no", "origin", "rid", "wrapper_ts_us", "raw", "body")
    raw = starts["raw"]
    plen = (raw.str.len_bytes() - starts["body"].str.len_bytes()).cast(pl.Int64)
    starts = _prefix_fields(starts.drop("raw"), raw, plen, fmt).rename({"body": "message"})
    conts = others.filter(pl.col("is_cont"))
    if conts.height:
        starts = _fold(starts, conts, one_origin)
    else:
        starts = starts.with_columns_seq(n_lines=pl.lit(1, dtype=pl.Int64))
    if fmt.suffix is not None:
        starts = _strip_suffix(starts, fmt)
    return _text_records(starts, malformed, fmt, redact)


def split_text_native(scan: TextScan, origin: str, fmt: TextFormat, *, redact: RedactOption = True) -> Envelope:
    """``split_text``'s envelope from the compiled scan of a block's lines (``extension.scan_text``): the scan
    has found the records, folded their continuation lines and cut the suffix; the typed fields are read
    here as ``split_text`` reads them (from the prefix alone: ``extension.scans`` keeps formats whose prefix
    regex looks past the prefix out)."""
    found = scan.records
    prefix = found["prefix"]
    starts = found.select_seq("line_no", origin=pl.lit(origin, dtype=pl.String),
                              wrapper_ts_us=pl.lit(None, dtype=pl.Int64), message="message", n_lines="n_lines")
    starts = _prefix_fields(starts, prefix, None, fmt)
    if fmt.suffix is not None:
        starts = _suffix_fields(starts, found["suffix"], fmt)
    malformed = scan.malformed.select_seq("line_no", origin=pl.lit(origin, dtype=pl.String), raw="raw")
    return _text_records(starts, malformed, fmt, redact)


def _text_records(starts: pl.DataFrame, malformed: pl.DataFrame, fmt: TextFormat, redact: RedactOption) -> Envelope:
    """The envelope of a text format's records (message folded, suffix cut, prefix groups read)."""
    if fmt.message_escaping != "none":
        starts = starts.with_columns_seq(message=_message(pl.col("message"), fmt.message_escaping))
    starts = _older_layouts(starts, fmt.fields)
    # without escaping, a newline in a message can only come from folding (computed once: three steps ask it)
    multiline = starts["n_lines"] > 1 if fmt.message_escaping == "none" else None
    df = _finish(starts, fmt.fields, redact, multiline)
    return Envelope(_select(df, multiline).with_columns_seq(n_lines=df["n_lines"]), malformed)


_WHOLE_MESSAGE = "(?s)^(?P<message>.*)$"


def _json_groups(values: pl.Series, pattern: str, fixed: Head | None = None,
                 fields: frozenset[str] = frozenset()) -> pl.DataFrame:
    """The sub-pattern's groups for one key's values; once per distinct value when values repeat (with the typed
    outputs its groups make, as ``out__NAME``: see ``_typed_here``); by slicing when the value is fixed-width
    (``fixed``) and every value has that width (else the regex decides; the date and time to the second are then
    computed once per distinct second, as ``seconds__``)."""
    if pattern == _WHOLE_MESSAGE:
        return values.alias("message").to_frame()
    if fixed is not None and values.len() and bool((values.str.len_bytes() == fixed.nbytes).all()):
        head = {name: (offset, width) for name, offset, width in fixed.fields}
        seconds = _seconds_once(values, head, fixed.width)
        sliced = values.to_frame("v").select_seq(pl.col("v").str.slice(offset, width).alias(name)
                                                 for name, (offset, width) in head.items()
                                                 if seconds is None or name not in _DATE_TIME)
        return sliced if seconds is None else sliced.with_columns_seq(seconds)
    found = distinct(values)
    reps = _groups_of_distinct(found, values, pattern)
    if found.first.len() * 4 < values.len():
        return _spread_typed(found, reps, set(reps.columns), fields)
    return values.to_frame("v").select_seq(pl.col("v").str.extract_groups(pattern)).unnest("v")


def split_json(lines: pl.DataFrame, fmt: JsonFormat, *, redact: RedactOption = True) -> Envelope:
    """One JSON object per line; keys mapped through the format's sub-patterns.

    Each line is decoded once (``json_decode`` into the format's keys); a block holding a line that
    starts like an object but is not valid JSON is read key by key instead (``_split_json_by_path``).
    """
    keys = [*fmt.keys, *(k for k in ("ConnectionId", "StreamId") if k not in fmt.keys)]
    is_object = lines["raw"].str.starts_with("{")
    try:
        decoded = _decode_objects(lines.filter(is_object)["raw"], {k: pl.String() for k in keys})
    except pl.exceptions.ComputeError:
        return _split_json_by_path(lines, fmt, redact=redact)
    is_record = decoded.select_seq(pl.all_horizontal(
        [pl.col(k).is_not_null() for k in _message_keys(fmt)] or [pl.lit(True)])).to_series()
    lines = lines.with_columns_seq(is_start=is_object.scatter(is_object.arg_true(), is_record))
    decoded = decoded.filter(is_record)
    df = lines.filter(pl.col("is_start")).select_seq("line_no", "origin", "wrapper_ts_us", "raw")
    parts = [_json_groups(decoded[key], pattern, fmt.fixed.get(key), fmt.fields) for key, pattern in fmt.keys.items()]
    df = pl.concat([df, *parts, decoded.select_seq(cid__="ConnectionId", sid__="StreamId")], how="horizontal")
    return _json_envelope(df.with_columns_seq(tag__=_tags(pl.col("cid__"), pl.col("sid__"))).drop("cid__", "sid__"),
                          lines, fmt, redact)


def _decode_objects(objects: pl.Series, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """The keys of one JSON object per value: polars' NDJSON reader over the joined lines (its parallel
    reader is 1.5-2x the per-value decoder), the per-value decoder when the reader does not give one row
    per line (it raises ``ComputeError`` on a line that is not JSON, as the reader does)."""
    if objects.len():
        try:
            body = objects.str.join("\n").cast(pl.Binary).item()
            out = pl.read_ndjson(io.BytesIO(body), schema=schema)
            if out.height == objects.len():
                return out
        except (pl.exceptions.PolarsError, ValueError):
            pass
    return objects.str.json_decode(pl.Struct(schema)).struct.unnest()


def _message_keys(fmt: JsonFormat) -> list[str]:
    """A record is a JSON object carrying these keys; any other line is malformed, as in text formats."""
    return [key for key, pattern in fmt.keys.items() if "(?P<message>" in pattern]


def _json_envelope(df: pl.DataFrame, lines: pl.DataFrame, fmt: JsonFormat, redact: RedactOption) -> Envelope:
    """Records (``df``, with the message and a ``tag__`` column) and the malformed ``lines`` (not ``is_start``)."""
    malformed = lines.filter(~pl.col("is_start")).select_seq("line_no", "origin", "raw")
    if df["tag__"].str.len_bytes().max():  # (most layouts keep the tags inside the message: nothing to add)
        df = df.with_columns_seq(message=pl.col("tag__") + pl.col("message"))
    df = df.with_columns_seq(n_lines=pl.lit(1, dtype=pl.Int64)).drop("tag__")
    df = _finish(_older_layouts(df, fmt.fields), fmt.fields, redact)
    return Envelope(_select(df).with_columns_seq(n_lines=df["n_lines"]), malformed)


def _tags(cid: pl.Expr, sid: pl.Expr) -> pl.Expr:
    """Envoy >= 1.27 bootstrap json_format puts the connection/stream tags beside the message."""
    return (pl.when(sid.is_not_null()).then(pl.lit('[Tags: "ConnectionId":"') + cid + '","StreamId":"' + sid + '"] ')
            .when(cid.is_not_null()).then(pl.lit('[Tags: "ConnectionId":"') + cid + '"] ')
            .otherwise(pl.lit("")))


def _split_json_by_path(lines: pl.DataFrame, fmt: JsonFormat, *, redact: RedactOption = True) -> Envelope:
    """Key by key with JSON path lookups: a line that is not valid JSON is simply not a record."""
    raw = pl.col("raw")
    has_message = pl.lit(True)
    for key in _message_keys(fmt):
        has_message = has_message & raw.str.json_path_match(f"$['{key}']").is_not_null()
    is_obj = raw.str.starts_with("{") & raw.str.json_path_match("$").is_not_null() & has_message
    lines = lines.with_columns_seq(is_start=is_obj)
    df = lines.filter(pl.col("is_start"))
    exprs = []
    for key, pattern in fmt.keys.items():
        exprs.append(raw.str.json_path_match(f"$['{key}']").str.extract_groups(pattern).alias(f"__{key}"))
    df = df.with_columns_seq(exprs)
    for key in fmt.keys:
        df = df.unnest(f"__{key}")
    df = df.with_columns_seq(tag__=_tags(raw.str.json_path_match("$.ConnectionId"),
                                         raw.str.json_path_match("$.StreamId")))
    env = _json_envelope(df, lines, fmt, redact)
    return _recover_unescaped(env, fmt, redact) if fmt.as_text is not None else env


def _recover_unescaped(env: Envelope, fmt: JsonFormat, redact: RedactOption) -> Envelope:
    """Read as text the malformed lines a layout with an unescaped message (``"msg":"%_"``) wrote:
    a quote in the message makes the line invalid JSON, but the pattern read as text still splits it."""
    text_fmt = fmt.as_text
    assert text_fmt is not None
    bad = env.malformed.with_columns_seq(wrapper_ts_us=pl.lit(None, dtype=pl.Int64))
    closing = text_fmt.pattern[text_fmt.pattern.rindex("%") + 2:]  # what follows the message: `"}`
    fits = bad["raw"].str.contains(text_fmt.start) & bad["raw"].str.ends_with(closing)
    if not fits.any():
        return env
    recovered = split_text(bad.filter(fits).select_seq("line_no", "raw", "origin", "wrapper_ts_us"), text_fmt,
                           redact=redact)
    records = pl.concat([env.records, recovered.records.select_seq(env.records.columns)], how="vertical_relaxed")
    malformed = pl.concat([bad.filter(~fits).select_seq(env.malformed.columns), recovered.malformed])
    return Envelope(records.sort("line_no"), malformed.sort("line_no"))


def split_envelope(lines: pl.DataFrame, fmt: TextFormat | JsonFormat, *, redact: RedactOption = True) -> Envelope:
    if isinstance(fmt, JsonFormat):
        return split_json(lines, fmt, redact=redact)
    return split_text(lines, fmt, redact=redact)
