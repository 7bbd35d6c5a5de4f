"""``dashboard --follow FILE`` in a real headless Chromium against the real server (waitress, 127.0.0.1): the
followed log's requests appear in the browser as the log grows, without a reload."""
from __future__ import annotations

import gzip
import time
from pathlib import Path

import pytest

from tests.dashboard.browser_steps import TIMEOUT, shot, until

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
KEEPALIVE = FIXTURES / "istio-thread" / "keepalive" / "envoy.log.gz"


def _requests_shown(br) -> int | None:  # type: ignore[no-untyped-def]
    text = br.driver.execute_script(
        "const e = document.querySelector('#overview-requests'); return e ? e.textContent : null;")
    digits = "".join(ch for ch in (text or "") if ch.isdigit())
    return int(digits) if digits else None


@pytest.mark.needs_browser
def test_the_followed_log_grows_live_in_the_browser(dash_br, dashboard_process, tmp_path, artifacts):
    lines = gzip.decompress(KEEPALIVE.read_bytes()).splitlines(keepends=True)
    log = tmp_path / "envoy.log"
    log.write_bytes(b"".join(lines[:500]))
    server = dashboard_process("--follow", str(log))
    dash_br.server_url = server.url
    dash_br.wait_for_contains_text("#dataset", "envoy.log", timeout=TIMEOUT)
    dash_br.wait_for_contains_text("#job-message", "following the log", timeout=TIMEOUT)
    # the overview card is drawn by a callback after the job message: wait for it, then it must read zero
    shown = until(lambda: (n := _requests_shown(dash_br)) is not None and (n,), what="the overview's request count")
    assert shown == (0,)

    def grow(upto: int) -> None:  # the log grows while the page stays open
        done = len(log.read_bytes().splitlines())
        for start in range(done, upto, 300):
            with log.open("ab") as fh:
                fh.write(b"".join(lines[start:min(start + 300, upto)]))
            time.sleep(0.1)

    grow(3000)
    first = until(lambda: _requests_shown(dash_br), what="the first requests of the followed log")
    shot(dash_br, artifacts, "follow-1-first")
    grow(len(lines))
    grown = until(lambda: (n := _requests_shown(dash_br)) is not None and n > first and n,
                  what="more requests shown as the log grew")
    assert first < grown <= 51  # (the keepalive capture: 50 client requests and one admin request)
    shot(dash_br, artifacts, "follow-2-grown")
    overview = dash_br.find_element("#overview").text
    assert "Percentiles per phase" in overview
    assert "envoy.log (following)" in overview and "uploaded" not in overview and "MB read" not in overview
    assert f"{len(lines):,}" in dash_br.find_element("#overview-lines-read").text  # (every line of the log read)
    assert f"following: {log} · " in dash_br.find_element("#dataset").text
