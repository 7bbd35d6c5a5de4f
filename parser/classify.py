"""Events stage: classify every record's message with the grammar and extract typed fields.

Fast path (default): lines that differ only in numbers, ids and quoted values
share a *shape*. Each distinct shape is parsed once by the grammar; the parse
becomes a regular expression with one capture group per field, applied to all
lines of that shape at once by polars. A line its shape's expression does not
match goes through the grammar itself, so the grammar stays the authority.
Slow path (``fast=False`` or ``ENVOY_DISSECTOR_FAST=0``): the grammar on every line.
Both return the same frame; tests compare them on every fixture.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import polars as pl

from envoy_dissector.parser.grammar import UNKNOWN, MessageParse, parse_message
from envoy_dissector.parser.logformat import rust_escape
from envoy_dissector.parser.schema import FIELD_SCHEMA, KIND, PREFIX_FIELDS, QUOTED_FIELDS

#: What varies between lines of one shape: quoted strings, hex, words with digits (ids, numbers, addresses).
MASK = r"""'[^'\n]*'|"[^"\n]*"|0x[0-9a-fA-F]+|[A-Za-z_.\-]*[0-9][A-Za-z0-9_.\-]*"""
_MASK_RE = re.compile(MASK)
_PLACEHOLDER = "\x00"
_OK = "ok__"
INT_FIELDS = tuple(k for k, v in FIELD_SCHEMA.items() if v == pl.Int64()) + ("conn_id",)
BOOL_FIELDS = tuple(k for k, v in FIELD_SCHEMA.items() if v == pl.Boolean())


def fast_path_enabled() -> bool:
    return os.environ.get("ENVOY_DISSECTOR_FAST", "1") not in ("0", "false", "no")


@dataclass(frozen=True)
class ShapeRule:
    """The grammar's verdict on one shape, as a kind and (if it has fields) an extraction regex."""

    kind: str
    fields: tuple[str, ...]
    regex: str | None


def shape_rule(representative: str, parse: MessageParse) -> ShapeRule:
    """Turn the grammar's parse of one line into a regex matching every line of its shape."""
    if not parse.spans:
        return ShapeRule(parse.kind, (), None)
    regions = [(m.start(), m.end()) for m in _MASK_RE.finditer(representative)]
    bounds = {0, len(representative)}
    for a, b in regions:
        bounds |= {a, b}
    for _, a, b in parse.spans:
        bounds |= {a, b}
    cuts = sorted(bounds)
    starts = {a: name for name, a, _ in parse.spans}
    ends = {b for _, _, b in parse.spans}
    # A mask region cut by a field boundary is written out piecewise (literal + lazy capture).
    split = {r for r in regions if any(r[0] < x < r[1] for _, a, b in parse.spans for x in (a, b))}
    pieces = ["^(?P<" + _OK + ">)"]
    in_field = False
    i = 0
    while i < len(cuts) - 1:
        a = cuts[i]
        if in_field and a in ends:
            pieces.append(")")
            in_field = False
        if a in starts:
            if in_field:
                pieces.append(")")
            pieces.append(f"(?P<{starts[a]}>")
            in_field = True
        region = next((r for r in regions if r[0] <= a < r[1]), None)
        if region is not None and region not in split:
            pieces.append(f"(?:{MASK})")
            i = cuts.index(region[1])
            continue
        b = cuts[i + 1]
        if region is not None and in_field:
            pieces.append(".+?")
        else:
            pieces.append(rust_escape(representative[a:b]))
        i += 1
    if in_field:
        pieces.append(")")
    pieces.append("$")
    names = tuple(name for name, _, _ in parse.spans)
    if len(set(names)) != len(names):
        return ShapeRule(parse.kind, names, None)  # repeated label: leave such lines to the grammar
    return ShapeRule(parse.kind, names, "".join(pieces))


@dataclass
class Classifier:
    """Keeps the shape -> rule table across chunks of one capture (and across captures)."""

    rules: dict[str, ShapeRule] = field(default_factory=dict)
    fallback_lines: int = 0
    grammar_calls: int = 0

    def rule_for(self, shape: str, representative: str) -> ShapeRule:
        rule = self.rules.get(shape)
        if rule is None:
            self.grammar_calls += 1
            rule = shape_rule(representative, parse_message(representative))
            self.rules[shape] = rule
        return rule


def _grammar_rows(texts: list[str]) -> pl.DataFrame:
    """The reference: the grammar on each text; returns kind + raw string fields."""
    rows = []
    for text in texts:
        parse = parse_message(text)
        row: dict[str, str | None] = {"kind": parse.kind}
        row.update(parse.values(text))
        rows.append(row)
    schema = {"kind": pl.String, **{k: pl.String for k in (*FIELD_SCHEMA, *PREFIX_FIELDS)}}
    return pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)


