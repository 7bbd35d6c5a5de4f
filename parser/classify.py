"""Events stage: classify every record's message with the grammar and extract typed fields.

Fast path (default): lines that differ only in numbers, ids and quoted values
share a *shape*. Each distinct shape is parsed once by the grammar; the field
spans of that parse, located relative to the shape's placeholders, are cut out
of all lines of that shape at once by polars.

A placeholder can stand for values the grammar lexes differently (``3`` is an
INT, ``3abc`` an INT and a WORD, ``"StreamId"`` part of a prefix, ``"Foo"`` not,
``100`` part of the literal ``encoding 100 continue headers via codec:``). So each
line's placeholder values are checked against the representative's by their
*lexical signature* (digit runs collapsed, quoted strings and hex numbers by
kind, literal-phrase runs exactly), except inside catch-all spans (``rest``,
``anything``) whose content cannot change the parse. A line that differs goes
through the grammar itself, so the grammar stays the authority.
Slow path (``fast=False`` or ``ENVOY_DISSECTOR_FAST=0``): the grammar on every line.
Both return the same frame; tests compare them on every fixture and on mutated lines.
"""
from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from envoy_dissector.parser import extension
from envoy_dissector.parser.constant import constant
from envoy_dissector.parser.distinct import Distinct, distinct_rows
from envoy_dissector.parser.extension import distinct
from envoy_dissector.parser.grammar import UNKNOWN, MessageParse, parse_message
from envoy_dissector.parser.grammar_names import LITERAL_NAMES
from envoy_dissector.parser.schema import FIELD_SCHEMA, KIND, PREFIX_FIELDS, QUOTED_FIELDS

#: What varies between lines of one shape: quoted strings, hex, words with digits (ids, numbers, addresses).
MASK = r"""'[^'\n]*'|"[^"\n]*"|0x[0-9a-fA-F]+|[A-Za-z_.\-]*[0-9][A-Za-z0-9_.\-]*"""
_MASK_RE = re.compile(MASK)
_PLACEHOLDER = "\x00"
_HEX_FULL = r"^0x[0-9a-fA-F]+$"
_HEX_FULL_RE = re.compile(_HEX_FULL)
INT_FIELDS = tuple(k for k, v in FIELD_SCHEMA.items() if v == pl.Int64()) + ("conn_id",)
BOOL_FIELDS = tuple(k for k, v in FIELD_SCHEMA.items() if v == pl.Boolean())


def fast_path_enabled() -> bool:
    return os.environ.get("ENVOY_DISSECTOR_FAST", "1") not in ("0", "false", "no")


def signature(value: str) -> str:
    """What of a placeholder value the lexer can see: quoted string / hex number / text with digits collapsed.

    >>> [signature(v) for v in ("'/a b'", "0x7f3a", "1234", "3abc", "a.b-22", '"StreamId"', '"12"')]
    ["'", 'x', '0', '0abc', 'a.b-0', '"StreamId"', '"0"']
    """
    if value.startswith("'"):
        return "'"
    if _HEX_FULL_RE.match(value):
        return "x"
    return re.sub(r"[0-9]+", "0", value)


def _signature_expr(value: pl.Expr) -> pl.Expr:
    """``signature`` as a polars expression (the two must agree; a test checks it)."""
    return (pl.when(value.str.starts_with("'")).then(pl.lit("'"))
            .when(value.str.contains(_HEX_FULL)).then(pl.lit("x"))
            .otherwise(value.str.replace_all("[0-9]+", "0")))


def _literal_runs() -> tuple[tuple[str, str, str], ...]:
    """Digit-bearing MASK matches inside the grammar's literal phrases, with the phrase around them.

    E.g. ``("encoding ", "100", " continue headers via codec:")``: a line of shape
    ``encoding \x00 continue ...`` is that literal only if its value is exactly ``100``.
    """
    out = []
    for literal in LITERAL_NAMES:
        if literal == "<INVALID>":
            continue
        text = literal[1:-1].replace("\\\\", "\\")
        for m in _MASK_RE.finditer(text):
            if any(ch.isdigit() for ch in m.group()):
                out.append((_MASK_RE.sub(_PLACEHOLDER, text[: m.start()]), m.group(),
                            _MASK_RE.sub(_PLACEHOLDER, text[m.end():])))
    return tuple(out)


