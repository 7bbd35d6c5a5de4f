"""Lines in an Envoy capture that are not Envoy's, by kind: set aside, counted, never read as records.

The raw ``kubectl logs POD -c istio-proxy`` interleaves Envoy's records with pilot-agent's own lines
(``FLAG: --concurrency="2"``, xDS, SDS and CA lines, text or JSON), access-log lines (one-line text or
JSON, or pretty-printed JSON objects over many lines) and the application's output; pastes add the
command that produced them, elisions and markdown. Each kind has one regex, used both on the detection
sample (Python) and on every line (polars), so the two agree. A line that is a record start of the
capture's format is never foreign: callers test the format first. Lines that continue a foreign line
(pilot-agent's multi-line ``Effective config:``) take its kind.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

import polars as pl

from envoy_dissector.parser.envelope import CONTINUATION, MESSAGE_CONTINUES
from envoy_dissector.parser.limits import OVERSIZE_MARK

_ISO = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+(?:Z|[+-][0-9]{2}:?[0-9]{2})"
#: pilot-agent's JSON scopes (an Envoy logger of Istio <= 1.9 JSON is a bare scope too: only these count)
_AGENT_SCOPES = ("ads|xdsproxy|sds|cache|citadelclient|default|klog|healthcheck|security|model|status|caclient"
                 "|googleca|spiffe|telemetry|monitoring|bootstrap|iptables|cni|validation|ca|xds|dns|wasm|envoy")
#: Access-log keys of Envoy / Istio JSON access logs (one line, or one key per line when pretty-printed).
_ACCESS_KEYS = (r'"(?:response_code|response_flags|upstream_host|upstream_cluster|downstream_remote_address'
                r'|downstream_local_address|bytes_sent|bytes_received|start_time|upstream_service_time'
                r'|x_forwarded_for|request_id|route_name|upstream_transport_failure_reason|duration)"\s*:')
_METHOD = r"(?:GET|POST|PUT|DELETE|HEAD|OPTIONS|PATCH|CONNECT|TRACE|-)"

#: (kind, regex on a line that is not a record start of the capture's format), tried in order.
KINDS: tuple[tuple[str, str], ...] = (
    # `[2024-05-01T10:00:00.123Z] "GET /x HTTP/1.1" 200 ...` (Envoy's default access-log format)
    ("access-log", r'^\[' + _ISO + r'\] "' + _METHOD + r' '),
    ("access-log", r"^\{.*" + _ACCESS_KEYS),
    # pilot-agent / istiod text: `TS<tab>info<tab>[scope<tab>]message` (a record start of an Istio text format
    # is an Envoy line and never gets here); tabs may have become spaces in a paste
    ("pilot-agent", r"^" + _ISO + r"[ \t]+(?:debug|info|warn|warning|error|fatal|critical)[ \t]+[^ \t]"),
    ("pilot-agent", r'^\{"level":"[a-z]+","time":"[^"]*",(?:"scope":"(?:' + _AGENT_SCOPES + r')",)?"msg":'),
    # another program's console log with an upper-case level (kuma-dp's zap lines, Java and Go apps)
    ("app-output", r"^" + _ISO + r"\t(?:DEBUG|INFO|WARN|WARNING|ERROR)\t"),
    ("app-output", r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9:.,]+[ :]+(?:DEBUG|INFO|WARN|WARNING|ERROR)\b"),
    # the command that produced the paste: `$ kubectl logs ...`, `user@host:~$ ...`, `❯ stern ...`
    ("shell-prompt", r"^(?:[A-Za-z0-9_.-]+@[A-Za-z0-9_.-]+(?::[^\s$#]*)?\s?|[A-Za-z0-9_.@:~/-]+ )?[$#❯➜] +[a-z]"),
    ("shell-prompt", r"^[A-Za-z0-9_.-]+@[A-Za-z0-9_.-]+(?::[^\s]*)?[ \t]*[$#%]?[ \t]*$"),  # a prompt, the command cut
    ("shell-prompt", r"^(?:kubectl|stern|docker|docker-compose|podman|istioctl|oc|kail|k|curl|grpcurl|journalctl)"
                     r" +(?:-|logs|compose|service|pc|proxy-config|exec|https?:)"),
    # a paste's elision: `...`, `……`, `[...]`, `... omitted ...`, `<snip>`
    ("elision", r"^\s*(?:\.{2,}|…+|\[\.\.\.\]|<snip(?:ped)?>|-+ ?snip ?-+|\.\.\.? ?\(?[A-Za-z ]*\)?)\s*$"),
    ("elision", r"^\s*(?:\.\.\.|…) ?(?:[A-Za-z0-9 ,()]*(?:omitted|truncated|removed|skipped|more|lines|snip)"
                r"[A-Za-z0-9 ,()]*)(?:\.\.\.|…)?\s*$"),
    ("elision", r"^\s*(?:\.\.\.|…)[^\s.…]{1,12}(?:\.\.\.|…)\s*$"),  # a word between ellipses: `...중략...`
    # markdown around a paste: fences, bold lines, headings, quotes
    ("markdown", r"^\s*(?:```|~~~)"),
    ("markdown", r"^\s*\*\*[^*].*\*\*:?\s*$"),
    ("markdown", r"^#{1,6} [A-Za-z]"),
    ("markdown", r"^>(?: |$)"),
)
#: the kind of a line that is neither an Envoy record nor one of KINDS
UNRECOGNISED = "unrecognised"
#: every kind a line outside the records is counted under (diagnostics' ``lines_aside_by_kind``)
ALL_KINDS: tuple[str, ...] = (*dict.fromkeys(kind for kind, _ in KINDS), "json-object", "blank", UNRECOGNISED,
                              "oversize", "unread")

#: kinds a paste puts between a record and its continuation lines (they continue nothing themselves)
_BETWEEN = ("shell-prompt", "elision", "markdown")
#: the kinds that make a chunk be read again with its foreign lines set aside
FOREIGN_KINDS: tuple[str, ...] = tuple(dict.fromkeys(kind for kind, _ in KINDS))
_COMPILED = tuple((kind, re.compile(regex)) for kind, regex in KINDS)
#: An Envoy line of any known layout (for the detection sample: the format is not known yet)
_ENVOY_MARK = (r"\[C[0-9]+\]|\]\[(?:trace|debug|info|warning|warn|error|critical)\]\["
               r"|^\S+[ \t]+\w+[ \t]+(?:\S+:\d+[ \t]+)?"
               r'envoy [a-z_0-9.]+[ \t]|"scope":\s*"envoy |envoy\.[a-z_0-9]+\(\d+\) ')
ENVOY_MARK = re.compile(_ENVOY_MARK)
_CONTINUES = re.compile(f"{CONTINUATION}|{MESSAGE_CONTINUES}")


def kind_of(line: str) -> str | None:
    """The foreign kind of one line of the detection sample (None: it may be Envoy's, or continues a record).

    An Istio text line whose scope is ``envoy X`` is Envoy's even though it looks like pilot-agent's.
    """
    if ENVOY_MARK.search(line):
        return None
    for kind, pattern in _COMPILED:
        if pattern.search(line):
            return kind
    return None


def count_kinds(lines: Iterable[str]) -> Counter[str]:
    """How many lines of each foreign kind (lines continuing a foreign line count with it)."""
    found: Counter[str] = Counter()
    last: str | None = None
    for line in lines:
        kind = kind_of(line)
        if kind is None and last is not None and _CONTINUES.match(line):
            kind = last  # pilot-agent's multi-line `Effective config:` and the like
        if kind not in _BETWEEN:
            last = kind
        if kind is not None:
            found[kind] += 1
    return found


def line_kinds(raw: pl.Expr) -> pl.Expr:
    """The foreign kind of each line (null: none of KINDS), for lines that are not record starts."""
    expr: pl.Expr = pl.lit(None, dtype=pl.String)
    for kind, regex in reversed(KINDS):
        expr = pl.when(raw.str.contains(regex)).then(pl.lit(kind)).otherwise(expr)
    return expr


def set_aside(lines: pl.DataFrame, is_start: pl.Expr) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Split ``lines`` (``line_no, raw, origin, ...``) into the lines the envelope reads and the foreign lines
    (``line_no, origin, raw, kind``).

    A foreign line is one of KINDS or a pretty-printed JSON object (a line ``{`` to a line ``}``, both
    unindented, between record starts); lines that continue a foreign line (indented, ``key: value``...)
    take its kind, as continuation lines take their record's.
    """
    raw = pl.col("raw")
    marked = lines.with_columns_seq(start__=is_start).with_columns_seq(
        kind__=pl.when(pl.col("start__") | raw.str.contains(_ENVOY_MARK)).then(pl.lit(None, dtype=pl.String))
        .otherwise(line_kinds(raw)),
        open__=raw.str.contains(r"^\{\s*$"), close__=raw.str.contains(r"^\}\s*,?\s*$"),
        continues__=raw.str.contains(f"{CONTINUATION}|{MESSAGE_CONTINUES}") & ~pl.col("start__"),
        access__=raw.str.contains(_ACCESS_KEYS))
    # inside a pretty-printed object: from an opening line through its closing line, counted afresh after each
    # record start (an object left open cannot reach past the next record, however the lines were cut in chunks)
    marked = marked.with_columns_seq(segment__=pl.col("start__").cum_sum().over("origin"))
    depth = pl.col("open__").cast(pl.Int32).cum_sum() - pl.col("close__").cast(pl.Int32).cum_sum()
    marked = marked.with_columns_seq(depth__=depth.over("origin", "segment__"),
                                     object__=pl.col("open__").cum_sum().over("origin", "segment__"))
    before = pl.col("depth__").shift(1, fill_value=0).over("origin", "segment__")
    inside = (pl.col("open__") | (before > 0)) & ~pl.col("start__")
    marked = marked.with_columns_seq(json__=inside, access__=pl.col("access__").any().over("origin", "segment__",
                                                                                         "object__"))
    json_kind = pl.when(pl.col("json__")).then(
        pl.when(pl.col("access__")).then(pl.lit("access-log")).otherwise(pl.lit("json-object")))
    marked = marked.with_columns_seq(kind__=pl.coalesce(pl.col("kind__"), json_kind))
    # a line that continues the line above takes that line's kind ("": an Envoy record's, or no kind)
    kind = pl.col("kind__")
    # a paste's own lines (a prompt, an elision, markdown) and a whole pretty-printed object stand between a record
    # and its continuation lines
    owner = (pl.when(kind.is_in(_BETWEEN) | pl.col("json__")).then(pl.lit(None, dtype=pl.String))
             .when(pl.col("start__") | ~pl.col("continues__")).then(pl.coalesce(kind, pl.lit(""))).otherwise(kind))
    marked = marked.with_columns_seq(owner__=owner.forward_fill().over("origin"))
    marked = marked.with_columns_seq(kind__=pl.when(kind.is_not_null()).then(kind).when(
        pl.col("continues__") & (pl.col("owner__") != "")).then(pl.col("owner__")))
    aside = marked.filter(pl.col("kind__").is_not_null())
    kept = marked.filter(pl.col("kind__").is_null()).select_seq(lines.columns)
    return kept, aside.select_seq("line_no", "origin", "raw", kind="kind__")


def json_lines_foreign(raw: pl.Series) -> bool:
    """Whether a JSON capture's lines hold another program's JSON line that a JSON format would take for a record
    (pilot-agent's ``{"level":..,"time":..,"msg":..}`` has the keys Istio's layouts need); lines with an Envoy mark
    are not looked at."""
    rest = raw.filter(~raw.str.contains('"scope":"envoy ', literal=True)
                      & ~raw.str.contains('"@module":"envoy.', literal=True))  # (most lines: no regex)
    rest = rest.filter(~rest.str.contains(_ENVOY_MARK))
    return bool(rest.len()) and bool(kinds_of(rest).is_in(FOREIGN_KINDS).any())


#: a pretty-printed object's first line, or an elision, folded into a message as if it continued it
_FOLDED_FOREIGN = r"\n(?:\{|[ \t]*(?:\.\.\.|…))[ \t]*(?:\n|$)"


def holds_foreign(malformed: pl.Series, records: pl.DataFrame) -> bool:
    """Whether a chunk read as it is holds other programs' lines: a malformed line of a foreign kind (or a lone
    ``{``), or a pretty-printed object or an indented elision folded into a record's message (their lines read
    like a continuation)."""
    if malformed.len():
        kinds = kinds_of(malformed)
        if bool(kinds.is_in(FOREIGN_KINDS).any()) or bool(malformed.str.contains(r"^\{\s*$").any()):
            return True
    if records.height == 0 or "n_lines" not in records.columns:
        return False
    folded = records.filter(pl.col("n_lines") > 1)["message"]
    return bool(folded.str.contains(_FOLDED_FOREIGN).any())


def kinds_of(raw: pl.Series) -> pl.Series:
    """The kind of each line in no record (``raw``): a foreign kind, ``oversize`` (the length limit's marker),
    ``blank`` or ``unrecognised``. A line holding an Envoy mark is Envoy's, damaged: ``unrecognised``."""
    return raw.to_frame("raw").select_seq(
        kind=pl.when(pl.col("raw").str.starts_with(OVERSIZE_MARK)).then(pl.lit("oversize"))
        .when(pl.col("raw").str.contains(r"^\s*$")).then(pl.lit("blank"))
        .when(pl.col("raw").str.contains(_ENVOY_MARK)).then(pl.lit(UNRECOGNISED))
        .otherwise(line_kinds(pl.col("raw")).fill_null(UNRECOGNISED)))["kind"]
