"""The dashboard in a real headless Chromium: uploads through the real file input, every view,
and two browser sessions kept apart. Screenshots of each view go to ``test-artifacts/``."""
from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest

from envoy_dissector.analysis import dissect
from envoy_dissector.dashboard.datasets import Registry
from tests.builders import analysed
from tests.dashboard.browser_steps import TIMEOUT, click, click_until, open_tab, shot, until, upload

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
pytestmark = pytest.mark.needs_browser  # skipped without Chromium, failed without it when CI is set (conftest.py)

LUA = FIXTURES / "istio-thread" / "lua-cpu" / "envoy.log.gz"
WORKERS = FIXTURES / "istio-thread" / "workers" / "envoy.log.gz"
DELAY = FIXTURES / "istio-thread" / "upstream-delay" / "envoy.log.gz"


def client_requests(path: Path) -> int:
    return int(analysed(path).summary()["capture"]["requests"])  # (once per test process)


def first_cell(br, col: str) -> str | None:
    """Text of ``col`` in the grid's first row (row-index 0), without thousands separators."""
    cells = br.find_elements(f'.ag-center-cols-container .ag-row[row-index="0"] [col-id="{col}"]')
    return cells[0].text.replace(",", "").strip() if cells else None


def grid_row_with_path(br, path: str):
    for row in br.find_elements(".ag-center-cols-container .ag-row"):
        cells = row.find_elements_by_css_selector('[col-id="path"]')
        if cells and cells[0].text.strip() == path:
            return row
    return None


def click_status_of_row(br, path: str) -> bool:
    """Click the status cell of the grid row for ``path``, that row found at the click (the grid redraws its rows
    as its blocks arrive: a row found earlier may be stale); False while there is none."""
    row = grid_row_with_path(br, path)
    if row is None:
        return False
    row.find_elements_by_css_selector('[col-id="status"]')[0].click()
    return True


def waterfall_drawn(br) -> bool:
    """A request's waterfall is drawn (its phase ticks; before a click the graph is empty)."""
    return any(e.text == "downstream_read" for e in br.find_elements("#waterfall-graph .ytick text"))


@pytest.fixture
def app(make_app):
    return make_app()