LITERAL_RUNS = _literal_runs()
LITERAL_RUN_VALUES = sorted({run for _, run, _ in LITERAL_RUNS})


@dataclass(frozen=True)
class Boundary:
    """A field boundary in any line of a shape: ``literal + sum(len(first `regions` placeholders)) + delta``."""

    literal: int
    regions: int
    delta: int


@dataclass(frozen=True)
class ShapeRule:
    """The grammar's verdict on one shape: its kind, where each field sits, and what a line must share
    with the representative for the verdict to hold."""

    kind: str
    fields: tuple[tuple[str, Boundary, Boundary], ...]
    #: placeholders outside catch-all spans, and the representative's signatures there
    checked: tuple[int, ...] = ()
    signatures: tuple[str, ...] = ()
    #: placeholders holding a run of a literal phrase in the representative, or cut by a field boundary
    #: with digits on both sides of the cut: values must be equal
    exact: tuple[int, ...] = ()
    exact_values: tuple[str, ...] = ()
    #: placeholders where a literal phrase could form: values must not be one of LITERAL_RUN_VALUES
    forbid: tuple[int, ...] = ()


def shape_rule(shape: str, values: list[str], parse: MessageParse) -> ShapeRule:
    """Locate the grammar's field spans (found on one representative line) relative to the placeholders.

    ``shape`` has ``\\x00`` where MASK matched and ``values`` are the matched texts of the
    representative, both from the same regex engine, so positions line up exactly.
    """
    regions: list[tuple[int, int]] = []
    literal_before: list[int] = []
    pos = lit = 0
    for ch in shape:
        if ch == _PLACEHOLDER:
            k = len(regions)
            regions.append((pos, pos + len(values[k])))
            literal_before.append(lit)
            pos += len(values[k])
        else:
            pos += 1
            lit += 1

    def boundary(p: int, is_end: bool) -> Boundary:
        consumed = 0  # placeholder characters before p
        for k, (a, b) in enumerate(regions):
            if a < p < b:  # inside a placeholder: a constant offset from its start (or end)
                return Boundary(literal_before[k], k + 1, p - b) if is_end else Boundary(literal_before[k], k, p - a)
            if b <= p and (is_end or a < p):
                consumed += b - a
                continue
            return Boundary(p - consumed, k, 0)
        return Boundary(p - consumed, len(regions), 0)

    fields = tuple((name, boundary(a, False), boundary(b, True)) for name, a, b in parse.spans)
    # A field starting inside a placeholder is located from the placeholder's start, one ending inside
    # it from its end: right only if no digits (whose count varies) lie in between. Else: equal values.
    pinned = set()
    for _, fa, fb in parse.spans:
        for k, (a, b) in enumerate(regions):
            if (a < fa < b and any(ch.isdigit() for ch in values[k][: fa - a])) or \
                    (a < fb < b and any(ch.isdigit() for ch in values[k][fb - a :])):
                pinned.add(k)
    slots = [i for i, ch in enumerate(shape) if ch == _PLACEHOLDER]
    checked, exact, forbid = [], [], []
    for k, (a, b) in enumerate(regions):
        free = any(fa <= a and b <= fb for fa, fb in parse.free)
        if not free:
            checked.append(k)
        fits = set() if free else {run for left, run, right in LITERAL_RUNS
                                   if shape[: slots[k]].endswith(left) and shape[slots[k] + 1 :].startswith(right)}
        if values[k] in fits or k in pinned:
            exact.append(k)
        elif fits:
            forbid.append(k)
    return ShapeRule(parse.kind, fields, tuple(checked), tuple(signature(values[k]) for k in checked),
                     tuple(exact), tuple(values[k] for k in exact), tuple(forbid))


#: The columns that define a record class, and how many classes the cache keeps.
CLASS_KEY = ("logger", "canon__", "rest__")
#: (each chunk's lookup joins against the cache: 16 ms at 1.5 k classes, 50 ms at 200 k in isolation; on a
#: 3.3 GB capture a 20 k cap, with its more frequent restarts, was no faster than 200 k)
CLASS_CACHE = 200_000


