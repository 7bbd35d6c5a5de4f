"""What a person sees first, checked in a real headless Chromium (1440x1000) from the rendered page's geometry
and text: the waterfall's title clear of plotly's mode bar; the Requests grid's headers whole, durations with
thousands separators, client requests first; the workers table inside its panel; a failed upload without a
green "Uploaded"; a banner on a debug-level capture naming what it cannot measure."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.dashboard.test_browser import TIMEOUT, make_app, named, open_tab, shot, until, upload  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
DEBUG = FIXTURES / "debug-level" / "istio-thread" / "workers" / "envoy.log.gz"
pytestmark = pytest.mark.needs_browser

RECT = "const r = arguments[0].getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom];"


def rect(br, element) -> tuple[float, float, float, float]:
    return tuple(br.driver.execute_script(RECT, element))


def overlap(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_what_the_views_show_first(dash_duo, make_app, artifacts, named, tmp_path):  # noqa: F811
    dash_duo.start_server(make_app())
    dash_duo.wait_for_contains_text("#dataset", "demo: lua-cpu", timeout=TIMEOUT)
    assert not dash_duo.find_elements("#quality-banner-text")  # a trace-level capture measures everything

    # the waterfall's title is below the mode bar
    open_tab(dash_duo, "waterfall")
    title = dash_duo.wait_for_element("#waterfall-graph .gtitle", timeout=TIMEOUT)
    graph = dash_duo.find_element("#waterfall-graph .js-plotly-plot")
    dash_duo.driver.execute_script(
        "arguments[0].dispatchEvent(new MouseEvent('mousemove', {bubbles: true}))", graph)  # (the bar shows)
    modebar = dash_duo.wait_for_element("#waterfall-graph .modebar", timeout=TIMEOUT)
    assert title.text and not overlap(rect(dash_duo, title), rect(dash_duo, modebar)), \
        (rect(dash_duo, title), rect(dash_duo, modebar))
    shot(dash_duo, artifacts, "details-waterfall")

    # the grid: whole headers, client requests first, durations grouped by thousands
    open_tab(dash_duo, "requests")
    until(lambda: dash_duo.find_elements('.ag-center-cols-container .ag-row[row-index="0"] [col-id="internal"]'),
          what="the grid's first row")
    truncated = dash_duo.driver.execute_script(
        "return [...document.querySelectorAll('.ag-header-cell .ag-header-cell-text')]"
        ".filter(e => e.offsetParent && (e.scrollWidth > e.clientWidth + 1 || e.scrollHeight > e.clientHeight + 1))"
        ".map(e => e.textContent);")
    assert truncated == [], truncated
    first = dash_duo.find_element('.ag-center-cols-container .ag-row[row-index="0"] [col-id="internal"]').text
    assert first.strip().lower() == "false"
    totals = [e.text for e in dash_duo.find_elements('.ag-center-cols-container [col-id="total_us"]')]
    big = [t for t in totals if len(t.replace(",", "")) > 3]
    assert big and all("," in t for t in big), totals[:10]
    shot(dash_duo, artifacts, "details-requests")

    # the workers table fits its panel
    open_tab(dash_duo, "loop")
    table = dash_duo.wait_for_element("#workers-table", timeout=TIMEOUT)
    panel = dash_duo.find_element("#workers-panel")
    until(lambda: rect(dash_duo, table)[2] > 0, what="the workers table drawn")
    assert rect(dash_duo, table)[2] <= rect(dash_duo, panel)[2] + 1, (rect(dash_duo, table), rect(dash_duo, panel))
    assert rect(dash_duo, table)[2] <= dash_duo.driver.execute_script("return window.innerWidth")
    shot(dash_duo, artifacts, "details-workers")

    # a file that is not a log: the red error only
    notes = tmp_path / "notes.txt"
    notes.write_text("hello, this is not a proxy log\n")
    dash_duo.find_element("#upload-file").send_keys(str(notes))
    dash_duo.wait_for_contains_text("#job-message", "not an Envoy / istio-proxy log", timeout=TIMEOUT)
    assert "error" in dash_duo.find_element("#job-message").get_attribute("class")
    message = dash_duo.find_element("#upload-message")
    assert "Uploaded" not in message.text and "ok" not in message.get_attribute("class").split()
    shot(dash_duo, artifacts, "details-failed-upload")

    # a debug-level capture: the banner says what it cannot measure, on every tab
    upload(dash_duo, named(DEBUG, "debug-workers.log.gz"))
    banner = dash_duo.wait_for_element("#quality-banner-text", timeout=TIMEOUT)
    for phrase in ("Debug-level capture", "downstream_read", "event-loop queueing", "cannot be measured"):
        assert phrase in banner.text, banner.text
    open_tab(dash_duo, "overview")
    assert dash_duo.find_element("#quality-banner-text").is_displayed()
    shot(dash_duo, artifacts, "details-debug-banner")
