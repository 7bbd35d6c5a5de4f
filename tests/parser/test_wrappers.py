"""kubectl wrappers around log lines (parser/wrappers.py), on the real derived captures in fixtures/kubectl."""
from __future__ import annotations

import gzip
import re
from datetime import datetime

import polars as pl
from polars.testing import assert_frame_equal

from envoy_dissector.parser.pipeline import parse_text
from envoy_dissector.parser.wrappers import detect_wrappers, strip_sample

PODS = ("productpage-v1-7d9c8b6f5-x2k9p", "reviews-v2-5b64f47978-qh7zn")
ORIGINS = sorted(f"{pod}/istio-proxy" for pod in PODS)
_PREFIX = re.compile(r"^\[pod/([^/\]]+)/([^\]]+)\] ")


def read(path) -> str:
    return gzip.open(path, "rt").read() if str(path).endswith(".gz") else open(path).read()


def test_timestamps_wrapper_is_stripped_and_records_match_the_source(fixture_by_rel, parsed_fixture):
    source = parsed_fixture(fixture_by_rel("istio-thread/keepalive/envoy.log.gz"))
    wrapped = parsed_fixture(fixture_by_rel("kubectl/timestamps/envoy.log.gz"))
    assert wrapped.diagnostics.wrappers == ["kubectl-timestamps"]
    assert wrapped.diagnostics.format == "istio-thread"
    # Envoy's own timestamp wins over kubectl's; everything but the origin is the source capture's.
    assert_frame_equal(source.events.drop("origin"), wrapped.events.drop("origin"))


def test_prefix_wrapper_gives_pod_container_origin(fixture_by_rel, parsed_fixture):
    source = parsed_fixture(fixture_by_rel("istio-thread/keepalive/envoy.log.gz"))
    wrapped = parsed_fixture(fixture_by_rel("kubectl/prefix/envoy.log.gz"))
    assert wrapped.diagnostics.wrappers == ["kubectl-prefix"]
    assert wrapped.events["origin"].unique().to_list() == ["productpage-v1-7d9c8b6f5-x2k9p/istio-proxy"]
    assert_frame_equal(source.events.drop("origin"), wrapped.events.drop("origin"))


def _lines_of(text: str, origin: str) -> str:
    pod, container = origin.split("/")
    prefix = f"[pod/{pod}/{container}] "
    return "".join(line for line in text.splitlines(keepends=True) if line.startswith(prefix))


def test_multi_pod_sequential_and_interleaved(fixture_by_rel, parsed_fixture):
    for rel in ("kubectl/multi-pod/sequential.log.gz", "kubectl/multi-pod/interleaved.log.gz"):
        fx = fixture_by_rel(rel)
        parsed = parsed_fixture(fx)
        d = parsed.diagnostics
        assert d.wrappers == ["kubectl-prefix", "kubectl-timestamps"]
        assert d.lines_malformed == 0 and d.lines_read == d.lines_in_records
        events = parsed.events
        assert sorted(events["origin"].unique().to_list()) == ORIGINS
        assert sorted(d.by_origin) == ORIGINS
        text = read(fx.path)
        for origin in ORIGINS:
            alone = parse_text(_lines_of(text, origin)).events  # this pod's lines only
            mine = events.filter(pl.col("origin") == origin)
            assert alone.height == mine.height == d.by_origin[origin]["records"]
            # same records; line numbers differ (they count lines of the combined file)
            assert_frame_equal(alone.drop("line_no"), mine.drop("line_no"))


def test_interleaved_and_sequential_agree_per_pod(fixture_by_rel, parsed_fixture):
    seq = parsed_fixture(fixture_by_rel("kubectl/multi-pod/sequential.log.gz")).events
    inter = parsed_fixture(fixture_by_rel("kubectl/multi-pod/interleaved.log.gz")).events
    for origin in ORIGINS:
        a = seq.filter(pl.col("origin") == origin).drop("line_no")
        b = inter.filter(pl.col("origin") == origin).drop("line_no")
        assert_frame_equal(a, b)


def test_line_numbers_point_at_the_wrapped_file(fixture_by_rel, parsed_fixture):
    fx = fixture_by_rel("kubectl/multi-pod/interleaved.log.gz")
    lines = read(fx.path).splitlines()
    events = parsed_fixture(fx).events
    for row in events.gather_every(97).iter_rows(named=True):
        line = lines[row["line_no"] - 1]
        pod, container = _PREFIX.match(line).groups()
        assert row["origin"] == f"{pod}/{container}"
        first = row["message"].split("\n")[0]
        assert first in line


def test_wrapper_timestamp_used_when_the_format_has_none():
    """A --log-format without time: ts_us comes from kubectl's RFC3339Nano stamp (ns truncated to µs)."""
    text = ("2024-03-05T07:08:09.123456789Z debug http [C1][S2] new stream\n"
            "2024-03-05T07:08:09.5Z debug http [C1][S2] request end stream\n"
            "2024-03-05T09:08:10+02:00 debug http [C1][S2] request end stream\n")
    parsed = parse_text(text, log_format="%l %n %v")
    assert parsed.diagnostics.wrappers == ["kubectl-timestamps"]
    base = int(datetime.fromisoformat("2024-03-05T07:08:09+00:00").timestamp()) * 1_000_000
    assert parsed.events["ts_us"].to_list() == [base + 123456, base + 500000, base + 1_000_000]


def test_format_starting_with_rfc3339_is_not_a_kubectl_wrapper():
    fmt = "%Y-%m-%dT%T.%fZ %l %n %v"
    line = "2024-03-05T07:08:09.123456Z debug pool [C2] creating stream"
    parsed = parse_text(line + "\n", log_format=fmt)
    assert parsed.diagnostics.wrappers == []
    assert parsed.events.select("kind", "conn_id").row(0) == ("pool_creating_stream", 2)
    # ... but kubectl --timestamps on top of such a format is still recognised and stripped
    parsed = parse_text("2024-03-05T07:08:09.123499123Z " + line + "\n", log_format=fmt)
    assert parsed.diagnostics.wrappers == ["kubectl-timestamps"]
    assert parsed.events["ts_us"].to_list() == [1709622489123456]


def test_detect_wrappers_needs_most_lines():
    lines = ["[pod/a/b] x"] * 7 + ["y"] * 3
    assert detect_wrappers(lines) == []
    lines = ["[pod/a/b] 2024-03-05T07:08:09Z x"] * 9 + ["y"]
    assert detect_wrappers(lines) == ["kubectl-prefix", "kubectl-timestamps"]
    assert strip_sample(lines[:1], ["kubectl-prefix", "kubectl-timestamps"]) == ["x"]
    assert detect_wrappers([]) == []