@dataclass
class Classifier:
    """Keeps the shape -> rule table across chunks of one capture (and across captures)."""

    rules: dict[str, ShapeRule] = field(default_factory=dict)
    grammar_calls: int = 0
    #: distinct texts whose values did not fit their shape's representative, classified by the grammar one by one
    fallback_lines: int = 0
    #: results per record class (logger, id-prefix form, rest of the first line) seen so far, up to CLASS_CACHE rows
    classes: pl.DataFrame | None = field(default=None, repr=False)
    #: chunks are classified on several threads: one grammar call per new shape, exact counters
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _generation: int = field(default=0, repr=False, compare=False)  # bumped when the class cache starts over
    #: class key -> its row in ``classes`` (a new dict when the cache starts over; rows are only added to one)
    _rows: dict[tuple[str | None, str, bytes], int] = field(default_factory=dict, repr=False, compare=False)

    def snapshot(self) -> tuple[pl.DataFrame | None, tuple[int, int]]:
        """The class cache and where it stood (generation, height), for ``remember``."""
        with self._lock:
            classes = self.classes
            return classes, (self._generation, classes.height if classes is not None else 0)

    def rows_of(self, keys: pl.DataFrame, since: tuple[int, int]) -> pl.Series:
        """Row of each class of ``keys`` (``CLASS_KEY`` columns) in the cache as ``snapshot`` gave it, null if
        not there: a dictionary lookup per class, where a join would hash the whole cache at every chunk."""
        with self._lock:
            rows = self._rows if since[0] == self._generation else {}
        height = since[1]
        found = (rows.get(k) for k in keys.select_seq(CLASS_KEY).iter_rows())
        return pl.Series([r if r is not None and r < height else None for r in found], dtype=pl.UInt32)

    def remember(self, found: pl.DataFrame, since: tuple[int, int],
                 in_use: Callable[[], pl.DataFrame] | None = None) -> None:
        """Adds newly classified classes to the cache (``since``: the cache's state when the caller looked
        up; classes other threads added after that are not added twice).

        A full cache starts over with the classes the calling chunk used (``in_use``) and the new
        ones: one-off classes (per-request header values) pile up over a long capture, while the
        recurring ones are in use in every chunk.
        """
        with self._lock:
            if found.height > CLASS_CACHE:
                return
            if self.classes is None or self.classes.height + found.height > CLASS_CACHE:
                kept = in_use() if in_use is not None and self.classes is not None else found.head(0)
                table = pl.concat([kept, found]) if kept.height + found.height <= CLASS_CACHE else found
                self.classes = table.rechunk()
                self._generation += 1
                self._rows = {k: i for i, k in enumerate(table.select_seq(CLASS_KEY).iter_rows())}
                return
            generation, height = since
            recent = self.classes.slice(height if generation == self._generation else 0)
            if recent.height:
                found = found.join(recent.select_seq(CLASS_KEY), on=list(CLASS_KEY), how="anti", nulls_equal=True)
            start = self.classes.height
            table = pl.concat([self.classes, found])
            self.classes = table.rechunk() if table.n_chunks() > 16 else table
            self._rows.update((k, start + i) for i, k in enumerate(found.select_seq(CLASS_KEY).iter_rows()))

    #: shapes met in this capture (``rules`` may also hold shapes from earlier runs: see shape_cache.py)
    seen: set[str] = field(default_factory=set, repr=False)

    def rule_for(self, shape: str, values: list[str], representative: str) -> ShapeRule:
        self.seen.add(shape)
        rule = self.rules.get(shape)
        if rule is None:
            with self._lock:
                rule = self.rules.get(shape)
                if rule is None:
                    self.grammar_calls += 1
                    rule = shape_rule(shape, values, parse_message(representative))
                    self.rules[shape] = rule
        return rule

    def count_fallback(self, lines: int) -> None:
        with self._lock:
            self.fallback_lines += lines


def _grammar_rows(texts: list[str]) -> pl.DataFrame:
    """The reference: the grammar on each text; returns kind + raw string fields."""
    rows = []
    for text in texts:
        parse = parse_message(text)
        row: dict[str, str | None] = {"kind": parse.kind}
        row.update(parse.values(text))
        rows.append(row)
    schema = {"kind": pl.String, **dict.fromkeys((*FIELD_SCHEMA, *PREFIX_FIELDS), pl.String)}
    return pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)


