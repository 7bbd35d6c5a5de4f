"""Secrets in header dumps and codec header lines are redacted by default (parser/redact.py)."""
from __future__ import annotations

import json

import polars as pl
import pytest

from envoy_dissector.parser.pipeline import parse_text
from envoy_dissector.parser.redact import REDACTED, SENSITIVE_HEADERS, is_sensitive

SECRETS = {"authorization": "Bearer eyJhbGciOiJIUzI1NiJ9.c2VjcmV0.sig", "cookie": "session=s3cr3t; theme=dark",
           "set-cookie": "id=a3fWa; Max-Age=2592000", "x-api-key": "AKIA1234SECRET",
           "Proxy-Authorization": "Basic Zm9v"}
T = "2024-01-01T00:00:00.{:06d}Z"


def istio_text() -> str:
    dump = [f"'{k}', '{v}'" for k, v in SECRETS.items()]
    lines = [
        f"{T.format(1)}\tdebug\tenvoy http conn_manager_impl.cc:1560\t[C1][S2] request headers complete "
        "(end_stream=true):",
        "':authority', 'svc'", "':path', '/p'", "':method', 'GET'", *dump, "'user-agent', 'curl/8'",
        "\tthread=7",
    ]
    for n, (k, v) in enumerate(SECRETS.items(), start=2):
        lines.append(f"{T.format(n)}\ttrace\tenvoy http http1/codec_impl.cc:583\t[C1] completed header: key={k} "
                     f"value={v}\tthread=7")
    lines.append(f"{T.format(9)}\ttrace\tenvoy http http1/codec_impl.cc:583\t[C1] completed header: "
                 "key=user-agent value=curl/8\tthread=7")
    return "\n".join(lines) + "\n"


def json_text() -> str:
    dump = "\n".join(f"'{k}', '{v}'" for k, v in SECRETS.items())
    msg = f"[C1][S2] router decoding headers:\n':method', 'GET'\n{dump}"
    return json.dumps({"level": "debug", "time": T.format(1), "scope": "envoy router",
                       "caller": "router.cc:1", "msg": msg, "thread": 3}) + "\n"


@pytest.mark.parametrize("make", [istio_text, json_text], ids=["istio-thread", "istio-json"])
def test_secrets_are_redacted_by_default(make):
    events = parse_text(make()).events
    blob = "\n".join(events["message"].to_list())
    for value in SECRETS.values():
        assert value not in blob
    for name in SECRETS:
        assert f"'{name}', '{REDACTED}'" in blob or f"key={name} value={REDACTED}" in blob
    assert "curl/8" in blob or "json" in make.__name__  # other headers stay
    assert events["method"][0] == "GET"


def test_header_value_column_is_redacted():
    events = parse_text(istio_text()).events.filter(pl.col("kind") == "completed_header")
    got = dict(zip(events["header_key"], events["header_value"]))
    assert got == {**dict.fromkeys(SECRETS, REDACTED), "user-agent": "curl/8"}


@pytest.mark.parametrize("make", [istio_text, json_text], ids=["istio-thread", "istio-json"])
def test_redact_false_keeps_values(make):
    events = parse_text(make(), redact=False).events
    blob = "\n".join(events["message"].to_list())
    assert REDACTED not in blob
    for value in SECRETS.values():
        assert value in blob
    if make is istio_text:
        headers = events.filter(pl.col("kind") == "completed_header")
        assert dict(zip(headers["header_key"], headers["header_value"]))["authorization"] == SECRETS["authorization"]


def test_escaped_newline_format_is_redacted_too():
    fmt = "%Y-%m-%dT%T.%fZ|%l|%n|%_"
    line = (f"{T.format(1)}|debug|router|[C1][S2] router decoding headers:\\n':method', 'GET'"
            f"\\n'cookie', '{SECRETS['cookie']}'\\n'authorization', '{SECRETS['authorization']}'\n")
    message = parse_text(line, log_format=fmt).events["message"][0]
    assert SECRETS["cookie"] not in message and SECRETS["authorization"] not in message
    assert f"'cookie', '{REDACTED}'" in message


def test_sensitive_names():
    assert is_sensitive("Authorization") and is_sensitive("SET-COOKIE") and not is_sensitive("user-agent")
    assert {"authorization", "cookie", "set-cookie", "x-api-key", "proxy-authorization"} <= set(SENSITIVE_HEADERS)


def test_unicode_case_folded_names_are_still_candidates():
    """The regexes fold case the Unicode way (KELVIN SIGN matches k): the fast pre-check must not skip them."""
    kelvin_cookie = "coo\u212aie"
    line = (f"{T.format(1)}\tdebug\tenvoy http conn_manager_impl.cc:1560\t[C1][S2] request headers complete "
            f"(end_stream=true):\n':method', 'GET'\n'{kelvin_cookie}', 'session=s3cr3t'\n\tthread=7\n")
    message = parse_text(line).events["message"][0]
    assert "s3cr3t" not in message and REDACTED in message
