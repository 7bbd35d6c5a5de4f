"""Envelope stage (parser/envelope.py): folding multi-line records, malformed lines, CRLF."""
from __future__ import annotations

import gzip

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from envoy_dissector.parser.envelope import CONTINUATION, split_envelope
from envoy_dissector.parser.formats import KNOWN_FORMATS
from envoy_dissector.parser.pipeline import parse_text


@pytest.fixture(scope="module")
def istio_lines(fixture_by_rel) -> list[str]:
    return gzip.open(fixture_by_rel("istio-thread/keepalive/envoy.log.gz").path, "rt").read().splitlines()


@pytest.fixture(scope="module")
def envoy_lines(fixture_by_rel) -> list[str]:
    return gzip.open(fixture_by_rel("envoy-us/keepalive/envoy.log.gz").path, "rt").read().splitlines()


def _dump_at(lines: list[str], phrase: str, start: int = 0) -> tuple[int, int]:
    """(index of the first record containing ``phrase``, index of the next record start)."""
    i = next(k for k in range(start, len(lines)) if phrase in lines[k])
    j = next(k for k in range(i + 1, len(lines)) if lines[k][:4].isdigit() or lines[k].startswith("[20"))
    return i, j


def test_istio_header_dump_folds_with_thread_trailer(istio_lines):
    i, j = _dump_at(istio_lines, "request headers complete")
    block = istio_lines[i:j]
    assert block[-1].startswith("\tthread=")  # Istio puts the thread after the dump, on its own line
    parsed = parse_text("\n".join(istio_lines[i : j + 1]) + "\n")
    ev = parsed.events
    assert ev.height == 2 and parsed.diagnostics.lines_malformed == 0
    row = ev.row(0, named=True)
    assert row["n_lines"] == len(block)
    assert row["thread"] == int(block[-1].split("=")[1])
    dump = block[1:-1]
    assert row["message"].split("\n")[1:] == list(dump)
    assert "thread=" not in row["message"]
    assert row["kind"] == "request_headers_complete" and row["method"] == "GET"
    assert ev["line_no"].to_list() == [1, len(block) + 1]


def test_envoy_layout_header_dump_folds_with_blank_line(envoy_lines):
    i, j = _dump_at(envoy_lines, "request headers complete")
    block = envoy_lines[i:j]
    assert block[-1] == ""  # Envoy's default layout ends a dump with an empty line
    parsed = parse_text("\n".join(envoy_lines[i : j + 1]) + "\n")
    row = parsed.events.row(0, named=True)
    assert row["n_lines"] == len(block)
    assert row["message"].split("\n")[1:] == block[1:-1]
    assert row["authority"] is not None and row["path"] is not None


def test_every_dump_kind_in_the_fixture_folds(istio_lines):
    parsed = parse_text("\n".join(istio_lines) + "\n")
    ev = parsed.events
    multi = ev.filter(pl.col("n_lines") > 1)
    assert multi.height > 0
    # every multi-line record's extra lines are header-dump lines or the thread trailer
    for message in multi["message"]:
        for extra in message.split("\n")[1:]:
            assert pl.Series([extra]).str.contains(CONTINUATION).item(), extra
    assert set(multi["kind"].cast(str)) <= {"request_headers_complete", "router_decoding_headers",
                                            "upstream_response_headers", "encoding_headers",
                                            "request_trailers_complete", "router_decoding_trailers",
                                            "upstream_response_trailers", "encoding_trailers",
                                            "background"}  # Envoy's startup "Local locality: ..." + blank


def test_garbage_line_in_the_middle_is_malformed_with_its_line_number(istio_lines):
    seg = istio_lines[200:300]
    k = next(n for n in range(5, 40) if not seg[n - 1].endswith(":") and seg[n][:4].isdigit())
    text = "\n".join(seg[:k] + ["### this is not a log line ###"] + seg[k:]) + "\n"
    parsed = parse_text(text)
    d = parsed.diagnostics
    assert d.lines_malformed == 1
    assert d.lines_read == 101 == d.lines_in_records + d.lines_malformed
    assert d.malformed_examples == [f"<text>:{k + 1}: ### this is not a log line ###"]
    clean = parse_text("\n".join(seg) + "\n").events
    assert parsed.events.height == clean.height
    # records after the garbage keep their own (shifted) physical line numbers
    shifted = clean.with_columns(pl.when(pl.col("line_no") > k).then(pl.col("line_no") + 1)
                                 .otherwise(pl.col("line_no")).alias("line_no"))
    assert_frame_equal(parsed.events, shifted)


def test_garbage_before_the_first_record(istio_lines):
    seg = istio_lines[:50]
    parsed = parse_text("garbage one\n\xff\xfe binary-ish \x00\ngarbage three\n" + "\n".join(seg) + "\n")
    d = parsed.diagnostics
    assert d.lines_malformed == 3
    assert [e.split(": ", 1)[0] for e in d.malformed_examples] == ["<text>:1", "<text>:2", "<text>:3"]
    assert d.lines_in_records == 50 and parsed.events["line_no"].min() == 4