def _typed(present: list[str]) -> list[pl.Expr]:
    """Each prefix field and field typed, from its string column (a field not ``present``: from nulls)."""
    exprs = []
    for name in (*PREFIX_FIELDS, *FIELD_SCHEMA):
        source = pl.col(name) if name in present else pl.lit(None, dtype=pl.String)
        col = source
        if name in QUOTED_FIELDS:
            col = col.str.strip_prefix("'").str.strip_suffix("'")
        if name == "dispatch_buffered":  # a bool: printed 0/1 or false/true depending on the build
            col = col.str.to_lowercase().replace({"false": "0", "true": "1"}).cast(pl.Int64, strict=False)
        elif name == "stream_id":
            col = col.cast(pl.UInt64, strict=False)
        elif name in INT_FIELDS:
            col = col.cast(pl.Int64, strict=False)
        elif name in BOOL_FIELDS:
            col = pl.when(source.is_null()).then(None).otherwise(source.str.to_lowercase().is_in(["true", "1"]))
        exprs.append(col.alias(name))
    return exprs


def _with_all_fields(df: pl.DataFrame) -> pl.DataFrame:
    missing = [pl.lit(None, dtype=pl.String).alias(k) for k in (*PREFIX_FIELDS, *FIELD_SCHEMA) if k not in df.columns]
    return df.with_columns_seq(missing) if missing else df


def _texts(records: pl.DataFrame) -> pl.Series:
    """``logger<TAB>first line`` per record; a NUL (the shapes' placeholder) becomes U+FFFD."""
    text = pl.col("logger").fill_null("") + pl.lit("\t") + pl.col("first_line").fill_null("")
    return records.select_seq(text.str.replace_all(_PLACEHOLDER, "\ufffd", literal=True).alias("text")).to_series()


def classify_slow(records: pl.DataFrame) -> pl.DataFrame:
    """Grammar per line. ``records`` needs ``logger`` and ``first_line``; returns kind + fields, row-aligned."""
    found = _grammar_rows(_texts(records).to_list())
    return _finish(_with_all_fields(found))


def _field_mode(a: Boundary, b: Boundary) -> int:
    """0: the field is (part of) one placeholder; 1: pure literal text; 2: anything else."""
    if b.regions == a.regions + 1 and a.literal == b.literal:
        return 0
    if a.regions == b.regions and a.delta == 0 and b.delta == 0:
        return 1
    return 2


@dataclass(frozen=True)
class _FieldPlan:
    """Per-shape parameters of one field, as arrays indexed by shape id."""

    mode: np.ndarray  # -1 absent, 0 one placeholder, 1 literal, 2 positional
    params: np.ndarray  # (shapes, 6): Boundary start (literal, regions, delta), end (literal, regions, delta)
    const: list[str | None]


def _plans(rules: list[ShapeRule], shapes: list[str]) -> dict[str, _FieldPlan]:
    names: dict[str, None] = {}
    for rule in rules:
        names.update((n, None) for n, _, _ in rule.fields)
    plans = {}
    for name in names:
        mode = np.full(len(rules), -1, dtype=np.int64)
        params = np.zeros((len(rules), 6), dtype=np.int64)
        const: list[str | None] = [None] * len(rules)
        for i, (rule, shape) in enumerate(zip(rules, shapes)):
            where = next(((a, b) for n, a, b in rule.fields if n == name), None)
            if where is None:
                continue
            a, b = where
            mode[i] = _field_mode(a, b)
            params[i] = (a.literal, a.regions, a.delta, b.literal, b.regions, b.delta)
            if mode[i] == 1:  # literal text: in the shape, each placeholder before it is one character
                const[i] = shape[a.literal + a.regions : b.literal + b.regions]
        plans[name] = _FieldPlan(mode, params, const)
    return plans


