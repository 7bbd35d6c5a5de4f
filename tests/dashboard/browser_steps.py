"""Steps of the browser tests (a ``dash_duo``-like browser in, nothing out): upload through the real file
input, open a tab, wait for a condition, take a screenshot."""
from __future__ import annotations

import time
from pathlib import Path

TIMEOUT = 30


def upload(br, path: Path, name: str | None = None) -> None:
    """Send a file through the real <input type=file> and wait until its dataset is chosen."""
    field = br.wait_for_element("#upload-file", timeout=TIMEOUT)
    field.send_keys(str(path.resolve()))
    br.wait_for_contains_text("#job-message", f"{name or path.name}: analysed", timeout=TIMEOUT)
    br.wait_for_contains_text("#dataset", f"uploaded: {name or path.name}", timeout=TIMEOUT)


def open_tab(br, value: str) -> None:
    br.find_element(f"#tab-{value}").click()


#: True once no dash callback is running and every plotly graph on the page has drawn its figure.
DRAWN = ("return document.readyState === 'complete' && !document.querySelector('._dash-loading, "
         "[data-dash-is-loading=\"true\"]') && Array.from(document.querySelectorAll('.js-plotly-plot'))"
         ".every(g => g._fullLayout && g.querySelector('.main-svg'));")


def shot(br, artifacts: Path, name: str, wait_s: float = 5.0) -> None:
    """A screenshot for a reader of ``test-artifacts/`` (nothing compares it), taken once the page says it is
    drawn, or after ``wait_s`` on a page that keeps redrawing (a followed log): a fixed 0.6 s wait before each
    held a worker idle ~12 s a run."""
    deadline = time.time() + wait_s
    while not br.driver.execute_script(DRAWN) and time.time() < deadline:
        time.sleep(0.1)
    br.driver.save_screenshot(str(artifacts / f"{name}.png"))


def click(br, selector: str, what: str | None = None) -> None:
    """Click what ``selector`` finds, found again on each try: a callback that redraws the element between the
    finding and the click makes the held element stale (the click is tried again on the new one)."""
    until(lambda: br.find_element(selector).click() or True, what=what or f"a click on {selector}")


def click_until(try_click, done, what: str, settle_s: float = 3.0):
    """Click (``try_click``, True once it clicked) until ``done`` answers, ``settle_s`` after each click. A click on
    an element that a callback's redraw replaces at that moment is lost without an error (the gate saw a competing
    connection's click and a grid row's do nothing), so one click is not trusted to land."""
    def landed():
        if result := done():  # (an earlier click that landed late)
            return result
        if not try_click():
            return None
        deadline = time.time() + settle_s
        while time.time() < deadline:
            if result := done():
                return result
            time.sleep(0.1)
        return None
    return until(landed, what=what)


def until(predicate, timeout: float = TIMEOUT, what: str = "condition"):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except Exception as exc:
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")
