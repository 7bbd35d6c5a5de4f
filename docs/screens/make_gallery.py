"""Regenerate docs/screens/: what users see, from bundled fixtures, so a reviewer can look without running anything.

    python docs/screens/make_gallery.py            # rewrite docs/screens/
    python docs/screens/make_gallery.py --check    # regenerate into a temporary directory and compare

Made here: the terminal report at 80 columns (text) and the compare table; the notebook figures (phase
distribution, waterfall of the slowest request, event loop, utilisation, phase share, latency, compare) drawn by
plotly.js in headless Chromium; every dashboard tab of two fixtures (the real server, `envoy-dissect dashboard`
on 127.0.0.1). Needs chromium and chromedriver (/usr/bin). The stitched waterfall needs two live Envoys (no
bundled fixture holds a mesh capture): tests/dashboard/test_visual.py draws it.

Kept cheap for the gate (.ci/check): each fixture is analysed once; one browser session draws everything; the
figure pages share one plotly.js file beside them (inlined, each page was 3.5 MB to write and parse: 2.5x slower,
the same pixels); the dashboards start at the outset, so their start overlaps the notebook figures.
"""
from __future__ import annotations

import argparse
import filecmp
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

ROOT = Path(__file__).resolve().parents[2]
SCREENS = ROOT / "docs" / "screens"
#: The two fixtures shown: one worker saturated by 8 connections' Lua CPU; a tracer's flushes and idle stretches.
#: Paths relative to the repository (the script runs from there): the same names in every clone's pictures.
FIXTURES = {"lua-cpu": Path("fixtures/istio-thread/lua-cpu/envoy.log.gz"),
            "tracing-zipkin": Path("fixtures/istio-thread/tracing-zipkin/envoy.log.gz")}
BASELINE = Path("fixtures/istio-thread/lua-cpu-baseline/envoy.log.gz")
TABS = ("overview", "requests", "waterfall", "loop", "compare")
WINDOW = (1280, 900)
TIMEOUT = 180.0  # (seconds; a dashboard on a shared, loaded machine takes over a minute to draw)
FIRST_ROW = '.ag-center-cols-container .ag-row[row-index="0"] [col-id="status"]'