def _extract(cut_from: pl.DataFrame, rows: np.ndarray | None, mode: int, params: np.ndarray,
             const: list[str | None], sids: np.ndarray) -> pl.Series:
    """Values of one field for the ``rows`` of ``cut_from`` (``text``, ``values``; None: every row), which all
    share ``mode``; ``sids``: their shapes. The rows are taken inside the query: the frame is not gathered."""
    if mode == 1:
        return pl.Series(const, dtype=pl.String).gather(sids)
    p = params[sids]

    def param(k: int) -> pl.Expr:
        return pl.lit(pl.Series(p[:, k]))

    def column(name: str) -> pl.Expr:
        return pl.col(name) if rows is None else pl.col(name).gather(pl.Series(rows))

    if mode == 0:
        value = column("values").list.get(param(1), null_on_oob=True)
        return cut_from.select_seq(value.str.slice(param(2), value.str.len_chars().cast(pl.Int64) - param(2) + param(5))
                                   ).to_series()
    frame = cut_from.select_seq(column("text"), column("values"))
    cum = pl.concat_list(pl.lit(0, dtype=pl.UInt32), pl.col("values").list.eval(pl.element().str.len_chars().cum_sum()))
    frame = frame.with_columns_seq(cum=cum)
    start = param(0) + pl.col("cum").list.get(param(1), null_on_oob=True).cast(pl.Int64) + param(2)
    end = param(3) + pl.col("cum").list.get(param(4), null_on_oob=True).cast(pl.Int64) + param(5)
    return frame.select_seq(pl.col("text").str.slice(start, end - start)).to_series()


def classify_fast(records: pl.DataFrame, classifier: Classifier | None = None) -> pl.DataFrame:
    """Grammar per distinct shape, fields by vectorised slicing; same result as ``classify_slow``."""
    classifier = classifier or Classifier()
    work = pl.DataFrame({"text": _texts(records)}).with_columns_seq(
        shape=pl.col("text").str.replace_all(MASK, _PLACEHOLDER))
    reps = work.unique(subset="shape", keep="first", maintain_order=True).with_columns_seq(
        values=pl.col("text").str.extract_all(MASK)).with_row_index("sid")
    rules = [classifier.rule_for(shape, values, text)
             for shape, text, values in reps.select_seq("shape", "text", "values").iter_rows()]
    sid = work.select_seq(pl.col("shape").replace_strict(reps["shape"], reps["sid"], return_dtype=pl.Int64)
                          ).to_series().to_numpy()
    out = {"kind": pl.Series("kind", [r.kind for r in rules], dtype=pl.String).gather(sid)}
    plans = _plans(rules, reps["shape"].to_list())
    work = work.with_columns_seq(values=pl.col("text").str.extract_all(MASK))
    n = work.height
    misfits = _misfits(work, rules, sid)
    cut_from = work.select_seq("text", "values")
    for name, plan in plans.items():
        column = constant(None, n, pl.String, name)
        row_mode = plan.mode[sid].copy()
        row_mode[misfits] = -1  # the grammar classifies those below
        for mode in (0, 1, 2):
            rows = np.flatnonzero(row_mode == mode)
            if rows.size == n:  # (every row cut one way: no scatter)
                column = _extract(cut_from, None, mode, plan.params, plan.const, sid).alias(name)
            elif rows.size:
                column = column.scatter(rows, _extract(cut_from, rows, mode, plan.params, plan.const, sid[rows]))
        out[name] = column
    df = pl.DataFrame(out)
    if misfits.size:
        classifier.count_fallback(int(misfits.size))
        df = _with_all_fields(df)
        exact = _with_all_fields(_grammar_rows(work["text"].gather(misfits).to_list()))
        df = df.with_columns_seq(df[c].scatter(misfits, exact[c]) for c in ("kind", *PREFIX_FIELDS, *FIELD_SCHEMA))
    return _finish(df)


def _misfits(work: pl.DataFrame, rules: list[ShapeRule], sid: np.ndarray) -> np.ndarray:
    """Rows whose placeholder values do not fit their shape's representative (see ShapeRule)."""
    def per_row(lists: list[tuple], dtype: pl.DataType) -> pl.Series:
        return pl.Series([list(x) for x in lists], dtype=pl.List(dtype)).gather(sid)

    values = pl.col("values")
    frame = work.select_seq("values").with_columns_seq(
        chk=per_row([r.checked for r in rules], pl.UInt32()), sig=per_row([r.signatures for r in rules], pl.String()))
    ok = values.list.gather(pl.col("chk")).list.eval(_signature_expr(pl.element())) == pl.col("sig")
    if any(r.exact for r in rules):
        frame = frame.with_columns_seq(ex=per_row([r.exact for r in rules], pl.UInt32()),
                                       exv=per_row([r.exact_values for r in rules], pl.String()))
        ok = ok & (values.list.gather(pl.col("ex")) == pl.col("exv"))
    if any(r.forbid for r in rules):
        frame = frame.with_columns_seq(fb=per_row([r.forbid for r in rules], pl.UInt32()))
        ok = ok & ~values.list.gather(pl.col("fb")).list.eval(pl.element().is_in(LITERAL_RUN_VALUES)).list.any()
    return frame.select_seq(ok.not_()).to_series().arg_true().to_numpy()


