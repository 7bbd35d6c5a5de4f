"""Compiling user --log-format strings (parser/logformat.py) and parsing lines written with them."""
from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from envoy_dissector.parser.errors import UsageError
from envoy_dissector.parser.logformat import (
    FLAG_PATTERNS,
    JsonFormat,
    TextFormat,
    compile_format,
    compile_text_format,
    rust_escape,
)
from envoy_dissector.parser.pipeline import parse_text

T0 = datetime(2024, 3, 5, 7, 8, 9, 123456, tzinfo=UTC)


def epoch_us(dt: datetime) -> int:
    return (dt - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def stamp(dt: datetime, frac: str) -> str:
    """Render ``dt`` as spdlog would for %Y-%m-%d %T.<frac>."""
    base = dt.strftime("%Y-%m-%d %H:%M:%S")
    return base + "." + {"e": f"{dt.microsecond // 1000:03d}", "f": f"{dt.microsecond:06d}",
                         "F": f"{dt.microsecond * 1000 + 789:09d}"}[frac]


def one(text: str, log_format: str, **kw):
    parsed = parse_text(text, log_format=log_format, **kw)
    d = parsed.diagnostics
    assert d.format == "custom"
    assert d.lines_read == d.lines_in_records + d.lines_malformed
    return parsed


def test_custom_pipe_format_with_short_levels():
    fmt = "%Y-%m-%d %T.%f|%t|%L|%n|%v"
    levels = {"T": "trace", "D": "debug", "I": "info", "W": "warning", "E": "error", "C": "critical"}
    lines = []
    for k, short in enumerate(levels):
        dt = T0 + timedelta(microseconds=17 * k)
        lines.append(f"{stamp(dt, 'f')}|{40 + k}|{short}|connection|[C{7 + k}] read returns: {100 + k}")
    parsed = one("\n".join(lines) + "\n", fmt)
    ev = parsed.events
    assert ev.height == len(levels) and parsed.diagnostics.lines_malformed == 0
    assert ev["level"].to_list() == list(levels.values())
    assert ev["ts_us"].to_list() == [epoch_us(T0) + 17 * k for k in range(len(levels))]
    assert ev["thread"].to_list() == [40 + k for k in range(len(levels))]
    assert ev["logger"].unique().to_list() == ["connection"]
    assert ev["conn_id"].to_list() == [7 + k for k in range(len(levels))]
    assert ev["bytes"].to_list() == [100 + k for k in range(len(levels))]
    assert set(ev["kind"].cast(str)) == {"read_returns"}


@pytest.mark.parametrize("frac", ["e", "f", "F"])
def test_fraction_flags(frac):
    fmt = f"[%Y-%m-%d %T.%{frac}][%t][%l][%n] %v"
    line = f"[{stamp(T0, frac)}][3][debug][router] [C1][S2] pool ready"
    ev = one(line + "\n", fmt).events
    expected = epoch_us(T0)
    if frac == "e":
        expected -= T0.microsecond % 1000  # milliseconds only
    assert ev["ts_us"].to_list() == [expected]
    assert ev.select("conn_id", "stream_id", "kind").row(0) == (1, 2, "pool_ready")


def test_literal_text_regex_metacharacters_and_percent():
    fmt = "(%Y-%m-%d %T.%f) *%l* {%n} 100%% [%t] | %v"
    line = f"({stamp(T0, 'f')}) *info* {{http}} 100% [9] | [C3][S4] new stream"
    ev = one(line + "\n", fmt).events
    assert ev.select("ts_us", "level", "logger", "thread", "conn_id", "stream_id", "kind").row(0) == (
        epoch_us(T0), "info", "http", 9, 3, 4, "new_stream")
    # a line that differs in the literal text is not a record of this format
    bad = one(f"({stamp(T0, 'f')}) *info* {{http}} 99% [9] | [C3][S4] new stream\n" + line + "\n", fmt)
    assert bad.diagnostics.lines_malformed == 1 and bad.events["line_no"].to_list() == [2]


def test_escaped_newlines_flag_keeps_a_header_dump_on_one_line():
    fmt = "%Y-%m-%dT%T.%fZ %l %n %_"
    dump = ("[C5][S6] request headers complete (end_stream=true):\\n':authority', 'example.com'"
            "\\n':path', '/a/b'\\n':method', 'POST'\\n'x-request-id', 'r-1'")
    text = f"{T0.strftime('%Y-%m-%dT%H:%M:%S')}.{T0.microsecond:06d}Z debug http {dump}\n"
    ev = one(text, fmt).events
    row = ev.row(0, named=True)
    assert row["n_lines"] == 1 and row["ts_us"] == epoch_us(T0)
    assert row["kind"] == "request_headers_complete" and row["end_stream"] is True
    assert row["message"].count("\n") == 4
    assert (row["method"], row["authority"], row["path"], row["x_request_id"]) == ("POST", "example.com", "/a/b",
                                                                                   "r-1")


def test_json_escaped_message_flag_in_a_text_format():
    fmt = "%Y-%m-%d %T.%e %L %n msg=\"%j\""
    msg = 'wasm log istio: said \\"hi\\"\\tthere'
    ev = one(f'{stamp(T0, "e")} D wasm msg="{msg}"\n', fmt).events
    assert ev["message"].to_list() == ['wasm log istio: said "hi"\tthere']
    assert ev["kind"].cast(str).to_list() == ["wasm_log"]
    assert ev["level"].to_list() == ["debug"]


def test_json_format_given_as_log_format():
    fmt = '{"ts":"%Y-%m-%dT%T.%F","lvl":"%l","logger":"%n","where":"%@","tid":%t,"m":"%j"}'
    ns = f"{T0.microsecond * 1000 + 999:09d}"
    line = ('{"ts":"' + T0.strftime("%Y-%m-%dT%H:%M:%S") + "." + ns + '","lvl":"trace","logger":"connection",'
            '"where":"source/common/network/connection_impl.cc:700","tid":12,"m":"[C8] write returns: 42"}')
    assert isinstance(compile_format(fmt), JsonFormat)
    ev = one(line + "\n", fmt).events
    assert ev.select("ts_us", "level", "logger", "source", "thread", "conn_id", "bytes", "kind").row(0) == (
        epoch_us(T0), "trace", "connection", "source/common/network/connection_impl.cc:700", 12, 8, 42,
        "write_returns")


def test_source_location_flags():
    fmt = "%Y-%m-%d %T.%f %l %n %s:%# %v"
    ev = one(f"{stamp(T0, 'f')} trace http2 source/common/http/http2/codec_impl.cc:1234 [C1] sent goaway code=0\n",
             fmt).events
    assert ev.select("source", "kind", "code").row(0) == ("source/common/http/http2/codec_impl.cc:1234",
                                                          "h2_sent_goaway", 0)


@pytest.mark.parametrize(("offset", "text"), [(timedelta(hours=2), "+02:00"), (timedelta(hours=-5, minutes=-30),
                                                                              "-0530"), (timedelta(0), "Z")])
def test_timezone_offset_is_applied(offset, text):
    fmt = "%Y-%m-%dT%T.%f%z %l %n %v"
    local = T0 + offset  # what a process in that zone prints for instant T0
    line = f"{local.strftime('%Y-%m-%dT%H:%M:%S')}.{local.microsecond:06d}{text} debug pool [C2] creating stream"
    assert one(line + "\n", fmt).events["ts_us"].to_list() == [epoch_us(T0)]


def test_format_without_time_uses_no_timestamp():
    ev = one("debug http [C1][S2] new stream\n", "%l %n %v").events
    assert ev["ts_us"].to_list() == [None]
    assert ev.select("conn_id", "stream_id", "kind").row(0) == (1, 2, "new_stream")


def test_multiline_records_in_a_custom_format_fold():
    fmt = "%Y-%m-%d %T.%f|%t|%L|%n|%v"
    text = (f"{stamp(T0, 'f')}|1|D|router|[C1][S2] router decoding headers:\n"
            "':authority', 'svc'\n':path', '/p'\n':method', 'GET'\n\n"
            f"{stamp(T0, 'f')}|1|D|router|[C1][S2] pool ready\n")
    parsed = one(text, fmt)
    ev = parsed.events
    assert ev["n_lines"].to_list() == [5, 1]
    assert ev.select("method", "authority", "path").row(0) == ("GET", "svc", "/p")
    assert parsed.diagnostics.lines_in_records == 6


@pytest.mark.parametrize("bad", ["%Y-%m-%d %Q %v", "%E %v", "[%k] %v"])
def test_unsupported_flag_is_a_usage_error(bad):
    with pytest.raises(UsageError, match=re.escape("unsupported flag %" + bad.split("%")[-2][0])):
        compile_format(bad)
    with pytest.raises(UsageError):
        parse_text("x\n", log_format=bad)


@pytest.mark.parametrize("bad", ["%Y-%m-%d %T %l %n", '{"level":"%l","scope":"%n"}'])
def test_format_without_message_is_a_usage_error(bad):
    with pytest.raises(UsageError, match="no message flag"):
        compile_format(bad)


def test_compiled_regexes_are_valid_python_and_anchor_the_prefix():
    for flag in FLAG_PATTERNS:
        if flag in "v_j^$":
            continue
        fmt = compile_text_format(f"(a.b) %{flag} [x]* %v")
        assert isinstance(fmt, TextFormat)
        re.compile(fmt.start)
        re.compile(fmt.record)
        assert fmt.start.startswith("^")
    assert rust_escape("a.b|c(d)[e]{f}*+?^$#&-~\\") == r"a\.b\|c\(d\)\[e\]\{f\}\*\+\?\^\$\#\&\-\~\\"
