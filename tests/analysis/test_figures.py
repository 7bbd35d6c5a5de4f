"""figures: the shared plotly figures stay small whatever the capture (lanes, slices, points)."""
from __future__ import annotations

import itertools

import plotly.io as pio
import polars as pl
import pytest

from envoy_dissector.analysis import dissect
from envoy_dissector.analysis.outputs import figures


@pytest.fixture(scope="module")
def cap():
    return dissect("fixtures/istio-thread/workers/envoy.log.gz")


def many_origins(loop: pl.DataFrame, n: int) -> pl.DataFrame:
    return pl.concat([loop.with_columns(origin=pl.lit(f"pod-{i}"),
                                        start_us=pl.col("start_us") + i, end_us=pl.col("end_us") + i)
                      for i in range(n)])


def test_event_loop_keeps_the_busiest_lanes_and_the_highlighted_one(cap):
    loop = many_origins(cap.loop, 100)
    conn = int(cap.loop.filter(pl.col("conn_id").is_not_null())["conn_id"][0])
    fig = figures.event_loop(loop, highlight=[conn])
    lanes = {y for t in fig.data for y in t.y}
    assert len(lanes) == figures.MAX_LANES and "busiest 24 of" in fig.layout.title.text
    assert any((t.name or "").startswith("highlighted") for t in fig.data)
    assert len(pio.to_json(fig)) < 2_000_000


def test_event_loop_zero_keeps_coordinates_of_the_whole_capture(cap):
    zero = int(cap.loop["start_us"].min())
    start = zero + 20_000
    fig = figures.event_loop(cap.loop, start_us=start, end_us=start + 5_000, zero_us=zero)
    # (x in ms since ``zero``: slices overlapping the window start begin at most one 5 ms slice before it)
    assert min(b for t in fig.data for b in t.base) >= 20 - 5
    first = cap.loop.filter(pl.col("end_us") >= start).sort("start_us").row(0, named=True)
    assert any(b == (first["start_us"] - zero) / 1000 for t in fig.data for b in t.base)
    default = figures.event_loop(cap.loop, start_us=start, end_us=start + 5_000)
    assert min(b for t in default.data for b in t.base) == 0


def test_event_loop_many_slices_become_a_heatmap(cap):
    loop = pl.concat([cap.loop.with_columns(start_us=pl.col("start_us") + i * 10**6,
                                            end_us=pl.col("end_us") + i * 10**6) for i in range(20)])
    assert loop.height > figures.MAX_SLICES
    fig = figures.event_loop(loop)
    assert fig.data[0].type == "heatmap"


def test_utilisation_caps_lines_and_adds_the_mean(cap):
    assert len(figures.utilisation(cap.loop).data) == cap.loop.select("origin", "thread").unique().height
    fig = figures.utilisation(many_origins(cap.loop, 50))
    assert len(fig.data) == figures.MAX_LANES // 2 + 1 and fig.data[-1].name.startswith("mean of all")


def test_latency_over_time_is_decimated():
    n = 50_000
    r = pl.DataFrame({"request_uid": [str(i) for i in range(n)], "life_start_us": list(range(n)),
                      "total_us": [100] * n, "loop_queue_us": [0] * n, "complete": [True] * n,
                      "internal": [False] * n})
    fig = figures.latency_over_time(r)
    assert fig.data[0].type == "scattergl" and len(fig.data[0].x) <= figures.MAX_POINTS


def test_waterfall_has_phases_and_filter_rows():
    lua = dissect("fixtures/istio-thread/lua-cpu/envoy.log.gz")
    uid = lua.requests.filter(pl.col("path") == "/")["request_uid"][0]
    fig = lua.waterfall(uid)
    labels = " ".join(fig.data[0].y)
    assert "filter_chain" in labels and "envoy.filters.http.lua" in labels and "upstream_wait" in labels
    assert fig.layout.xaxis.range[0] <= 0


def test_log_content_reaches_plotly_escaped(tmp_path):
    """Plotly renders <a href>, <b>, <br> in titles, ticks, legends and hover: log content is escaped."""
    import gzip
    import re
    from pathlib import Path

    from envoy_dissector.analysis import dissect
    from envoy_dissector.analysis.outputs.figures import event_loop, plain, waterfall

    text = gzip.decompress(Path("fixtures/istio-thread/lua-cpu/envoy.log.gz").read_bytes()).decode()
    text = text.replace("':path', '/'", "':path', '/<a href=\"http://evil.example/\">x</a>'")
    text = text.replace("filter=envoy.filters.http.lua ", "filter=<b>lua</b> ")
    path = tmp_path / "<br>x.log"
    path.write_text(text)
    cap = dissect(str(path))
    row = cap.request(cap.requests.filter(cap.requests["path"].str.contains("evil"))["request_uid"][0])
    fig = waterfall(row, cap.request_phases(row))
    assert "/&lt;a href=\"http://evil.example/\"&gt;x&lt;/a&gt;" in fig.layout.title.text
    labels = " ".join(fig.data[0].y)
    assert "&lt;b&gt;lua&lt;/b&gt;" in labels and not re.search(r"<[ab][ >]", labels)
    lanes = " ".join(event_loop(cap.loop).data[0].y)
    assert "&lt;br&gt;x.log · thread" in lanes and "<br>" not in lanes
    assert plain("a&b<c>") == "a&amp;b&lt;c&gt;"


def test_phase_distribution_puts_each_phase_at_its_own_labelled_x(cap):
    fig = cap.phase_distribution()
    xs = [t.x[0] for t in fig.data]
    assert xs == [t.name for t in fig.data] and len(set(xs)) == len(xs) >= 5
    assert all(min(t.lowerfence[0], t.q1[0], t.median[0]) >= 1 for t in fig.data)  # drawable on the log axis


def test_utilisation_breaks_its_line_at_gaps(cap):
    """Buckets with no slice are not interpolated across: a None between buckets that are not adjacent."""
    fig = figures.utilisation(cap.loop)
    for trace in fig.data:
        x = list(trace.x)
        for a, b in itertools.pairwise(x):
            if a is not None and b is not None:
                assert b > a
        assert trace.connectgaps is False
    assert any(v is None for t in fig.data for v in t.y)