def _finish(df: pl.DataFrame) -> pl.DataFrame:
    """``kind`` and every prefix field and field typed, in one query (a field ``df`` lacks: nulls)."""
    return df.select_seq(pl.col("kind").fill_null(UNKNOWN).cast(KIND), *_typed(df.columns))


#: The grammar's ``prefix`` rule as a regex: ``[C12][S34] `` and both ``[Tags: ...] `` spellings.
ID_PREFIX = (r'^(?:\[C[0-9]+\](?:\[S[0-9]+\])? |\[Tags: "ConnectionId":"[0-9]+"(?:,"StreamId":"[0-9]+")?\] '
             r'|\[Tags: \\"ConnectionId\\":\\"[0-9]+\\"(?:,\\"StreamId\\":\\"[0-9]+\\")?\] )')
#: Stand-ins for the ids in a class's representative text: a field equal to one came from the prefix.
SENTINELS = ("918273645", "192837465")


def _id_prefixes(candidates: pl.Series) -> pl.DataFrame:
    """Per candidate (a line's start up to its first ``] ``): is it the grammar's id prefix, its length,
    its ids (typed: a connection id that does not fit its type is null), and its text with the ids replaced by
    ``SENTINELS``."""
    text = pl.col("cand__").cast(pl.String)
    valid = text.str.contains(ID_PREFIX + "$").fill_null(False)
    ids = text.str.extract_all("[0-9]+")
    canon = text.str.replace("[0-9]+", SENTINELS[0]).str.replace(
        "(\\]\\[S|\"StreamId\\\\?\":\\\\?\")[0-9]+", "${1}" + SENTINELS[1])
    return candidates.to_frame("cand__").select_seq(
        plen__=pl.when(valid).then(pl.col("cand__").bin.size()).otherwise(0).cast(pl.Int64),
        conn__=pl.when(valid).then(ids.list.get(0, null_on_oob=True).cast(pl.Int64, strict=False)),
        stream__=pl.when(valid).then(ids.list.get(1, null_on_oob=True).cast(pl.UInt64, strict=False)),
        canon__=pl.when(valid).then(canon).otherwise(pl.lit("")), pfx__=pl.when(valid).then(text).otherwise(pl.lit("")))


#: ``extension.record_classes``' prefix forms (0: none), as their text with the ids replaced by ``SENTINELS``.
PREFIX_FORMS = ("", f"[C{SENTINELS[0]}] ", f"[C{SENTINELS[0]}][S{SENTINELS[1]}] ",
                f'[Tags: "ConnectionId":"{SENTINELS[0]}"] ',
                f'[Tags: "ConnectionId":"{SENTINELS[0]}","StreamId":"{SENTINELS[1]}"] ',
                f'[Tags: \\"ConnectionId\\":\\"{SENTINELS[0]}\\"] ',
                f'[Tags: \\"ConnectionId\\":\\"{SENTINELS[0]}\\",\\"StreamId\\":\\"{SENTINELS[1]}\\"] ')


def _class_rows(records: pl.DataFrame) -> pl.DataFrame:
    """Per record: ``logger``, its id prefix with the ids replaced by ``SENTINELS`` (``canon__``) and as it is
    (``pfx__``; both empty without a prefix), the rest of its first line (``rest__``) and the prefix's ids
    (``conn__``, ``stream__``). The reference for ``extension.record_classes``."""
    line = pl.col("first_line").fill_null("").cast(pl.Binary)
    # every spelling of the id prefix ends at the line's first "] "
    cand = pl.when(line.bin.starts_with(b"[")).then(line.bin.head(
        pl.col("first_line").str.find("] ", literal=True).cast(pl.Int64) + 2))
    rows = records.select_seq("logger", line__=line, cand__=cand)
    groups = distinct(rows["cand__"])
    rows = pl.concat([rows.drop("cand__"), groups.spread(_id_prefixes(rows["cand__"].gather(groups.first)))],
                     how="horizontal")
    return rows.select_seq("logger", canon__=pl.col("canon__").fill_null(""), pfx__=pl.col("pfx__").fill_null(""),
                           rest__=pl.col("line__").bin.slice(pl.col("plen__").fill_null(0)), conn__="conn__",
                           stream__="stream__")


