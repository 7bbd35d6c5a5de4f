"""What a person sees first, checked in a real headless Chromium (1440x1000) from the rendered page's geometry
and text: the waterfall's title clear of plotly's mode bar; the Requests grid's headers whole, durations with
thousands separators, client requests first; the workers table inside its panel; a failed upload without a
green "Uploaded"; a banner on a debug-level capture naming what it cannot measure."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.dashboard.browser_steps import TIMEOUT, open_tab, shot, until, upload

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
DEBUG = FIXTURES / "debug-level" / "istio-thread" / "workers" / "envoy.log.gz"
pytestmark = pytest.mark.needs_browser

RECT = ("const e = document.querySelector(arguments[0]); if (!e) return null;"
        "const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom];")
TEXTS = "return [...document.querySelectorAll(arguments[0])].map(e => e.textContent.trim());"


def rect(br, selector: str) -> tuple[float, float, float, float] | None:
    """Where the first element matching ``selector`` is drawn, read in one script (the page re-renders)."""
    r = br.driver.execute_script(RECT, selector)
    return tuple(r) if r else None


def texts(br, selector: str) -> list[str]:
    return list(br.driver.execute_script(TEXTS, selector))


def overlap(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_what_the_views_show_first(dash_duo, make_app, artifacts, named, tmp_path):
    dash_duo.start_server(make_app())
    dash_duo.wait_for_contains_text("#dataset", "demo: lua-cpu", timeout=TIMEOUT)

    # the waterfall's title is below the mode bar
    open_tab(dash_duo, "waterfall")
    dash_duo.wait_for_element("#waterfall-graph .gtitle", timeout=TIMEOUT)
    dash_duo.wait_for_element("#waterfall-graph .modebar", timeout=TIMEOUT)
    assert texts(dash_duo, "#waterfall-graph .gtitle")[0]
    title, modebar = rect(dash_duo, "#waterfall-graph .gtitle"), rect(dash_duo, "#waterfall-graph .modebar")
    assert title and modebar and not overlap(title, modebar), (title, modebar)
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
    # (an infinite grid draws a row before its values: wait for the cell's text)
    first = until(lambda: [t for t in texts(dash_duo, '.ag-center-cols-container .ag-row[row-index="0"] '
                                                      '[col-id="internal"]') if t], what="the first row's values")
    assert [t.lower() for t in first] == ["false"]
    # (the other rows' values come after the first row's: wait for durations of four digits or more)
    big = until(lambda: [t for t in texts(dash_duo, '.ag-center-cols-container [col-id="total_us"]')
                         if len(t.replace(",", "")) > 3], what="durations of 1,000 µs or more in the grid")
    assert all("," in t for t in big), big[:10]
    shot(dash_duo, artifacts, "details-requests")

    # the workers table fits its panel
    open_tab(dash_duo, "loop")
    dash_duo.wait_for_element("#workers-table", timeout=TIMEOUT)
    table = until(lambda: (r := rect(dash_duo, "#workers-table")) and r[2] > 0 and r, what="the workers table drawn")
    panel = rect(dash_duo, "#workers-panel")
    assert panel and table[2] <= panel[2] + 1, (table, panel)
    assert table[2] <= dash_duo.driver.execute_script("return window.innerWidth")
    shot(dash_duo, artifacts, "details-workers")

    # a file that is not a log: the red error only
    notes = tmp_path / "notes.txt"
    notes.write_text("hello, this is not a proxy log\n")
    dash_duo.find_element("#upload-file").send_keys(str(notes))
    dash_duo.wait_for_contains_text("#job-message", "not an Envoy / istio-proxy log", timeout=TIMEOUT)
    # (text and class are one callback's outputs, but a release may render them a frame apart: wait for the class)
    classes = until(lambda: (c := dash_duo.driver.execute_script(
        "return ['job-message', 'upload-message'].map(i => document.getElementById(i).className.split(' '));"))
        and "error" in c[0] and c, what="the job message marked as an error")
    assert "ok" not in classes[1], classes
    assert "Uploaded" not in texts(dash_duo, "#upload-message")[0]
    shot(dash_duo, artifacts, "details-failed-upload")

    # a debug-level capture: the banner says what it cannot measure, on every tab
    upload(dash_duo, named(DEBUG, "debug-workers.log.gz"))
    dash_duo.wait_for_element("#quality-banner-text", timeout=TIMEOUT)
    banner = texts(dash_duo, "#quality-banner-text")[0]
    for phrase in ("Debug-level capture", "downstream_read", "event-loop queueing", "cannot be measured"):
        assert phrase in banner, banner
    open_tab(dash_duo, "overview")
    until(lambda: dash_duo.find_element("#quality-banner-text").is_displayed(),  # (found at each try: redrawn)
          what="the banner shown on the overview tab")
    shot(dash_duo, artifacts, "details-debug-banner")

    # back to a trace-level capture, which measures everything: its banner callback takes the banner away
    # (checked only now: before a banner was shown, its absence would not say the callback had answered)
    dash_duo.find_element("#dataset").click()

    def click_the_demo() -> bool:  # (found and clicked in one try: the open menu redraws its options)
        # (dash 3's dropdown draws its options as .VirtualizedSelectOption, dash 4's with role=option)
        for option in dash_duo.find_elements(".VirtualizedSelectOption, [role=option]"):
            if option.text.startswith("demo: lua-cpu ("):
                option.click()
                return True
        return False
    until(click_the_demo, what="the demo in the dataset options, clicked")
    dash_duo.wait_for_no_elements("#quality-banner-text", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#dataset", "demo: lua-cpu", timeout=TIMEOUT)