def test_continuation_looking_lines_before_any_record_are_malformed(istio_lines):
    parsed = parse_text("':path', '/orphan'\n\tthread=3\n" + "\n".join(istio_lines[:20]) + "\n")
    assert parsed.diagnostics.lines_malformed == 2


def test_crlf_line_endings_parse_like_lf(istio_lines, envoy_lines):
    for lines in (istio_lines[150:400], envoy_lines[150:400]):
        lf = parse_text("\n".join(lines) + "\n")
        crlf = parse_text("\r\n".join(lines) + "\r\n")
        assert_frame_equal(lf.events, crlf.events)
        assert not crlf.events["message"].str.contains("\r").any()
        assert crlf.diagnostics.lines_read == len(lines)


def test_missing_final_newline(istio_lines):
    a = parse_text("\n".join(istio_lines[:30]) + "\n")
    b = parse_text("\n".join(istio_lines[:30]))
    assert_frame_equal(a.events, b.events)
    assert b.diagnostics.lines_read == 30


@pytest.mark.parametrize("known", [k for k in KNOWN_FORMATS if not k.pattern.startswith("{")],
                         ids=lambda k: k.label)
def test_split_envelope_is_pure_and_accounts_for_lines(known):
    fmt = known.compiled
    lines = pl.DataFrame({"line_no": [1, 2, 3], "raw": ["nope", "", "nope"], "origin": ["o"] * 3,
                          "wrapper_ts_us": pl.Series([None] * 3, dtype=pl.Int64)})
    env = split_envelope(lines, fmt)
    assert env.records.height == 0
    assert env.malformed["line_no"].to_list() == [1, 2, 3]


def test_json_lines_without_the_message_key_are_malformed(fixture_by_rel):
    lines = gzip.open(fixture_by_rel("istio-json/keepalive/envoy.log.gz").path, "rt").read().splitlines()[100:130]
    extra = ['{"foo": 1}', "[1, 2]", '{"msg": null}', "not json at all",
             '{"level":"debug","time":"2026-11-22T01:09:47.931625Z","scope":"envoy router",'
             '"msg":"[C1][S2] pool ready"}']
    parsed = parse_text("\n".join(lines[:10] + extra + lines[10:]) + "\n")
    d = parsed.diagnostics
    assert d.lines_read == 35 and d.lines_malformed == 4 and d.records == 31
    assert [e.split(": ", 1)[0] for e in d.malformed_examples] == [f"<text>:{n}" for n in (11, 12, 13, 14)]
    # a record without the optional keys (caller, thread) is still a record
    row = parsed.events.filter(pl.col("line_no") == 15).row(0, named=True)
    assert (row["kind"], row["conn_id"], row["thread"], row["source"]) == ("pool_ready", 1, None, None)


@pytest.mark.parametrize("rel", ["istio-json/keepalive/envoy.log.gz", "istio-json/workers/envoy.log.gz",
                                 "istio-json-old/keepalive/envoy.log.gz"])
def test_json_decoded_once_equals_key_by_key(rel, fixture_by_rel):
    """The fast JSON split (one json_decode per line) and the path-by-path split give the same records."""
    from envoy_dissector.parser.envelope import _split_json_by_path, split_json
    from envoy_dissector.parser.formats import detect_format

    text = gzip.open(fixture_by_rel(rel).path, "rt").read().splitlines()
    tags = ('{"level":"debug","time":"2026-11-22T01:09:47.931625Z","scope":"envoy http","msg":"pool ready",'
            '"ConnectionId":12,"StreamId":"34"}')
    raw = text + [tags, '{"foo": 1}', "not json"]
    lines = pl.DataFrame({"line_no": range(1, len(raw) + 1), "raw": raw, "origin": ["o"] * len(raw),
                          "wrapper_ts_us": pl.Series([None] * len(raw), dtype=pl.Int64)})
    fmt = detect_format(text[:200]).compiled
    fast, exact = split_json(lines, fmt), _split_json_by_path(lines, fmt)
    assert_frame_equal(fast.records, exact.records)
    assert_frame_equal(fast.malformed, exact.malformed)
    assert fast.records["message"][-1].startswith('[Tags: "ConnectionId":"12","StreamId":"34"] ')


def test_a_broken_json_line_falls_back_and_is_malformed(fixture_by_rel):
    lines = gzip.open(fixture_by_rel("istio-json/keepalive/envoy.log.gz").path, "rt").read().splitlines()[100:120]
    broken = '{"level":"debug","time":"2026-11-22T01:09:47.931625Z","msg":"cut here'
    parsed = parse_text("\n".join(lines[:5] + [broken] + lines[5:]) + "\n")
    d = parsed.diagnostics
    assert (d.lines_read, d.lines_malformed, d.records) == (21, 1, 20)
    assert d.malformed_examples[0].startswith("<text>:6: ")