def test_upload_and_every_view(dash_duo, app, artifacts, named):
    dash_duo.start_server(app)
    # the demo is there at once
    dash_duo.wait_for_contains_text("#dataset", "demo: lua-cpu", timeout=TIMEOUT)
    dash_duo.wait_for_text_to_equal("#overview-requests", "40", timeout=TIMEOUT)

    # upload a fixture through the real file input
    upload(dash_duo, named(LUA, "lua-cpu.log.gz"))
    expected = client_requests(LUA)
    dash_duo.wait_for_text_to_equal("#overview-requests", f"{expected:,}", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#overview-title", "lua-cpu.log.gz", timeout=TIMEOUT)
    dash_duo.wait_for_element("#percentile-table")
    dash_duo.wait_for_contains_text("#findings", "saturated", timeout=TIMEOUT)
    until(lambda: "Fix:" in text_of(dash_duo, "#findings"), what="a fix in the findings")  # (redrawn by callbacks)
    dash_duo.wait_for_element("#phase-share .main-svg")
    shot(dash_duo, artifacts, "1-overview")

    # requests grid, served block by block from the server
    open_tab(dash_duo, "requests")
    dash_duo.wait_for_contains_text("#requests-count", f"of {expected + 1} requests", timeout=TIMEOUT)
    until(lambda: grid_row_with_path(dash_duo, "/"), what="a grid row for path /")
    shot(dash_duo, artifacts, "2-requests")
    click_until(lambda: click_status_of_row(dash_duo, "/"), lambda: waterfall_drawn(dash_duo),
                what="a click on the grid row for path /, its waterfall drawn")

    # its waterfall: phases and per-filter rows, competing connections
    dash_duo.wait_for_element("#waterfall-graph .main-svg", timeout=TIMEOUT)
    labels = until(lambda: " | ".join(e.text for e in dash_duo.find_elements("#waterfall-graph .ytick text"))
                   or None, what="waterfall labels")
    for phase in ("downstream_read", "header_parse", "filter_chain", "upstream_wait", "encode",
                  "downstream_write", "envoy.filters.http.lua"):
        until(lambda p=phase: p in " | ".join(e.text for e in dash_duo.find_elements("#waterfall-graph .ytick text")),
              what=f"{phase} in the waterfall ({labels})")
    until(lambda: "upstream connection" in (facts := text_of(dash_duo, "#request-facts"))
          and "upstream attempts" in facts, what="the upstream facts")
    dash_duo.wait_for_contains_text("#competing", "C", timeout=TIMEOUT)
    dash_duo.find_element("#show-lines").click()
    dash_duo.wait_for_contains_text("#log-lines-text", "new stream", timeout=TIMEOUT)
    shot(dash_duo, artifacts, "3-waterfall")

    # a competing connection jumps to the event loop with it highlighted
    def click_first_connection() -> bool:  # (found and clicked in one try: the block is a callback's output)
        for button in dash_duo.find_elements("#competing .conn-btn"):
            if button.text.startswith("C"):
                button.click()
                return True
        return False

    def highlighted() -> str | None:
        infos = dash_duo.find_elements("#loop-info")
        return found.group(1) if infos and (found := re.search(r"highlighted (C\d+)", infos[0].text)) else None
    conn = click_until(click_first_connection, highlighted, what="a competing connection clicked and highlighted")
    dash_duo.wait_for_contains_text("#loop-info", f"highlighted {conn}", timeout=TIMEOUT)
    dash_duo.wait_for_element("#loop-graph .main-svg", timeout=TIMEOUT)
    until(lambda: "thread" in " ".join(e.text for e in dash_duo.find_elements("#loop-graph .ytick text")),
          what="worker lanes in the event-loop view")
    dash_duo.wait_for_element("#workers-table", timeout=TIMEOUT)
    shot(dash_duo, artifacts, "4-event-loop")
    # zoom: plotly reports the new x range and the server re-queries that window. A relayout sent while a callback
    # still redraws the graph (the highlight's) is lost with the figure it was applied to: sent again until it holds.
    def zoom() -> bool:
        dash_duo.driver.execute_script(
            "const g = document.querySelector('#loop-graph .js-plotly-plot');"
            "Plotly.relayout(g, {'xaxis.range[0]': 20, 'xaxis.range[1]': 21});")  # (ms since the capture's start)
        return True
    click_until(zoom, lambda: "window +20.000..+21.000 ms" in dash_duo.find_element("#loop-info").text,
                what="the event-loop view zoomed to 20-21 ms")
    dash_duo.find_element("#loop-reset").click()
    dash_duo.wait_for_contains_text("#loop-info", "window +0.000..", timeout=TIMEOUT)

    # the competing connection's own requests: the grid is filtered on the server
    open_tab(dash_duo, "waterfall")
    click(dash_duo, "#competing .conn-btn.small")
    dash_duo.wait_for_contains_text("#requests-count", f"of {expected + 1} requests", timeout=TIMEOUT)
    count = until(lambda: (t := dash_duo.find_element("#requests-count").text) and not t.startswith(f"{expected + 1} ")
                  and t, what="a filtered request count")
    n = int(count.split()[0])
    assert 1 <= n < expected
    until(lambda: len(dash_duo.find_elements(".ag-center-cols-container .ag-row")) == n, what=f"{n} grid rows")
    search = dash_duo.find_element("#search")
    search.clear()
    search.send_keys("/ready\n")
    dash_duo.wait_for_text_to_equal("#requests-count", f"1 of {expected + 1} requests (incl. internal ones) match",
                                    timeout=TIMEOUT)
    # sorting by a header click is done on the server too
    search.clear()
    search.send_keys("\n")
    dash_duo.wait_for_text_to_equal("#requests-count", f"{expected + 1} of {expected + 1} requests (incl. internal "
                                    "ones) match", timeout=TIMEOUT)
    totals = analysed(LUA).requests["total_us"].drop_nulls()
    header = '.ag-header-cell[col-id="total_us"] .ag-header-cell-label'  # (found at each click: the grid redraws it)
    click(dash_duo, header)
    until(lambda: first_cell(dash_duo, "total_us") == f"{totals.min():,}".replace(",", ""), what="ascending sort")
    click(dash_duo, header)
    until(lambda: first_cell(dash_duo, "total_us") == str(totals.max()), what="descending sort")

    # compare: upload a second capture, compare it with the first
    upload(dash_duo, named(DELAY, "upstream-delay.log.gz"))
    open_tab(dash_duo, "compare")
    dash_duo.wait_for_contains_text("#compare-a", "uploaded: lua-cpu.log.gz", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#compare-b", "uploaded: upstream-delay.log.gz", timeout=TIMEOUT)
    # (the table is a callback's output, redrawn as the two choices settle: read by query inside the wait)
    until(lambda: all(part in text_of(dash_duo, "#compare-table")
                      for part in ("upstream_wait", "filter_chain", "total", "Δ p50")),
          what="every phase and the p50 change in the compare table")
    shot(dash_duo, artifacts, "5-compare")
    assert dash_duo.get_logs() == [] or all("favicon" in str(e) for e in dash_duo.get_logs())


def test_the_overview_grows_while_an_upload_is_analysed(dash_duo, make_app, artifacts, named):
    """The streaming analysis hands finished requests to the page as it goes: a provisional overview with the
    requests so far appears, grows, and gives way to the full one. Until the test has seen the count grow, each
    finished batch is held until the page shows it (the page redraws every 2 s at most; a loaded machine
    polls later, and a small fixture would be analysed between two draws). The analysis is the real streaming
    path."""
    counts: list[int] = []
    client_rows = [0]  # client requests handed to the page so far

    def watching() -> bool:
        return len({c for c in counts if c > 0}) < 2

    def slowed(*args, on_finished, **kwargs):
        def emit(requests, phases):
            on_finished(requests, phases)
            client_rows[0] += int((~requests["internal"]).sum())
            deadline = time.monotonic() + TIMEOUT  # (past it the test fails on its own: the count did not grow)
            while client_rows[0] and watching() and time.monotonic() < deadline \
                    and (not counts or counts[-1] < client_rows[0]):
                time.sleep(0.1)
        return dissect(*args, on_finished=emit, window_events=400, block_bytes=20_000, **kwargs)

    app = make_app(registry=Registry(analyse=slowed))
    dash_duo.start_server(app)
    dash_duo.wait_for_contains_text("#dataset", "demo: lua-cpu", timeout=TIMEOUT)
    dash_duo.find_element("#upload-file").send_keys(str(named(WORKERS, "workers.log.gz").resolve()))
    dash_duo.wait_for_contains_text("#overview-title", "workers.log.gz (analysing", timeout=TIMEOUT)
    dash_duo.wait_for_element("#overview-provisional", timeout=TIMEOUT)

    def provisional_count() -> int | None:
        if not dash_duo.find_elements("#overview-provisional"):
            return None
        text = [t.text for t in dash_duo.find_elements("#overview-requests")]
        if not text or not text[0]:
            return 0  # being redrawn
        counts.append(int(text[0].replace(",", "")))
        return counts[-1]
    until(lambda: (provisional_count() or 0) > 0, what="requests in the provisional overview")
    until(lambda: provisional_count() is None or not watching(), what="the provisional count to grow")
    shot(dash_duo, artifacts, "overview-provisional")
    expected = client_requests(WORKERS)
    dash_duo.wait_for_text_to_equal("#overview-title", "workers.log.gz", timeout=60)  # the full overview
    assert not dash_duo.find_elements("#overview-provisional")
    dash_duo.wait_for_text_to_equal("#overview-requests", f"{expected:,}", timeout=TIMEOUT)
    dash_duo.wait_for_element("#percentile-table", timeout=TIMEOUT)
    assert counts == sorted(counts), counts  # it grew, never shrank
    grown = sorted({c for c in counts if c > 0})
    assert len(grown) >= 2 and grown[-1] <= expected, counts


def test_not_an_envoy_log_and_size_cap(dash_duo, make_app, tmp_path, artifacts):
    app = make_app(max_upload_mb=1)  # 1 MiB of log text
    dash_duo.start_server(app)
    dash_duo.wait_for_contains_text("#dataset", "demo", timeout=TIMEOUT)
    bad = tmp_path / "notes.txt"
    bad.write_text("hello, this is not a proxy log\nsecond line\n")
    dash_duo.wait_for_element("#upload-file", timeout=TIMEOUT).send_keys(str(bad))
    dash_duo.wait_for_contains_text("#job-message", "not an Envoy / istio-proxy log", timeout=TIMEOUT)
    assert "notes.txt" in dash_duo.find_element("#job-message").text
    # drag and drop: a File dropped on the zone takes the same streaming path
    dash_duo.driver.execute_script(
        "const dt = new DataTransfer();"
        "dt.items.add(new File(['not a log either\\n'], 'dropped.log'));"
        "document.getElementById('upload-drop').dispatchEvent("
        "  new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));")
    dash_duo.wait_for_contains_text("#job-message", "dropped.log", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#job-message", "not an Envoy / istio-proxy log", timeout=TIMEOUT)
    big = tmp_path / "big.log"
    big.write_bytes(b"x" * 1_200_000)
    dash_duo.find_element("#upload-file").send_keys(str(big))
    dash_duo.wait_for_contains_text("#upload-message", "upload limit", timeout=TIMEOUT)
    # a small gzip holding more than the cap: refused by the server, which counts decompressed bytes
    import gzip

    packed = tmp_path / "packed.log.gz"
    packed.write_bytes(gzip.compress(b"2026-11-22T01:09:40.050266Z\tinfo\tenvoy main x\thello\n" * 40_000))
    assert packed.stat().st_size < 100_000
    dash_duo.find_element("#upload-file").send_keys(str(packed))
    dash_duo.wait_for_contains_text("#upload-message", "packed.log.gz: more than this server's upload limit of 1 MB "
                                    "of log text (decompressed)", timeout=TIMEOUT)
    shot(dash_duo, artifacts, "6-errors")
    # a capture written with a custom --log-format: given in the header, it is sent with the upload
    dash_duo.find_element(".options summary").click()
    dash_duo.find_element("#upload-log-format").send_keys("%Y-%m-%d %T.%f|%t|%L|%n|%v")
    custom = tmp_path / "custom-format.log.gz"
    shutil.copyfile(FIXTURES / "custom" / "keepalive" / "envoy.log.gz", custom)
    dash_duo.find_element("#upload-file").send_keys(str(custom))
    dash_duo.wait_for_contains_text("#job-message", "custom-format.log.gz: analysed", timeout=TIMEOUT)
    dash_duo.wait_for_text_to_equal("#overview-format", "custom", timeout=TIMEOUT)


@pytest.fixture
def second_browser(request, tmp_path):
    """Another Chromium with its own browser session (own sessionStorage), like a second user."""
    from dash.testing.browser import Browser

    (tmp_path / "download2").mkdir()
    with Browser(browser="Chrome", headless=True, options=request.config.hook.pytest_setup_options(),
                 download_path=str(tmp_path / "download2"), percy_run=False, percy_finalize=False) as br:
        yield br


def test_two_sessions_stay_apart(dash_duo, second_browser, app, artifacts, named):
    dash_br = second_browser
    dash_duo.start_server(app)
    dash_br.server_url = dash_duo.server_url
    for br in (dash_duo, dash_br):
        br.wait_for_contains_text("#dataset", "demo", timeout=TIMEOUT)
    # both upload at the same time: send the files before waiting for either
    dash_duo.wait_for_element("#upload-file", timeout=TIMEOUT).send_keys(str(named(LUA, "session-a.log.gz")))
    dash_br.wait_for_element("#upload-file", timeout=TIMEOUT).send_keys(str(named(WORKERS, "session-b.log.gz")))
    dash_duo.wait_for_contains_text("#job-message", "analysed", timeout=TIMEOUT)
    dash_br.wait_for_contains_text("#job-message", "analysed", timeout=TIMEOUT)
    dash_duo.wait_for_text_to_equal("#overview-requests", f"{client_requests(LUA):,}", timeout=TIMEOUT)
    dash_br.wait_for_text_to_equal("#overview-requests", f"{client_requests(WORKERS):,}", timeout=TIMEOUT)
    # each session lists only its own upload (plus the shared demo)
    for br in (dash_duo, dash_br):
        br.find_element("#dataset").click()
        options = until(lambda b=br: [e.text for e in b.find_elements(".Select-menu-outer, [role=option]")] or None,
                        what="dataset options")
        text = " ".join(options)
        assert text.count("uploaded:") == 1, text
        mine, theirs = ("session-a", "session-b") if br is dash_duo else ("session-b", "session-a")
        assert mine in text and theirs not in text, text
        br.find_element("#dataset").click()
    shot(dash_duo, artifacts, "7-session-a")
    shot(dash_br, artifacts, "7-session-b")


HOSTILE_PATH = '/<a href="http://evil.example/">x</a><b>bold</b>'
HOSTILE_FILTER = "<b>lua</b>"


@pytest.fixture
def hostile_capture(tmp_path):
    """The lua-cpu capture with markup where log content goes: every ``:path``, the filter name, every
    x-request-id; and a file name with markup (it becomes the origin: lane labels, uids)."""
    import gzip
    import re

    text = gzip.decompress(LUA.read_bytes()).decode()
    text = text.replace("':path', '/'", f"':path', '{HOSTILE_PATH}'")
    text = text.replace("filter=envoy.filters.http.lua ", f"filter={HOSTILE_FILTER} ")
    text = re.sub(r"'x-request-id', '([0-9a-f-]+)'", r"'x-request-id', '<i>\1</i>'", text)
    path = tmp_path / "<b>hostile<br>.log"
    path.write_text(text)
    return path


def no_markup(br, selector: str) -> None:
    """No element under ``selector`` made from markup in the capture: a link, or a bold/italic element
    (Plotly: a styled tspan) holding exactly the text the markup wrapped (``x``, ``bold``, ``lua``, an
    x-request-id, the file name), or a line break inside the file name."""
    found = br.driver.execute_script(
        "const root = document.querySelector(arguments[0]); if (!root) return 'missing';"
        "const wrapped = /^(x|bold|lua|hostile.*|[0-9a-f-]{36})$/;"
        "const styled = Array.from(root.querySelectorAll('b, i, strong, em, tspan[style*=\"bold\"], "
        "tspan[style*=\"italic\"]')).filter(e => wrapped.test(e.textContent.trim()));"
        "const broken = Array.from(root.querySelectorAll('text, div, span, option'))"
        "  .filter(e => e.textContent.includes('hostile') && e.querySelector('br, tspan.line'));"
        "return Array.from(root.querySelectorAll('a')).concat(styled, broken).map(e => e.outerHTML).join(' | ');",
        selector)
    assert found == "", f"{selector}: {found}"


def text_of(br, selector: str) -> str:
    return br.driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map(e => e.textContent).join(' | ');", selector)


def test_log_content_is_never_markup(dash_br, dashboard_process, hostile_capture, artifacts):
    """Markup in log content shows as text everywhere (waterfall title, tick labels, hover, grid, facts, log
    lines, event-loop lanes, dataset list), on the real server (waitress) with an access token."""
    server = dashboard_process(str(hostile_capture), "--token", "browser-token-0123456789")
    dash_br.server_url = server.url  # ?token= once: the cookie carries it afterwards
    assert "token" not in dash_br.driver.current_url
    name = "<b>hostile<br>.log"
    dash_br.wait_for_contains_text("#dataset", name, timeout=TIMEOUT)
    dash_br.wait_for_text_to_equal("#overview-title", name, timeout=TIMEOUT)
    for sel in ("#dataset", "#overview"):
        no_markup(dash_br, sel)

    # grid cells: the path and x-request-id as text
    open_tab(dash_br, "requests")
    until(lambda: grid_row_with_path(dash_br, HOSTILE_PATH), what="a grid row with the hostile path")
    assert "<i>" in text_of(dash_br, '.ag-center-cols-container .ag-row [col-id="x_request_id"]')
    no_markup(dash_br, "#requests-grid")
    shot(dash_br, artifacts, "8-markup-grid")
    click_until(lambda: click_status_of_row(dash_br, HOSTILE_PATH),
                lambda: waterfall_drawn(dash_br), what="a click on the hostile path's row, its waterfall drawn")

    # waterfall: title, tick labels and hover as text, no link anywhere in the figure
    dash_br.wait_for_element("#waterfall-graph .main-svg", timeout=TIMEOUT)
    until(lambda: HOSTILE_PATH in text_of(dash_br, "#waterfall-graph .gtitle"), what="the path in the title")
    until(lambda: HOSTILE_FILTER in text_of(dash_br, "#waterfall-graph .ytick text"), what="the filter tick")
    index = dash_br.driver.execute_script(
        "const gd = document.querySelector('#waterfall-graph .js-plotly-plot');"
        "const i = gd.data[0].y.findIndex(y => y.includes('lua'));"
        "Plotly.Fx.hover(gd, [{curveNumber: 0, pointNumber: i}]); return i;")
    assert index >= 0
    hover = until(lambda: text_of(dash_br, "#waterfall-graph .hoverlayer"), what="a hover label")
    assert HOSTILE_FILTER in hover, hover
    for sel in ("#waterfall-graph", "#request-facts"):
        no_markup(dash_br, sel)
    # the facts block is redrawn when the request's callbacks settle: read it by query, not by a held element
    until(lambda: HOSTILE_PATH in text_of(dash_br, "#request-facts"), what="the path in the request facts")
    shot(dash_br, artifacts, "9-markup-waterfall")
    dash_br.find_element("#show-lines").click()
    dash_br.wait_for_contains_text("#log-lines-text", f"':path', '{HOSTILE_PATH}'", timeout=TIMEOUT)
    no_markup(dash_br, "#log-lines")

    # event loop: lanes named after the file (the origin) as text
    open_tab(dash_br, "loop")
    until(lambda: f"{name} · thread" in text_of(dash_br, "#loop-graph .ytick text"), what="lane labels")
    no_markup(dash_br, "#loop-graph")
    assert dash_br.driver.execute_script("return location.host") == f"127.0.0.1:{server.port}"
