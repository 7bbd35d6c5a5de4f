"""Redaction of secrets in log messages (on by default everywhere; docs/security.md).

Three rules, applied to every record that can hold a header value or a URL:

* **by name**: a header whose name is in ``SENSITIVE_HEADERS`` or contains one of
  ``SENSITIVE_NAME_PARTS`` (``x-vault-token``, ``x-goog-api-key``, ``www-authenticate``...),
  in header dumps (``'name', 'value'``, any spacing or case) and codec lines
  (``completed header: key=NAME value=...``);
* **by shape**: a header value that looks like a credential whatever its name: a JWT
  (``eyJ...``), an auth scheme and its token (``Bearer ...``, ``Basic ...``), or a long single
  token mixing letters and digits that is not plain hex (API keys; request and trace ids are hex);
* **query strings**: the value of a URL query or fragment parameter whose name is in ``SENSITIVE_PARAMS``
  or contains one of ``SENSITIVE_PARAM_PARTS`` (``access_token=``, ``#id_token=``, ``api_key=``...),
  anywhere in the message (``:path``, ``match for URL '...'``, ``referer``, ``x-envoy-original-path``),
  with the name, the ``?&;#`` before it and the ``=`` after it percent-encoded once or twice too
  (``api%5Fkey=``, ``redirect=...%3Ftoken%3D...``).

Free text (a malformed line quoted in diagnostics, an error message) gets ``redact_text``: the rules
above, and any ``name: value`` / ``"name":"value"`` / ``name=value`` of a sensitive name (``-`` and
``_`` alike), and any JWT, auth scheme's credential or long mixed token wherever it stands.

``Redaction`` adds names (``--redact-header``, ``--redact-query-param``; ``*`` globs allowed).
Values become ``[redacted]``; the rest of the message (names, other parameters) is kept.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import polars as pl

from envoy_dissector.parser import extension

SENSITIVE_HEADERS: tuple[str, ...] = (
    "authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "x-auth-token",
    "x-amz-security-token", "x-csrf-token", "x-xsrf-token", "api-key", "apikey", "x-forwarded-client-cert",
    "x-envoy-peer-metadata", "x-goog-iap-jwt-assertion", "x-jwt-assertion", "x-access-token", "x-refresh-token",
    "www-authenticate", "proxy-authenticate", "ocp-apim-subscription-key", "x-goog-api-key", "private-token",
    "x-vault-token", "x-session-token", "x-amz-date", "x-client-secret", "x-functions-key",
)
#: a header name containing one of these is sensitive
SENSITIVE_NAME_PARTS: tuple[str, ...] = (
    "token", "secret", "password", "passwd", "api-key", "api_key", "apikey", "authoriz", "authentic", "oauth",
    "x-auth", "auth-", "session", "cookie", "credential", "subscription-key", "jwt", "signature", "private-key",
    "access-key",
)  # not "auth" alone: ":authority" is the request's host
SENSITIVE_PARAMS: tuple[str, ...] = ("key", "sig", "code", "pwd", "pass", "auth", "client_secret", "x-amz-signature",
                                     "x-amz-credential", "x-goog-signature", "x-goog-credential")
#: a query parameter whose name contains one of these is sensitive
SENSITIVE_PARAM_PARTS: tuple[str, ...] = (
    "token", "secret", "password", "passwd", "api_key", "apikey", "api-key", "authoriz", "authentic", "oauth",
    "auth_", "_auth", "session", "signature", "credential", "access_key", "private_key", "jwt", "assertion",
)
REDACTED = "[redacted]"
#: auth schemes whose next word is a credential
AUTH_SCHEMES = ("bearer", "basic", "digest", "negotiate", "token", "apikey", "hoba", "mutual", "aws4-hmac-sha256")
_JWT = r"eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*"
_SHORTEST_TOKEN = 32
_TOKEN_CHAR = r"[A-Za-z0-9+/_=.~\-]"
_LONG_TOKEN = f"^{_TOKEN_CHAR}{{{_SHORTEST_TOKEN},}}$"
_BEYOND_HEX = "[g-zG-Z]"
#: what a header value the long-token rule redacts contains: right after a quote or an ``=`` (codec lines),
#: _SHORTEST_TOKEN token characters with a letter beyond hex (g-z) among them (request and trace ids, hex with
#: hyphens, have none), spelt without look-around
_LONG_TOKEN_VALUE = "['=](?:" + "|".join(
    [f"{_TOKEN_CHAR}{{{i}}}{_BEYOND_HEX}{_TOKEN_CHAR}{{{_SHORTEST_TOKEN - 1 - i}}}" for i in range(_SHORTEST_TOKEN - 1)]
    + [f"{_TOKEN_CHAR}{{{_SHORTEST_TOKEN - 1},}}{_BEYOND_HEX}"]) + ")"
#: A character beyond ASCII (the rules fold case the Unicode way: such a string is always looked at).
_NON_ASCII = r"[^\x00-\x7f]"


def _glob(name: str) -> str:
    """A name or ``*`` glob as a regex fragment (case-insensitive by the caller)."""
    return ".*".join(re.escape(part) for part in name.lower().split("*"))


def _escaped(hex_codes: str) -> str:
    """A percent escape of one of ``hex_codes`` (``|``-separated), encoded once or twice (``%3f``, ``%253f``)."""
    return f"%(?:25)?(?:{hex_codes})"


def _loose_char(ch: str) -> str:
    """One character of a parameter name as written or percent-encoded (either case of a letter)."""
    codes = {f"{ord(c):02x}" for c in (ch.lower(), ch.upper())}
    return f"(?:{re.escape(ch)}|{_escaped('|'.join(sorted(codes)))})"


def _loose(name: str) -> str:
    """A parameter name or ``*`` glob whose characters may each be percent-encoded (``api%5Fkey``)."""
    return ".*".join("".join(_loose_char(c) for c in part) for part in name.lower().split("*"))


#: what comes before a parameter's name: ``?&;#`` as written or percent-encoded (a URL inside a parameter)
_PARAM_SEP = rf"(?:[?&;#]|{_escaped('3f|26|3b|23')})"
_PARAM_EQ = rf"(?:=|{_escaped('3d')})"
#: a character of a parameter's name: anything but a separator, ``=``, a quote or a space, written or encoded
_PARAM_CHAR = rf"""(?:[^=&?#;'"\s%]|{_escaped('[013-9a-f][0-9a-f]|2[0-247-9a-f]|3[0-9ace]')})"""


@dataclass(frozen=True)
class Redaction:
    """What is redacted: the built-in rules plus ``headers`` and ``params`` (names or ``*`` globs)."""

    headers: tuple[str, ...] = ()
    params: tuple[str, ...] = ()

    def __bool__(self) -> bool:  # a Redaction means "redact" wherever a bool ``redact`` is accepted
        return True

    @cached_property
    def header_name(self) -> str:
        """Regex matching a whole sensitive header name (no anchors, case-insensitive by the caller)."""
        exact = [re.escape(n) for n in SENSITIVE_HEADERS] + [_glob(n) for n in self.headers]
        parts = "|".join(re.escape(p) for p in SENSITIVE_NAME_PARTS)
        return rf"(?:{'|'.join(exact)}|[^'\s]*(?:{parts})[^'\s]*)"

    @cached_property
    def param_name(self) -> str:
        """Regex matching a whole sensitive parameter name, any of its characters percent-encoded."""
        exact = [_loose(n) for n in (*SENSITIVE_PARAMS, *self.params)]
        parts = "|".join(_loose(p) for p in SENSITIVE_PARAM_PARTS)
        return rf"(?:{'|'.join(exact)}|{_PARAM_CHAR}*(?:{parts}){_PARAM_CHAR}*)"

    @cached_property
    def words(self) -> list[str]:
        """Substrings at least one of which a message must hold to need any redaction (a quick filter).

        The exact parameter names are looked for as ``?name=`` / ``&name=`` / ``;name=``: alone, "key", "code"
        and "auth" are in every codec header line (``key=``), ``decode`` and ``:authority``; ``%`` takes any
        percent-encoded name and ``#`` a fragment's (as single characters they keep the search fast: ``#key=``
        among the literals makes it half as fast again).
        """
        extra = [w for n in (*self.headers, *self.params) for w in n.lower().split("*") if w]
        params = [f"{sep}{name}=" for name in SENSITIVE_PARAMS for sep in "?&;"]
        return sorted({*SENSITIVE_HEADERS, *SENSITIVE_NAME_PARTS, *params, *SENSITIVE_PARAM_PARTS,
                       *AUTH_SCHEMES, "eyj", "%", "#", *extra})


DEFAULT = Redaction()
RedactOption = bool | Redaction


def policy(option: RedactOption) -> Redaction | None:
    """The rules to apply for a ``redact`` argument (None: redaction off)."""
    if isinstance(option, Redaction):
        return option
    return DEFAULT if option else None


def rows_where(df: pl.DataFrame, condition: pl.Expr, within: pl.Expr | pl.Series | None = None) -> pl.Series:
    """Row numbers where ``condition`` holds, evaluating it only on the rows ``within`` selects (if given: an
    expression, or its values as a boolean Series, which a caller asking several conditions computes once)."""
    if within is None:
        return df.select_seq(condition).to_series().arg_true()
    rows = (within if isinstance(within, pl.Series) else df.select_seq(within).to_series()).arg_true()
    if rows.len() == 0:
        return rows
    # (the columns the condition reads, gathered a Series at a time: no query of their own)
    picked = pl.DataFrame([df[name].gather(rows) for name in dict.fromkeys(condition.meta.root_names())])
    return rows.filter(picked.select_seq(condition).to_series())


def _credential_shape(value: pl.Expr) -> pl.Expr:
    """Whether a header value looks like a credential whatever its header's name (rule 2)."""
    schemes = "|".join(re.escape(s) for s in AUTH_SCHEMES)
    return (value.str.contains(rf"(?i)(?:^|[\s,]){_JWT}|^\s*(?:{schemes})\s+\S")
            | (value.str.contains(_LONG_TOKEN) & value.str.contains(r"[0-9]") & value.str.contains(_BEYOND_HEX)))


def _dump_lines(text: pl.Expr, rules: Redaction) -> pl.Expr:
    """Header-dump lines (``'name', 'value'``) redacted by name and by value shape, line by line."""
    pair = r"^(\s*'[^'\n]*'\s*,\s*')(.*)$"
    name = text.str.extract(r"^\s*'([^'\n]*)'\s*,\s*'", 1)
    value = text.str.extract(pair, 2).str.strip_suffix("'")
    by_name = name.str.contains(rf"(?i)^{rules.header_name}$")
    sensitive = (by_name | _credential_shape(value)).fill_null(False)
    return pl.when(sensitive).then(text.str.replace(pair, "${1}" + REDACTED + "'")).otherwise(text)


def _codec_line(text: pl.Expr) -> pl.Expr:
    """A codec header line (``completed header: key=NAME value=...``, a message of its own) redacted by its
    value's shape (rule 2; by name: ``redact_expr``)."""
    codec = r"(completed header: key=\S+ value=)([^\n]*)"
    coded = _credential_shape(text.str.extract(codec, 2)).fill_null(False)
    return pl.when(coded).then(text.str.replace(codec, "${1}" + REDACTED)).otherwise(text)


def redact_expr(text: pl.Expr, rules: Redaction) -> pl.Expr:
    """Every rule on a message expression (any number of lines); rows with nothing to redact are unchanged."""
    lines = _codec_line(text).str.split("\n")
    dumped = lines.list.eval(_dump_lines(pl.element(), rules)).list.join("\n")
    header = rf"(?i)(completed header: key={rules.header_name} value=)[^\n]*"
    schemes = "|".join(re.escape(s) for s in AUTH_SCHEMES)
    shaped = rf"(?i)(completed header: key=\S+ value=)(?:[^\n]*{_JWT}|\s*(?:{schemes})\s+\S)[^\n]*"
    query = rf"""(?i)({_PARAM_SEP}{rules.param_name}{_PARAM_EQ})[^&#'"\s]*"""
    return (dumped.str.replace_all(header, "${1}" + REDACTED)
            .str.replace_all(shaped, "${1}" + REDACTED)
            .str.replace_all(query, "${1}" + REDACTED))


def is_sensitive(name: str, rules: Redaction = DEFAULT) -> bool:
    return re.fullmatch(rules.header_name, name.lower()) is not None


def _holds_word_or_token(text: pl.Expr, rules: Redaction) -> pl.Expr:
    """A sensitive word (ASCII case folded) or a long token with a letter beyond hex."""
    return text.str.contains_any(rules.words, ascii_case_insensitive=True) | text.str.contains(_LONG_TOKEN_VALUE)


def may_need_redaction(text: pl.Expr, rules: Redaction) -> pl.Expr:
    """Whether a string may hold something a rule redacts: a sensitive word, a long token with a letter beyond hex,
    or a non-ASCII character (``_candidates``' test). It holds for a string whenever it holds for any piece of it
    (the words and the token's pattern have no anchors), so a line it rejects has no piece any rule changes."""
    return _holds_word_or_token(text, rules) | text.str.contains(_NON_ASCII)


#: What marks a message that may hold a header value or a URL outside a dump: a codec header line, a URL's ``?;#%``
#: and a dump pair's quote and comma (one regex: a ``;`` among ``contains_any``'s literals makes it 3x slower)
_MARKS = r"completed header: key=|[?;#%]|' ?,"


def _candidates(df: pl.DataFrame, column: str, rules: Redaction, multiline: pl.Expr | pl.Series | None
                ) -> pl.Series:
    """Rows that may need redaction: dumps, codec header lines and URLs holding a sensitive word, a JWT,
    an auth scheme or a long token with a letter beyond hex (cheap substring tests first); in one compiled pass
    where the extension is on (``extension.redaction_candidates``), else by polars."""
    within = multiline if multiline is None or isinstance(multiline, pl.Series) else df.select_seq(
        multiline).to_series()
    found = extension.redaction_candidates(df[column], within, marks=_MARKS, words=rules.words,
                                           token=_LONG_TOKEN_VALUE)
    return found if found is not None else _candidates_by_polars(df, column, rules, within)


def _candidates_by_polars(df: pl.DataFrame, column: str, rules: Redaction, multiline: pl.Series | None
                          ) -> pl.Series:
    """``_candidates`` by polars' string methods (the reference the compiled pass is compared with)."""
    text = pl.col(column)
    dumps = rows_where(df, text.str.contains("\n", literal=True), within=multiline)
    marked = df.select_seq(text.str.contains(_MARKS)).to_series().arg_true()
    rows = pl.concat([dumps, marked]).unique().sort() if dumps.len() and marked.len() else (
        dumps if dumps.len() else marked)
    if rows.len() == 0:
        return rows
    subset = df[column].gather(rows).to_frame()
    keep = subset.select_seq(_holds_word_or_token(text, rules)).to_series()
    if subset.select_seq(text.str.len_bytes().sum() != text.str.len_chars().sum()).item():
        keep = keep | subset.select_seq(text.str.contains(_NON_ASCII)).to_series()
    return rows.filter(keep)


def redact_frame(df: pl.DataFrame, column: str = "message", multiline: pl.Expr | pl.Series | None = None,
                 policy_option: RedactOption = True) -> pl.DataFrame:
    """Redact ``column`` on the rows that can hold a secret (``multiline`` narrows the rows that can hold
    a dump). A row with any non-ASCII character is a candidate too, since the regexes fold case the
    Unicode way."""
    rules = policy(policy_option)
    if rules is None or df.height == 0:
        return df
    rows = _candidates(df, column, rules, multiline)
    if rows.len() == 0:
        return df
    subset = df[column].gather(rows).to_frame()
    return df.with_columns_seq(df[column].scatter(rows, subset.select_seq(redact_expr(pl.col(column),
                                                                                      rules)).to_series()))


def redact_strings(texts: Sequence[str], option: RedactOption = True) -> list[str]:
    """The same rules on plain strings (diagnostics examples, error messages)."""
    rules = policy(option)
    if rules is None or not texts:
        return list(texts)
    frame = pl.DataFrame({"message": list(texts)}, schema={"message": pl.String})
    return redact_frame(frame, policy_option=rules)["message"].to_list()


def _either_dash(name: str) -> str:
    """A name as a regex fragment in which ``-`` and ``_`` stand for each other (``x_api_key`` in a JSON log)."""
    return re.escape(name).replace(r"\-", "[-_]").replace("_", "[-_]")


_FREE_NAMES = "|".join(_either_dash(n) for n in SENSITIVE_HEADERS)
_FREE_PARTS = "|".join(_either_dash(n) for n in (*SENSITIVE_NAME_PARTS, *SENSITIVE_PARAM_PARTS))
_FREE_PARAMS = "|".join(_either_dash(n) for n in SENSITIVE_PARAMS)
_FREE_SCHEMES = "|".join(re.escape(s) for s in AUTH_SCHEMES if s != "token")  # "token" is an English word too
#: ``name: value``, ``"name":"value"``, ``name=value`` of a sensitive name in free text (the short parameter
#: names, ``code``, ``key``..., with ``=`` only: ``"code":200`` is an access log's status): the name (a whole
#: word), its separator and an opening quote, then the value to its closing quote or the next separator
_FREE_PAIR = re.compile(
    rf"""(?i)((?<![\w-])(?:(?:{_FREE_NAMES}|[\w-]*(?:{_FREE_PARTS})[\w-]*)["']?\s*[:=]|(?:{_FREE_PARAMS})\s*=)"""
    r"""\s*)("[^"]*"|'[^']*'|[^"',;&\s]+)""")
_FREE_SCHEME = re.compile(rf"""(?i)\b((?:{_FREE_SCHEMES})\s+)[^\s"',;]+""")
_FREE_JWT = re.compile(_JWT)
_FREE_TOKEN = re.compile(rf"(?<!{_TOKEN_CHAR}){_TOKEN_CHAR}{{{_SHORTEST_TOKEN},}}(?!{_TOKEN_CHAR})")


def _mixed(token: re.Match[str]) -> str:
    """A long token redacted if it mixes digits with letters beyond hex (the header-value rule)."""
    text = token.group(0)
    if re.search("[0-9]", text) and re.search(_BEYOND_HEX, text):
        return REDACTED
    return text


def _pair(pair: re.Match[str]) -> str:
    """A sensitive name's value redacted, its quotes kept."""
    quote = pair.group(2)[0] if pair.group(2)[0] in "'\"" else ""
    return f"{pair.group(1)}{quote}{REDACTED}{quote}"


def redact_text(text: str, option: RedactOption = True) -> str:
    """One string (a quoted malformed line such as an access-log line, an error message): every rule above,
    and in free text a sensitive name's value (``authorization: Bearer ...``, ``"x_api_key":"..."``,
    ``cookie=...``), a JWT, an auth scheme's credential and a long mixed token wherever they stand."""
    if policy(option) is None:
        return text
    text = redact_strings([text], option)[0]
    text = _FREE_PAIR.sub(_pair, text)
    text = _FREE_JWT.sub(REDACTED, text)
    text = _FREE_SCHEME.sub(lambda m: m.group(1) + REDACTED, text)
    return _FREE_TOKEN.sub(_mixed, text)
