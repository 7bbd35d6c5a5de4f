"""Older layouts (parser/layouts.py, the old JSON layout in parser/formats.py): lab captures rewritten into
each older layout parse into the same events; real excerpts in those layouts are read.
"""
from __future__ import annotations

import gzip
import json
import re

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from envoy_dissector.parser.pipeline import parse_text

_TAGS = re.compile(r'\[Tags: "ConnectionId":"(\d+)"(?:,"StreamId":"(\d+)")?\] ')


def _read_gz(path) -> str:
    with gzip.open(path, "rt") as fh:
        return fh.read()


def _old_ids(line: str) -> str:
    """Envoy <= 1.26 connection/stream prefix instead of 1.27+ Tags."""
    return _TAGS.sub(lambda m: f"[C{m.group(1)}]" + (f"[S{m.group(2)}]" if m.group(2) else "") + " ", line)


def _lines(fixture_by_rel, rel: str) -> list[str]:
    lines = _read_gz(fixture_by_rel(rel).path).splitlines()
    start = next(i for i in range(150, len(lines)) if "new stream" in lines[i])
    return lines[start:start + 400]


def test_envoy_1_10_layout_location_inside_the_message(fixture_by_rel):
    """`[ts][tid][lvl][logger] source/...cc:N] msg` (Envoy <= 1.10: the location was part of the message)."""
    bare = _lines(fixture_by_rel, "envoy/keepalive/envoy.log.gz")
    old = [re.sub(r"^(\[[^\]]+\]\[\d+\]\[\w+\]\[\w+\]) \[([^\]\s]+:\d+)\] ", r"\1 \2] ", line) for line in bare]
    assert sum(a != b for a, b in zip(bare, old)) > 300
    a, b = parse_text("\n".join(bare) + "\n"), parse_text("\n".join(old) + "\n")
    assert b.diagnostics.format == "envoy" and b.diagnostics.lines_malformed == 0
    assert_frame_equal(a.events, b.events.with_columns(origin=a.events["origin"]))
    assert b.events["source"].null_count() == 0


def test_istio_1_6_to_1_8_location_at_the_start_of_the_message(fixture_by_rel):
    """`TS\\tlevel\\tenvoy logger\\t[external/envoy/source/...cc:N] msg` (Istio 1.6-1.8)."""
    bare = _lines(fixture_by_rel, "istio-thread/keepalive/envoy.log.gz")
    pattern = re.compile(r"^([^\t]+\t[^\t]+\tenvoy [^\s]+) ([^\s]+:\d+)\t(.*?)(?:\tthread=\d+)?$")
    old = [pattern.sub(r"\1\t[external/envoy/\2] \3", line) for line in bare]
    old = [line for line in old if not line.startswith("\tthread=")]
    new = [line for line in bare if not line.startswith("\tthread=")]
    a, b = parse_text("\n".join(new) + "\n"), parse_text("\n".join(old) + "\n")
    assert b.diagnostics.format == "istio" and b.diagnostics.lines_malformed == 0
    assert (b.events["source"] == "external/envoy/" + a.events["source"]).all()
    assert_frame_equal(a.events.drop("thread", "source", "origin", "n_lines", "line_no"),
                       b.events.drop("thread", "source", "origin", "n_lines", "line_no"))


def test_istio_1_9_json_with_unescaped_quotes_in_msg(fixture_by_rel):
    """`{"level","time","scope":"%n","msg":"%_"}`: bare logger as scope; quotes in the message are not
    escaped, so every line with `[Tags: "ConnectionId"...` is not valid JSON and is read as text."""
    bare = _lines(fixture_by_rel, "istio-json-old/keepalive/envoy.log.gz")
    old = []
    for line in bare:
        obj = json.loads(line)
        logger = obj["scope"].removeprefix("envoy ")
        msg = obj["msg"].replace("\n", "\\n")
        old.append(f'{{"level":"{obj["level"]}","time":"{obj["time"]}","scope":"{logger}","msg":"{msg}"}}')
    invalid = 0
    for line in old:
        try:
            json.loads(line)
        except ValueError:
            invalid += 1
    assert invalid > 100  # most lines: the quotes of the Tags prefix
    a, b = parse_text("\n".join(bare) + "\n"), parse_text("\n".join(old) + "\n")
    d = b.diagnostics
    assert d.format == "istio-json" and "1.9" in d.format_label
    assert d.lines_malformed == 0 and d.records == len(old)
    assert_frame_equal(a.events, b.events.with_columns(origin=a.events["origin"]))