@dataclass(frozen=True)
class _RecordClasses:
    """The records' classes: which class each record is in (``classes``), one key row per class (``keys``:
    ``CLASS_KEY``), and each record's own ids (``conn``, ``stream``)."""

    classes: Distinct
    keys: pl.DataFrame
    conn: pl.Series
    stream: pl.Series


def _classes_of_rows(rows: pl.DataFrame) -> _RecordClasses:
    key = list(CLASS_KEY)
    classes = distinct_rows(rows.select_seq(key))
    return _RecordClasses(classes, rows.select_seq(key)[classes.first], rows["conn__"], rows["stream__"])


def _record_classes(records: pl.DataFrame) -> _RecordClasses:
    """The records' classes: in one compiled pass where ``extension.record_classes`` takes them, else by
    ``_class_rows``; the same classes, keys and ids either way."""
    found = extension.record_classes(records["logger"], records["first_line"])
    if found is None:
        return _classes_of_rows(_class_rows(records))
    per_class = found.classes
    first = per_class["first"]
    line = records["first_line"].gather(first).fill_null("").cast(pl.Binary).to_frame("line__")
    keys = line.select_seq(
        records["logger"].gather(first),
        canon__=per_class["form"].replace_strict(range(len(PREFIX_FORMS)), PREFIX_FORMS, return_dtype=pl.String),
        rest__=pl.col("line__").bin.slice(per_class["prefix_len"]))
    return _RecordClasses(Distinct(first, found.records["class"]), keys, found.records["conn"].alias("conn__"),
                          found.records["stream"].alias("stream__"))


def _with_sentinel(key: pl.DataFrame) -> pl.Series:
    """Classes whose text already holds a sentinel: their records keep their own ids (their own class)."""
    logger = pl.col("logger").fill_null("")
    return key.select_seq(pl.any_horizontal(
        *[logger.str.contains(s, literal=True) for s in SENTINELS],
        *[pl.col("rest__").bin.contains(s.encode()) for s in SENTINELS])).to_series()


#: Columns a class lookup always returns: the kind, the ids a record's own prefix may replace, and the status a
#: response header dump fills (``headers.header_columns``).
_ALWAYS = frozenset({"kind", "conn_id", "stream_id", "status"})


