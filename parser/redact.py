"""Redaction of secrets in header dumps and header lines (on by default everywhere)."""
from __future__ import annotations

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


def redact_message(message: pl.Expr) -> pl.Expr:
    """Replace values of sensitive headers in dumps (``'cookie', '...'``) and codec header lines."""
    return (message.str.replace_all(_DUMP_LINE, "${1}" + REDACTED + "'")
            .str.replace(_HEADER_LINE, "${1}" + REDACTED))


def is_sensitive(name: str) -> bool:
    return name.lower() in SENSITIVE_HEADERS


def redact_frame(df: pl.DataFrame, column: str = "message") -> pl.DataFrame:
    """Redact ``column`` on the rows that can hold a sensitive header value.

    Candidates: multi-line dumps and codec header lines that name a sensitive header (an
    ASCII case-insensitive substring search; a row with any non-ASCII character is a candidate
    too, since the regexes fold case the Unicode way).
    """
    text = pl.col(column)
    rows = df.select(text.str.contains("\n", literal=True) | text.str.contains("completed header: key=", literal=True)
                     ).to_series().arg_true()
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