def browser() -> Any:
    """Headless Chromium through chromedriver, a fixed window and device scale (the same pixels every run)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.remote.remote_connection import RemoteConnection

    if hasattr(RemoteConnection, "set_timeout"):  # selenium 3 with urllib3 2 (tests/dashboard/conftest.py)
        RemoteConnection.set_timeout(120)
    options = Options()
    options.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
                "--force-device-scale-factor=1", "--font-render-hinting=none", f"--window-size={WINDOW[0]},{WINDOW[1]}",
                "--disable-background-networking"):
        options.add_argument(arg)
    driver = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
    try:
        return webdriver.Chrome(executable_path=driver, options=options)  # selenium 3
    except TypeError:
        from selenium.webdriver.chrome.service import Service

        return webdriver.Chrome(service=Service(driver), options=options)


def until(check: Callable[[], Any], what: str) -> Any:
    deadline = time.time() + TIMEOUT
    while time.time() < deadline:
        try:
            got = check()
            if got:
                return got
        except Exception:  # an element not there yet, or replaced while read
            pass
        time.sleep(0.25)
    raise RuntimeError(f"timed out waiting for {what}")


def settle(driver: Any) -> None:
    """Wait until dash has no callback running and plotly has drawn, then a little more for transitions."""
    until(lambda: driver.execute_script(
        "return document.readyState === 'complete' && !document.querySelector('._dash-loading, "
        "[data-dash-is-loading=\"true\"]');"), "the page to settle")
    time.sleep(1.5)


def shoot(driver: Any, path: Path) -> None:
    """A screenshot of the whole page (the window grown to the page's height)."""
    height = int(driver.execute_script("return Math.max(document.body.scrollHeight, 600);"))
    driver.set_window_size(WINDOW[0], min(height + 20, 4000))
    time.sleep(0.5)
    driver.save_screenshot(str(path))
    driver.set_window_size(*WINDOW)


@cache
def analysed(log: Path) -> Any:
    """One analysis per fixture for every picture and text made of it."""
    from envoy_dissector.analysis import dissect

    return dissect(str(log))


def figure_png(driver: Any, fig: go.Figure, path: Path, work: Path) -> None:
    """``fig`` drawn by plotly.js in a page of its own; the page loads work/plotly.min.js (written once)."""
    fig = go.Figure(fig).update_layout(width=1200, height=max(int(fig.layout.height or 0), 520))
    plotly_js = work / "plotly.min.js"
    if not plotly_js.exists():
        from plotly.offline import get_plotlyjs

        plotly_js.write_text(get_plotlyjs(), encoding="utf-8")
    page = work / (path.stem + ".html")
    page.write_text(fig.to_html(include_plotlyjs="directory", full_html=True, div_id="fig",
                                config={"displayModeBar": False, "staticPlot": True}), encoding="utf-8")
    driver.get(page.as_uri())
    until(lambda: driver.execute_script("const g = document.getElementById('fig');"
                                        "return !!(g && g._fullLayout && g.querySelector('.main-svg'));"), path.name)
    time.sleep(0.5)
    driver.save_screenshot(str(path))


def notebook_figures(driver: Any, out: Path, work: Path) -> None:
    from envoy_dissector.analysis.outputs import figures
    from envoy_dissector.analysis.stats import counted

    baseline = analysed(BASELINE)
    for name, log in FIXTURES.items():
        cap = analysed(log)
        slowest = counted(cap.requests).sort(["total_us", "request_uid"], descending=[True, False])["request_uid"][0]
        shown = {"phase-distribution": cap.phase_distribution(), "waterfall": cap.waterfall(slowest),
                 "event-loop": cap.event_loop(), "utilisation": figures.utilisation(cap.loop),
                 "phase-share": figures.phase_share(cap.requests),
                 "latency": figures.latency_over_time(cap.requests)}
        if name == "lua-cpu":
            shown["compare"] = figures.compare(baseline.summary(), cap.summary(), "lua-cpu-baseline", "lua-cpu")
        for figure, fig in shown.items():
            figure_png(driver, fig, out / f"notebook-{name}-{figure}.png", work)


def terminal_reports(out: Path) -> None:
    from envoy_dissector.analysis.outputs.comparison import compare, render_comparison
    from envoy_dissector.analysis.outputs.report import render

    for name, log in FIXTURES.items():
        cap = analysed(log)
        (out / f"report-{name}-80.txt").write_text(render(cap, width=80) + "\n", encoding="utf-8")
    base, lua = analysed(BASELINE), analysed(FIXTURES["lua-cpu"])
    text = render_comparison(compare(base, lua), str(BASELINE), str(FIXTURES["lua-cpu"]), width=80)
    (out / "compare-lua-cpu-80.txt").write_text(text + "\n", encoding="utf-8")


@contextmanager
def dashboard(capture: Path, work: Path) -> Iterator[Callable[[], str]]:
    """``envoy-dissect dashboard CAPTURE`` started on a free 127.0.0.1 port; a call that waits for its address
    (token included)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = (work / f"dashboard-{port}.out").open("w+")
    env = {k: v for k, v in os.environ.items() if k != "ENVOY_DISSECTOR_TOKEN"} | {"TMPDIR": str(work)}
    proc = subprocess.Popen([sys.executable, "-m", "envoy_dissector.cli", "dashboard", "--port", str(port),
                             str(capture)], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        def address() -> str | None:
            log.seek(0)
            found = re.search(r" dashboard on (http\S+)", log.read())
            return found.group(1) if found else None
        yield lambda: until(address, "the dashboard to start")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def dashboard_tabs(driver: Any, out: Path, addresses: dict[str, Callable[[], str]]) -> None:
    for name, address in addresses.items():
        driver.get(address())
        until(lambda: driver.find_elements("css selector", "#tab-overview"), "the dashboard")
        until(lambda: driver.find_elements("css selector", "#overview .main-svg"), "the overview")
        for tab in TABS:
            driver.find_element("css selector", f"#tab-{tab}").click()
            if tab == "requests":  # the first row's waterfall is the next tab's
                until(lambda: driver.find_elements("css selector", FIRST_ROW), "the grid's first row")
                settle(driver)
                shoot(driver, out / f"dashboard-{name}-{tab}.png")
                until(lambda: driver.find_elements("css selector", FIRST_ROW)[0].click() or True,
                      "a click on the grid's first row")
                continue
            settle(driver)
            shoot(driver, out / f"dashboard-{name}-{tab}.png")


def make(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as servers:
        work = Path(tmp)
        addresses = {name: servers.enter_context(dashboard(log, work)) for name, log in FIXTURES.items()}
        terminal_reports(out)
        driver = browser()
        try:
            notebook_figures(driver, out, work)
            dashboard_tabs(driver, out, addresses)
        finally:
            driver.quit()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="regenerate elsewhere and list files that differ")
    args = parser.parse_args()
    os.chdir(ROOT)
    if not args.check:
        for old in SCREENS.glob("*.png"):
            old.unlink()
        make(SCREENS)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        make(Path(tmp))
        names = sorted(p.name for p in SCREENS.iterdir() if p.suffix in (".png", ".txt"))
        fresh = sorted(p.name for p in Path(tmp).iterdir() if p.suffix in (".png", ".txt"))
        differ = [n for n in names if n in fresh and not filecmp.cmp(SCREENS / n, Path(tmp) / n, shallow=False)]
        missing = sorted(set(names) ^ set(fresh))
        for n in differ + missing:
            print(f"differs: {n}")
        if differ and os.environ.get("GALLERY_KEEP"):
            shutil.copytree(tmp, os.environ["GALLERY_KEEP"], dirs_exist_ok=True)
        return 1 if differ or missing else 0


if __name__ == "__main__":
    sys.exit(main())