def test_one_header_per_record_folds_into_its_dump(fixture_by_rel):
    """Envoy <= 1.8 logged each header as its own record `[C1][S2]   'name':'value'`."""
    bare = [_old_ids(line) for line in _lines(fixture_by_rel, "envoy/keepalive/envoy.log.gz")]
    old: list[str] = []
    head = ""
    for line in bare:
        if line.startswith("["):
            head = line
            old.append(line)
        elif line.startswith("'"):
            m = re.match(r"^(\[[^\]]+\]\[\d+\]\[\w+\]\[\w+\] \[[^\]]+\] )(\[C\d+\](?:\[S\d+\])?) ", head)
            name, value = re.match(r"^'([^']*)', '(.*)'$", line).groups()
            old.append(f"{m.group(1)}{m.group(2)}   '{name}':'{value}'")
        # the blank line closing a dump did not exist then
    a, b = parse_text("\n".join(bare) + "\n"), parse_text("\n".join(old) + "\n")
    assert b.diagnostics.lines_malformed == 0 and b.diagnostics.lines_read == len(old) == b.diagnostics.lines_in_records
    assert b.events.height == a.events.height
    cols = ["kind", "conn_id", "stream_id", "message", "method", "authority", "path", "x_request_id", "status"]
    assert_frame_equal(a.events.select(cols), b.events.select(cols))
    assert b.events["authority"].drop_nulls().len() > 5


def test_one_header_per_record_across_a_block_boundary(fixture_by_rel):
    """The record-boundary cut between blocks keeps a dump's header records with their dump."""
    from envoy_dissector.parser.pipeline import parse
    from envoy_dissector.parser.sources import text_source

    text = REAL_3205 * 40
    whole = parse_text(text).events
    for block in (300, 1000, 2500):
        blocks = parse(text_source(text), block_bytes=block).events
        assert_frame_equal(whole, blocks)
    assert whole.filter(pl.col("kind") == "request_headers_complete")["authority"].to_list() == ["localhost:3000"] * 40


# github.com/envoyproxy/envoy/issues/3205 (2018-04-25, Envoy 1.6): debug log in the <= 1.10 layout, the request
# headers printed one per record.
REAL_3205 = (
    '[2018-04-25 11:11:46.671][11][debug][http] source/common/http/conn_manager_impl.cc:186] [C'
    '1] new stream\n'
    '[2018-04-25 11:11:46.672][11][debug][http] source/common/http/conn_manager_impl.cc:790] [C'
    '1][S2066557439932801438] request end stream\n'
    '[2018-04-25 11:11:46.672][11][debug][http] source/common/http/conn_manager_impl.cc:455] [C'
    '1][S2066557439932801438] request headers complete (end_stream=true):\n'
    '[2018-04-25 11:11:46.672][11][debug][http] source/common/http/conn_manager_impl.cc:460] [C'
    "1][S2066557439932801438]   ':authority':'localhost:3000'\n"
    '[2018-04-25 11:11:46.672][11][debug][http] source/common/http/conn_manager_impl.cc:460] [C'
    "1][S2066557439932801438]   'connection':'keep-alive'\n"
    '[2018-04-25 11:11:46.672][11][debug][http] source/common/http/conn_manager_impl.cc:460] [C'
    "1][S2066557439932801438]   'user-agent':'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWe"
    "bKit/537.36 (KHTML, like Gecko) Chrome/65.0.3325.181 Safari/537.36'\n"
)


