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


def _token(length: int, letter_at: int) -> str:
    """A token of hex digits and one letter beyond hex at ``letter_at`` (what the long-token rule redacts)."""
    chars = [("0123456789abcdef")[i % 16] for i in range(length)]
    chars[letter_at] = "Q"
    return "".join(chars)


PRE_FILTER_CASES = [
    *[f"[C1][S2] request headers complete (end_stream=true):\n':method', 'GET'\n'x-custom', '{_token(n, at)}'"
      for n, at in ((32, 0), (32, 31), (40, 20), (40, 35), (70, 50), (70, 69))],
    "[C1][S2] router decoding headers:\n':path', '/a?KEY=k1&b=2'\n'x-request-id', '6a36345e-f724-46dd-a4b2-a7d0facdf2cd'",
    "[C1][S2] cluster 'svc' match for URL '/login?user=a&Code=xyz'",
    "[C1][S2] cluster 'svc' match for URL '/x;sig=abc'",
    "[C1][S2] cluster 'svc' match for URL '/x?auth=abc&pwd=p&pass=q'",
    "[C1] completed header: key=:path value=/cb?code=s3cr3t",
    "[C1] completed header: key=x-thing value=Bearer abcdef",
    "[C1] completed header: key=x-thing value=eyJhbGciOiJIUzI1NiJ9.c2VjcmV0.sig",
]
BENIGN = [
    "[C1] completed header: key=x-request-id value=6a36345e-f724-46dd-a4b2-a7d0facdf2cd",
    "[C1] completed header: key=:authority value=127.0.0.1:51759",
    "[C1][S2] router decoding headers:\n':authority', '127.0.0.1:51759'\n':path', '/'\n"
    "'x-request-id', '6a36345e-f724-46dd-a4b2-a7d0facdf2cd'\n'traceparent', "
    "'00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'\n'x-envoy-expected-rq-timeout-ms', '15000'",
    "[C1][S2] decode headers called: filter=envoy.filters.http.router status=0",
    "[C1][S2] cluster 'svc' match for URL '/items?page=2&keyboard=us'",
]


def test_the_quick_pre_filter_never_hides_a_secret():
    """Only candidate rows are redacted: every message the full rules change must be a candidate."""
    from envoy_dissector.parser.redact import DEFAULT, _candidates, redact_expr, redact_frame

    frame = pl.DataFrame({"message": PRE_FILTER_CASES + BENIGN})
    everywhere = frame.select(redact_expr(pl.col("message"), DEFAULT))["message"]
    assert (everywhere != frame["message"]).to_list() == [True] * len(PRE_FILTER_CASES) + [False] * len(BENIGN)
    assert redact_frame(frame)["message"].to_list() == everywhere.to_list()
    # and it is a filter: ids, hex trace contexts, ':authority', 'decode', 'key=' and 'keyboard=' are not candidates
    candidates = _candidates(frame, "message", DEFAULT, None).to_list()
    assert candidates == list(range(len(PRE_FILTER_CASES)))
