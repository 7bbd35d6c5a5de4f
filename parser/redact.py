"""Redaction of secrets in header dumps and header lines (on by default everywhere)."""
from __future__ import annotations

import re

import polars as pl

SENSITIVE_HEADERS: tuple[str, ...] = (
    "authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "x-auth-token",
    "x-amz-security-token", "x-csrf-token", "x-xsrf-token", "api-key", "apikey", "x-forwarded-client-cert",
    "x-envoy-peer-metadata", "x-goog-iap-jwt-assertion", "x-jwt-assertion", "x-access-token", "x-refresh-token",
)
REDACTED = "[redacted]"
_NAMES = "|".join(SENSITIVE_HEADERS)
_DUMP_LINE = rf"(?im)^('(?:{_NAMES})', ').*$"
_HEADER_LINE = rf"(?i)(completed header: key=(?:{_NAMES}) value=).*$"


_ANY_TEXT = rf"""(?i)((?:{_NAMES})["']?\s*[:=,]\s*["']?(?:Bearer |Basic )?)[^"',;\s]+"""
_ANY_TEXT_RE: re.Pattern[str] | None = None


def redact_text(text: str) -> str:
    """Redact a sensitive header's value wherever it appears in free text (quoted malformed lines)."""
    global _ANY_TEXT_RE
    if _ANY_TEXT_RE is None:
        _ANY_TEXT_RE = re.compile(_ANY_TEXT)
    return _ANY_TEXT_RE.sub(lambda m: m.group(1) + REDACTED, text)


def rows_where(df: pl.DataFrame, condition: pl.Expr, within: pl.Expr | None = None) -> pl.Series:
    """Row numbers where ``condition`` holds, evaluating it only on the rows ``within`` selects (if given)."""
    if within is None:
        return df.select(condition).to_series().arg_true()
    rows = df.select(within).to_series().arg_true()
    if rows.len() == 0:
        return rows
    return rows.filter(df.select(condition.meta.root_names())[rows].select(condition).to_series())


def redact_message(message: pl.Expr) -> pl.Expr:
    """Replace values of sensitive headers in dumps (``'cookie', '...'``) and codec header lines."""
    return (message.str.replace_all(_DUMP_LINE, "${1}" + REDACTED + "'")
            .str.replace(_HEADER_LINE, "${1}" + REDACTED))


def is_sensitive(name: str) -> bool:
    return name.lower() in SENSITIVE_HEADERS


def redact_frame(df: pl.DataFrame, column: str = "message", multiline: pl.Expr | None = None) -> pl.DataFrame:
    """Redact ``column`` on the rows that can hold a sensitive header value.

    Candidates (``multiline`` narrows the rows that can hold a dump): multi-line dumps and codec
    header lines that name a sensitive header (an
    ASCII case-insensitive substring search; a row with any non-ASCII character is a candidate
    too, since the regexes fold case the Unicode way).
    """
    text = pl.col(column)
    dumps = rows_where(df, text.str.contains("\n", literal=True), within=multiline)
    lines = df.select(text.str.contains("completed header: key=", literal=True)).to_series().arg_true()
    rows = pl.concat([dumps, lines]).unique().sort() if lines.len() and dumps.len() else (
        dumps if dumps.len() else lines)
    if rows.len() == 0:
        return df
    subset = df[column].gather(rows).to_frame()
    named = subset.select(text.str.contains_any(list(SENSITIVE_HEADERS), ascii_case_insensitive=True)).to_series()
    if subset.select(text.str.len_bytes().sum() != text.str.len_chars().sum()).item():
        named = named | subset.select(text.str.contains(r"[^\x00-\x7f]")).to_series()
    rows, subset = rows.filter(named), subset.filter(named)
    if rows.len() == 0:
        return df
    return df.with_columns(df[column].scatter(rows, subset.select(redact_message(text)).to_series()))
