"""Events stage (parser/classify.py): the fast path agrees with the grammar; typed fields are right.

Typed fields are checked against Envoy's own access log (``access.jsonl``: connection ids,
x-request-id, method, path, authority, status) and against the raw message text.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from envoy_dissector.parser.classify import Classifier, classify, fast_path_enabled
from envoy_dissector.parser.grammar import ALL_KINDS, parse_message
from envoy_dissector.parser.pipeline import iter_parse, parse, parse_text
from envoy_dissector.parser.schema import EVENT_SCHEMA

TRUTH_CAPTURES = ["istio-thread/workers", "istio-thread/http2", "istio-thread/new-upstream-conn", "envoy/workers",
                  "istio-json/workers", "istio-json-old/keepalive", "custom/workers", "old-format/converted/workers"]


def test_fast_path_agrees_with_slow_path(fixture_log, parsed_fixture):
    fast = parsed_fixture(fixture_log, fast=True)
    slow = parsed_fixture(fixture_log, fast=False)
    assert_frame_equal(fast.events, slow.events)
    assert fast.diagnostics.shapes > 0 and slow.diagnostics.shapes == 0
    assert fast.diagnostics.grammar_calls == fast.diagnostics.shapes  # one grammar call per shape


def test_event_schema(fixture_by_rel, parsed_fixture):
    events = parsed_fixture(fixture_by_rel("istio-thread/http2/envoy.log.gz")).events
    assert dict(events.schema) == EVENT_SCHEMA
    assert events.schema["stream_id"] == pl.UInt64 and events.schema["conn_id"] == pl.Int64
    assert set(events["kind"].cast(str).unique()) <= set(ALL_KINDS)


def test_env_var_forces_the_slow_path(monkeypatch, fixture_by_rel, parsed_fixture):
    fx = fixture_by_rel("istio-thread/retries-503/envoy.log.gz")
    monkeypatch.setenv("ENVOY_DISSECTOR_FAST", "0")
    assert not fast_path_enabled()
    parsed = parse(fx.path)
    assert parsed.diagnostics.shapes == 0 and parsed.diagnostics.grammar_calls == 0
    assert_frame_equal(parsed.events, parsed_fixture(fx).events)
    monkeypatch.setenv("ENVOY_DISSECTOR_FAST", "1")
    assert fast_path_enabled()


def _access(fx) -> pl.DataFrame:
    rows = [json.loads(line) for line in (fx.path.parent / "access.jsonl").read_text().splitlines() if line]
    return pl.DataFrame(rows, infer_schema_length=None)


@pytest.mark.parametrize("capture", TRUTH_CAPTURES)
def test_request_fields_agree_with_envoys_access_log(capture, fixture_by_rel, parsed_fixture):
    fx = fixture_by_rel(f"{capture}/envoy.log.gz")
    events = parsed_fixture(fx).events
    access = _access(fx).filter(pl.col("path") != "/ready")
    assert access.height > 0
    req = events.filter(pl.col("kind") == "request_headers_complete", pl.col("x_request_id").is_not_null())
    joined = access.join(req, on="x_request_id", how="left", suffix="_log")
    # every request Envoy logged is found by its x-request-id, on the right downstream connection
    assert joined["conn_id"].null_count() == 0
    assert joined["conn_id"].to_list() == joined["connection_id"].to_list()
    assert joined["method_log"].to_list() == joined["method"].to_list()
    assert joined["path_log"].to_list() == joined["path"].to_list()
    assert joined["authority_log"].to_list() == joined["authority"].to_list()
    assert joined.select(pl.col("stream_id").is_not_null().all()).item() or capture.startswith("istio-thread/http2")
    # the response status is on the encoding_headers dump of the same stream
    enc = events.filter(pl.col("kind") == "encoding_headers").select("conn_id", "stream_id", st="status")
    with_status = joined.join(enc, on=["conn_id", "stream_id"], how="left")
    assert with_status["st"].to_list() == with_status["status"].to_list()
    # and the upstream connection from `Attached upstream connection [Cu] to downstream connection [Cd]`
    attached = events.filter(pl.col("kind") == "attached_upstream_connection").select("conn_id", "upstream_conn_id")
    pairs = set(attached.iter_rows())
    for down, up in access.select("connection_id", "upstream_connection_id").iter_rows():
        assert (down, up) in pairs


def test_stream_ids_above_2_to_the_63_are_exact(fixture_by_rel, parsed_fixture):
    events = parsed_fixture(fixture_by_rel("istio-thread/workers/envoy.log.gz")).events
    with_ids = events.filter(pl.col("stream_id").is_not_null())
    big = with_ids.filter(pl.col("stream_id") > 2**63)
    assert big.height > 0
    for message, cid, sid in with_ids.select("message", "conn_id", "stream_id").gather_every(37).iter_rows():
        m = re.match(r'\[Tags: "ConnectionId":"(\d+)","StreamId":"(\d+)"\]', message)
        assert m and (int(m[1]), int(m[2])) == (cid, sid)


def test_typed_fields_match_the_message_text(fixture_by_rel, parsed_fixture):
    events = parsed_fixture(fixture_by_rel("istio-thread/large-body/envoy.log")).events

    def rows(kind: str, *cols: str) -> list[tuple]:
        return events.filter(pl.col("kind") == kind).select("message", *cols).rows()

    checks = {
        "read_returns": (r"read returns: (-?\d+)$", lambda m: (int(m[1]),), ("bytes",)),
        "writing_bytes": (r"writing (\d+) bytes, end_stream (true|false)$",
                          lambda m: (int(m[1]), m[2] == "true"), ("bytes", "end_stream")),
        "encoding_data": (r"encoding data via codec \(size=(\d+) end_stream=(true|false)\)$",
                          lambda m: (int(m[1]), m[2] == "true"), ("bytes", "end_stream")),
        "route_match": (r"cluster '([^']*)' match for URL '([^']*)'$", lambda m: (m[1], m[2]), ("cluster", "url")),
        "decode_headers_called": (r"decode headers called: filter=(\S*) status=(\d+)$",
                                  lambda m: (m[1], int(m[2])), ("filter", "filter_status")),
        "request_headers_complete": (r"request headers complete \(end_stream=(true|false)\):",
                                     lambda m: (m[1] == "true",), ("end_stream",)),
    }
    for kind, (pattern, expect, cols) in checks.items():
        found = rows(kind, *cols)
        assert found, kind
        for message, *values in found:
            m = re.search(pattern, message.split("\n")[0])
            assert m, (kind, message)
            assert tuple(values) == expect(m), (kind, message)
    assert {r[1] for r in rows("decode_headers_called", "filter")} >= {"envoy.filters.http.router"}
    assert all("'" not in c for _, c, u in rows("route_match", "cluster", "url"))


def test_old_and_tagged_prefixes_give_the_same_events(fixture_by_rel, parsed_fixture):
    for name in ("keepalive", "workers"):
        tagged = parsed_fixture(fixture_by_rel(f"istio/{name}/envoy.log.gz")).events
        old = parsed_fixture(fixture_by_rel(f"old-format/converted/{name}/envoy.log.gz")).events
        assert old["message"].str.contains(r"^\[C\d+\]").sum() > 1000
        assert not old["message"].str.contains("[Tags:", literal=True).any()
        assert_frame_equal(tagged.drop("message", "origin"), old.drop("message", "origin"))


@pytest.mark.parametrize(("text", "conn", "stream"), [
    ('connection\t[C12] read returns: 5', "12", None),
    ('http\t[C12][S34] pool ready', "12", "34"),
    ('connection\t[Tags: "ConnectionId":"12"] read returns: 5', "12", None),
    ('router\t[Tags: "ConnectionId":"12","StreamId":"18446744073709551615"] pool ready', "12",
     "18446744073709551615"),
    ('router\t[Tags: \\"ConnectionId\\":\\"12\\",\\"StreamId\\":\\"34\\"] pool ready', "12", "34"),
])
def test_prefix_styles(text, conn, stream):
    parse = parse_message(text)
    values = parse.values(text)
    assert values.get("conn_id") == conn and values.get("stream_id") == stream
    assert parse.kind in ("read_returns", "pool_ready")


def test_header_dump_columns(fixture_by_rel, parsed_fixture):
    events = parsed_fixture(fixture_by_rel("istio-thread/keepalive/envoy.log.gz")).events
    dumps = events.filter(pl.col("message").str.contains("\n"))
    for kind in ("request_headers_complete", "router_decoding_headers"):
        d = dumps.filter(pl.col("kind") == kind)
        assert d.height > 0
        assert d["method"].null_count() == 0 and d["path"].null_count() == 0 and d["authority"].null_count() == 0
    resp = dumps.filter(pl.col("kind").is_in(["upstream_response_headers", "encoding_headers"]))
    assert resp["status"].null_count() == 0 and set(resp["status"]) <= {200, 503}
    single = events.filter(~pl.col("message").str.contains("\n"))
    assert single.select(pl.col("method", "authority", "path", "x_request_id").is_null().all()).row(0) == (
        True, True, True, True)
    # the dump values are the lines of the message
    for message, method, path, xid in dumps.filter(pl.col("kind") == "router_decoding_headers").select(
            "message", "method", "path", "x_request_id").head(20).iter_rows():
        lines = message.split("\n")
        assert f"':method', '{method}'" in lines and f"':path', '{path}'" in lines
        assert xid is None or f"'x-request-id', '{xid}'" in lines


def test_trace_id_from_traceparent_and_b3():
    text = ("2024-01-01T00:00:00.000001Z\tdebug\tenvoy router\t[C1][S2] router decoding headers:\n"
            "':method', 'GET'\n'traceparent', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'\n\n"
            "2024-01-01T00:00:00.000002Z\tdebug\tenvoy router\t[C3][S4] router decoding headers:\n"
            "':method', 'GET'\n'x-b3-traceid', '80f198ee56343ba864fe8b2a57d3eff7'\n")
    ev = parse_text(text).events
    assert ev["trace_id"].to_list() == ["4bf92f3577b34da6a3ce929d0e0e4736", "80f198ee56343ba864fe8b2a57d3eff7"]


def test_unknown_and_background_are_kept_and_counted():
    text = ("2024-01-01T00:00:00.000001Z\ttrace\tenvoy connection\t[C9] a message no grammar rule knows 42\n"
            "2024-01-01T00:00:00.000002Z\tinfo\tenvoy upstream\tcds: added/updated 1 cluster(s)\n"
            "2024-01-01T00:00:00.000003Z\ttrace\tenvoy connection\t[C9] read returns: 7\n")
    for fast in (True, False):
        parsed = parse_text(text, fast=fast)
        ev = parsed.events
        assert ev["kind"].cast(str).to_list() == ["unknown", "background", "read_returns"]
        assert ev["conn_id"].to_list() == [9, None, 9]  # the prefix is still read on an unknown message
        assert parsed.diagnostics.records_unknown == 1
        assert parsed.diagnostics.events_by_kind == {"unknown": 1, "background": 1, "read_returns": 1}


def test_classifier_reuses_shapes_across_chunks(fixture_by_rel):
    fx = fixture_by_rel("istio-thread/keepalive/envoy.log.gz")
    events = parse(fx.path).events
    records = events.with_columns(first_line=pl.col("message").str.split("\n").list.first())
    classifier = Classifier()
    half = records.height // 2
    a = classify(records.head(half), fast=True, classifier=classifier)
    calls = classifier.grammar_calls
    b = classify(records.slice(half), fast=True, classifier=classifier)
    assert classifier.grammar_calls - calls < calls / 4  # the second half is mostly known shapes
    assert_frame_equal(pl.concat([a, b]), classify(records, fast=False))


@pytest.mark.parametrize("room", [0, 40, 10**6])
def test_class_cache_full_or_not_gives_the_same_frames(room, fixture_by_rel, monkeypatch):
    """Chunks classify only classes the cache lacks; a full cache starts over; results do not change."""
    import envoy_dissector.parser.classify as classify_module

    monkeypatch.setattr(classify_module, "CLASS_CACHE", room)
    fx = fixture_by_rel("istio-thread/workers/envoy.log.gz")
    records = parse(fx.path).events.with_columns(first_line=pl.col("message").str.split("\n").list.first())
    classifier = Classifier()
    parts = [classify(records.slice(i, 700), fast=True, classifier=classifier) for i in range(0, records.height, 700)]
    assert_frame_equal(pl.concat(parts), classify(records, fast=False))
    stored = classifier.classes.height if classifier.classes is not None else 0
    assert stored <= room
    if room == 10**6:
        assert stored > 0
        assert classifier.classes.select(classify_module.CLASS_KEY).is_unique().all()


def test_class_cache_starting_over_under_concurrent_chunks(fixture_by_rel, parsed_fixture, monkeypatch):
    """Four workers on small chunks with a tiny cache (it starts over again and again): same events."""
    import envoy_dissector.parser.classify as classify_module

    monkeypatch.setattr(classify_module, "CLASS_CACHE", 60)
    fx = fixture_by_rel("istio-thread/workers/envoy.log.gz")
    chunked = pl.concat([c.events for c in iter_parse(fx.path, block_bytes=16384, workers=4)])
    assert_frame_equal(chunked, parsed_fixture(fx).events)


def test_sentinel_values_in_messages_across_chunks():
    """Lines whose text holds a sentinel id (a 192837465-byte write) keep their real ids, chunk after chunk."""
    from envoy_dissector.parser.classify import SENTINELS

    rows = []
    for i in range(400):
        rows.append(("connection", f"[C5][S7] writing {SENTINELS[1]} bytes, end_stream false"))
        rows.append(("connection", f"[C{i}] writing {SENTINELS[0]} bytes, end_stream false"))
        rows.append(("connection", f"writing {SENTINELS[1]} bytes, end_stream false"))
        rows.append(("connection", f"[C{i}][S{i + 1}] read returns: {i}"))
    records = pl.DataFrame(rows, schema=["logger", "first_line"], orient="row")
    classifier = Classifier()
    parts = [classify(records.slice(i, 100), fast=True, classifier=classifier) for i in range(0, records.height, 100)]
    got = pl.concat(parts)
    assert_frame_equal(got, classify(records, fast=False))
    assert got["conn_id"].to_list()[:4] == [5, 0, None, 0]
    assert classifier.classes.select("logger", "canon__", "rest__").is_unique().all()  # no class stored twice


def test_signature_expression_matches_python():
    from envoy_dissector.parser.classify import _signature_expr, signature

    values = ["'a b'", "''", "0x1f", "0xZZ", "0x", "12", "-3", "3abc", "abc3", "a.b-22", '"StreamId"', '"12"',
              "1.2.3", "Http2Visitor", "100", "_9", "x1y22z333"]
    got = pl.Series(values).to_frame("v").select(_signature_expr(pl.col("v"))).to_series().to_list()
    assert got == [signature(v) for v in values]


@pytest.mark.parametrize(("texts", "kinds"), [
    # same shape, different lexical class of a value: the grammar decides each line
    (["connection\t[C1] socket event: 3", "connection\t[C1] socket event: 3abc"], ["socket_event", "unknown"]),
    (['router\t[Tags: "ConnectionId":"1","StreamId":"2"] pool ready',
      'router\t[Tags: "ConnectionId":"1","Foo":"2"] pool ready'], ["pool_ready", "unknown"]),
    (["http\t[C1][S2] encoding 101 continue headers via codec:",
      "http\t[C1][S2] encoding 100 continue headers via codec:"], ["unknown", "encoding1xx_headers"]),
    (["http2\tHttp3Visitor::OnEndStream(5)", "http2\tHttp2Visitor::OnEndStream(5)"],
     ["unknown", "h2_visitor_end_stream"]),
    (["router\t[C4][S5] pool ready0", "router\t[C4][S5] pool xyz0"], ["unknown", "unknown"]),
])
def test_fast_path_follows_the_grammar_when_values_change_class(texts, kinds):
    from envoy_dissector.parser.classify import Classifier

    logger_msgs = [t.split("\t", 1) for t in texts]
    records = pl.DataFrame(logger_msgs, schema={"logger": pl.String, "first_line": pl.String}, orient="row")
    classifier = Classifier()
    fast = classify(records, fast=True, classifier=classifier)
    assert fast["kind"].cast(str).to_list() == kinds
    assert_frame_equal(fast, classify(records, fast=False))
    assert classifier.grammar_calls == 1 and classifier.fallback_lines == 1  # one shape, one line re-checked


def test_free_text_values_do_not_force_the_grammar(fixture_by_rel):
    """Values inside catch-all fields (reasons, header values) vary freely without a grammar call per line."""
    from envoy_dissector.parser.classify import Classifier

    lines = [f"http\t[C{n}] completed header: key=x-request-id value={n:08x}-{n * 7919:x}-a1b2" for n in range(200)]
    lines += [f"connection\t[C{n}] read error: Connection reset by peer {n}, code: {n % 7}" for n in range(200)]
    records = pl.DataFrame([x.split("\t", 1) for x in lines], schema={"logger": pl.String, "first_line": pl.String},
                           orient="row")
    classifier = Classifier()
    fast = classify(records, fast=True, classifier=classifier)
    assert classifier.fallback_lines == 0
    assert_frame_equal(fast, classify(records, fast=False))
    assert fast["header_value"][5] == f"{5:08x}-{5 * 7919:x}-a1b2"


def test_fallback_count_is_the_same_run_to_run():
    """The classes a chunk has not seen are classified in the order they first appear, so the representative of
    each shape (and with it which lines are re-checked by the grammar) does not change between runs."""
    from envoy_dissector.parser.pipeline import parse

    path = Path(__file__).resolve().parents[2] / "fixtures/real/027-compose-lua-decompressor-v1.24-trace-cut-in-encode.log"
    counts = {parse(path).diagnostics.fallback_lines for _ in range(8)}
    assert len(counts) == 1, counts