def test_real_envoy_1_6_header_records():
    parsed = parse_text(REAL_3205)
    d = parsed.diagnostics
    assert d.format == "envoy" and d.lines_malformed == 0 and d.lines_in_records == 6
    ev = parsed.events
    assert ev["kind"].cast(str).to_list() == ["new_stream", "request_end_stream", "request_headers_complete"]
    assert ev["source"].to_list() == ["source/common/http/conn_manager_impl.cc:186",
                                      "source/common/http/conn_manager_impl.cc:790",
                                      "source/common/http/conn_manager_impl.cc:455"]
    dump = ev.row(2, named=True)
    assert dump["n_lines"] == 4 and dump["authority"] == "localhost:3000"
    assert dump["message"].split("\n")[1:] == ["':authority', 'localhost:3000'", "'connection', 'keep-alive'",
                                               ("'user-agent', 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) "
                                                "AppleWebKit/537.36 (KHTML, like Gecko) Chrome/65.0.3325.181 "
                                                "Safari/537.36'")]


# github.com/istio/istio/issues/32037 (2021-04-09, Istio 1.9): `kubectl logs --timestamps`, tabs turned into
# spaces, the location in brackets at the start of the message (Istio 1.6-1.8 style), a dump after it.
REAL_32037 = (
    '2021-04-01T05:09:24.193719454Z 2021-04-01T05:09:24.189062Z      debug   envoy filter    [s'
    'rc/envoy/http/alpn/alpn_filter.cc:81] override with 2 ALPNs\n'
    '2021-04-01T05:09:24.193756341Z 2021-04-01T05:09:24.189122Z      debug   envoy router    [e'
    'xternal/envoy/source/common/router/router.cc:594] [C5][S9] router decoding headers:\n'
    "2021-04-01T05:09:24.193781452Z ':authority', 'hpbp-authz.hpbp-dev-core'\n"
    "2021-04-01T05:09:24.193787673Z ':path', '/hpbp-authz/v1/authorizations?temp=f7aecde8-0b7f-"
    "4e49-9faa-c081ffc1e956'\n"
    "2021-04-01T05:09:24.193838011Z 'content-type', 'application/json'\n"
)


def test_real_kubectl_timestamps_tabs_as_spaces_location_in_message():
    parsed = parse_text(REAL_32037)
    d = parsed.diagnostics
    assert d.wrappers == ["kubectl-timestamps", "tabs-as-spaces"] and d.format == "istio"
    ev = parsed.events
    assert ev["source"].to_list() == ["src/envoy/http/alpn/alpn_filter.cc:81",
                                      "external/envoy/source/common/router/router.cc:594"]
    assert ev.row(1, named=True)["kind"] == "router_decoding_headers"
    assert ev.row(1, named=True)["authority"] == "hpbp-authz.hpbp-dev-core"
    assert ev["ts_us"].to_list() == [1617253764189062, 1617253764189122]  # Istio's time, not kubectl's


def test_config_dump_folds_into_its_record():
    """Multi-line messages that are not header dumps (proto text config, dynamic metadata) fold."""
    text = ("2022-06-29T21:18:13.175349Z\tdebug\tenvoy filter\tSaved Dynamic Metadata:\n"
            "fields {\n  key: \"request.auth.principal\"\n  value {\n    string_value: \"cluster.local/ns/x\"\n  }\n}\n"
            "2022-06-29T21:18:13.175385Z\tdebug\tenvoy router\t[C7816][S1] no cluster match for URL '/x'\n"
            "### a line of another program ###\n")
    parsed = parse_text(text)
    d = parsed.diagnostics
    assert parsed.events["n_lines"].to_list() == [7, 1]
    assert parsed.events["message"][0].endswith("  }\n}")
    assert d.lines_malformed == 1 and d.malformed_examples == ["<text>:9: ### a line of another program ###"]


@pytest.mark.parametrize("fast", [True, False])
def test_old_layouts_agree_on_fast_and_slow_paths(fast):
    a = parse_text(REAL_3205 + REAL_3205, fast=fast).events
    b = parse_text(REAL_3205 + REAL_3205, fast=not fast).events
    assert_frame_equal(a, b)