def _typed(df: pl.DataFrame) -> pl.DataFrame:
    exprs = []
    for name in (*PREFIX_FIELDS, *FIELD_SCHEMA):
        if name not in df.columns:
            continue
        col = pl.col(name)
        if name in QUOTED_FIELDS:
            col = col.str.strip_prefix("'").str.strip_suffix("'")
        if name == "stream_id":
            col = col.cast(pl.UInt64, strict=False)
        elif name in INT_FIELDS:
            col = col.cast(pl.Int64, strict=False)
        elif name in BOOL_FIELDS:
            col = pl.when(pl.col(name).is_null()).then(None).otherwise(
                pl.col(name).str.to_lowercase().is_in(["true", "1"]))
        exprs.append(col.alias(name))
    return df.with_columns(exprs)


def _with_all_fields(df: pl.DataFrame) -> pl.DataFrame:
    missing = [pl.lit(None, dtype=pl.String).alias(k) for k in (*PREFIX_FIELDS, *FIELD_SCHEMA) if k not in df.columns]
    return df.with_columns(missing) if missing else df


def _texts(records: pl.DataFrame) -> pl.Series:
    return records.select(
        (pl.col("logger").fill_null("") + pl.lit("\t") + pl.col("first_line").fill_null("")).alias("text")
    ).to_series()


def classify_slow(records: pl.DataFrame) -> pl.DataFrame:
    """Grammar per line. ``records`` needs ``logger`` and ``first_line``; returns kind + fields, row-aligned."""
    found = _grammar_rows(_texts(records).to_list())
    return _finish(_with_all_fields(found))


def classify_fast(records: pl.DataFrame, classifier: Classifier | None = None) -> pl.DataFrame:
    """Grammar per distinct shape, fields by vectorised regex; same result as ``classify_slow``."""
    classifier = classifier or Classifier()
    work = pl.DataFrame({"text": _texts(records)}).with_row_index("row__")
    work = work.with_columns(shape=pl.col("text").str.replace_all(MASK, _PLACEHOLDER))
    reps = work.unique(subset="shape", keep="first", maintain_order=True).select("shape", "text")
    table_rows = []
    for shape, text in reps.iter_rows():
        rule = classifier.rule_for(shape, text)
        table_rows.append((shape, rule.kind, rule.regex))
    table = pl.DataFrame(table_rows, schema={"shape": pl.String, "kind": pl.String, "regex": pl.String},
                         orient="row")
    work = work.join(table, on="shape", how="left", maintain_order="left")
    plain = work.filter(pl.col("regex").is_null()).select("row__", "kind")
    parts = [plain]
    fallback_rows = []
    with_regex = work.filter(pl.col("regex").is_not_null())
    if with_regex.height:
        for (regex,), part in with_regex.partition_by("regex", as_dict=True).items():
            got = part.select("row__", "kind", pl.col("text").str.extract_groups(regex).alias("f")).unnest("f")
            ok = got.filter(pl.col(_OK).is_not_null()).drop(_OK)
            parts.append(ok)
            if ok.height != got.height:
                missed = got.filter(pl.col(_OK).is_null()).select("row__")
                fallback_rows.append(missed.join(part.select("row__", "text"), on="row__"))
    if fallback_rows:
        missed = pl.concat(fallback_rows)
        classifier.fallback_lines += missed.height
        slow = _grammar_rows(missed["text"].to_list())
        parts.append(pl.concat([missed.select("row__"), slow], how="horizontal"))
    out = pl.concat([_with_all_fields(p) for p in parts], how="diagonal_relaxed").sort("row__").drop("row__")
    return _finish(_with_all_fields(out))


def _finish(df: pl.DataFrame) -> pl.DataFrame:
    cols = ["kind", *PREFIX_FIELDS, *FIELD_SCHEMA]
    df = _typed(df.select(cols))
    return df.with_columns(pl.col("kind").fill_null(UNKNOWN).cast(KIND))


def classify(records: pl.DataFrame, *, fast: bool | None = None, classifier: Classifier | None = None) -> pl.DataFrame:
    """Kind + typed fields for each record (row-aligned with ``records``)."""
    if fast is None:
        fast = fast_path_enabled()
    if records.height == 0:
        return _finish(_with_all_fields(pl.DataFrame(schema={"kind": pl.String})))
    return classify_fast(records, classifier) if fast else classify_slow(records)
