"""Every shared figure drawn by plotly.js in a real headless Chromium, its geometry read back from the rendered
page: the figure as users see it, not the figure object we built (issue 28).

Each figure goes into a minimal HTML page with plotly.js inlined (``fig.to_html``), opened from a file; positions
come from plotly's own axes (``l2p``) and the DOM's bounding boxes."""
from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import polars as pl
import pytest

from envoy_dissector.analysis import dissect
from envoy_dissector.analysis.outputs import figures
from envoy_dissector.analysis.outputs.comparison import compare
from envoy_dissector.analysis.stages.loop import UNATTRIBUTED_IDLE_US
from envoy_dissector.analysis.stats import counted
from tests.dashboard.browser_steps import TIMEOUT, until

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
pytestmark = pytest.mark.needs_browser

#: (fixture, why): a worker with a tracer's flushes and the idle stretch before shutdown; one worker, 8 connections.
LOOP_FIXTURES = ("istio-thread/tracing-zipkin", "istio-thread/lua-cpu")


@pytest.fixture(scope="module")
def dash_br(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One headless Chromium for the module (dash[testing]'s ``dash_br`` starts one per test, ~2 s each): every
    test opens its figure as a page of its own (``draw``), so no test sees another's page."""
    from dash.testing.browser import Browser

    with Browser(browser="Chrome", headless=True, options=request.config.hook.pytest_setup_options(),
                 download_path=str(tmp_path_factory.mktemp("download")), percy_run=False,
                 percy_finalize=False) as browser:
        yield browser


@pytest.fixture(scope="module")
def caps() -> dict[str, Any]:
    return {rel: dissect(str(FIXTURES / rel / "envoy.log.gz"))
            for rel in (*LOOP_FIXTURES, "istio-thread/tracing-off")}


def draw(br, fig: go.Figure, tmp_path: Path, name: str) -> None:
    """Open ``fig`` in the browser as a page of its own, 1200×700, and wait until plotly has drawn it."""
    fig = go.Figure(fig).update_layout(width=1200, height=max(int(fig.layout.height or 0), 500))
    page = tmp_path / f"{name}.html"
    page.write_text(fig.to_html(include_plotlyjs=True, full_html=True, div_id="fig",
                                config={"displayModeBar": True}), encoding="utf-8")
    br.driver.get(page.as_uri())
    until(lambda: br.driver.execute_script(
        "const g = document.getElementById('fig'); return !!(g && g._fullLayout && g.querySelector('.main-svg'));"),
        timeout=TIMEOUT, what=f"{name} drawn")


def js(br, script: str) -> Any:
    return br.driver.execute_script(script)


def rect(br, selector: str) -> dict[str, float] | None:
    return js(br, f"const e = document.querySelector({json.dumps(selector)});"
                  "if (!e) return null; const r = e.getBoundingClientRect();"
                  "return {left: r.left, right: r.right, top: r.top, bottom: r.bottom};")


def overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return a["left"] < b["right"] and b["left"] < a["right"] and a["top"] < b["bottom"] and b["top"] < a["bottom"]


def assert_title_clear(br, name: str) -> None:
    """The title is drawn, inside the page's width, and the mode bar (shown on hover) does not cover it."""
    js(br, "document.getElementById('fig').dispatchEvent(new MouseEvent('mousemove', {bubbles: true}));")
    title = rect(br, "#fig .gtitle")
    modebar = rect(br, "#fig .modebar")
    page = rect(br, "#fig .main-svg")
    assert title and modebar and page, (name, title, modebar)
    assert not overlap(title, modebar), (name, title, modebar)
    assert title["right"] <= page["right"] + 1, (name, "title runs off the figure", title, page)


def test_phase_distribution_one_labelled_box_per_phase(dash_br, caps, tmp_path) -> None:
    cap = caps["istio-thread/lua-cpu"]
    draw(dash_br, cap.phase_distribution(), tmp_path, "phases")
    boxes = js(dash_br, """
        const out = [];
        document.querySelectorAll('#fig .boxlayer .trace path.box').forEach(p => {
            const r = p.getBoundingClientRect(); out.push([(r.left + r.right) / 2, r.width, r.height]); });
        return out;""")
    ticks = js(dash_br, """return Array.from(document.querySelectorAll('#fig .xtick text')).map(t => {
        const r = t.getBoundingClientRect(); return [t.textContent, r.right]; });""")  # slanted: ends at its tick
    names = [t.name for t in cap.phase_distribution().data]
    assert len(boxes) == len(names) >= 5
    centres = sorted(round(b[0]) for b in boxes)
    assert len(set(centres)) == len(centres)  # each box at its own x, none drawn over another
    assert min(b - a for a, b in itertools.pairwise(centres)) > 20
    assert [t[0] for t in ticks] == names  # each position labelled with its phase
    for i, (_, tick_x) in enumerate(sorted(ticks, key=lambda t: t[1])):
        nearest = min(range(len(centres)), key=lambda k: abs(centres[k] - tick_x))
        assert nearest == i  # the label under its own box
    assert_title_clear(dash_br, "phase distribution")


@pytest.mark.parametrize("rel", LOOP_FIXTURES)
def test_event_loop_slices_are_no_longer_than_the_work(dash_br, caps, tmp_path, rel: str) -> None:
    """No drawn slice is longer than the longest request it served (or, for a thread serving no client
    connection, the longest client request or 10 ms of unattributed silence); the axis reads ms since the
    capture's start, not µs since an epoch number."""
    cap = caps[rel]
    fig = cap.event_loop()
    draw(dash_br, fig, tmp_path, "loop")
    drawn = js(dash_br, """
        const g = document.getElementById('fig'), xa = g._fullLayout.xaxis, out = [];
        const px_per_ms = xa.l2p(1) - xa.l2p(0);  // (the axis' coordinates are ms since the capture's start)
        g.querySelectorAll('.barlayer .trace').forEach((tr, i) => {
            const d = g._fullData[tr.__data__ ? tr.__data__[0].trace.index : i];
            tr.querySelectorAll('.point path').forEach((p, j) => {
                const r = p.getBoundingClientRect();
                out.push({trace: d.name, j: j, width_us: r.width / px_per_ms * 1000, conn: d.customdata[j]});
            });
        });
        return out;""")
    assert drawn
    clients = counted(cap.requests)
    longest_of = dict(clients.group_by(conn="downstream_conn_id").agg(
        (pl.col("total_us") + pl.col("queue_before_read_us").fill_null(0)).max()).iter_rows())
    ceiling = max(int(clients["total_us"].max()), UNATTRIBUTED_IDLE_US)
    px_us = 1e6 / 1200  # one pixel of a 1200-px figure over a ~1 s axis: the drawing's own precision
    for bar in drawn:
        conn = bar["conn"].split("<br>")[0].split()[0]
        limit = longest_of.get(int(conn[1:]), ceiling) if conn.startswith("C") and conn[1:].isdigit() else ceiling
        assert bar["width_us"] <= limit + px_us, bar
    title = js(dash_br, "return document.querySelector('#fig .xtitle').textContent;")
    assert title.startswith("ms since the capture's start") and "UTC" in title
    # the coordinates themselves are ms since the first slice (not µs labelled as ms): the rendered axis' full
    # extent (autorange, double click) spans the capture's loop in ms
    full = js(dash_br, """const g = document.getElementById('fig');
        return Plotly.relayout(g, {'xaxis.autorange': true}).then(() => g._fullLayout.xaxis.range);""")
    span_ms = (int(cap.loop["end_us"].max()) - int(cap.loop["start_us"].min())) / 1000
    assert full[0] <= 0 and span_ms <= full[1] <= span_ms * 1.1 + 1, (full, span_ms)
    ticks = js(dash_br, "return Array.from(document.querySelectorAll('#fig .xtick text')).map(t => t.textContent);")
    assert ticks and all(len(t.replace(",", "")) <= 6 for t in ticks), ticks  # ms, not 16-digit µs
    assert_title_clear(dash_br, "event loop")


@pytest.mark.parametrize("rel", LOOP_FIXTURES)
def test_utilisation_never_draws_across_a_gap(dash_br, caps, tmp_path, rel: str) -> None:
    """Every drawn segment of a utilisation line joins adjacent buckets: read back from the SVG path (its points
    turned into seconds through plotly's own axis), no two consecutive points of one segment are further apart
    than one bucket."""
    cap = caps[rel]
    fig = figures.utilisation(cap.loop)
    draw(dash_br, fig, tmp_path, "util")
    segments = js(dash_br, """
        const g = document.getElementById('fig'), xa = g._fullLayout.xaxis, out = [];
        g.querySelectorAll('.scatterlayer .trace path.js-line').forEach(p => {
            const d = p.getAttribute('d') || '';
            d.split('M').filter(s => s.trim()).forEach(seg => {
                const xs = seg.split('L').map(pt => xa.p2l(parseFloat(pt.split(',')[0])));
                out.push(xs);
            });
        });
        return out;""")
    span = (int(cap.loop["end_us"].max()) - int(cap.loop["start_us"].min()) + 1) / 1e6
    bucket_s = max(span / 200, 1e-6)
    gaps = sum(v is None for t in fig.data for v in t.y)
    assert gaps > 0  # these captures have idle stretches (start-up, before shutdown)
    assert segments
    for xs in segments:
        steps = [b - a for a, b in itertools.pairwise(xs)]
        assert all(step <= bucket_s * 1.05 for step in steps), (max(steps) / bucket_s, xs, bucket_s)
    assert_title_clear(dash_br, "utilisation")


def test_waterfall_titles_and_phases_visible(dash_br, caps, tmp_path) -> None:
    cap = caps["istio-thread/lua-cpu"]
    slow = counted(cap.requests).sort("total_us", descending=True)["request_uid"][0]
    draw(dash_br, cap.waterfall(slow), tmp_path, "waterfall")
    labels = js(dash_br, "return Array.from(document.querySelectorAll('#fig .ytick text')).map(t => t.textContent);")
    assert any("filter_chain" in label for label in labels) and any("upstream_wait" in label for label in labels)
    bars = js(dash_br, "return document.querySelectorAll('#fig .barlayer .point path').length;")
    assert bars == len(labels)
    assert_title_clear(dash_br, "waterfall")


def test_stitched_waterfall_nests_the_inbound_proxy(dash_br, tmp_path) -> None:
    """Two real Envoys on loopback (lab/mesh.py, 20 requests): one call drawn across both proxies."""
    from envoy_dissector.lab.mesh import run_mesh

    mesh = run_mesh(tmp_path / "mesh", log_format="istio-thread", requests=20)
    cap = dissect([mesh / "a" / "envoy.log", mesh / "b" / "envoy.log"])
    pairs = cap.requests.filter(pl.col("peer_request_uid").is_not_null() & pl.col("network_out_us").is_not_null())
    assert pairs.height > 0
    fig = cap.stitched_waterfall(pairs["request_uid"][0])
    draw(dash_br, fig, tmp_path, "stitched")
    labels = js(dash_br, "return Array.from(document.querySelectorAll('#fig .ytick text')).map(t => t.textContent);")
    assert any(label.startswith("outbound") for label in labels)
    assert any("inbound" in label for label in labels) and any("network out" in label for label in labels)
    assert js(dash_br, "return document.querySelectorAll('#fig .barlayer .point path').length;") == len(labels)
    assert_title_clear(dash_br, "stitched waterfall")


def test_overview_and_compare_figures(dash_br, caps, tmp_path) -> None:
    on, off = caps["istio-thread/tracing-zipkin"], caps["istio-thread/tracing-off"]
    for name, fig in (("phase share", figures.phase_share(on.requests)),
                      ("latency", figures.latency_over_time(on.requests)),
                      ("compare", figures.compare(on.summary(), off.summary(), "tracing on", "tracing off"))):
        draw(dash_br, fig, tmp_path, name.replace(" ", "-"))
        assert_title_clear(dash_br, name)
    # compare: one group per phase, each labelled, both captures' bars in it
    ticks = js(dash_br, "return Array.from(document.querySelectorAll('#fig .xtick text')).map(t => t.textContent);")
    table = compare(on, off)
    assert set(ticks) <= set(table["phase"].to_list()) and len(ticks) >= 5
    legend = js(dash_br, "return Array.from(document.querySelectorAll('#fig .legendtext')).map(t => t.textContent);")
    assert {"tracing on p50", "tracing off p50"} <= set(legend)