def classify_distinct(records: pl.DataFrame, classifier: Classifier | None = None,
                      fields: frozenset[str] | None = None) -> pl.DataFrame:
    """``classify_fast`` once per class of records, gathered back to every record.

    Records repeat: keep-alive traffic logs the same messages over and over, differing only in
    the connection and stream ids of the ``[C..][S..] `` prefix (a 16 MiB block of 91 k records
    holds ~20 k distinct first lines but ~1.5 k once the ids are set aside). A class is (logger,
    prefix form, rest of the first line); its representative carries sentinel ids, and a
    conn_id/stream_id equal to a sentinel is the record's own id from its prefix. The ids are
    digit runs in the grammar's ``prefix`` rule, so records of a class have the same shape and
    lexical signature and the fast path would give them one rule anyway. Results are kept in
    the classifier: a later chunk classifies only the classes it has not seen. ``fields``: the field columns
    to return (default all): each returned column is gathered for every record.
    """
    classifier = classifier if classifier is not None else Classifier()
    found_classes = _record_classes(records)
    classes, keys = found_classes.classes, found_classes.keys  # keys: one row per class, in order of first appearance
    own_conn, own_stream = found_classes.conn, found_classes.stream  # (typed once per distinct prefix)
    key = list(CLASS_KEY)

    def answers(table: pl.DataFrame) -> list[str]:
        """The columns of a class table the caller wants (not the class key)."""
        return [c for c in table.columns if c not in key and (fields is None or c in fields or c in _ALWAYS)]

    def lookup(table: pl.DataFrame) -> pl.DataFrame:
        return keys.join(table.select_seq(*key, *answers(table)), on=key, how="left", maintain_order="left",
                         nulls_equal=True)

    known, state = classifier.snapshot()

    def unknown_classes() -> tuple[pl.DataFrame | None, pl.Series]:
        """The cache's answers for ``keys`` (None: no cache yet) and the classes it cannot answer."""
        if known is None:
            return None, constant(True, keys.height, pl.Boolean)
        hits = pl.concat([keys, known.select_seq(answers(known))[classifier.rows_of(keys, state)]], how="horizontal")
        return hits, hits["kind"].is_null()

    found, missing = unknown_classes()
    if found is None or missing.any():
        new = keys.filter(missing)
        clash = _with_sentinel(new)
        if clash.any():  # rare: such records keep their real ids in their class key
            rows = _class_rows(records)
            own = new.filter(clash).select_seq("logger", "rest__", own__=pl.lit(True)).unique(subset=["logger",
                                                                                                      "rest__"])
            flag = rows.select_seq("logger", "rest__").join(own, on=["logger", "rest__"], how="left",
                                                            maintain_order="left", nulls_equal=True)["own__"]
            rows = rows.with_columns_seq(canon__=pl.when(flag.is_not_null()).then(pl.col("pfx__"))
                                         .otherwise(pl.col("canon__")))
            # their new keys may be cached already (an earlier chunk had the same line): look up again
            classes = distinct_rows(rows.select_seq(key))
            keys = rows.select_seq(key)[classes.first]
            found, missing = unknown_classes()
            new = keys.filter(missing)
        text = pl.col("canon__") + pl.col("rest__").cast(pl.String)
        extra = pl.concat([new, classify_fast(new.select_seq("logger", first_line=text), classifier)], how="horizontal")
        hits = found
        classifier.remember(extra, since=state, in_use=None if hits is None else (
            lambda: hits.filter(hits["kind"].is_not_null())))
        if found is None:
            found = lookup(extra)
        else:  # fill the classes the cache did not know
            at = missing.arg_true()
            fill = keys[at].join(extra, on=key, how="left", maintain_order="left", nulls_equal=True)
            found = found.with_columns_seq(found[c].scatter(at, fill[c]) for c in found.columns if c not in key)
    found = found.drop(key)
    # every record takes its class's row (a field no class of the chunk has stays a column of nulls, not gathered),
    # in one take of the frame: a gather per column cost ~1.8x as much (bench/README.md, classify's gather)
    held = [c for c in found.columns if found[c].null_count() < found.height]
    taken = classes.spread(found.select_seq(held)) if held else None
    per_record = pl.DataFrame([taken[c] if taken is not None and c in held
                               else constant(None, records.height, found[c].dtype, c) for c in found.columns])
    return per_record.with_columns_seq(
        conn_id=pl.when(pl.col("conn_id") == int(SENTINELS[0])).then(own_conn).otherwise(pl.col("conn_id")),
        stream_id=pl.when(pl.col("stream_id") == int(SENTINELS[1])).then(own_stream).otherwise(pl.col("stream_id")))


def classify(records: pl.DataFrame, *, fast: bool | None = None, classifier: Classifier | None = None,
             fields: frozenset[str] | None = None) -> pl.DataFrame:
    """Kind + typed fields for each record (row-aligned with ``records``); ``fields`` (default all): the field
    columns wanted — the fast path returns only those (the others may be there, or not)."""
    if fast is None:
        fast = fast_path_enabled()
    if records.height == 0:
        return _finish(_with_all_fields(pl.DataFrame(schema={"kind": pl.String})))
    found = classify_distinct(records, classifier, fields) if fast else classify_slow(records)
    return _without_codec_stream_ids(records, found)


#: Loggers whose ``[S..]`` / ``"StreamId"`` is the codec's own stream number (QUIC's 0, 4, 8...), not the
#: connection manager's stream id: kept out of ``stream_id`` so they never make a stream of their own.
CODEC_STREAM_LOGGERS = ("quic_stream",)


def _without_codec_stream_ids(records: pl.DataFrame, found: pl.DataFrame) -> pl.DataFrame:
    if "logger" not in records.columns or "stream_id" not in found.columns:
        return found
    codec = records["logger"].is_in(CODEC_STREAM_LOGGERS)
    if not codec.any():
        return found
    return found.with_columns_seq(stream_id=pl.when(codec).then(None).otherwise(pl.col("stream_id")))
